"""Extractive question answering over long documents (SQuAD-format data), scored by exact match and F1.

A model whose window holds the question and the whole context reads it at once (`--max_length` up to
the model's limit). A longer context is cut into overlapping windows, neighbours sharing `--doc_stride`
tokens, as in transformers' `run_qa.py`: a window that does not hold the whole answer is trained to
point at its first token (`<s>`, "not in this window"), and at evaluation each example's answer is the
best-scoring span over all its windows (the `--n_best_size` best starts and ends of each window, spans
inside the context of at most `--max_answer_length` tokens, by default as many as the longest training
answer). `--truncate` keeps each context's first window only: the truncated baseline, as a user of a
short model would run it. Longformer-style models put global attention on the question: their QA head
does so when it is given no `global_attention_mask`.

The test scores are reported next to the classic lexical baseline, which needs no model: the sentence of the
context most like the question by TF-IDF cosine (the sliding-window / sentence-retrieval baselines of Richardson
et al. 2013 and Rajpurkar et al. 2016), so a low F1 can be read against what word overlap alone finds.

An example whose first answer is not found at its `answer_start` in the context is skipped, not
trained or scored on: each is printed with its file, row and id, and the results list them under
`skipped`. Other bad rows stop the run before training. A context shorter than the question is valid
and used as it is (one short window).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import datasets
import numpy as np
from transformers import Trainer

from ..metrics import load_metric
from . import task, task_data

COLUMNS = {"id": "the question's id", "question": "the question", "context": "the document",
           "answers": "{'text': [...], 'answer_start': [...]}"}
# a sentence: from a non-space to the first ., ! or ? before a space, else to the end of its line
SENTENCE = re.compile(r"\S(?:[^\n]*?[.!?](?=\s)|[^\n]*\S)?")


@dataclass
class QuestionAnsweringArguments:
    doc_stride: int = field(default=128, metadata={
        "help": "question answering: tokens shared by neighbouring windows of a context longer than the window"})
    n_best_size: int = field(default=20, metadata={"help": "question answering: best starts and ends tried per window"})
    max_answer_length: int | None = field(default=None, metadata={
        "help": "question answering: longest answer, in tokens (default: the longest training answer's)"})
    truncate: bool = field(default=False, metadata={
        "help": "question answering: read only each context's first window (what --max_length holds beside the "
                "question), as a reader truncated to its length does; a question whose answer lies past it scores 0"})


def load_squad(path: str) -> datasets.Dataset:
    """Rows of `id`, `question`, `context`, `answers`: jsonl/json records, or SQuAD's nested `{"data": [...]}` json."""
    task_data.check_files([path])
    if Path(path).suffix.lower() == ".json":
        with open(path, encoding="utf-8") as file:
            try:
                content = json.load(file)
            except json.JSONDecodeError as error:
                raise ValueError(f"could not read {path} as json: {error}") from error
        if isinstance(content, dict) and isinstance(content.get("data"), list):
            rows = [{"id": qa.get("id"), "question": qa.get("question"), "context": paragraph.get("context"),
                     "answers": {"text": [a.get("text") for a in qa.get("answers") or []],
                                 "answer_start": [a.get("answer_start") for a in qa.get("answers") or []]}}
                    for article in content["data"] for paragraph in article.get("paragraphs", [])
                    for qa in paragraph.get("qas", [])]
            if not rows:
                raise ValueError(f"{path} holds no questions under data[].paragraphs[].qas[]")
            return datasets.Dataset.from_list(rows)
    return task_data.load_files([path])


def check_examples(split: task_data.Split, tokenizer, max_length: int, doc_stride: int) -> None:
    """Stop on a row that cannot be used."""
    task_data.require_columns(split, COLUMNS)
    check_questions(split, tokenizer, max_length, doc_stride)
    dataset = split.dataset
    for row, answers in zip(dataset[task_data.ROW], dataset["answers"], strict=True):
        texts, starts = (answers.get("text"), answers.get("answer_start")) if isinstance(answers, dict) else (None, None)
        if not texts or not isinstance(starts, list) or len(starts) != len(texts) or \
                not all(isinstance(t, str) and t and isinstance(s, int) for t, s in zip(texts, starts, strict=True)):
            raise ValueError(f"{split.where(row, 'answers')}: expected at least one answer as {COLUMNS['answers']} with "
                             f"non-empty texts and integer starts, got {answers!r} (unanswerable questions are not supported)")


def skip_misplaced_answers(split: task_data.Split) -> list[dict]:
    """Drop the rows whose answer is not at its offset and return them."""
    dataset = split.dataset
    skipped, keep = [], []
    for i, (row, identifier, context, answers) in enumerate(zip(dataset[task_data.ROW], dataset["id"], dataset["context"],
                                                                  dataset["answers"], strict=True)):
        start, text = answers["answer_start"][0], answers["text"][0]
        if context[start:start + len(text)] == text:
            keep.append(i)
        else:
            skipped.append({"file": split.path, "row": row + 1, "id": identifier})
    split.dataset = dataset.select(keep)
    return skipped


def check_questions(split: task_data.Split, tokenizer, max_length: int, doc_stride: int) -> None:
    """Stop on a row whose question or context is not text, or whose question leaves its windows no room to advance."""
    task_data.require_columns(split, {column: COLUMNS[column] for column in ("question", "context")})
    dataset = split.dataset
    specials = tokenizer.num_special_tokens_to_add(pair=True)
    for row, question, context in zip(dataset[task_data.ROW], dataset["question"], dataset["context"], strict=True):
        for column, value in (("question", question), ("context", context)):
            if not isinstance(value, str) or not value.strip():
                raise ValueError(f"{split.where(row, column)}: expected non-empty text, got {value!r}")
    questions = tokenizer(list(dataset["question"]), add_special_tokens=False)["input_ids"]
    for i, (row, question) in enumerate(zip(dataset[task_data.ROW], questions, strict=True)):
        room = max_length - len(question) - specials
        # windows must advance: more context tokens per window than they share (only when there are several)
        several = room <= doc_stride and len(tokenizer(dataset[i]["context"], add_special_tokens=False)["input_ids"]) > room
        if room < 1 or several:
            raise ValueError(f"{split.where(row, 'question')}: the question takes {len(question)} of the window's "
                             f"{max_length} tokens, leaving {max(room, 0)} for the context per window, which must be "
                             f"more than --doc_stride {doc_stride}; shorten the question, raise --max_length or lower "
                             "--doc_stride")


def unanswered_windows(path: str, tokenizer, max_length: int, doc_stride: int, limit: int | None) -> datasets.Dataset:
    """Unlabelled questions for `distill`: the first `limit` questions of a SQuAD-format file (their answers, if any,
    unread) cut into windows whose start and end targets are -100: the teacher's logits are their only signal."""
    dataset = task_data.subset(load_squad(path), limit)
    split = task_data.Split(task_data.numbered(dataset), path)
    check_questions(split, tokenizer, max_length, doc_stride)
    examples = split.dataset.select_columns(["question", "context"])
    examples = examples.add_column("example", list(range(len(examples))))
    return task_data.encoded(examples, "unlabelled questions", windows, tokenizer, max_length, doc_stride)


def report_skipped(skipped: dict[str, list[dict]], splits: dict[str, task_data.Split], command: str, show: bool) -> None:
    """Print the skipped examples (the first 10 of each split, when `show`); stop if a split has none left."""
    for name, rows in skipped.items():
        for row in rows[:10] if show else []:
            print(f"{command}: skipped {row['file']}, row {row['row']}, id {row['id']!r}: its answer is not at its "
                  "answer_start", flush=True)
        if len(rows) > 10 and show:
            print(f"{command}: ... and {len(rows) - 10} more in the {name} split (all listed in the results)", flush=True)
        if not len(splits[name].dataset):
            raise ValueError(f"no usable example left in the {name} split ({splits[name].path}): every answer is off its offset")


def answer_tokens(offsets: list, in_context: list[bool], first_char: int, end_char: int) -> tuple[int, int]:
    """The answer's first and last token in a window, or (0, 0), the `<s>` target, when the window lacks part of it."""
    context = [i for i, inside in enumerate(in_context) if inside]
    if offsets[context[0]][0] > first_char or offsets[context[-1]][1] < end_char:
        return 0, 0
    start = next(i for i in context if offsets[i][1] > first_char)
    end = next(i for i in reversed(context) if offsets[i][0] < end_char)
    return start, end


def windows(batch: dict, tokenizer, max_length: int, doc_stride: int) -> dict:
    """Tokenize (question, context) pairs into windows with their answer targets, their example and context offsets.

    Without an `answers` column (unlabelled questions, for `distill`) every target is -100 (none)."""
    encoded = tokenizer(batch["question"], batch["context"], truncation="only_second", max_length=max_length,
                        stride=doc_stride, return_overflowing_tokens=True, return_offsets_mapping=True)
    samples = encoded.pop("overflow_to_sample_mapping")  # each window's row in `batch`
    encoded["example"] = [batch["example"][i] for i in samples]
    encoded["start_positions"], encoded["end_positions"] = [], []
    for i, offsets in enumerate(encoded["offset_mapping"]):
        in_context = [sequence == 1 for sequence in encoded.sequence_ids(i)]
        start = end = -100
        if "answers" in batch:
            answers = batch["answers"][samples[i]]
            first = answers["answer_start"][0]
            start, end = answer_tokens(offsets, in_context, first, first + len(answers["text"][0]))
        encoded["start_positions"].append(start)
        encoded["end_positions"].append(end)
        encoded["offset_mapping"][i] = [offset if inside else None for offset, inside in zip(offsets, in_context, strict=True)]
    return encoded


def first_windows(features: datasets.Dataset) -> datasets.Dataset:
    """Each example's first window only: what a reader truncated to one window sees."""
    examples = features["example"]
    return features.select([i for i, example in enumerate(examples) if i == 0 or examples[i - 1] != example])


def longest_answer(examples: datasets.Dataset, tokenizer) -> int:
    """The most tokens of any training answer: `--max_answer_length`'s default, so that no answer of the kind
    trained on is out of reach (transformers' examples fix 30, shorter than a sentence)."""
    texts = [text for answers in examples["answers"] for text in answers["text"]]
    return max(len(ids) for ids in tokenizer(texts, add_special_tokens=False)["input_ids"])


def best_spans(features: datasets.Dataset | dict, start_logits: np.ndarray, end_logits: np.ndarray, n_best_size: int,
               max_answer_length: int) -> dict[int, tuple[float, int, int]]:
    """Each example's best span over all its windows: example -> (start + end logit, first char, end char); an
    example none of whose windows has a valid span (inside the context, end not before start) is left out."""
    best: dict[int, tuple[float, int, int]] = {}
    for example, offsets, starts, ends in zip(features["example"], features["offset_mapping"], start_logits, end_logits,
                                              strict=True):
        for start in np.argsort(starts)[::-1][:n_best_size]:
            for end in np.argsort(ends)[::-1][:n_best_size]:
                if (max(start, end) >= len(offsets) or offsets[start] is None or offsets[end] is None or end < start
                        or end - start + 1 > max_answer_length):
                    continue
                score = float(starts[start] + ends[end])
                if example not in best or score > best[example][0]:
                    best[example] = (score, offsets[start][0], offsets[end][1])
    return best


def best_answers(contexts: list[str], features: datasets.Dataset, start_logits: np.ndarray, end_logits: np.ndarray,
                 n_best_size: int, max_answer_length: int) -> list[str]:
    """Each example's answer text: the highest start + end logit over its windows' valid spans ("" if none)."""
    best = best_spans(features, start_logits, end_logits, n_best_size, max_answer_length)
    return [contexts[example][best[example][1]:best[example][2]] if example in best else ""
            for example in range(len(contexts))]


def squad_scores(texts: Sequence[str], answers: Sequence[dict]) -> dict[str, float]:
    """Exact match and F1 (percent) of one predicted text per example against its `answers`, by the shipped squad."""
    return load_metric("squad").compute(
        predictions=[{"id": str(i), "prediction_text": text} for i, text in enumerate(texts)],
        references=[{"id": str(i), "answers": each} for i, each in enumerate(answers)])


def sentences(context: str) -> list[tuple[int, int]]:
    """The (start, end) character offsets of the context's sentences (`SENTENCE`: line breaks end one too)."""
    return [match.span() for match in SENTENCE.finditer(context)]


def lexical_baseline(train_contexts: Sequence[str], questions: Sequence[str], contexts: Sequence[str]) -> list[str]:
    """Each question's answer without a model: the sentence of its context nearest the question by cosine of TF-IDF
    vectors, the IDF fitted on the distinct training contexts. Ties go to the earlier sentence."""
    from sklearn.feature_extraction.text import TfidfVectorizer  # here: a command's --help need not import it

    vectorizer = TfidfVectorizer().fit(dict.fromkeys(train_contexts))
    asked, read = vectorizer.transform(questions), {}
    answers = []
    for i, context in enumerate(contexts):
        if context not in read:  # many questions share a document
            spans = sentences(context)
            read[context] = spans, vectorizer.transform([context[start:end] for start, end in spans])
        spans, vectors = read[context]
        start, end = spans[int(np.argmax((vectors @ asked[i].T).toarray()))]  # rows are L2-normalised: cosines
        answers.append(context[start:end])
    return answers


class QuestionAnsweringTrainer(Trainer):
    """A Trainer that scores examples, not windows: its `evaluate` turns the windows' logits into answers.

    `evaluate(features, examples=...)` scores a split; without arguments it scores the validation split.
    """

    def __init__(self, *args, eval_examples: datasets.Dataset, qa_args: QuestionAnsweringArguments, **kwargs):
        super().__init__(*args, **kwargs)
        self.eval_examples, self.qa_args = eval_examples, qa_args

    def evaluate(self, eval_dataset: datasets.Dataset | None = None, ignore_keys: list[str] | None = None,
                 metric_key_prefix: str = "eval", examples: datasets.Dataset | None = None) -> dict[str, float]:
        features = self.eval_dataset if eval_dataset is None else eval_dataset
        examples = self.eval_examples if examples is None else examples
        self.compute_metrics = lambda prediction: self.score(prediction, features, examples)
        return super().evaluate(features, ignore_keys, metric_key_prefix)

    def score(self, prediction, features: datasets.Dataset, examples: datasets.Dataset) -> dict[str, float]:
        start_logits, end_logits = prediction.predictions[:2]
        texts = best_answers(list(examples["context"]), features, start_logits, end_logits, self.qa_args.n_best_size,
                             self.qa_args.max_answer_length)
        return squad_scores(texts, examples["answers"])


class QuestionAnswering(task.Task):
    name, head, metric = "question_answering", "ForQuestionAnswering", "f1"
    arguments = (QuestionAnsweringArguments,)
    options = {"finetune": arguments, "distill": arguments}
    scores = {"f1": "F1", "exact_match": "exact match"}
    trainer_class = QuestionAnsweringTrainer
    logits, targets = ("start_logits", "end_logits"), ("start_positions", "end_positions")
    windowed = True

    def data(self, args, task_args: QuestionAnsweringArguments, tokenizer, max_length: int, command: str,
             show: bool) -> task.TaskData:
        """Per split the usable examples (numbered in an `example` column) and their windows; the skipped examples
        (printed by `command` when `show`) in the notes."""
        for name in ("doc_stride", "n_best_size", "max_answer_length"):
            value = getattr(task_args, name)
            if value is not None and value < (0 if name == "doc_stride" else 1):
                raise ValueError(f"--{name} must be {'>= 0' if name == 'doc_stride' else 'positive'}, got {value}")
        splits = task_data.load_splits(args, self.name, load=load_squad,
                                  check=lambda split: check_examples(split, tokenizer, max_length, task_args.doc_stride))
        task_data.limit(splits, args)
        skipped = {name: skip_misplaced_answers(split) for name, split in splits.items()}
        report_skipped(skipped, splits, command, show)
        examples = {name: split.dataset.add_column("example", list(range(len(split.dataset))))
                    for name, split in splits.items()}
        features = {name: task_data.encoded(dataset, name, windows, tokenizer, max_length, task_args.doc_stride)
                    for name, dataset in examples.items()}
        if task_args.truncate:
            features = {name: first_windows(split) for name, split in features.items()}
        if task_args.max_answer_length is None:
            task_args.max_answer_length = longest_answer(examples["train"], tokenizer)
        return task.TaskData(examples, features, notes={"skipped": skipped, "doc_stride": task_args.doc_stride,
                                                        "max_answer_length": task_args.max_answer_length,
                                                        "truncate": task_args.truncate})

    def head_settings(self, data: task.TaskData, args, config) -> tuple[dict, str]:
        return {"num_labels": 2}, "a start and an end logit"

    def trainer_options(self, data: task.TaskData, args, task_args) -> dict:
        return {"eval_examples": data.examples["validation"], "qa_args": task_args}

    def evaluation(self, data: task.TaskData, split: str) -> dict:
        return {"examples": data.examples[split]}

    def unlabeled(self, args, tokenizer, max_length: int, data: task.TaskData):
        if args.unlabeled_file == "domain":
            raise ValueError("--task question_answering: --unlabeled_file must be a SQuAD-format file of questions "
                             "and contexts (its answers are not read); the embedded 'domain' corpus holds no questions")
        return unanswered_windows(args.unlabeled_file, tokenizer, max_length, args.doc_stride,
                                  args.max_unlabeled_documents) if args.unlabeled_file else None

    def baseline(self, data: task.TaskData) -> dict:
        """The lexical baseline (`lexical_baseline`) on the test questions."""
        test = data.examples["test"]
        return squad_scores(lexical_baseline(data.examples["train"]["context"], test["question"], test["context"]),
                            test["answers"])

    def data_fields(self, data: task.TaskData) -> dict:
        """Its windows per split, the unlabelled ones (`distill`) and the skipped examples."""
        return {"windows": {name: len(d) for name, d in data.features.items()},
                "unlabeled_windows": data.notes["unlabeled"],
                "skipped": {name: len(rows) for name, rows in data.notes["skipped"].items()}}

    def report(self, data: task.TaskData, test: dict, baseline: dict) -> tuple[dict, str]:
        skipped, windows = data.notes["skipped"], {name: len(d) for name, d in data.features.items()}
        fields = {"doc_stride": data.notes["doc_stride"], "max_answer_length": data.notes["max_answer_length"],
                  "truncate": data.notes["truncate"], "windows": windows,
                  "skipped": {name: {"count": len(rows), "rows": rows} for name, rows in skipped.items()},
                  "test_exact_match": test["test_exact_match"], "test_f1": test["test_f1"],
                  "test_loss": test["test_loss"], "baseline_exact_match": baseline["exact_match"],
                  "baseline_f1": baseline["f1"]}
        return fields, (f"test exact match {fields['test_exact_match']:.1f}, F1 {fields['test_f1']:.1f} "
                        f"({len(data.examples['test'])} questions in {windows['test']} windows; skipped "
                        f"{sum(len(rows) for rows in skipped.values())} examples whose answer is off its offset) | "
                        f"lexical baseline (best TF-IDF sentence): exact match {baseline['exact_match']:.1f}, "
                        f"F1 {baseline['f1']:.1f}")


TASK = task.register(QuestionAnswering())
