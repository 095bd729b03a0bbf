"""Token classification (entity extraction) from an MLM checkpoint, scored by entity-level precision/recall/F1.

Data: one sentence or document per row, a list of words (`tokens`) and one tag per word (`ner_tags` or
`tags`; BIO/IOB2 strings, or integers named by `--label_list`). Each word's tag goes to its first
sub-word token and -100 (ignored by the loss) to the rest, as transformers' `run_ner.py`. Scores come from the shipped `seqeval` module, next to the baseline that tags
every word with the most frequent training tag (usually "O", whose entity F1 is 0).
"""

from __future__ import annotations

import argparse
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

import datasets
import numpy as np
from transformers import DataCollatorForTokenClassification, TrainingArguments, set_seed

from ..metrics import load_metric
from . import peft_recipe, stage, tasks
from .classify import ClassifierTrainer, FinetuneArguments, check_head_options, length_of_training

WORDS_COLUMNS, TAGS_COLUMNS = ("tokens",), ("ner_tags", "tags")


@dataclass
class TokenClassificationArguments:
    label_list: str | None = field(default=None, metadata={
        "help": "token classification: the tags, comma-separated, in id order (needed for integer tags; "
                "default: the sorted tags of the training split)"})


def pick_column(split: tasks.Split, given: str, default: str, candidates: tuple[str, ...], what: str) -> str:
    """The column the user named (`given`, when not the classifier's `default`), else the first candidate present."""
    names = (given,) if given != default else candidates
    found = next((name for name in names if name in split.dataset.column_names), names[0])
    tasks.require_columns(split, {found: what})
    return found


def read_tags(splits: dict[str, tasks.Split], words: str, tags: str, label_list: str | None) -> list[str]:
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
        for row, sentence, labels in zip(split.dataset[tasks.ROW], split.dataset[words], split.dataset[tags], strict=True):
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
        split.dataset = datasets.Dataset.from_dict({"words": all_words, "tags": all_tags, tasks.ROW: split.dataset[tasks.ROW]})
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
    return words.map(lambda batch: align(batch, tokenizer, max_length, {}), batched=True, remove_columns=["words"],
                     desc="Tokenizing unlabelled text").remove_columns("words_seen")


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


def prepare_data(args, token_args: TokenClassificationArguments, tokenizer, max_length: int, command: str,
                 show: bool) -> tuple[dict[str, tasks.Split], list[str], dict[str, datasets.Dataset], dict[str, int]]:
    """The task's data for `finetune` and `distill` (`args`: their file, column and sample options): the checked and
    limited splits (columns `words`, `tags`), the tag names, each split tokenized with its tags aligned, and the words
    per split beyond `max_length` (printed by `command` when `show`)."""
    splits = tasks.load_splits(args, "token_classification")
    train = splits["train"]
    words = pick_column(train, args.text_column, FinetuneArguments.text_column, WORDS_COLUMNS, "the list of words")
    tags = pick_column(train, args.label_column, FinetuneArguments.label_column, TAGS_COLUMNS, "one tag per word")
    for split in splits.values():
        tasks.require_columns(split, {words: "the list of words", tags: "one tag per word"})
    tasks.limit(splits, args)
    names = read_tags(splits, words, tags, token_args.label_list)
    index = {name: i for i, name in enumerate(names)}
    encoded = {name: split.dataset.map(lambda batch: align(batch, tokenizer, max_length, index), batched=True,
                                       remove_columns=split.dataset.column_names, desc=f"Tokenizing {name}")
               for name, split in splits.items()}
    truncated = {name: sum(len(w) for w in splits[name].dataset["words"]) - sum(encoded[name]["words_seen"])
                 for name in splits}
    encoded = {name: dataset.remove_columns("words_seen") for name, dataset in encoded.items()}
    if any(truncated.values()) and show:
        print(f"{command}: words beyond --max_length {max_length} tokens are not tagged or scored: {truncated}", flush=True)
    return splits, names, encoded, truncated


def finetune_token_classification(args: FinetuneArguments, token_args: TokenClassificationArguments,
                                  training_args: TrainingArguments, callbacks: Sequence = ()) -> dict:
    """Fine-tune a token classifier; returns the test entity scores and the most-frequent-tag baseline."""
    task = "token_classification"
    checkpoint, config, tokenizer, max_length = tasks.start(args, training_args, "ForTokenClassification", task, token_args)
    check_head_options(args, type(config))
    splits, names, encoded, truncated = prepare_data(args, token_args, tokenizer, max_length, "finetune",
                                                     training_args.process_index == 0)
    tasks.check_head_size(args, config, "ForTokenClassification", len(names), f"tags {names}")
    index = {name: i for i, name in enumerate(names)}
    set_seed(training_args.seed)
    model = stage.model_class(config, "ForTokenClassification").from_pretrained(
        args.model_name_or_path, num_labels=len(names), id2label=dict(enumerate(names)), label2id=index)
    model = peft_recipe.wrap(model, args, "ForTokenClassification")
    compute, scores = token_metrics(names)
    collator = DataCollatorForTokenClassification(tokenizer, pad_to_multiple_of=stage.pad_multiple(model, max_length))
    stopping = length_of_training(args, training_args, len(encoded["train"]))
    trainer = ClassifierTrainer(model=model, args=training_args, data_collator=collator, train_dataset=encoded["train"],
                                eval_dataset=encoded["validation"], processing_class=tokenizer, compute_metrics=compute,
                                callbacks=[*callbacks, *stopping], classifier_learning_rate=args.classifier_learning_rate)
    stage.train(trainer, checkpoint)
    test = trainer.evaluate(encoded["test"], metric_key_prefix="test")
    majority = Counter(tag for row in splits["train"].dataset["tags"] for tag in row).most_common(1)[0][0]
    seen = [[names[t] for t in row if t != -100] for row in encoded["test"]["labels"]]
    baseline = scores([[majority] * len(row) for row in seen], seen)
    results = {
        **tasks.base_results(task, args, config, trainer, max_length,
                             {name: len(split.dataset) for name, split in splits.items()}),
        "labels": names, "truncated_words": truncated, "test_loss": test["test_loss"],
        **{f"test_{key}": test[f"test_{key}"] for key in ("precision", "recall", "f1", "accuracy")},
        "baseline_tag": majority, **{f"baseline_{key}": value for key, value in baseline.items()},
    }
    if trainer.is_world_process_zero():
        print(f"finetune: test entity F1 {results['test_f1']:.3f} (precision {results['test_precision']:.3f}, recall "
              f"{results['test_recall']:.3f}), tag accuracy {results['test_accuracy']:.3f} | every word "
              f"{majority!r}: entity F1 {baseline['f1']:.3f}, tag accuracy {baseline['accuracy']:.3f}", flush=True)
    return stage.finish(trainer, results, args.merge)


def run(args: argparse.Namespace) -> int:
    return tasks.run_task(args, finetune_token_classification, TokenClassificationArguments)
