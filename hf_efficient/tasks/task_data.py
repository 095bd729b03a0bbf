"""A task's data: local text/jsonl/csv/parquet files or the embedded sets (`hf_efficient.data`), checked before
training, a task's splits read and cut (`load_splits`).

Every check here runs before a model is built, so that bad input fails in seconds with a message that
says what to change, not after minutes of training.
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import os
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import datasets
import torch
from datasets.fingerprint import Hasher
from torch.utils.data import DataLoader
from transformers import PreTrainedTokenizerBase

from .. import data as embedded

EMBEDDED_CORPORA = {"general": embedded.load_general_corpus, "domain": embedded.load_domain_corpus}
ROW = "source_row"  # each example's row in its file, kept through cuts and subsets for messages
# embedded fine-tuning data (`finetune --dataset`): name -> (the `finetune --task` it is for, its loader)
EMBEDDED_TASKS = {"kernel_docs": ("classification", embedded.load_kernel_docs),
                  "long_match": ("classification", embedded.load_long_match),
                  "long_qa": ("question_answering", embedded.load_long_qa),
                  "far_qa": ("question_answering", embedded.load_far_qa),
                  "man_qa": ("question_answering", embedded.load_man_qa)}  # the held-out task (bench/quality.py)
# an embedded pair task's two text columns, which `finetune --dataset NAME` reads as text and text pair by default
EMBEDDED_PAIRS = {"long_match": ("document", "section")}
FILE_BUILDERS = {".txt": "text", ".text": "text", ".jsonl": "json", ".json": "json", ".csv": "csv", ".parquet": "parquet"}
MODEL_INPUTS = ("input_ids", "attention_mask", "token_type_ids")  # the per-token inputs a model reads of a row


def check_files(paths: Sequence[str]) -> str:
    """Raise a clear error for a missing, unreadable, empty or unsupported file; return the `datasets` builder."""
    builders = set()
    for path in map(Path, paths):
        if not path.exists():
            raise FileNotFoundError(f"data file {path} does not exist")
        if not path.is_file():
            raise ValueError(f"data file {path} is not a file")
        if not os.access(path, os.R_OK):
            raise PermissionError(f"data file {path} is not readable")
        if path.stat().st_size == 0:
            raise ValueError(f"data file {path} is empty")
        suffixes = [s for s in path.suffixes if s != ".gz"]
        builder = FILE_BUILDERS.get(suffixes[-1].lower() if suffixes else "")
        if builder is None:
            raise ValueError(f"data file {path}: unsupported extension; use one of {sorted(FILE_BUILDERS)} (optionally .gz)")
        if builder in ("text", "json", "csv"):
            check_lines(path, line_records=suffixes[-1].lower() == ".jsonl", header=builder == "csv")
        builders.add(builder)
    if len(builders) > 1:
        raise ValueError(f"data files {list(paths)} mix formats {sorted(builders)}; give files of one format")
    return builders.pop()


def check_lines(path: Path, line_records: bool, header: bool) -> None:
    """ValueError naming the file and row of the first line that is not UTF-8 text or, in JSON lines (`line_records`),
    not a JSON object: `datasets` says only "An error occurred while generating the dataset" of these. Rows count
    from 1 after the `header` line (csv)."""
    opener = gzip.open if path.suffix.lower() == ".gz" else open
    with opener(path, "rb") as file:
        for row, line in enumerate(file, start=0 if header else 1):
            try:
                text = line.decode("utf-8")
            except UnicodeDecodeError as error:
                where = f"row {row}" if row else "the header line"
                raise ValueError(f"data file {path}, {where}: not UTF-8 text (byte {line[error.start]:#04x} at "
                                 f"column {error.start + 1}); save the file as UTF-8") from None
            if not line_records or not text.strip():
                continue
            try:
                record = json.loads(text)
            except json.JSONDecodeError as error:
                raise ValueError(f"data file {path}, row {row}: not valid JSON ({error.msg} at column {error.pos + 1})") from None
            if not isinstance(record, dict):
                raise ValueError(f"data file {path}, row {row}: expected a JSON object of fields, got a "
                                 f"{type(record).__name__}")


def load_files(paths: Sequence[str]) -> datasets.Dataset:
    """One dataset from local files (one format), with a clear error when they cannot be read or hold nothing."""
    builder = check_files(paths)
    try:
        dataset = datasets.load_dataset(builder, data_files=[str(p) for p in paths], split="train")
    except Exception as error:  # datasets raises many types for unparsable input
        raise ValueError(f"could not read {list(paths)} as {builder}: {error}") from error
    if len(dataset) == 0:
        raise ValueError(f"data files {list(paths)} contain no records")
    return dataset


def require_column(dataset: datasets.Dataset, column: str, what: str) -> None:
    if column not in dataset.column_names:
        raise ValueError(f"column {column!r} not found in {what}; its columns are "
                         f"{[name for name in dataset.column_names if name != ROW]}")


def load_corpus(files: Sequence[str] | None, embedded_name: str, text_column: str,
                *more_columns: str) -> datasets.Dataset:
    """MLM text: local files, or the embedded corpus `embedded_name` ("general" or "domain"), its `text_column` (and
    `more_columns`, e.g. a text pair's second text). Rows with an empty text are dropped."""
    if files:
        dataset, what = load_files(files), f"data files {list(files)}"
    else:
        if embedded_name not in EMBEDDED_CORPORA:
            raise ValueError(f"unknown embedded corpus {embedded_name!r}; choose from {sorted(EMBEDDED_CORPORA)}")
        dataset, what = EMBEDDED_CORPORA[embedded_name](), f"the embedded {embedded_name} corpus"
    for column in (text_column, *more_columns):
        require_column(dataset, column, what)
    dataset = dataset.filter(lambda text: bool(text and text.strip()), input_columns=text_column)
    if len(dataset) == 0:
        raise ValueError(f"{what} has no non-empty text in column {text_column!r}")
    return dataset.select_columns([text_column, *more_columns])


def subset(dataset: datasets.Dataset, limit: int | None) -> datasets.Dataset:
    """The first `limit` rows (all when None): for corpora, whose documents come in no meaningful order."""
    return dataset.select(range(min(limit, len(dataset)))) if limit else dataset


def sample(dataset: datasets.Dataset, limit: int | None) -> datasets.Dataset:
    """At most `limit` rows, a fixed random sample kept in file order: for labelled splits, which files often sort
    (e.g. by label), so their first rows would not represent them (the first 64 kernel_docs documents share a label)."""
    if not limit or limit >= len(dataset):
        return dataset
    return dataset.select(sorted(random.Random(0).sample(range(len(dataset)), limit)))


def encoded(rows: datasets.Dataset, what: str, encode: Callable[..., dict], tokenizer: PreTrainedTokenizerBase,
            *arguments) -> datasets.Dataset:
    """`rows` replaced by what a task's tokenization makes of each batch of them, `encode(batch, tokenizer,
    *arguments)`, shown as "Tokenizing `what`"."""
    return tokenizer_map(rows, lambda batch, tokenizer: encode(batch, tokenizer, *arguments), tokenizer, batched=True,
                         remove_columns=rows.column_names, desc=f"Tokenizing {what}")


def tokenizer_map(rows: datasets.Dataset, function: Callable[..., dict], tokenizer: PreTrainedTokenizerBase,
                  **map_arguments) -> datasets.Dataset:
    """`rows.map(function, **map_arguments)`, each batch mapped by `function(batch, tokenizer=tokenizer)`: every map
    that tokenizes.

    datasets names (and caches) a map's result by hashing its function and arguments. Hashing a tokenizer that way
    pickles its vocabulary in Python, about half a second for all-MiniLM-L6-v2's, on every map of every run; this
    hashes the same things with the tokenizer in its serialized form instead, so `function` takes the tokenizer as
    an argument rather than holding it.
    """
    described = tokenizer  # a tokenizer without a Rust backend: datasets' own hash
    if getattr(tokenizer, "backend_tokenizer", None) is not None:
        # The backend's JSON holds the vocabulary, merges, added tokens and normalizer (the tokenizer's `_vocab` and
        # `_merges` are what it was built from); the rest is small. Its truncation and padding are left out:
        # transformers sets them again on each call, from that call's arguments.
        backend = json.loads(tokenizer.backend_tokenizer.to_str())
        described = [type(tokenizer).__qualname__,
                     json.dumps({key: value for key, value in backend.items() if key not in ("truncation", "padding")}),
                     {key: value for key, value in vars(tokenizer).items() if key not in ("_tokenizer", "_vocab", "_merges")}]
    fingerprint = Hasher.hash([rows._fingerprint, function, map_arguments, described])
    return rows.map(function, fn_kwargs={"tokenizer": tokenizer}, new_fingerprint=fingerprint, **map_arguments)


@torch.no_grad()
def batch_outputs(forward: Callable[[dict], torch.Tensor], dataset: datasets.Dataset, collator: Callable,
                  batch_size: int, device: torch.device) -> torch.Tensor:
    """`forward(batch)` of each collated batch of `dataset`'s `MODEL_INPUTS` on `device`, in row order, concatenated on
    the CPU in float32: a frozen model's outputs for every row (the probe's features, the teacher's cached logits)."""
    rows = dataset.select_columns([column for column in MODEL_INPUTS if column in dataset.column_names])
    return torch.cat([forward({key: value.to(device) for key, value in batch.items()}).float().cpu()
                      for batch in DataLoader(rows, batch_size=batch_size, collate_fn=collator)])


@dataclass
class Split:
    """One split's rows and where they came from, for error messages."""

    dataset: datasets.Dataset
    path: str  # its file, or what the embedded split is
    file: bool = True

    @property
    def what(self) -> str:
        return f"data file {self.path}" if self.file else self.path

    def where(self, row: int, column: str) -> str:
        return f"{self.what}, row {row + 1}, field {column!r}"


def load_splits(args, task: str, load=lambda path: load_files([path]),
                check=lambda split: None) -> dict[str, Split]:
    """train, validation and test `Split`s from the files, or the embedded `args.dataset` without --train_file.

    `load(path)` reads one file; `check(split)` stops on a bad row of it, before a split too small to cut is
    reported (the bad row is the problem to fix first). A missing validation or test split is cut from train; the
    cut splits keep the train file's name and row numbers (their rows come from it).
    """
    if not args.train_file:
        if not any(kind == task for kind, _ in EMBEDDED_TASKS.values()):
            raise ValueError(f"--task {task} needs local data: give --train_file (and --validation_file, --test_file)")
        splits = {name: Split(numbered(dataset), f"the embedded {args.dataset} {name} split", file=False)
                  for name, dataset in load_embedded_task(args.dataset, task).items()}
        for split in splits.values():
            check(split)
        return splits
    given = {"train": args.train_file, "validation": args.validation_file, "test": args.test_file}
    splits = {}
    for name, path in given.items():
        if path:
            splits[name] = Split(numbered(load(path)), path)
            check(splits[name])
    missing = [name for name in ("validation", "test") if name not in splits]
    if missing:
        train = splits["train"]
        cut = math.ceil(0.1 * len(missing) * len(train.dataset))  # the rows train_test_split cuts: one per split at least
        if cut < len(missing) or cut >= len(train.dataset):
            raise ValueError(f"{train.what} has {len(train.dataset)} rows, too few to cut {' and '.join(missing)} from; "
                             f"give {' and '.join(f'--{name}_file' for name in missing)}")
        parts = train.dataset.train_test_split(test_size=0.1 * len(missing), seed=1234)
        splits["train"] = Split(parts["train"], train.path)
        if len(missing) == 2:
            halves = parts["test"].train_test_split(test_size=0.5, seed=1234)
            parts = {"validation": halves["train"], "test": halves["test"]}
        else:
            parts = {missing[0]: parts["test"]}
        splits.update({name: Split(dataset, train.path) for name, dataset in parts.items()})
    return splits


def numbered(dataset: datasets.Dataset) -> datasets.Dataset:
    return dataset.add_column(ROW, list(range(len(dataset))))


def require_columns(split: Split, columns: dict[str, str]) -> None:
    """A ValueError naming the file and the first missing column; `columns` maps each to what it should hold."""
    for column, what in columns.items():
        if column not in split.dataset.column_names:
            raise ValueError(f"{split.what}: column {column!r} ({what}) not found; its columns are "
                             f"{[name for name in split.dataset.column_names if name != ROW]}")


def limit(splits: dict[str, Split], args) -> None:
    splits["train"].dataset = sample(splits["train"].dataset, args.max_train_samples)
    for name in ("validation", "test"):
        splits[name].dataset = sample(splits[name].dataset, args.max_eval_samples)


def load_embedded_task(name: str, task: str) -> datasets.DatasetDict:
    """The splits of the embedded `name` for `finetune --task task`; a ValueError naming the choices otherwise."""
    if name not in EMBEDDED_TASKS:
        raise ValueError(f"unknown embedded task {name!r}; choose from {sorted(EMBEDDED_TASKS)}")
    kind, load = EMBEDDED_TASKS[name]
    if kind != task:
        others = [other for other, (other_kind, _) in EMBEDDED_TASKS.items() if other_kind == task]
        instead = f"--task {kind}" + "".join(f", --dataset {other}" for other in others) + " or --train_file"
        raise ValueError(f"--dataset {name} is {kind} data, not {task}: give {instead}")
    return load()


def load_task(train_file: str | None, validation_file: str | None, test_file: str | None, embedded_name: str,
              text_column: str, label_column: str,
              text_pair_column: str | None = None) -> tuple[datasets.DatasetDict, list[str]]:
    """Classification splits (train, validation, test) with `text` (and, given `text_pair_column`, `text_pair`: the
    second text of a pair) and `labels`, and the label names (`load_splits`).

    Labels may be a ClassLabel, integers or strings (`labels` = the class index), or lists of strings, one
    list per example, possibly empty (multi-label: `labels` = a 0/1 float per name). The names are the
    ClassLabel's, else the sorted distinct training labels. A row whose label is missing or unseen in
    training is an error naming the file, the row and the field.
    """
    classes = {}  # of the training split, which is checked first: "names", "multi_label"

    def check(split: Split) -> None:
        texts = {text_column: "text", **({text_pair_column: "text_pair"} if text_pair_column else {})}
        for column in (*texts, label_column):
            require_column(split.dataset, column, split.what)
        feature, values = split.dataset.features[label_column], split.dataset[label_column]
        if isinstance(feature, datasets.ClassLabel):
            values = [feature.int2str(value) for value in values]
        if not classes:
            multi_label = isinstance(feature, (datasets.List, datasets.Sequence))
            seen = {label for row in values if row is not None for label in (row if multi_label else [row])}
            names = list(feature.names) if isinstance(feature, datasets.ClassLabel) else sorted(seen, key=str)
            if len(names) < 2:
                raise ValueError(f"column {label_column!r} of {split.what} has fewer than 2 distinct labels: {names}")
            classes.update(names=names, multi_label=multi_label)
        names, multi_label = classes["names"], classes["multi_label"]
        index, rows = {label: i for i, label in enumerate(names)}, []
        for row, labels in zip(split.dataset[ROW], values, strict=True):
            if labels is None or multi_label != isinstance(labels, list):
                kind = "a list of labels" if multi_label else "one label"
                raise ValueError(f"{split.where(row, label_column)}: expected {kind}, got {labels!r}")
            unknown = [label for label in (labels if multi_label else [labels]) if label not in index]
            if unknown:
                raise ValueError(f"{split.where(row, label_column)}: label {unknown[0]!r} is not among the training "
                                 f"labels {names[:20]}")
            rows.append([float(label in labels) for label in names] if multi_label else index[labels])
        for row, *values in zip(split.dataset[ROW], *(split.dataset[column] for column in texts), strict=True):
            for column, value in zip(texts, values, strict=True):
                if not isinstance(value, str):
                    raise ValueError(f"{split.where(row, column)}: expected a text, got {value!r}")
        dataset = split.dataset.select_columns([*texts, ROW]).add_column("labels", rows)
        split.dataset = dataset.rename_columns({column: name for column, name in texts.items() if column != name})

    files = argparse.Namespace(train_file=train_file, validation_file=validation_file, test_file=test_file,
                               dataset=embedded_name)
    splits = load_splits(files, "classification", check=check)
    return datasets.DatasetDict({name: split.dataset.remove_columns(ROW) for name, split in splits.items()}), \
        classes["names"]


def text_columns(args) -> tuple[str, str | None]:
    """(text column, text pair column) of a classification run: --text_column and --text_pair_column, or, both left
    unset, the embedded pair task's own pair (`EMBEDDED_PAIRS`, `--dataset` without --train_file)."""
    if not args.train_file and args.text_column == "text" and args.text_pair_column is None:
        return EMBEDDED_PAIRS.get(args.dataset, ("text", None))
    return args.text_column, args.text_pair_column


def unlabeled_text(args, column: str, *more_columns: str) -> datasets.Dataset | None:
    """The rows of `--unlabeled_file` with a non-empty `column` (and its `more_columns`; 'domain': the embedded
    corpus), shuffled, at most `--max_unlabeled_documents`; None without the option."""
    if not args.unlabeled_file:
        return None
    corpus = load_corpus(None if args.unlabeled_file == "domain" else [args.unlabeled_file], "domain", column,
                         *more_columns)
    return subset(corpus.shuffle(seed=0), args.max_unlabeled_documents)
