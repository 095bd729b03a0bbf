"""Token classification (entity extraction) from an MLM checkpoint, scored by entity-level precision/recall/F1.

Data: one sentence or document per row, a list of words (`tokens`) and one tag per word (`ner_tags` or
`tags`; BIO/IOB2 strings, or integers named by `--label_list`). Each word's tag goes to its first
sub-word token and -100 (ignored by the loss) to the rest, as transformers' `run_ner.py`. Scores come from the shipped `seqeval` module, next to the baseline that tags
every word with the most frequent training tag (usually "O", whose entity F1 is 0).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import datasets
import numpy as np
from transformers import DataCollatorForTokenClassification

from ..metrics import load_metric
from . import task, task_data
from .classification import ClassifierTrainer, HeadLearningRate, TextColumns, check_head_options

WORDS_COLUMNS, TAGS_COLUMNS = ("tokens",), ("ner_tags", "tags")


@dataclass
class TokenClassificationArguments:
    label_list: str | None = field(default=None, metadata={
        "help": "token classification: the tags, comma-separated, in id order (needed for integer tags; "
                "default: the sorted tags of the training split)"})


def pick_column(split: task_data.Split, given: str, default: str, candidates: tuple[str, ...]) -> str:
    """The column the user named (`given`, when not the classifier's `default`), else the first candidate present
    (else the first candidate, which the caller's check of every split then names as missing)."""
    names = (given,) if given != default else candidates
    return next((name for name in names if name in split.dataset.column_names), names[0])


def read_tags(splits: dict[str, task_data.Split], words: str, tags: str, label_list: str | None) -> list[str]:
    """Check every row (word and tag counts, known tags); leave `words` and `tags` (names) columns; return the tag set
    (`label_list`, else the sorted tags of the training file, the parts cut from it included).

    A csv cell holds the words or tags separated by spaces.
    """
    names = [name.strip() for name in label_list.split(",")] if label_list else None
    if names is not None and (len(set(names)) != len(names) or not all(names)):
        raise ValueError(f"--label_list {label_list!r} has an empty or repeated tag")
    if names is None:
        if any(isinstance(tag, int) for row in splits["train"].dataset[tags] for tag in row):
            raise ValueError(f"{splits['train'].path}: column {tags!r} holds integer tags; give their names in id "
                             "order with --label_list (e.g. O,B-PER,I-PER)")
        training = [split for split in splits.values() if split.path == splits["train"].path]  # incl. the parts cut from it
        names = sorted({tag for split in training for row in split.dataset[tags]
                        for tag in (row.split() if isinstance(row, str) else row)})
    known = set(names)
    for split in splits.values():
        all_words, all_tags = [], []
        for row, sentence, labels in zip(split.dataset[task_data.ROW], split.dataset[words], split.dataset[tags], strict=True):
            sentence, labels = (value.split() if isinstance(value, str) else value for value in (sentence, labels))
            if not isinstance(sentence, list) or not sentence or not all(isinstance(w, str) and w for w in sentence):
                raise ValueError(f"{split.where(row, words)}: expected a non-empty list of non-empty words, got {sentence!r}")
            if not isinstance(labels, list) or len(labels) != len(sentence):
                count = len(labels) if isinstance(labels, list) else labels
                raise ValueError(f"{split.where(row, tags)}: {count} tags for {len(sentence)} words; give one tag per word")
            labels = [names[tag] if isinstance(tag, int) and 0 <= tag < len(names) else tag for tag in labels]
            unknown = [tag for tag in labels if tag not in known]
            if unknown:
                source = "--label_list" if label_list else f"the training split ({splits['train'].path})"
                raise ValueError(f"{split.where(row, tags)}: tag {unknown[0]!r} is not among the tags of {source}: {names}")
            all_words.append(sentence)
            all_tags.append(labels)
        split.dataset = datasets.Dataset.from_dict({"words": all_words, "tags": all_tags, task_data.ROW: split.dataset[task_data.ROW]})
    return names


def align(batch: dict, tokenizer, max_length: int, index: dict[str, int]) -> dict:
    """Tokenize the words as running text; each word's tag id on its first token, -100 on the rest and on specials.

    The words are joined by single spaces, so that a byte-level BPE sees " word" as in pretraining (with
    `is_split_into_words=True` it does so only when loaded with `add_prefix_space=True`, which a generic
    fast tokenizer ignores); a token belongs to the word in which its characters start. Without a `tags` column
    (unlabelled text, for `distill`) every label is -100.
    """
    starts = [np.cumsum([0] + [len(word) + 1 for word in words[:-1]]) for words in batch["words"]]
    encoded = tokenizer([" ".join(words) for words in batch["words"]], truncation=True, max_length=max_length,
                        return_offsets_mapping=True)
    encoded["labels"], encoded["words_seen"] = [], []
    all_tags = batch["tags"] if "tags" in batch else [None] * len(batch["words"])
    for i, (tags, offsets) in enumerate(zip(all_tags, encoded.pop("offset_mapping"), strict=True)):
        labels, previous = [], None
        for sequence, (begin, _) in zip(encoded.sequence_ids(i), offsets, strict=True):
            word = None if sequence is None else int(np.searchsorted(starts[i], begin, side="right")) - 1
            labels.append(-100 if word is None or word == previous or tags is None else index[tags[word]])
            previous = word
        encoded["labels"].append(labels)
        encoded["words_seen"].append(sum(label != -100 for label in labels))
    return encoded


def untagged(texts: list[str], tokenizer, max_length: int) -> datasets.Dataset:
    """Unlabelled text as tokenized rows whose labels are all -100: words split at white space, as a csv cell's."""
    words = datasets.Dataset.from_dict({"words": [text.split() for text in texts]})
    return task_data.encoded(words, "unlabelled text", align, tokenizer, max_length, {}).remove_columns("words_seen")


def token_metrics(names: list[str]):
    """compute_metrics: seqeval's entity scores on the words' first sub-tokens (the positions with a label)."""
    seqeval = load_metric("seqeval")

    def scores(predictions: list[list[str]], references: list[list[str]]) -> dict:
        result = seqeval.compute(predictions=predictions, references=references)
        return {key: result[f"overall_{key}"] for key in ("precision", "recall", "f1", "accuracy")}

    def compute(prediction) -> dict:
        guesses = np.argmax(prediction.predictions, axis=-1)
        keep = prediction.label_ids != -100
        return scores([[names[t] for t in row[mask]] for row, mask in zip(guesses, keep, strict=True)],
                      [[names[t] for t in row[mask]] for row, mask in zip(prediction.label_ids, keep, strict=True)])

    return compute, scores


class TokenClassification(task.Task):
    name, head, metric = "token_classification", "ForTokenClassification", "f1"
    arguments = (TokenClassificationArguments,)
    options = {"finetune": (TextColumns, HeadLearningRate, TokenClassificationArguments),
               "distill": (TextColumns, TokenClassificationArguments)}
    scores = {"f1": "entity F1", "accuracy": "tag accuracy"}
    trainer_class = ClassifierTrainer

    def check(self, args, config) -> None:
        check_head_options(args, config)

    def data(self, args, task_args: TokenClassificationArguments, tokenizer, max_length: int, command: str,
             show: bool) -> task.TaskData:
        """The checked and limited splits (columns `words`, `tags`), each tokenized with its tags aligned; the words
        per split beyond `max_length` are reported (`truncated_words`)."""
        splits = task_data.load_splits(args, self.name)
        train = splits["train"]
        words = pick_column(train, args.text_column, TextColumns.text_column, WORDS_COLUMNS)
        tags = pick_column(train, args.label_column, TextColumns.label_column, TAGS_COLUMNS)
        for split in splits.values():
            task_data.require_columns(split, {words: "the list of words", tags: "one tag per word"})
        task_data.limit(splits, args)
        names = read_tags(splits, words, tags, task_args.label_list)
        index = {name: i for i, name in enumerate(names)}
        encoded = {name: task_data.encoded(split.dataset, name, align, tokenizer, max_length, index)
                   for name, split in splits.items()}
        truncated = {name: sum(len(w) for w in splits[name].dataset["words"]) - sum(encoded[name]["words_seen"])
                     for name in splits}
        if any(truncated.values()) and show:
            print(f"{command}: words beyond --max_length {max_length} tokens are not tagged or scored: {truncated}",
                  flush=True)
        return task.TaskData({name: split.dataset for name, split in splits.items()},
                             {name: dataset.remove_columns("words_seen") for name, dataset in encoded.items()},
                             names, {"truncated_words": truncated})

    def head_settings(self, data: task.TaskData, args, config) -> tuple[dict, str]:
        return super().head_settings(data, args, config)[0], f"tags {data.labels}"

    def collator(self, tokenizer, pad_to_multiple_of: int | None):
        return DataCollatorForTokenClassification(tokenizer, pad_to_multiple_of=pad_to_multiple_of)

    def trainer_options(self, data: task.TaskData, args, task_args) -> dict:
        return {"compute_metrics": token_metrics(data.labels)[0],
                "classifier_learning_rate": getattr(args, "classifier_learning_rate", None)}  # distill has none

    def unlabeled(self, args, tokenizer, max_length: int, data: task.TaskData):
        rows = task_data.unlabeled_text(args, "text")
        return None if rows is None else untagged(list(rows["text"]), tokenizer, max_length)

    def baseline(self, data: task.TaskData) -> dict:
        """Every word tagged with the most frequent training tag."""
        names = data.labels
        majority = Counter(tag for row in data.examples["train"]["tags"] for tag in row).most_common(1)[0][0]
        seen = [[names[t] for t in row if t != -100] for row in data.features["test"]["labels"]]
        return {"tag": majority, **token_metrics(names)[1]([[majority] * len(row) for row in seen], seen)}

    def data_fields(self, data: task.TaskData) -> dict:
        """Its tags, the words past --max_length and the unlabelled rows (`distill`)."""
        return {"labels": data.labels, "truncated_words": data.notes["truncated_words"],
                "unlabeled_examples": data.notes["unlabeled"]}

    def report(self, data: task.TaskData, test: dict, baseline: dict) -> tuple[dict, str]:
        fields = {"labels": data.labels, "truncated_words": data.notes["truncated_words"]}
        fields.update({"test_loss": test["test_loss"],
                       **{f"test_{key}": test[f"test_{key}"] for key in ("precision", "recall", "f1", "accuracy")},
                       "baseline_tag": baseline["tag"],
                       **{f"baseline_{key}": value for key, value in baseline.items() if key != "tag"}})
        return fields, (f"test entity F1 {fields['test_f1']:.3f} (precision {fields['test_precision']:.3f}, recall "
                        f"{fields['test_recall']:.3f}), tag accuracy {fields['test_accuracy']:.3f} | every word "
                        f"{baseline['tag']!r}: entity F1 {baseline['f1']:.3f}, tag accuracy {baseline['accuracy']:.3f}")


TASK = task.register(TokenClassification())
