"""Quality against cost: family x length x long-document task over seeds, beside dense 512-token baselines.

Every row starts from the same checkpoint through the pretrained-start recipe (training/long_context.py:
convert, then `adapt` for `--adapt_steps`, none by default), or, with `--start scratch`, through the workflow's
own path (each family pretrained from scratch, then adapted), then fine-tunes with the task's own `finetune` on
the same examples for the same epochs. Baselines in the same matrix: dense truncated to 512 tokens (QA: its
`--truncate`), dense over 512-token sliding windows (QA: `doc_stride` windows, as `finetune --task
question_answering` does; classification: chunk logits mean-pooled per document, a text pair's chunks of its
first text each with the second), and TF-IDF, which needs no
checkpoint (`tfidf_run`). Costs are measured over each Trainer run: training CPU-seconds (`time.process_time`,
per process: `--workers` runs keep it per run) and peak memory (live tensor bytes on CPU,
`torch.cuda.max_memory_allocated` on GPU). With adapt steps, the adapt runs double as the equal-budget MLM
table: every family's held-out MLM loss after the same steps, against dense at the same length.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import math
import multiprocessing
import os
import re
import shutil
import statistics
import sys
import threading
import time
from collections import defaultdict
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import datasets
import numpy as np
import torch
import transformers
from transformers import TrainerCallback
from transformers.trainer_callback import ExportableState
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

from ..convert import POSITION_INITS
from ..hub import load_tokenizer
from ..models.families import check_family
from ..recipes import family_settings
from ..tasks.classification import tfidf_cosine_classifier
from ..tasks.question_answering import QuestionAnsweringArguments
from ..tasks.task import TASKS as REGISTERED_TASKS
from ..tasks.task import Task, TaskData
from ..tasks.task_data import EMBEDDED_PAIRS, EMBEDDED_TASKS, load_corpus
from ..tensor_memory import PeakAllocated
from ..training import all_stages, long_context, mlm, stage
from ..training.finetuning import FinetuneArguments, finetune_task, task_defaults
from ..training.report import pyplot, save_figure
from ..training.tokenizer import train_tokenizer

TASKS = tuple(EMBEDDED_TASKS)  # the embedded long_qa, far_qa, long_match and kernel_docs
DENSE = "hfe_roberta"
SCRATCH = "scratch"  # --start: the workflow's own path, every family pretrained from scratch (all_stages' demo preset)
SAMPLING = ("random", "group_by_length")  # the Trainer's `train_sampling_strategy`s that apply to one process
WINDOW = 512  # the dense baselines' length (all-MiniLM-L6-v2's and RoBERTa's position table)
WINDOW_STRIDE = 128  # tokens shared by neighbouring classification windows, as QA's default --doc_stride
TFIDF = "TF-IDF"  # the model-free row of every task
POSITIONS = "positions"  # the --variants key that goes to `convert` (how the position table grows), not the config
# a --variants key: a curriculum that fine-tunes the long row on windows of this many tokens first, then on the
# whole inputs (a task that reads windows itself: QA)
CURRICULUM = "curriculum_length"
# --variants keys of the long row's fine-tuning, not its conversion (TrainingArguments fields, and the curriculum)
TRAINING_KEYS = ("num_train_epochs", "learning_rate", "per_device_train_batch_size", CURRICULUM)
QA_TASKS = [name for name, (kind, _) in EMBEDDED_TASKS.items() if kind == "question_answering"]
SAME_CPU = " at the windows' CPU-s"  # the name's mark of an `--equal_compute` row
# The published 3-seed table (docs/quality.md), which `recommend` and the demo quote; absent from an installed wheel
PUBLISHED_TABLE = Path(__file__).resolve().parents[2] / "docs" / "quality" / "quality.json"


@dataclass(frozen=True)
class Row:
    """One line of the table: a family at a length, reading the whole input ("long") or a 512 baseline."""

    family: str
    length: int
    mode: str = "long"  # long | truncated | windows
    variant: str = ""  # a long row's recipe ablation (`--variants`), "" for the recipe's own settings
    same_cpu: bool = False  # a long row given the windows' training CPU-seconds, in epochs (`--equal_compute`)

    @property
    def name(self) -> str:
        long = f"{self.family} {self.length}" + (f" {self.variant}" if self.variant else "") + (SAME_CPU * self.same_cpu)
        return {"long": long, "truncated": f"dense truncated {WINDOW}", "windows": f"dense {WINDOW} sliding windows"
                }[self.mode]

    @property
    def recipe(self) -> tuple[str, int, str]:
        """The checkpoint this row fine-tunes: the baselines share dense at 512 tokens; a variant that changes only
        the fine-tuning shares the recipe's own."""
        return (self.family, self.length, conversion_variant(self.variant)) if self.mode == "long" else (DENSE, WINDOW, "")


class Cost(TrainerCallback, ExportableState):
    """Training CPU-seconds and peak memory (MiB) of the Trainer runs it watches (a curriculum's two: summed and
    largest), each from its first to its last step, less the validation after each epoch (`Validation`'s curve).
    A checkpoint keeps the cost so far (`state`), which a run resumed from it adds to.

    Memory: `PeakAllocated`, `torch.cuda.max_memory_allocated` on GPU and on CPU the live tensor bytes (RSS growth is
    no measure there, glibc keeps freed pages). Counting adds the same small per-op cost to every row.
    """

    cpu_seconds, peak_mib = 0.0, 0.0
    resumed_seconds = 0.0  # of `cpu_seconds`, those measured before a stop, by the process that was stopped
    start = None  # the process time at which the run in progress began
    validation_start = None  # an evaluation outside training (a start's scores, the test split) is not counted

    def state(self) -> dict:
        running = self.start is not None
        return {"args": {}, "attributes": {
            "cpu_seconds": self.cpu_seconds + (time.process_time() - self.start - self.validating if running else 0.0),
            "peak_mib": max(self.peak_mib, self.memory.peak_so_far() / 2**20 if running else 0.0)}}

    def on_train_begin(self, args, state, control, **kwargs):
        saved = resumed(self, args, state)  # the cost up to the checkpoint, the runs before it included
        if saved:
            self.resumed_seconds += saved["cpu_seconds"] - self.cpu_seconds
            self.cpu_seconds, self.peak_mib = saved["cpu_seconds"], saved["peak_mib"]
        self.memory = PeakAllocated("cuda" if torch.cuda.is_available() else "cpu").__enter__()
        self.start, self.validating, self.validation_start = time.process_time(), 0.0, None

    def on_epoch_end(self, args, state, control, **kwargs):  # the Trainer validates next, if it does
        self.validation_start = time.process_time()

    def on_evaluate(self, args, state, control, **kwargs):
        if self.validation_start is not None:
            self.validating += time.process_time() - self.validation_start
            self.validation_start = None

    def leave(self) -> None:
        """Stop counting memory after a run that raised (it never reached `on_train_end`): the count must not
        outlive the run."""
        if self.start is not None:
            self.memory.__exit__(None, None, None)
            self.start = None

    def on_train_end(self, args, state, control, **kwargs):
        self.cpu_seconds += time.process_time() - self.start - self.validating
        self.start = self.validation_start = None
        self.memory.__exit__(None, None, None)
        self.peak_mib = max(self.peak_mib, self.memory.peak / 2**20)


class Validation(TrainerCallback, ExportableState):
    """The validation metric (`VALIDATION_METRICS`, percent) after each epoch of training: a learning curve in epochs,
    which the budget and the recipe's settings are chosen on (the test split is only reported). A checkpoint keeps
    the curve so far."""

    def __init__(self, metric):
        self.metric, self.curve, self.training = metric, [], False

    def state(self) -> dict:
        return {"args": {}, "attributes": {"curve": self.curve}}

    def on_train_begin(self, args, state, control, **kwargs):
        self.curve, self.training = list(resumed(self, args, state).get("curve", [])), True

    def on_evaluate(self, args, state, control, metrics=None, **kwargs):
        if self.training and metrics:
            self.curve.append({"epoch": round(state.epoch, 2), "metric": self.metric(metrics)})

    def on_train_end(self, args, state, control, **kwargs):
        self.training = False


def resumed(callback: ExportableState, args: transformers.TrainingArguments, state: transformers.TrainerState) -> dict:
    """What the checkpoint a run resumes from kept of `callback` (its `state()`'s attributes); {} for a new run."""
    if not state.global_step:
        return {}
    if type(callback).__name__ not in state.stateful_callbacks:
        raise ValueError(f"the checkpoint in {args.output_dir} does not say what its run measured so far; delete the "
                         "folder to run it again")
    return state.stateful_callbacks[type(callback).__name__]["attributes"]


def task_of(task: str) -> Task:
    """The registered task (`tasks/task.py`) that the embedded `task` is a data set of."""
    return REGISTERED_TASKS[EMBEDDED_TASKS[task][0]]


# ----------------------------------------------------------------------------------------- each task's hooks
def classification_metric(results: dict) -> float:
    return 100.0 * results["test_accuracy"]


def question_answering_metric(results: dict) -> float:
    """The test F1 over every question, a skipped one (its answer out of the reader's sight) scoring 0."""
    kept, skipped = results["examples"]["test"], results["skipped"]["test"]["count"]
    return results["test_f1"] * kept / (kept + skipped)


def tfidf_classifier(train: datasets.Dataset, test: datasets.Dataset, text_column: str = "text",
                     text_pair_column: str | None = None) -> float:
    """Word 1-2-gram TF-IDF and a logistic regression, the settings of docs/tasks.md's probes; for text pairs the
    logistic regression on their TF-IDF cosine (`tfidf_cosine_classifier`)."""
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline

    if text_pair_column:
        score = tfidf_cosine_classifier(train[text_column], train[text_pair_column], train["label"])
        return 100.0 * score(test[text_column], test[text_pair_column], test["label"])
    model = make_pipeline(TfidfVectorizer(sublinear_tf=True, min_df=2, ngram_range=(1, 2)),
                          LogisticRegression(max_iter=2000))
    return 100.0 * model.fit(train[text_column], train["label"]).score(test[text_column], test["label"])


def lexical_f1(train: datasets.Dataset, test: datasets.Dataset) -> float:
    """QA's lexical baseline (the best TF-IDF sentence), test F1."""
    return REGISTERED_TASKS["question_answering"].baseline(TaskData({"train": train, "test": test}, {}))["f1"]


# the embedded data sets' tasks: bench-quality's number of a finetune run's results (its main test score in percent)
# and the model-free row (`model_free(train, test, **the column options its finetune run reads)`)
BENCH_METRICS = {"classification": classification_metric, "question_answering": question_answering_metric}
# the validation split's score after an epoch, in the Trainer's metrics: the table's metric, over the kept questions
VALIDATION_METRICS = {"classification": lambda metrics: 100.0 * metrics["eval_accuracy"],
                      "question_answering": lambda metrics: metrics["eval_f1"]}
MODEL_FREE = {"classification": tfidf_classifier, "question_answering": lexical_f1}


def task_arguments(kind: Task, truncated: bool) -> list:
    """Its `arguments` of a bench-quality run at their defaults; the truncated baseline (`truncated`) reads each
    context's first window (QA's `--truncate`), as a user would."""
    return [QuestionAnsweringArguments(truncate=truncated) if each is QuestionAnsweringArguments else each()
            for each in kind.arguments]


# ----------------------------------------------------------------------------------------- data
def write_split_files(task: str, folder: Path, limits: dict[str, int | None], tokenizer, mode: str) -> dict[str, str]:
    """The task's splits as jsonl files for `finetune` (at most `limits[split]` examples), shaped for `mode`:
    "windows" (classification) cuts each document into 512-token chunks sharing `WINDOW_STRIDE` tokens, with the
    document's index (`window_of`); a text pair's first text is cut into chunks that leave room for its second, which
    every chunk repeats. Every other row reads the files as they are (QA's own options window or truncate them), an
    embedded pair task's by its text pair."""
    splits = EMBEDDED_TASKS[task][1]()
    folder.mkdir(parents=True, exist_ok=True)
    paths = {}
    for split, dataset in splits.items():
        dataset = dataset.shuffle(seed=1234).select(range(min(limits[split] or len(dataset), len(dataset))))
        if "label" in dataset.features:
            names = dataset.features["label"].names
            pair = EMBEDDED_PAIRS.get(task, ())  # the text pair finetune reads (`text_options`)
            rows = [{"text": r["text"], "label": names[r["label"]], **{c: r[c] for c in pair}} for r in dataset]
            if mode == "windows":
                cut, *kept = text_columns(task)
                rows = [{cut: chunk, **{column: r[column] for column in kept}, "label": r["label"], "window_of": i}
                        for i, r in enumerate(rows) for chunk in chunks(r[cut], tokenizer, *(r[c] for c in kept))]
        else:
            rows = [{key: r[key] for key in ("id", "question", "context", "answers")} for r in dataset]
        paths[split] = str(folder / f"{split}.jsonl")
        datasets.Dataset.from_list(rows).to_json(paths[split])
    return paths


def chunks(text: str, tokenizer, pair: str | None = None) -> list[str]:
    """`text` as the character spans of consecutive 512-token windows (special tokens and the second text `pair`
    included) sharing WINDOW_STRIDE tokens, or a third of a window that a long `pair` leaves short. A span that starts
    inside a word may tokenize longer on its own: it loses tokens at its end until it fits."""
    offsets = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)["offset_mapping"]
    paired = len(tokenizer(pair, add_special_tokens=False)["input_ids"]) if pair else 0
    size = WINDOW - tokenizer.num_special_tokens_to_add(pair=pair is not None) - paired
    shared, spans = min(WINDOW_STRIDE, size // 3), []
    for start in range(0, max(len(offsets) - shared, 1), size - shared):
        stop = min(start + size, len(offsets))
        while True:
            span = text[offsets[start][0]:offsets[stop - 1][1]]
            if stop - start == 1 or len(tokenizer(span, pair)["input_ids"]) <= WINDOW:
                break
            stop -= 1
        spans.append(span)
    return spans


# ----------------------------------------------------------------------------------------- runs
def windowed_accuracy(model_dir: str, test_file: str, task: str, batch_size: int = 8) -> float:
    """Document accuracy (%) of a chunk classifier: the mean of a document's chunk logits decides its label."""
    from transformers import AutoModelForSequenceClassification

    tokenizer = load_tokenizer(model_dir)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    model = AutoModelForSequenceClassification.from_pretrained(model_dir).to(device).eval()
    rows = datasets.load_dataset("json", data_files=test_file, split="train")
    columns = text_columns(task)
    logits = []
    with torch.no_grad():
        for i in range(0, len(rows), batch_size):
            batch = tokenizer(*(rows[column][i:i + batch_size] for column in columns), truncation=True,
                              max_length=WINDOW, padding=True, return_tensors="pt").to(device)
            logits.append(model(**batch).logits.float().cpu())
    logits = torch.cat(logits).numpy()
    pooled, labels = defaultdict(list), {}
    for document, label, row_logits in zip(rows["window_of"], rows["label"], logits, strict=True):
        pooled[document].append(row_logits)
        labels[document] = model.config.label2id[label]
    hits = [int(np.argmax(np.mean(pooled[d], axis=0)) == labels[d]) for d in pooled]
    return 100.0 * sum(hits) / len(hits)


def finetune_run(task: str, row: Row, checkpoint: str, files: dict[str, str], seed: int, output_dir: Path,
                 budget: dict, epochs: float | None = None) -> dict:
    """One fine-tuning run through the task's finetune function; metric in percent (`BENCH_METRICS`) and its costs.
    `epochs`: this many instead of the budget's or the variant's (an `--equal_compute` row's).

    A curriculum (`--variants curriculum_length=512`) first fine-tunes the checkpoint on windows of that many tokens
    over the same examples, in the baselines' batches, then the whole inputs from there: both passes are its cost."""
    print(f"== {task}: {row.name}, seed {seed}" + (f", {epochs:g} epochs" if epochs else ""), flush=True)
    started, cost, kind = time.process_time(), Cost(), task_of(task)
    validation = Validation(VALIDATION_METRICS[kind.name])
    training = variant_settings(row.variant)[2] | ({"num_train_epochs": epochs} if epochs else {})
    first_length, first_pass = training.pop(CURRICULUM, None), {}
    length = WINDOW if row.mode != "long" else row.length
    try:
        if first_length:  # its first pass's test metric is kept too: what the long model reads over windows
            first = {**training, "per_device_train_batch_size": budget["batch_size"]}
            first_pass["first_pass_metric"] = BENCH_METRICS[kind.name](
                train(kind, task, row, checkpoint, files, seed, output_dir / CURRICULUM, budget, first_length, first,
                      [cost, validation]))
            checkpoint = str(output_dir / CURRICULUM)
        results = train(kind, task, row, checkpoint, files, seed, output_dir, budget, length, training,
                        [cost, validation])
    finally:
        cost.leave()
    # the windows of a task that reads none itself (classification) are chunk files (`write_split_files`), pooled
    # per document
    chunked = row.mode == "windows" and not kind.windowed
    metric = windowed_accuracy(str(output_dir), files["test"], task) if chunked else BENCH_METRICS[kind.name](results)
    for folder in (output_dir, output_dir / CURRICULUM):  # finished: no resuming, so the checkpoints go
        for path in folder.glob(f"{PREFIX_CHECKPOINT_DIR}-*"):
            shutil.rmtree(path)
    return {"task": task, "row": row.name, "family": row.family, "length": length, "mode": row.mode, "seed": seed,
            "metric": metric, "cpu_seconds": cost.cpu_seconds, "peak_mib": cost.peak_mib,
            "global_step": results["global_step"], "num_train_epochs": results["settings"]["num_train_epochs"],
            # chunk windows are scored per document on test only: their validation counts chunks, no comparison
            "validation_curve": [] if chunked else validation.curve, **first_pass,
            "run_cpu_seconds": time.process_time() - started + cost.resumed_seconds}


def epochs_within(windows: dict, same_epochs: dict) -> float:
    """The epochs of a long row that fit in the windows run's training CPU-seconds, from its own run at the budget's
    epochs (`same_epochs`): rounded down to a tenth, at least a tenth."""
    per_epoch = same_epochs["cpu_seconds"] / same_epochs["num_train_epochs"]
    return max(0.1, math.floor(10 * windows["cpu_seconds"] / per_epoch) / 10)


def train(kind: Task, task: str, row: Row, checkpoint: str, files: dict[str, str], seed: int, output_dir: Path,
          budget: dict, length: int, training: dict, callbacks: list[TrainerCallback]) -> dict:
    """One `finetune` of `checkpoint` at `length` tokens under the budget (`training` over it); its results."""
    args = FinetuneArguments(model_name_or_path=checkpoint, train_file=files["train"],
                                      validation_file=files["validation"], test_file=files["test"], max_length=length,
                                      min_train_steps=0, resume=True,  # the budget's epochs or steps
                                      **text_options(task))
    # Every run validates after each epoch (the learning curve, `Validation`). A task whose start is a model of it
    # (classification's probe-initialised head) also keeps the best of its epochs and the start, as `finetune` runs it;
    # the others train for the budget's epochs, whatever the curve says, and keep the last epoch's checkpoint only:
    # an interrupted run resumes from it (a long row's three epochs take longer than a working session).
    selection = {} if kind.keeps_start else {"eval_strategy": "epoch", "save_strategy": "epoch", "save_total_limit": 1,
                                             "load_best_model_at_end": False}
    arguments = stage.training_arguments(task_defaults(kind), {
        "output_dir": str(output_dir), "seed": seed, **selection,
        "learning_rate": budget["learning_rate"], "max_steps": budget["max_steps"],
        "num_train_epochs": budget["num_train_epochs"], "per_device_train_batch_size": train_batch_size(row, budget),
        **training,
        "per_device_eval_batch_size": budget["batch_size"], "disable_tqdm": True,  # see `quiet`
        "train_sampling_strategy": budget.get("train_sampling_strategy", SAMPLING[0])})
    return finetune_task(kind, args, task_arguments(kind, row.mode == "truncated"), arguments, callbacks=callbacks)


def train_batch_size(row: Row, budget: dict) -> int:
    """A long row's batch is the budget's `long_batch_size` (recorded only where it differs from the baselines')."""
    return budget.get("long_batch_size", budget["batch_size"]) if row.mode == "long" else budget["batch_size"]


def text_columns(task: str) -> tuple[str, ...]:
    """The columns a classification row reads: an embedded pair task's text pair, else its text."""
    return EMBEDDED_PAIRS.get(task, ("text",))


def text_options(task: str) -> dict:
    """`finetune`'s column options of a row: an embedded pair task's text pair (`EMBEDDED_PAIRS`)."""
    pair = EMBEDDED_PAIRS.get(task)
    return {"text_column": pair[0], "text_pair_column": pair[1]} if pair else {}


def tfidf_run(task: str, files: dict[str, str]) -> dict:
    """The model-free baseline on the whole text of `files`: deterministic, so one run, no seed, no tensors.

    QA: `lexical_baseline` (best TF-IDF sentence) on every test question, test F1. Classification: word 1-2-gram
    TF-IDF + logistic regression, the settings of docs/tasks.md's probes (scripts/build_long_tasks.py), test accuracy;
    a text-pair task's (long_match): logistic regression on the TF-IDF cosine of its two texts, the build's probe.
    Both are the task's `MODEL_FREE` baseline. Its training CPU-seconds: the fit and the test predictions.
    """
    print(f"== {task}: {TFIDF}", flush=True)
    started = time.process_time()
    train, test = (datasets.load_dataset("json", data_files=files[split], split="train") for split in ("train", "test"))
    fitting = time.process_time()
    metric = MODEL_FREE[task_of(task).name](train, test, **text_options(task))
    cpu_seconds = time.process_time() - fitting
    return {"task": task, "row": TFIDF, "family": None, "length": None, "mode": "tfidf", "seed": None, "metric": metric,
            "cpu_seconds": cpu_seconds, "peak_mib": None, "global_step": None,
            "run_cpu_seconds": time.process_time() - started}


def matrix_rows(families: list[str], lengths: list[int], variants: list[str]) -> list[Row]:
    return [Row(family, length, "long", variant) for family in families for length in lengths
            for variant in ["", *variants]] + [Row(DENSE, WINDOW, "truncated"), Row(DENSE, WINDOW, "windows")]


def variant_settings(variant: str) -> tuple[dict, str, dict]:
    """A variant `"attention_window=512,positions=interpolate,num_train_epochs=2"` -> ({"attention_window": 512}, "interpolate",
    {"num_train_epochs": 2}): the config fields over the family's recipe settings, how `convert` grows the position
    table, and the fine-tuning arguments over the budget's (so a long row can train longer than the baselines)."""
    settings = stage.parse_overrides(variant, "--variants")
    training = {key: settings.pop(key) for key in TRAINING_KEYS if key in settings}
    return settings, settings.pop(POSITIONS, "tile"), training


def conversion_variant(variant: str) -> str:
    """The part of `variant` that its checkpoint is built with: `variant` itself unless it sets fine-tuning keys."""
    settings, positions, training = variant_settings(variant)
    if not training:
        return variant
    fields = {**settings, **({POSITIONS: positions} if positions != "tile" else {})}
    return ",".join(f"{key}={value}".replace(" ", "") for key, value in fields.items())


def check_options(args: argparse.Namespace) -> None:
    for name in args.families:
        check_family(name, "--families")
    bad = sorted(set(args.tasks) - set(TASKS))
    if bad:
        raise ValueError(f"unknown --tasks {bad}; choose from {sorted(TASKS)}")
    if not args.families or not args.lengths or not args.seeds:
        raise ValueError("give at least one of each: --families, --lengths, --seeds")
    short = [length for length in args.lengths if length <= WINDOW]
    if short:
        raise ValueError(f"--lengths {short}: the long rows must read more than the baselines' {WINDOW} tokens")
    if args.start == SCRATCH and args.size not in mlm.SIZES:
        raise ValueError(f"unknown --size {args.size!r}; choose from {sorted(mlm.SIZES)}")
    for name in ("batch_size", "long_batch_size", "pretrain_steps", "workers"):
        if getattr(args, name) < 1:
            raise ValueError(f"--{name} must be at least 1, got {getattr(args, name)}")
    if args.adapt_steps < 0 or (args.adapt_steps == 0 and (not args.tasks or args.start == SCRATCH)):
        raise ValueError(f"--adapt_steps {args.adapt_steps}: give 0 (convert only, with --tasks and a pretrained "
                         "--start) or more; the MLM table and --start scratch need adapt steps")
    if args.lm_head_steps < 0 or (args.lm_head_steps and (not args.adapt_steps or args.start == SCRATCH)):
        raise ValueError(f"--lm_head_steps {args.lm_head_steps}: give 0, or more with --adapt_steps and a pretrained "
                         "--start (it trains the new LM head adapt starts with)")
    for variant in args.variants:
        settings, positions, training = variant_settings(variant)
        if not settings and positions == "tile" and not training:
            raise ValueError(f"--variants {variant!r} changes nothing: give FIELD=VALUE pairs, e.g. attention_window=512")
        bad = {key: value for key, value in training.items() if not isinstance(value, int | float) or value <= 0
               or (key in ("per_device_train_batch_size", CURRICULUM) and not isinstance(value, int))}
        if bad:
            raise ValueError(f"--variants {variant!r}: {', '.join(bad)} must be a positive number (batch sizes and "
                             "lengths whole)")
        if CURRICULUM in training:
            if training[CURRICULUM] >= min(args.lengths):
                raise ValueError(f"--variants {variant!r}: {CURRICULUM} must be shorter than --lengths {args.lengths}")
            whole = [task for task in args.tasks if not task_of(task).windowed]
            if whole:
                raise ValueError(f"--variants {variant!r}: a curriculum needs tasks that read windows themselves "
                                 f"(question answering), not {whole}")
        if positions not in POSITION_INITS:
            raise ValueError(f"--variants {variant!r}: unknown {POSITIONS} {positions!r}; choose from "
                             f"{sorted(POSITION_INITS)}")
    if args.equal_compute and (args.max_steps > 0 or not args.tasks):
        raise ValueError("--equal_compute gives each long row the windows' training CPU-seconds in epochs: it needs "
                         "--tasks, and --num_train_epochs rather than --max_steps")
    if args.max_steps == 0 or args.max_steps < -1 or args.num_train_epochs <= 0:
        raise ValueError(f"--max_steps {args.max_steps}, --num_train_epochs {args.num_train_epochs}: give a positive "
                         "number of epochs, and -1 (the epochs decide) or a positive number of steps")


def recipes(families: list[str], lengths: list[int], variants: list[str], tasks: list[str]) -> list[tuple[str, int, str]]:
    """The (family, length, variant) checkpoints to build: every long row's, and the dense reference, which is the
    512 baselines' start when there are tasks, else (MLM only) dense at each length: equal budget at the same length."""
    reference = [(DENSE, WINDOW, "")] if tasks else [(DENSE, length, "") for length in lengths]
    return list(dict.fromkeys([row.recipe for row in matrix_rows(families, lengths, variants) if row.mode == "long"]
                              + reference))


def recipe(args: argparse.Namespace, family: str, length: int, variant: str) -> dict:
    """One checkpoint: `args.start` -> `family` at `length` tokens (`variant`'s settings) -> `--adapt_steps` of
    domain MLM; losses and costs."""
    print(f"== recipe: {args.start} -> {family} at {length} tokens{f' {variant}' if variant else ''}, "
          f"{args.adapt_steps} adapt steps", flush=True)
    cost = Cost()
    folder = Path(args.output_dir) / "checkpoints" / recipe_name(family, length, variant)
    given = {"per_device_eval_batch_size": args.batch_size, "seed": args.seeds[0], "disable_tqdm": True}  # `quiet`
    settings, positions, _ = variant_settings(variant)
    if args.start == SCRATCH:
        results = from_scratch(args, family, length, folder, given, cost, settings)
    else:
        results = long_context.long_context(args.start, family, length, folder, args.adapt_steps, given,
                                            args.max_train_documents, callbacks=[cost], settings=settings,
                                            positions=positions, lm_head_steps=args.lm_head_steps)
    return {"family": family, "length": length, "variant": variant,
            "checkpoint": results.get("checkpoint", str(folder / "adapted")),
            "mlm_loss_before": results["mlm_loss_before"], "mlm_loss_after": results["mlm_loss_after"],
            "mlm_loss_head_start": results.get("mlm_loss_head_start"),
            "cpu_seconds": getattr(cost, "cpu_seconds", 0.0), "peak_mib": getattr(cost, "peak_mib", 0.0),
            "steps": results["global_step"]}  # convert only: no training to cost


def recipe_name(family: str, length: int, variant: str) -> str:
    return f"{family}-{length}" + (f"-{variant}" if variant else "")


def from_scratch(args: argparse.Namespace, family: str, length: int, folder: Path, given: dict, cost: Cost,
                 settings: dict) -> dict:
    """The workflow's path with its demo preset: `pretrain` `family` from scratch at `length` tokens on the whole
    general corpus (`--pretrain_steps`, the shared tokenizer), then `adapt` on `--max_train_documents` domain
    documents. Attention settings as the pretrained start's (recipes.py), so that the two starts' matrices
    compare. Returns adapt's results."""
    preset, given = all_stages.DEMO, {**given, "eval_strategy": "no", "save_strategy": "no"}
    layers = mlm.SIZES[args.size]["num_hidden_layers"]
    overrides = {**family_settings(family, layers, pretrained_start=True), **settings}
    mlm.pretrain(mlm.PretrainArguments(model_type=family, size=args.size, tokenizer_name=str(tokenizer_folder(args)),
                                       config_overrides=overrides, max_length=length, overwrite_output_dir=True),
                 all_stages.stage_training_args(mlm.MLM_DEFAULTS, preset["pretrain"],
                                                {**given, "max_steps": args.pretrain_steps}, folder / "pretrained"))
    return mlm.adapt(mlm.AdaptArguments(model_name_or_path=str(folder / "pretrained"), max_length=length,
                                        max_train_documents=args.max_train_documents, overwrite_output_dir=True),
                     all_stages.stage_training_args(mlm.MLM_DEFAULTS, preset["adapt"],
                                                    {**given, "max_steps": args.adapt_steps}, folder / "adapted"),
                     callbacks=[cost])


def tokenizer_folder(args: argparse.Namespace) -> Path:
    return Path(args.output_dir) / "checkpoints" / "tokenizer"


def train_shared_tokenizer(args: argparse.Namespace) -> None:
    """The scratch start's one tokenizer for every family, trained as `pretrain` trains it (general corpus, demo vocabulary)."""
    corpus = load_corpus(None, "general", "text")
    train_tokenizer(corpus["text"], all_stages.DEMO["vocab_size"], max(args.lengths)).save_pretrained(tokenizer_folder(args))


def quiet() -> None:
    """No progress bars in this process: those of runs side by side garble each other. Progress is a line as each
    recipe and run starts, the Trainer's loss every `logging_steps` (`disable_tqdm`), and each run's result."""
    datasets.disable_progress_bars()
    transformers.utils.logging.disable_progress_bar()


def worker(parent: int) -> None:
    """A worker process: one thread, quiet, and gone with the bench: a bench killed without shutting its pool down
    would otherwise leave its workers training on and writing into --output_dir."""
    torch.set_num_threads(1)
    quiet()
    threading.Thread(target=exit_with, args=(parent,), daemon=True).start()


def exit_with(parent: int) -> None:
    """Exit this process once `parent` is no longer its parent (it died and the process was adopted)."""
    while os.getppid() == parent:
        time.sleep(1)
    os._exit(1)


def in_workers(function, jobs: list[tuple], workers: int) -> list:
    """`function(*job)` for every job, in order: here when `workers` is 1, else in that many processes of one thread."""
    if min(workers, len(jobs)) <= 1:
        return [function(*job) for job in jobs]
    with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn"), initializer=worker,
                             initargs=(os.getpid(),)) as pool:
        return list(pool.map(functools.partial(call, function), jobs))


COST_RANK = ("windows", "long", "truncated")  # the rows by training time at one length: windows take the most steps


def expected_cost_rank(job: tuple) -> tuple[int, int]:
    """Seed by seed (an interrupted matrix has whole seeds), and within a seed the longest runs first, so that
    `--workers` processes finish together rather than one waiting on the last long run; TF-IDF last."""
    _function, _path, _task, row, *rest = job  # a fine-tuning run's job, or TF-IDF's (its fourth item: files)
    if not isinstance(row, Row):
        return (sys.maxsize, 0)
    _checkpoint, _files, seed, *_ = rest
    return seed, COST_RANK.index(row.mode)


def run_jobs(jobs: list[tuple], workers: int) -> None:
    """Run (or reuse) `saved` jobs, the longest first."""
    jobs = sorted(jobs, key=expected_cost_rank)
    if jobs:
        kept = sum(path.is_file() for _, path, *_ in jobs)
        print(f"== {len(jobs)} runs ({kept} kept from an earlier invocation), {min(workers, len(jobs))} at a "
              "time", flush=True)
    in_workers(saved, jobs, workers)


def same_cpu_job(job: tuple, out: Path) -> tuple:
    """The `--equal_compute` twin of a long row's finetune job: the same row, checkpoint, data and seed, trained for
    the epochs its own run and the windows run of that seed (both kept by then) say fit in the windows' CPU-seconds."""
    function, path, task, row, checkpoint, files, seed, folder, budget = job
    twin = dataclasses.replace(row, same_cpu=True)
    windows = json.loads((run_folder(out, task, Row(DENSE, WINDOW, "windows")) / f"{seed}.json").read_text())
    same_epochs = json.loads(path.read_text())
    # a run kept before runs recorded their epochs trained its variant's, else the budget's
    same_epochs.setdefault("num_train_epochs", variant_settings(row.variant)[2].get("num_train_epochs",
                                                                                   budget["num_train_epochs"]))
    epochs = epochs_within(windows, same_epochs)
    twin_folder = run_folder(out, task, twin)
    return (function, twin_folder / path.name, task, twin, checkpoint, files, seed, twin_folder / str(seed), budget,
            epochs)


def run_folder(out: Path, task: str, row: Row) -> Path:
    """Where a row's runs of `task` are kept: its name, with dashes for spaces and other marks."""
    return out / "runs" / task / re.sub(r"[^\w=.,-]+", "-", row.name).strip("-")


def call(function, job: tuple):
    """`function(*job)`: jobs of different lengths (a fine-tuning run's, TF-IDF's) share one pool."""
    return function(*job)


def saved(function, path: Path, *job) -> dict:
    """`function(*job)`, its result kept at `path`; a result an earlier run of the matrix kept there is reused, so an
    interrupted matrix picks up where it stopped (`check_same_budget` makes sure the results are comparable)."""
    if path.is_file():
        return json.loads(path.read_text())
    result = function(*job)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f"{path.name}.partial")  # a run killed while writing leaves no result to reuse
    partial.write_text(json.dumps(result))
    partial.replace(path)
    return result


# What `bench_quality` writes into --output_dir (the demo's --overwrite_output_dir deletes these)
OUTPUTS = ("budget.json", "checkpoints", "data", "runs", "quality.json", "quality.md", "quality.png")


def check_same_budget(out: Path, budget: dict) -> None:
    """Record the budget in `out`; stop if `out` holds results of another budget, which must not mix in one table."""
    path = out / "budget.json"
    if path.is_file() and json.loads(path.read_text()) != budget:
        raise ValueError(f"--output_dir {out} holds results at another budget ({path.read_text().strip()}); "
                         "give a new --output_dir, or the same options to continue that matrix")
    out.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(budget))


def bench_quality(args: argparse.Namespace) -> dict:
    """Run the matrix; write quality.json, quality.md and (with tasks) quality.png into --output_dir. Returns the JSON.

    Each recipe's and run's result is kept beside its checkpoint or run folder as it finishes; the same command
    again reuses them (after an interruption, or with more --seeds, --families, --lengths or --tasks)."""
    check_options(args)
    quiet()
    out = Path(args.output_dir)
    budget = {"num_train_epochs": args.num_train_epochs, "max_steps": args.max_steps,
              "learning_rate": args.learning_rate, "batch_size": args.batch_size}
    if args.train_sampling_strategy != SAMPLING[0]:  # recorded only when set, so earlier folders' budgets still match
        budget["train_sampling_strategy"] = args.train_sampling_strategy
    if args.long_batch_size != args.batch_size:  # so is the long rows' own batch
        budget["long_batch_size"] = args.long_batch_size
    limits = {"train": args.max_train_samples, "validation": args.max_eval_samples, "test": args.max_eval_samples}
    adapt = {"adapt_steps": args.adapt_steps, **({"lm_head_steps": args.lm_head_steps} if args.lm_head_steps else {})}
    check_same_budget(out, {"start": args.start, "size": args.size, "pretrain_steps": args.pretrain_steps,
                            **adapt, "max_train_documents": args.max_train_documents, **budget, **limits})
    if args.start == SCRATCH and not (tokenizer_folder(args) / "tokenizer.json").is_file():
        train_shared_tokenizer(args)
    settings = argparse.Namespace(**{key: value for key, value in vars(args).items() if not callable(value)})  # picklable
    built = recipes(args.families, args.lengths, args.variants, args.tasks)
    adapted = in_workers(saved, [(recipe, out / "checkpoints" / f"{recipe_name(*built_recipe)}.json", settings,
                                  *built_recipe) for built_recipe in built], args.workers)
    checkpoints = {built_recipe: m.pop("checkpoint") for built_recipe, m in zip(built, adapted, strict=True)}
    jobs = []
    if args.tasks:
        tokenizer = load_tokenizer(checkpoints[DENSE, WINDOW, ""])
        files = {}
        for task in args.tasks:
            for row in matrix_rows(args.families, args.lengths, args.variants):
                mode = "windows" if row.mode == "windows" and not task_of(task).windowed else "long"
                if (task, mode) not in files:
                    files[task, mode] = write_split_files(task, out / "data" / f"{task}-{mode}", limits, tokenizer, mode)
                folder = run_folder(out, task, row)
                jobs += [(finetune_run, folder / f"{seed}.json", task, row, checkpoints[row.recipe],
                          files[task, mode], seed, folder / str(seed), budget) for seed in args.seeds]
            jobs.append((tfidf_run, out / "runs" / task / f"{TFIDF}.json", task, files[task, "long"]))
    run_jobs(jobs, args.workers)
    if args.equal_compute:  # second: each long row again, in as many epochs as the windows' CPU-seconds buy it
        run_jobs([same_cpu_job(job, out) for job in jobs if isinstance(job[3], Row) and job[3].mode == "long"
                  and CURRICULUM not in variant_settings(job[3].variant)[2]], args.workers)
    runs = kept_runs(out)
    report = {"start": args.start, "budget": {**budget, **adapt, **limits},
              "table": summarise(runs), "mlm": mlm_table(adapted), "runs": runs}
    out.mkdir(parents=True, exist_ok=True)
    (out / "quality.json").write_text(json.dumps(report, indent=2))
    (out / "quality.md").write_text(markdown(report))
    if runs:
        plot([t for t in report["table"] if not t["variant"]], out / "quality.png")
    print(markdown(report), flush=True)
    return report


def kept_runs(out: Path) -> list[dict]:
    """Every run result kept in `out`, by earlier invocations too: `check_same_budget` keeps one budget per folder, so
    a matrix grown by several commands (other seeds, tasks, families) is reported as one table."""
    runs = [json.loads(path.read_text()) for pattern in ("runs/*/*.json", "runs/*/*/*.json")
            for path in out.glob(pattern)]  # a run's own folder (checkpoints, report) lies deeper
    modes = ["long", "truncated", "windows", "tfidf"]
    return sorted(runs, key=lambda r: (TASKS.index(r["task"]), modes.index(r["mode"]), r["row"], r["seed"] or 0))


def summarise(runs: list[dict]) -> list[dict]:
    """One entry per (task, row): metric mean and spread (sample std) over seeds, mean CPU-seconds and peak MiB
    (TF-IDF's one run: None, no tensors to count)."""
    groups = defaultdict(list)
    for run in runs:
        groups[run["task"], run["row"]].append(run)
    table = []
    for (task, name), group in groups.items():
        metrics = [r["metric"] for r in group]
        # each run's last epoch: runs trained for the same seconds end at different epochs
        last = {r["seed"]: r["validation_curve"][-1]["metric"] for r in group} \
            if all(r.get("validation_curve") for r in group) else {}
        table.append({"task": task, "row": name, "length": group[0]["length"], "variant": variant_of(group[0]),
                      "seeds": len(group),
                      "metric_mean": statistics.mean(metrics),
                      "metric_std": statistics.stdev(metrics) if len(metrics) > 1 else 0.0,
                      "cpu_seconds": statistics.mean(r["cpu_seconds"] for r in group),
                      "peak_mib": max(r["peak_mib"] for r in group),
                      "epochs": statistics.mean(r["num_train_epochs"] for r in group)  # runs kept before: none
                      if all("num_train_epochs" in r for r in group) else None,
                      "validation_curve": validation_curve(group),
                      "validation": statistics.mean(last.values()) if last else None,
                      "validation_by_seed": last})
    model_free = {t["task"]: t["metric_mean"] for t in table if t["row"] == TFIDF}
    for t in table:  # a trained row at or below the model-free baseline did not learn: its comparison is broken
        t["learned"] = None if t["row"] == TFIDF or t["task"] not in model_free else t["metric_mean"] > model_free[t["task"]]
    return table


def variant_of(run: dict) -> str:
    """A long run's `--variants` ablation, as its row name says it ("" for the recipe's own settings, and baselines)."""
    if run.get("mode") != "long":
        return ""
    return run["row"].removesuffix(SAME_CPU).removeprefix(f"{run['family']} {run['length']}").strip()


def validation_curve(group: list[dict]) -> list[dict]:
    """The mean validation metric after each epoch over the runs of a row (`Validation`), where every run recorded
    it at that epoch (runs kept before runs validated: none)."""
    curves = [{point["epoch"]: point["metric"] for point in run.get("validation_curve") or []} for run in group]
    epochs = sorted(set.intersection(*(set(curve) for curve in curves))) if curves else []
    return [{"epoch": epoch, "metric": statistics.mean(curve[epoch] for curve in curves)} for epoch in epochs]


FLAT = 1.0  # metric points: a row whose later epochs add less than this to its validation has flattened


def chosen_epochs(rows: list[dict]) -> dict[str, tuple[float, bool]]:
    """Per task, the budget its learning curves choose: the first epoch by which every row has come within `FLAT` of
    its best validation (a row may dip after it: `finetune` keeps the best epoch); and whether the curves have
    flattened there (False: a row's last epoch measured still added more, so the budget may be short)."""
    chosen = {}
    for t in rows:
        curve = t["validation_curve"]
        best = max(point["metric"] for point in curve)
        epoch = next(point["epoch"] for point in curve if point["metric"] >= best - FLAT)
        last, flat = chosen.get(t["task"], (0.0, True))
        chosen[t["task"]] = (max(last, epoch), flat and epoch < curve[-1]["epoch"])
    return chosen


def chosen_settings(rows: list[dict]) -> list[dict]:
    """Per `--variants` row with a validation score: the numbers, and whether validation chooses its setting over the
    recipe's own row (the same family, length and epochs). Both are read on the seeds both ran; the variant's setting
    replaces the recipe's only where it reads higher by more than the larger spread over those seeds, as a target's
    "beats", so one shared seed chooses nothing. The test column plays no part."""
    recipe_rows = {(t["task"], t["row"]): t for t in rows if not t.get("variant")}
    chosen = []
    for t in rows:
        recipe_row = recipe_rows.get((t["task"], t["row"].replace(f" {t['variant']}", "", 1))) if t.get("variant") else None
        seeds = sorted(set(t.get("validation_by_seed") or {}) & set((recipe_row or {}).get("validation_by_seed") or {}))
        if not seeds:
            continue
        variant, recipe = ([row["validation_by_seed"][seed] for seed in seeds] for row in (t, recipe_row))
        if len(seeds) == 1:
            numbers = f"validation {variant[0]:.1f} against {recipe[0]:.1f} on seed {seeds[0]} only: no spread to read"
            replaces = False
        else:
            (variant_mean, variant_std), (recipe_mean, recipe_std) = (
                (statistics.mean(scores), statistics.stdev(scores)) for scores in (variant, recipe))
            numbers = (f"validation {variant_mean:.1f} ± {variant_std:.1f} against {recipe_mean:.1f} ± "
                       f"{recipe_std:.1f} on seeds " + ", ".join(map(str, seeds)))
            replaces = variant_mean > recipe_mean + max(variant_std, recipe_std)
        chosen.append({"task": t["task"], "row": t["row"], "numbers": numbers, "replaces": replaces})
    return chosen


DID_NOT_LEARN = "did not learn at this budget"


def row_label(row: dict) -> str:
    """The row's name, marked when it did not beat the model-free baseline (tables, plot and printed summary)."""
    return f"{row['row']} ({DID_NOT_LEARN})" if row.get("learned") is False else row["row"]


def mlm_table(mlm: list[dict]) -> list[dict]:
    """The adapt runs with each loss as a ratio to dense's at the same length (None without a dense run); none
    without adapt steps."""
    mlm = [m for m in mlm if m["mlm_loss_after"] is not None]
    dense = {m["length"]: m["mlm_loss_after"] for m in mlm if m["family"] == DENSE}
    return [{**m, "ratio_to_dense": m["mlm_loss_after"] / dense[m["length"]] if m["length"] in dense else None}
            for m in mlm]


# The targets the table is read against (docs/measurements/quality.md): per task, what a long row must show
LOOK_UP, FAR_EVIDENCE, LONG_CLASSIFICATION = "long_qa", "far_qa", ("long_match", "kernel_docs")
WINDOWS_OVER_MODEL_FREE = 1.5  # the windows row learns: its F1 at least this times TF-IDF's on the look-up QA
FAR_EVIDENCE_GAIN = 15.0  # far-evidence questions: the best long row at least this many points above the windows
# The held-out task: no recipe choice reads its scores, and the table reports it apart (docs/quality.md)
HELD_OUT = ("man_qa",)
HELD_OUT_CPU_RATIO = 0.7  # held out, same epochs: the long row within the windows' spread at this share of their CPU-s
SAME_CPU_GAIN = {LOOK_UP: 15.0, FAR_EVIDENCE: 10.0, **dict.fromkeys(HELD_OUT, 15.0)}  # at the windows' CPU-s, this far


def targets(table: list[dict]) -> list[dict]:
    """Each target the table can decide: its name, the numbers it rests on and whether it is met.

    "Matches" allows the larger seed spread of the two rows; a target whose rows did not run is left out."""
    rows = {(t["task"], t["row"]): t for t in table}
    windows, truncated = Row(DENSE, WINDOW, "windows").name, Row(DENSE, WINDOW, "truncated").name
    found = []
    for task in dict.fromkeys(t["task"] for t in table):
        trained = [t for t in table if t["task"] == task and t["row"] not in (windows, truncated, TFIDF)]
        long_rows = [t for t in trained if not t["row"].endswith(SAME_CPU)]  # same epochs as the baselines
        best = max(long_rows, key=lambda t: t["metric_mean"], default=None)
        window, cut, model_free = (rows.get((task, name)) for name in (windows, truncated, TFIDF))
        if task == LOOK_UP and window and model_free:
            ratio = window["metric_mean"] / max(model_free["metric_mean"], 1e-9)
            found.append({"task": task, "target": f"windows >= {WINDOWS_OVER_MODEL_FREE}x TF-IDF",
                          "numbers": f"{window['metric_mean']:.1f} / {model_free['metric_mean']:.1f} = {ratio:.2f}x",
                          "met": ratio >= WINDOWS_OVER_MODEL_FREE})
        if task in (LOOK_UP, FAR_EVIDENCE, *HELD_OUT) and best and window:
            # the best long row within the CPU-seconds allowed (a dearer family or length does not hide a cheaper one's match)
            ratio = HELD_OUT_CPU_RATIO if task in HELD_OUT else 1.0
            allowed = ratio * window["cpu_seconds"]
            cheap = max((t for t in long_rows if t["cpu_seconds"] <= allowed), key=lambda t: t["metric_mean"],
                        default=best)
            spread = max(cheap["metric_std"], window["metric_std"])
            matches = cheap["metric_mean"] >= window["metric_mean"] - spread
            verdict = "beats" if cheap["metric_mean"] > window["metric_mean"] + spread else "matches" if matches else "below"
            at_most = f"at most {ratio:g}x their" if ratio < 1 else "no more"
            found.append({"task": task, "target": f"{cheap['row']} matches the windows at {at_most} training CPU-s",
                          "numbers": f"F1 {mean_and_spread(cheap)} against {mean_and_spread(window)} "
                                     f"({verdict}); CPU-s {cheap['cpu_seconds']:.0f} against "
                                     f"{window['cpu_seconds']:.0f} ({cheap['cpu_seconds'] / window['cpu_seconds']:.2f}x)",
                          "met": matches and cheap["cpu_seconds"] <= allowed})
        if task == FAR_EVIDENCE and best and window:
            gain = best["metric_mean"] - window["metric_mean"]
            found.append({"task": task, "target": f"{best['row']} >= windows + {FAR_EVIDENCE_GAIN:.0f} points",
                          "numbers": f"{best['metric_mean']:.1f} - {window['metric_mean']:.1f} = {gain:+.1f}",
                          "met": gain >= FAR_EVIDENCE_GAIN})
        same_cpu = max((t for t in trained if t["row"].endswith(SAME_CPU)), key=lambda t: t["metric_mean"],
                       default=None)
        if task in SAME_CPU_GAIN and same_cpu and window:
            gain = same_cpu["metric_mean"] - window["metric_mean"]
            found.append({"task": task, "target": f"{same_cpu['row']} >= windows + {SAME_CPU_GAIN[task]:.0f} points",
                          "numbers": f"{mean_and_spread(same_cpu)} - {mean_and_spread(window)} = {gain:+.1f}; CPU-s "
                                     f"{same_cpu['cpu_seconds'] / window['cpu_seconds']:.2f}x the windows'",
                          "met": gain >= SAME_CPU_GAIN[task]})
        if task in LONG_CLASSIFICATION and best and cut:
            gain, spread = best["metric_mean"] - cut["metric_mean"], max(best["metric_std"], cut["metric_std"])
            found.append({"task": task, "target": f"{best['row']} beats truncated 512 by more than the spread",
                          "numbers": f"{mean_and_spread(best)} against {mean_and_spread(cut)}: {gain:+.1f}",
                          "met": gain > spread})
    return found


def load_published(path: Path = PUBLISHED_TABLE) -> tuple[list[dict] | None, str | None]:
    """(the published table's rows, where and how they were measured), or (None, None) when the file is not here."""
    if not path.is_file():
        return None, None
    report = json.loads(path.read_text())
    return report["table"], (f"docs/quality/quality.json, written by `hf-efficient bench-quality` "
                             f"(`docs/quality.md`): start {report['start']}, {budget_text(report['budget'])}")


# the budget's keys as a reader says them (a key not listed reads as itself)
BUDGET_WORDS = {"num_train_epochs": "epochs", "max_steps": "steps", "learning_rate": "learning rate",
                "batch_size": "batch", "long_batch_size": "long rows' batch", "adapt_steps": "adapt steps",
                "train": "training examples", "validation": "validation examples", "test": "test examples"}


def budget_text(budget: dict) -> str:
    """"epochs 1, learning rate 0.0001, batch 4, ...": the budget in words (no steps limit: left out)."""
    return ", ".join(f"{BUDGET_WORDS.get(key, key.replace('_', ' '))} {value:g}" if isinstance(value, float)
                     else f"{BUDGET_WORDS.get(key, key.replace('_', ' '))} {value}"
                     for key, value in budget.items() if not (key == "max_steps" and value == -1))


def mean_and_spread(row: dict) -> str:
    """"17.4 ± 3.3" over several seeds; one run has no spread to show."""
    return f"{row['metric_mean']:.1f} ± {row['metric_std']:.1f}" if row["seeds"] > 1 else f"{row['metric_mean']:.1f}"


def markdown(report: dict) -> str:
    def metric(task: str) -> str:  # the task's main test score
        return f"test {next(iter(task_of(task).scores.values()))}"

    def table(rows: list[dict]) -> list[str]:
        lines = ["| task | row | tokens | metric (%) | mean ± std | validation | epochs | training CPU-s | peak MiB | "
                 "seeds |", "|---|---|---|---|---|---|---|---|---|---|"]
        for t in rows:
            peak = "n/a" if t["peak_mib"] is None else f"{t['peak_mib']:.0f}"
            epochs = "-" if t.get("epochs") is None else f"{t['epochs']:.3g}"
            validation = "-" if t.get("validation") is None else f"{t['validation']:.1f}"
            lines.append(f"| {t['task']} | {row_label(t)} | {t['length'] or 'whole text'} | {metric(t['task'])} | "
                         f"{mean_and_spread(t)} | {validation} | {epochs} | {t['cpu_seconds']:.1f} | {peak} | "
                         f"{t['seeds']} |")
        return lines

    def curves(rows: list[dict], choose: bool = True) -> list[str]:  # the rows validated after two epochs or more
        rows = [t for t in rows if len(t.get("validation_curve") or []) > 1]
        epochs = sorted({point["epoch"] for t in rows for point in t["validation_curve"]})
        if not rows:
            return []
        lines = ["", "Learning curves: the validation metric (%) after each epoch, mean over seeds:", "",
                 "| task | row | " + " | ".join(f"epoch {epoch:g}" for epoch in epochs) + " |",
                 "|---|---|" + "---|" * len(epochs)]
        for t in rows:
            at = {point["epoch"]: f"{point['metric']:.1f}" for point in t["validation_curve"]}
            lines.append(f"| {t['task']} | {row_label(t)} | " + " | ".join(at.get(e, "-") for e in epochs) + " |")
        if not choose:  # the held-out task: no choice reads it
            return lines
        chosen = chosen_epochs(rows)
        return lines + ["", "Chosen on validation (the first epoch by which every row of the task has come within "
                            f"{FLAT:g} point of its best): " + "; ".join(
                                f"{task} {epoch:g} epochs" + ("" if flat else ", still rising: run more epochs")
                                for task, (epoch, flat) in chosen.items()) + "."]

    def ablations(rows: list[dict], choose: bool = True) -> list[str]:  # the `--variants` rows beside the recipe's
        variants = [t for t in rows if t.get("variant")]
        if not variants:
            return []
        recipe_rows = {(t["task"], t["row"].replace(f" {t['variant']}", "", 1)) for t in variants}
        lines = ["", "Ablations (the recipe's long rows, each with one setting changed by `--variants`; the choice "
                     "reads validation, not test):", "",
                 *table([t for t in rows if t.get("variant") or (t["task"], t["row"]) in recipe_rows])]
        if choose:
            lines += ["", "Chosen on validation (a setting replaces the recipe's where it reads higher by more than "
                          "the larger spread, on the seeds both rows ran):", ""]
            lines += [f"- {c['task']}, {c['row']}: {c['numbers']}: "
                      + ("**replaces the recipe's setting**" if c["replaces"] else "the recipe's setting stays")
                      for c in chosen_settings(rows)]
        return lines

    main = [t for t in report["table"] if not t.get("variant")]  # the published table: the recipe's settings only
    chosen_on = [t for t in main if t["task"] not in HELD_OUT]
    held_out = [t for t in main if t["task"] in HELD_OUT]
    # each table is a section that pages include alone (pymdownx.snippets' markers, hidden in the page)
    lines = [f"Start: {report['start']}; {budget_text(report['budget'])}.", "",
             "<!-- --8<-- [start:table] -->", *table(chosen_on), "<!-- --8<-- [end:table] -->",
             *curves(chosen_on), *ablations([t for t in report["table"] if t["task"] not in HELD_OUT])]
    if held_out:
        lines += ["", "Held-out task (no recipe choice reads it):", "", "<!-- --8<-- [start:held_out] -->",
                  *table(held_out), "<!-- --8<-- [end:held_out] -->", *curves(held_out, choose=False),
                  *ablations([t for t in report["table"] if t["task"] in HELD_OUT], choose=False)]
    if report["mlm"]:
        lines += ["", "Equal-budget MLM (held-out loss after the same adapt steps):", "",
                  "| family | tokens | steps | loss before | loss after | / dense | adapt CPU-s |", "|---|---|---|---|---|---|---|"]
    for m in report["mlm"]:
        ratio = "-" if m["ratio_to_dense"] is None else f"{m['ratio_to_dense']:.3f}"
        family = f"{m['family']} {m['variant']}" if m.get("variant") else m["family"]
        head = m.get("mlm_loss_head_start")  # --lm_head_steps: the loss at the start, then after the head's steps
        before = f"{m['mlm_loss_before']:.3f}" if head is None else f"{head:.3f} -> {m['mlm_loss_before']:.3f}"
        lines.append(f"| {family} | {m['length']} | {m['steps']} | {before} | "
                     f"{m['mlm_loss_after']:.3f} | {ratio} | {m['cpu_seconds']:.1f} |")
    if report["runs"]:  # what the matrix costs, whichever invocations ran its parts
        total = sum(r["run_cpu_seconds"] for r in report["runs"])
        lines += ["", f"All {len(report['runs'])} runs: {total:,.0f} CPU-seconds, one thread each (at least "
                      f"{total / 3600 / 2:.1f} hours on 2 cores with `--workers 2`; the recipes not counted)."]
    found = targets(main)
    if found:
        lines += ["", "Targets:", "", "| task | target | numbers | met |", "|---|---|---|---|"]
        lines += [f"| {t['task']} | {t['target']} | {t['numbers']} | {'yes' if t['met'] else '**no**'} |" for t in found]
    return "\n".join(lines) + "\n"


def plot(table: list[dict], path: Path) -> None:
    """Metric (mean ± std over seeds) against training CPU-seconds, one panel per task."""
    tasks = list(dict.fromkeys(t["task"] for t in table))
    plt = pyplot()
    fig, axes = plt.subplots(1, len(tasks), figsize=(6 * len(tasks), 4.5), squeeze=False)
    for ax, task in zip(axes[0], tasks, strict=True):
        for t in (t for t in table if t["task"] == task):
            if t["row"] == TFIDF:  # no training to place on the x-axis: the line a model must clear
                ax.axhline(t["metric_mean"], color="grey", linestyle="--", label=TFIDF)
            else:
                ax.errorbar(t["cpu_seconds"], t["metric_mean"], yerr=t["metric_std"], fmt="o", capsize=4,
                            label=row_label(t), mfc="none" if t.get("learned") is False else None)
        ax.set(title=task, xlabel="training CPU-seconds (mean over seeds)", ylabel="metric (%)")
        ax.set_ylim(bottom=0)
        ax.legend(fontsize=8)
    save_figure(fig, path)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--start", default=long_context.MINILM,
                        help=f"checkpoint every row starts from: minilm (all-MiniLM-L6-v2), a RoBERTa/BERT folder, or "
                             f"{SCRATCH} (every family pretrained from scratch, as `hf-efficient workflow` does)")
    parser.add_argument("--size", default=all_stages.DEMO["size"], help=f"--start {SCRATCH}: model size, of {list(mlm.SIZES)}")
    parser.add_argument("--pretrain_steps", type=int, default=all_stages.DEMO["pretrain"]["max_steps"],
                        help=f"--start {SCRATCH}: general-corpus MLM steps before the adapt steps")
    parser.add_argument("--families", nargs="+", default=["hfe_longformer"])
    parser.add_argument("--lengths", type=int, nargs="+", default=[2048], help="tokens the long rows read")
    parser.add_argument("--variants", nargs="*", default=[], metavar="FIELD=VALUE[,FIELD=VALUE]",
                        help=f"recipe ablations: each adds a long row per family and length whose conversion sets "
                             f"these config fields (e.g. attention_window=512) or {POSITIONS}=interpolate, or whose "
                             f"fine-tuning sets {', '.join(TRAINING_KEYS)} (e.g. num_train_epochs=2)")
    parser.add_argument("--tasks", nargs="*", default=QA_TASKS, help=f"of {list(TASKS)}; none: the MLM table only")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2], help="fine-tuning seeds: one run of every row each")
    parser.add_argument("--adapt_steps", type=int, default=0,
                        help="domain MLM steps of the recipe, every family (0: convert only; the MLM table needs more)")
    parser.add_argument("--lm_head_steps", type=int, default=0,
                        help="with --adapt_steps: first train adapt's new LM head alone this many steps, the encoder "
                             "frozen (all-MiniLM-L6-v2 ships no LM head)")
    parser.add_argument("--max_train_documents", type=int, default=200, help="domain documents the recipe reads")
    parser.add_argument("--num_train_epochs", type=float, default=3.0,
                        help="fine-tuning epochs of every run: every row sees the same examples (QA: questions); the "
                             "validation curves choose at least 3 (docs/measurements/quality.md)")
    parser.add_argument("--max_steps", type=int, default=-1, help="fine-tuning steps of every run (-1: the epochs decide)")
    parser.add_argument("--learning_rate", type=float, default=1e-4,
                        help="fine-tuning learning rate of every row (finetune's own default at all-MiniLM-L6-v2's width)")
    parser.add_argument("--batch_size", type=int, default=4, help="fine-tuning batch of the 512-token baselines")
    parser.add_argument("--long_batch_size", type=int, default=2,
                        help="fine-tuning batch of the long rows: a batch pads to its longest input, so a long row "
                             "costs fewer CPU-seconds and half the memory in batches of 2 (docs/measurements/quality.md)")
    parser.add_argument("--train_sampling_strategy", choices=SAMPLING, default=SAMPLING[0],
                        help="the Trainer's sampler in every row: group_by_length batches examples of similar length, "
                             "so a long row pads less")
    parser.add_argument("--equal_compute", action="store_true",
                        help="also train each long row for as many epochs (to a tenth) as fit in the windows row's "
                             "training CPU-seconds, same seed: a second row per long row, named with "
                             f"'{SAME_CPU.strip()}'")
    parser.add_argument("--max_train_samples", type=int, default=200, help="training examples (QA: questions) of every row")
    parser.add_argument("--max_eval_samples", type=int, default=80, help="validation and test examples of every row")
    parser.add_argument("--workers", type=int, default=1,
                        help="run the recipes, then the fine-tuning runs, in this many processes of one thread each")
    parser.add_argument("--output_dir", required=True)
    parser.set_defaults(run=bench_quality)
