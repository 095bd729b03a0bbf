"""`hf-efficient recommend`: a user's documents and this machine in, a family with its settings and measured cost out.

Three steps, each a function of the one before's record, so that the choice can be checked on recorded numbers:

1. `length_profile`: the documents tokenized with the start checkpoint's tokenizer (QA: question and context as the
   pair `finetune` reads): p50, p90, p99, the longest and the share past 512 tokens.
2. `measure_candidates`: on this device and dtype, at the p50 and p90 lengths (and p99 when only it is past 512), a
   training step (forward + backward) and an inference forward of one document, each candidate a random-weight
   model of the start checkpoint's size (bench/measure.py: best wall-clock time and peak tensor memory): dense
   truncated to 512, dense over 512-token windows, dense over the whole input, and each family at its
   pretrained-start recipe settings (recipes.py). Within `time_budget`: the most telling first, each later one only
   when its predicted time still fits; what was left out is said.
3. `decide`: a pure function of the record and the project's quality table (docs/quality/quality.json, written by
   `bench-quality`). Documents that fit 512 tokens: dense. Otherwise the candidates that read the whole document
   and whose batch of one fits memory (training/memory_fit.py) are ranked by evidence, then by measured cost:
   first dense over the whole input (full attention, which every family approximates) and the families the quality
   table measured at or above the windows, then dense over windows, then the families it has not measured (or
   measured below the windows), then truncation; within each, training plus inference seconds per document at the
   longest measured length. So on a GPU where dense flash attention is fastest at these lengths, dense comes first.

The report folder (markdown, JSON, a plot of cost against length with the percentiles marked) is written whole at
the end, replacing an earlier report: an interrupted run leaves the earlier one as it was.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import re
import shlex
import shutil
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import psutil
import torch
import transformers
from tqdm.auto import tqdm

from ..hub import load_tokenizer
from ..models.families import FAMILIES
from ..recipes import family_settings
from ..tasks import task_data
from ..tasks.question_answering import load_squad
from ..training import memory_fit
from ..training.long_context import MINILM, minilm_folder
from ..training.report import pyplot, save_figure
from .grid import DEFAULT_OVERLAP, DENSE, DTYPES, WINDOW, Windowed
from .measure import measure
from .options import add_option, positive_int
from .quality import load_published, mean_and_spread, task_of
from .sizes import benchmark_configs, build_model

TASK_COLUMNS = {"classification": "the text (and --text_pair_column)", "question_answering": "question and context"}
QA_COLUMNS = ("question", "context")
RECIPE_FAMILY = "hfe_longformer"  # the family the quality table measures (`bench-quality --families` default)
SIZE_FIELDS = ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size", "vocab_size")
DEFAULT_OUTPUT_DIR = "hfe-recommend"
REPORT_FILES = ("recommendation.md", "recommendation.json", "cost.png")
REQUESTED_BATCH = 8  # finetune's per_device_train_batch_size: the batch the fit may lower, with accumulation
CLOSE_LENGTHS = 1.1  # p50 within this factor of p90: measured at p90 only
REPORT_SECONDS = 3.0  # kept from the budget for the plot and the report
BUDGET_MARGIN = 1.25  # a candidate starts only when this times its predicted time still fits the budget
TRUNCATED, WINDOWS, WHOLE = "dense truncated to 512", "dense over 512-token windows", "dense over the whole input"
SHORT = "dense"  # the one dense candidate when documents fit 512 tokens (truncation and windows change nothing)
# ranking groups, best first (the fourth: a family where documents fit 512 tokens)
TIERS = ("measured or exact", "baseline", "not measured", "no gain under 512", "truncates")


# ----------------------------------------------------------------------------------------- records
@dataclass
class LengthProfile:
    """Token counts of the documents: percentiles, the longest, the share past 512 tokens."""

    documents: int  # how many were tokenized
    rows: int  # how many the data holds
    p50: int
    p90: int
    p99: int
    max: int
    share_past_512: float


@dataclass(frozen=True)
class Candidate:
    """One way to read a document: `mode` truncated (its first 512 tokens), windows (512-token windows sharing 128
    tokens, one batch) or whole (the whole document, a dense model or a family)."""

    name: str
    model_type: str
    mode: str


@dataclass
class Cost:
    """One candidate on one document of `length` tokens: seconds of a training step (forward + backward) and of an
    inference forward, and their peak tensor memory (MiB); None where not measured (`error` says why)."""

    candidate: str
    length: int
    train_seconds: float | None = None
    train_peak_mib: float | None = None
    infer_seconds: float | None = None
    infer_peak_mib: float | None = None
    error: str | None = None


@dataclass
class Measurements:
    """What `measure_candidates` recorded, everything `decide` reads."""

    profile: LengthProfile
    device: str  # cpu | cuda
    hardware: str  # the processor or GPU, in words
    dtype: str
    clock: str  # what the seconds are: wall-clock, or CPU seconds on one thread (`cpu_time`)
    size: dict  # the start checkpoint's SIZE_FIELDS
    parameters: int  # the dense model's at the start's size (memory_fit's gradients and optimizer states)
    free_bytes: int  # memory_fit.available_bytes when measuring
    lengths: list[int]  # document lengths measured at
    costs: list[Cost]
    skipped: list[str] = field(default_factory=list)  # one line per thing left out, and why


@dataclass
class Choice:
    """One ranked candidate: its settings, measured costs, the batch that fits, the quality evidence."""

    candidate: str
    model_type: str
    mode: str
    settings: dict
    max_length: int
    tier: int  # index of TIERS
    evidence: list[str]  # the quality table's rows for it, or why there are none
    costs: dict[int, Cost]  # by document length
    batch: int = 0
    accumulation: int = 0
    excluded: str | None = None  # why it cannot be recommended (not measured, failed, does not fit)


@dataclass
class Recommendation:
    verdict: str  # one plain sentence, "Use dense..." where dense is the answer
    best: Choice | None
    ranking: list[Choice]
    decisive_length: int
    commands: list[str] = field(default_factory=list)
    command_note: str | None = None


@dataclass
class RecommendResult:
    """What `recommend` returns: the request, the profile and measurements, the recommendation, the report folder."""

    request: dict
    measurements: Measurements
    recommendation: Recommendation
    quality_source: str | None
    output_dir: str
    wall_seconds: float


# ----------------------------------------------------------------------------------------- 1. documents
def task_of_request(task: str | None, dataset: str | None) -> str:
    """--task, or the embedded --dataset's task, or classification."""
    task = task or task_data.EMBEDDED_TASKS.get(dataset, ("classification",))[0]
    if task not in TASK_COLUMNS:
        raise ValueError(f"--task {task}: recommend reads {' or '.join(TASK_COLUMNS)} data")
    return task


def read_documents(train_file: str | None, dataset: str | None, task: str, text_column: str,
                   text_pair_column: str | None, max_documents: int) -> tuple[list[list[str]], int, str]:
    """(the texts of each column read, as `finetune` reads them; the data's row count; what the data is), from a
    fixed random sample of at most `max_documents` rows; every sampled row checked (one line naming the file, row
    and field)."""
    if train_file:
        load = load_squad if task == "question_answering" else lambda path: task_data.load_files([path])
        split = task_data.Split(task_data.numbered(load(train_file)), train_file)
    elif dataset:
        rows = task_data.load_embedded_task(dataset, task)["train"]
        split = task_data.Split(task_data.numbered(rows), f"the embedded {dataset} train split", file=False)
    else:
        raise ValueError("give --train_file (your documents) or --dataset (an embedded set: "
                         f"{', '.join(task_data.EMBEDDED_TASKS)})")
    if task == "question_answering":
        columns = QA_COLUMNS
    else:
        given = SimpleNamespace(train_file=train_file, dataset=dataset, text_column=text_column,
                                text_pair_column=text_pair_column)
        columns = tuple(filter(None, task_data.text_columns(given)))
    task_data.require_columns(split, {column: "text" for column in columns})
    rows = len(split.dataset)
    split.dataset = task_data.sample(split.dataset, max_documents)
    texts = [list(split.dataset[column]) for column in columns]
    for row, *values in zip(split.dataset[task_data.ROW], *texts, strict=True):
        for column, value in zip(columns, values, strict=True):
            if not isinstance(value, str) or not value.strip():
                raise ValueError(f"{split.where(row, column)}: expected non-empty text, got {value!r}")
    return texts, rows, split.what


def start_checkpoint(model_name_or_path: str) -> tuple[Path, transformers.PreTrainedTokenizerBase, dict, str]:
    """(folder, tokenizer, SIZE_FIELDS of its config, its name in words) of the start checkpoint: a folder or minilm."""
    folder = minilm_folder() if model_name_or_path == MINILM else Path(model_name_or_path)
    tokenizer = load_tokenizer(folder)
    try:
        config = transformers.AutoConfig.from_pretrained(folder, local_files_only=True)
    except (OSError, ValueError) as error:
        raise ValueError(f"the start checkpoint {folder} has no readable config.json: {error}") from error
    name = "all-MiniLM-L6-v2" if model_name_or_path == MINILM else str(folder)
    return folder, tokenizer, {key: getattr(config, key) for key in SIZE_FIELDS}, name


def length_profile(lengths: Sequence[int], rows: int) -> LengthProfile:
    p50, p90, p99 = (int(math.ceil(value)) for value in np.percentile(lengths, [50, 90, 99]))
    return LengthProfile(len(lengths), rows, p50, p90, p99, int(max(lengths)),
                         float(np.mean(np.asarray(lengths) > WINDOW)))


def token_counts(tokenizer: transformers.PreTrainedTokenizerBase, texts: list[list[str]]) -> list[int]:
    """Tokens of each document, special tokens included, nothing truncated (a pair: both texts)."""
    encoded = tokenizer(*texts, verbose=False, return_attention_mask=False, return_token_type_ids=False)
    return [len(ids) for ids in encoded["input_ids"]]


# ----------------------------------------------------------------------------------------- 2. measuring
def candidates(long: bool) -> list[Candidate]:
    """Everything compared, in the order it is measured (the most telling first): long documents, the recipe family
    (measured whatever the budget), dense truncated (one 512-token measurement serves every length), dense over
    windows, dense over the whole input, the other families; documents that fit 512 tokens, dense, then the
    families."""
    families = [Candidate(name, name, "whole") for name in sorted(FAMILIES, key=lambda name: name != RECIPE_FAMILY)
                if name != DENSE]
    if not long:
        return [Candidate(SHORT, DENSE, "whole"), *families]
    return [families[0], Candidate(TRUNCATED, DENSE, "truncated"), Candidate(WINDOWS, DENSE, "windows"),
            Candidate(WHOLE, DENSE, "whole"), *families[1:]]


def tokens_read(candidate: Candidate, length: int) -> int:
    """The tokens one model input holds: truncation reads 512 of any document."""
    return min(length, WINDOW) if candidate.mode == "truncated" else length


def model_config(model_type: str, tokens: int, size: dict) -> transformers.PreTrainedConfig:
    """`model_type` at the start checkpoint's `size` with its pretrained-start recipe settings, for `tokens`."""
    settings = family_settings(model_type, size["num_hidden_layers"], pretrained_start=True)
    return benchmark_configs(tokens, [model_type], **size, **settings)[model_type]


def windowed_model(config: transformers.PreTrainedConfig) -> Windowed:
    return Windowed(build_model(config), WINDOW, DEFAULT_OVERLAP)


def measure_cost(candidate: Candidate, length: int, size: dict, device: str, dtype: torch.dtype,
                 cpu_time: bool = False) -> Cost:
    """`candidate` on one document of `length` tokens: a training step and an inference forward (bench/measure.py, in
    this process: starting one per measurement would take much of a minute's budget); `cpu_time`: measure.py's."""
    config = model_config(candidate.model_type, length if candidate.mode == "whole" else min(length, WINDOW), size)
    factory = partial(windowed_model, config) if candidate.mode == "windows" else partial(build_model, config)
    options = {"repeats": 1, "device": device, "same_process": True, "dtype": dtype, "cpu_time": cpu_time}
    train, infer = (measure(factory, tokens_read(candidate, length), backward=backward, **options)
                    for backward in (True, False))
    error = train.error or infer.error
    if error:
        return Cost(candidate.name, length, error=error)
    return Cost(candidate.name, length, train.seconds, train.peak_mib, infer.seconds, infer.peak_mib)


def measured_lengths(profile: LengthProfile) -> tuple[list[int], list[str]]:
    """(the document lengths to measure at, longest first; notes on lengths left out): p90 and p50, p50 only when it
    is more than 10% shorter; p99 too when it alone is past 512 tokens (where the choice matters)."""
    lengths, notes = [profile.p90], []
    if profile.p50 * CLOSE_LENGTHS < profile.p90:
        lengths.append(profile.p50)
    else:
        notes.append(f"p50 ({profile.p50} tokens) is within {CLOSE_LENGTHS - 1:.0%} of p90: measured at p90 only")
    if profile.p90 <= WINDOW < profile.p99:
        lengths.insert(0, profile.p99)
    return lengths, notes


def attention_bytes(size: dict, length: int) -> int:
    """What dense attention over `length` tokens holds in a training step beyond a family's: scores, probabilities
    and their gradient in fp32, every layer and head (the sdpa math path; the fused ones hold less)."""
    return 3 * 4 * size["num_hidden_layers"] * size["num_attention_heads"] * length**2


def hardware_name(device: str, cpu_time: bool) -> str:
    if device == "cuda":
        return torch.cuda.get_device_name()
    # the load says how much of the cores other processes took while measuring
    threads = 1 if cpu_time else torch.get_num_threads()
    return f"CPU, {threads} thread{'s' * (threads > 1)} of {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}"


def check_device(device: str) -> None:
    if device == "cuda" and not torch.cuda.is_available():
        raise ValueError("--device cuda: no CUDA device is available here (torch.cuda.is_available() is False); "
                         "give --device cpu")


def measure_candidates(profile: LengthProfile, size: dict, device: str, dtype: str, deadline: float,
                       show: bool = True, cpu_time: bool = False) -> Measurements:
    """Every candidate at every measured length, in `candidates` order, the lengths longest first, while the time
    left before `deadline` (time.time()) holds its predicted time; what was left out is recorded in `skipped`.
    `cpu_time`: CPU seconds on one thread (measure.py's), for a machine other jobs share."""
    lengths, skipped = measured_lengths(profile)
    long = profile.p99 > WINDOW
    # a document of at most 512 tokens is read whole by truncation and windows alike: dense over the whole input
    plan = [(candidate, length) for length in lengths for candidate in candidates(long)
            if candidate.mode == "whole" or length > WINDOW]
    free = memory_fit.available_bytes(torch.device(device))
    with torch.device("meta"):
        parameters = sum(p.numel() for p in build_model(model_config(DENSE, WINDOW, size)).parameters())
    costs, walls, left_out = [], {}, {}  # walls: tokens read -> seconds each measurement of them took
    threads, hardware = torch.get_num_threads(), hardware_name(device, cpu_time)
    bar = tqdm(plan, desc="recommend", unit="candidate", disable=not show)
    for candidate, length in bar:
        bar.set_postfix_str(f"{candidate.name} at {length} tokens")
        truncated = next((cost for cost in costs if cost.candidate == TRUNCATED), None)
        if candidate.mode == "truncated" and truncated:
            costs.append(dataclasses.replace(truncated, length=length))  # it reads 512 tokens of any document
            continue
        if candidate.mode == "whole" and candidate.model_type == DENSE and length > WINDOW and \
                attention_bytes(size, length) > memory_fit.USABLE * free:
            skipped.append(f"{WHOLE} at {length} tokens: its attention alone would need "
                           f"~{memory_fit.size(attention_bytes(size, length))}, more than "
                           f"{memory_fit.USABLE:.0%} of the {memory_fit.size(free)} free")
            continue
        # predicted: the slowest measurement of the nearest token count, scaled by the tokens (what runs first at a
        # new length is the recipe family, so a length's other candidates are predicted from a measurement there)
        tokens = tokens_read(candidate, length)
        nearest = min(walls, key=lambda measured: abs(measured - tokens), default=None)
        predicted = 0.0 if nearest is None else max(walls[nearest]) * tokens / nearest
        if costs and time.time() + BUDGET_MARGIN * predicted > deadline:  # the first always runs
            left_out.setdefault(length, []).append(candidate.name)
            continue
        started = time.time()
        costs.append(measure_cost(candidate, length, size, device, DTYPES[dtype], cpu_time))
        walls.setdefault(tokens, []).append(time.time() - started)
    bar.close()
    torch.set_num_threads(threads)  # measure.py's CPU time runs on one thread, in this process
    for length, names in left_out.items():
        skipped.append(f"skipped for time at {length} tokens: {', '.join(names)} (a larger --time_budget measures them)")
    clock = "CPU seconds on one thread" if cpu_time else "wall-clock seconds"
    return Measurements(profile, device, hardware, dtype, clock, size, parameters, free, lengths, costs, skipped)


# ----------------------------------------------------------------------------------------- 3. deciding
def round_up(tokens: int, multiple: int = WINDOW) -> int:
    return max(multiple, -(-tokens // multiple) * multiple)


def long_rows(table: list[dict], model_type: str, task_kind: str) -> dict[str, dict]:
    """task -> the quality table's row of `model_type` at its recipe settings (no ablation), for tasks of
    `task_kind`."""
    pattern = re.compile(rf"{re.escape(model_type)} \d+")
    return {row["task"]: row for row in table if pattern.fullmatch(row["row"])
            and task_data.EMBEDDED_TASKS[row["task"]][0] == task_kind}


def quality_evidence(candidate: Candidate, table: list[dict] | None, task_kind: str) -> tuple[bool | None, list[str]]:
    """(whether the quality table measured `candidate` at or above dense over windows on every task of `task_kind`,
    None when it has no row of it; one line per task: its metric against the windows' and truncation's, with the
    seeds and training CPU-seconds)."""
    if table is None:
        return None, ["no quality table in this install (docs/quality/quality.json of the repository)"]
    windows_name, truncated_name = "dense 512 sliding windows", "dense truncated 512"
    own_name = {"truncated": truncated_name, "windows": windows_name}.get(candidate.mode)
    if own_name:
        rows = {row["task"]: row for row in table
                if row["row"] == own_name and task_data.EMBEDDED_TASKS[row["task"]][0] == task_kind}
    else:
        rows = long_rows(table, candidate.model_type, task_kind)
    if not rows:
        return None, [f"{candidate.name}: not in the quality table for {task_kind.replace('_', ' ')}"]
    by_name = {(row["task"], row["row"]): row for row in table}
    lines, at_or_above = [], True
    for task, own in rows.items():
        metric = next(iter(task_of(task).scores.values()))
        others = [by_name[task, name] for name in (windows_name, truncated_name)
                  if (task, name) in by_name and name != own["row"]]
        against = "; ".join(f"{other['row']} {mean_and_spread(other)} ({other['cpu_seconds']:.0f} training CPU-s)"
                            for other in others)
        lines.append(f"{task} ({metric}, {own['seeds']} seed{'s' * (own['seeds'] > 1)}): {own['row']} "
                     f"{mean_and_spread(own)} ({own['cpu_seconds']:.0f} training CPU-s)"
                     + (f" against {against}" if against else ""))
        windows = by_name.get((task, windows_name))
        at_or_above &= windows is None or own["metric_mean"] >= windows["metric_mean"]
    return at_or_above, lines


def tier(candidate: Candidate, long: bool, at_or_above: bool | None) -> int:
    """Index of TIERS: documents that fit 512 tokens put dense first, the families after it."""
    if not long:
        return 0 if candidate.model_type == DENSE else 3
    if candidate.mode == "truncated":
        return 4
    if candidate.mode == "windows":
        return 1
    return 0 if candidate.model_type == DENSE or at_or_above else 2


def fitted_batch(choice: Choice, measurements: Measurements, length: int) -> tuple[int, int, str | None]:
    """(per-device batch, gradient accumulation, why none fits) for a training example of `choice.max_length`
    tokens: memory_fit's estimate from the measured peak at `length` (linear in the length; windows and truncation
    train on 512-token examples, whose peak is the truncated measurement's), at finetune's batch of 8."""
    own = choice.costs[length]
    truncated = next((c for c in measurements.costs if c.candidate == TRUNCATED and c.train_peak_mib), None)
    if choice.mode == "windows" and truncated:
        peak, tokens = truncated.train_peak_mib, WINDOW
    else:
        peak, tokens = own.train_peak_mib, min(length, WINDOW) if choice.mode == "truncated" else length
    per_sequence = peak * 2**20 * choice.max_length / tokens
    estimate = memory_fit.Estimate(int(per_sequence), 3 * 4 * measurements.parameters, choice.max_length)
    budget = memory_fit.USABLE * measurements.free_bytes
    batch = memory_fit.largest_batch(estimate, budget, REQUESTED_BATCH, REQUESTED_BATCH)
    if batch == 0:
        return 0, 0, (f"one sequence of {choice.max_length} tokens needs ~{memory_fit.size(estimate.needed(1))} to "
                      f"train, more than {memory_fit.USABLE:.0%} of the {memory_fit.size(measurements.free_bytes)} free")
    return batch, REQUESTED_BATCH // batch, None


def seconds(cost: Cost) -> float:
    """What the ranking compares: training plus inference seconds of one document."""
    return cost.train_seconds + cost.infer_seconds


def decide(measurements: Measurements, quality: list[dict] | None, task_kind: str) -> Recommendation:
    """The ranked recommendation from `measurements` and the quality table's rows (`quality`, None: none): a pure
    function of them (see the module's docstring for the rule)."""
    profile = measurements.profile
    long = profile.p99 > WINDOW
    decisive = max(measurements.lengths)
    whole_length = round_up(profile.p99)
    ranking = []
    for candidate in candidates(long):
        costs = {c.length: c for c in measurements.costs if c.candidate == candidate.name}
        if not costs:
            continue
        at_or_above, evidence = quality_evidence(candidate, quality, task_kind) if long else \
            (None, [f"your documents fit in {WINDOW} tokens: the start checkpoint reads them whole, as it was trained"])
        max_length = whole_length if candidate.mode == "whole" else WINDOW
        settings = family_settings(candidate.model_type, measurements.size["num_hidden_layers"], pretrained_start=True)
        choice = Choice(candidate.name, candidate.model_type, candidate.mode, settings, max_length,
                        tier(candidate, long, at_or_above), evidence, costs)
        cost = costs.get(decisive)
        if cost is None or cost.error:
            choice.excluded = f"failed at {decisive} tokens: {cost.error}" if cost else f"not measured at {decisive} tokens"
        else:
            choice.batch, choice.accumulation, choice.excluded = fitted_batch(choice, measurements, decisive)
        ranking.append(choice)
    ranking.sort(key=lambda c: (c.excluded is not None, c.tier, seconds(c.costs[decisive]) if not c.excluded else 0))
    # truncation is ranked, never recommended for documents past 512 tokens: it does not read them
    best = next((c for c in ranking if not c.excluded and c.mode != "truncated"), None)
    return Recommendation(verdict(best, ranking, profile, decisive, measurements.hardware), best, ranking, decisive)


def verdict(best: Choice | None, ranking: list[Choice], profile: LengthProfile, decisive: int, hardware: str) -> str:
    """One plain sentence: what to use and the measurement it rests on."""
    if profile.p99 <= WINDOW:
        return (f"Use dense: {'all' if profile.max <= WINDOW else '99%'} of your documents fit in {WINDOW} tokens "
                f"(p99 {profile.p99}, longest {profile.max}), so a 512-token model reads them whole; an efficient "
                "family buys nothing there.")
    if best is None:
        return ("No candidate that reads your whole documents was measured and fits in memory here: see the ranking "
                "for why, and rerun with a larger --time_budget.")
    cost = seconds(best.costs[decisive])
    others = [c for c in ranking if not c.excluded and c is not best and c.mode != "truncated"]
    compared = ", ".join(f"{c.candidate} {seconds(c.costs[decisive]) / cost:.2f}x" for c in others[:3])
    measured = (f"measured at {decisive} tokens on {hardware}" +
                (f" (training + inference time of the others against it: {compared})" if compared else ""))
    if best.model_type == DENSE and best.mode == "whole":
        return (f"Use dense over the whole input (max_length {best.max_length}): full attention is the fastest here of "
                f"what reads your whole documents, {measured}.")
    if best.mode == "windows":
        return (f"Use dense over 512-token windows: the cheapest way measured here to read every token of documents "
                f"past 512 tokens (no window sees another), {measured}.")
    quality = ("the project's quality table measured it above dense over 512-token windows" if best.tier == 0 else
               "the project's quality table has not measured it above the windows: check it on your validation split")
    return (f"Use {best.model_type} at max_length {best.max_length}: it reads your whole documents and {quality}; "
            f"{measured}.")


# ----------------------------------------------------------------------------------------- commands and report
def next_commands(best: Choice, request: dict) -> tuple[list[str], str | None]:
    """(the `long-context` and `finetune` command lines that train `best` on the user's data, a note when finetune
    has no option for it)."""
    task = request["task"]
    if best.mode == "windows" and task == "classification":
        return [], ("finetune reads a classification document truncated to --max_length: to train over windows, cut "
                    "the documents into 512-token chunks first (bench-quality's windows row does, chunk logits "
                    "mean-pooled per document)")
    model_type = best.model_type
    folder = f"{model_type}-{best.max_length}"
    data = ["--train_file", request["train_file"]] if request["train_file"] else ["--dataset", request["dataset"]]
    if request["text_column"] != "text":
        data += ["--text_column", request["text_column"]]
    if request["text_pair_column"]:
        data += ["--text_pair_column", request["text_pair_column"]]
    precision = {"bfloat16": ["--bf16"], "float16": ["--fp16"]}.get(request["dtype"], [])
    truncate = ["--truncate"] if best.mode == "truncated" and task == "question_answering" else []
    convert = ["hf-efficient", "long-context", "--base_model", request["model_name_or_path"], "--family", model_type,
               "--max_length", str(best.max_length), "--output_dir", folder]
    finetune = ["hf-efficient", "finetune", "--task", task, "--model_name_or_path", f"{folder}/converted", *data,
                "--max_length", str(best.max_length), "--per_device_train_batch_size", str(best.batch),
                "--gradient_accumulation_steps", str(best.accumulation), *precision, *truncate,
                "--output_dir", f"{folder}-{task}"]
    return [shlex.join(convert), shlex.join(finetune)], None


def per_thousand(value: float | None) -> str:
    return "-" if value is None else f"{1000 * value:,.0f}"


def markdown(result: RecommendResult) -> str:
    m, r, request = result.measurements, result.recommendation, result.request
    p = m.profile
    size = ", ".join(f"{key} {value}" for key, value in m.size.items())
    sample = f"{p.documents:,} of {p.rows:,} rows" + (" (a fixed random sample)" if p.documents < p.rows else "")
    read = "question and context as a pair" if request["task"] == "question_answering" else "each text"
    lines = [f"**{r.verdict}**", "",
             f"Documents: {sample} of {request['data']}, tokenized with {request['start']}'s tokenizer ({read}, "
             f"special tokens included): p50 {p.p50:,}, p90 {p.p90:,}, p99 {p.p99:,}, longest {p.max:,} tokens; "
             f"{p.share_past_512:.1%} past 512 tokens.", "",
             f"Measured on {m.hardware} ({m.device}, {m.dtype}) at {', '.join(map(str, m.lengths))} tokens, in "
             f"{result.wall_seconds:.0f} s of a {request['time_budget']:.0f}-s budget: each candidate at the start's "
             f"size ({size}), random weights, one document per step; best {m.clock} of a training step "
             "(forward + backward, no optimizer step) and of an inference forward, and the training step's peak "
             f"tensor memory (`hf_efficient/bench/measure.py`). Batch: what fits in {memory_fit.USABLE:.0%} of the "
             f"{memory_fit.size(m.free_bytes)} free at max_length (`training/memory_fit.py`'s estimate; `finetune` "
             "checks it again on the longest row).", ""]
    header = "| rank | candidate | max_length | evidence | " + " | ".join(
        f"train s / 1,000 docs at {length} | infer s / 1,000 docs at {length}" for length in m.lengths
    ) + " | train peak MiB | batch x accumulation |"
    lines += [header, "|" + "---|" * (6 + 2 * len(m.lengths))]
    for rank, choice in enumerate(r.ranking, start=1):
        cells = []
        for length in m.lengths:
            cost = choice.costs.get(length)
            cells += ([per_thousand(cost.train_seconds), per_thousand(cost.infer_seconds)] if cost and not cost.error
                      else ["-", "-"])
        peak = choice.costs.get(r.decisive_length)
        peak = f"{peak.train_peak_mib:,.0f}" if peak and peak.train_peak_mib is not None else "-"
        fit = choice.excluded or f"{choice.batch} x {choice.accumulation}"
        lines.append(f"| {'' if choice.excluded else rank} | {choice.candidate} | {choice.max_length} | "
                     f"{TIERS[choice.tier]} | {' | '.join(cells)} | {peak} | {fit.replace('|', '/')} |")
    order = ("by evidence (measured or exact: full attention, or a family the quality table measured at or above the "
             "windows; then the windows baseline; then families it has not measured; then truncation)"
             if p.p99 > WINDOW else "dense first (your documents fit 512 tokens), then the families")
    lines += ["", f"Ranked {order}, each group by training + inference seconds at {r.decisive_length} tokens."]
    if m.skipped:
        lines += ["", "Left out: " + "; ".join(m.skipped) + "."]
    if r.best:
        settings = ", ".join(f"{key}={value}" for key, value in r.best.settings.items()) or "none beyond the family's"
        rounded = " (p99 rounded up to a multiple of 512)" if r.best.max_length > WINDOW else ""
        lines += ["", f"**{r.best.candidate}**: recipe settings {settings}; max_length {r.best.max_length}{rounded}, "
                      f"per_device_train_batch_size {r.best.batch} x "
                      f"gradient_accumulation_steps {r.best.accumulation}.", "",
                  f"Quality ({result.quality_source or 'no quality table here'}):", ""]
        lines += [f"- {line}" for line in r.best.evidence]
        if r.commands:
            lines += ["", "Next:", "", "```bash", *r.commands, "```"]
        if r.command_note:
            lines += ["", r.command_note[0].upper() + r.command_note[1:] + "."]
    return "\n".join(lines) + "\n"


def plot(result: RecommendResult, path: Path) -> None:
    """Seconds per 1,000 documents against document length, training and inference, the percentiles marked."""
    m, p = result.measurements, result.measurements.profile
    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    for ax, (what, key) in zip(axes, (("training", "train_seconds"), ("inference", "infer_seconds")), strict=True):
        for name in dict.fromkeys(c.candidate for c in m.costs):
            points = sorted((c.length, 1000 * getattr(c, key)) for c in m.costs
                            if c.candidate == name and not c.error)
            if points:
                ax.plot(*zip(*points, strict=True), marker="o", label=name)
        for (label, tokens), style in zip((("p50", p.p50), ("p90", p.p90), ("p99", p.p99)), (":", "-.", "--"),
                                          strict=True):
            ax.axvline(tokens, color="grey", linestyle=style, label=f"your {label}: {tokens:,} tokens")
        ax.axvline(WINDOW, color="black", linewidth=0.8, label=f"{WINDOW} tokens")
        ax.set_xlim(left=0)
        ax.set(title=f"{what}, {m.hardware}, {m.dtype}", xlabel="document tokens",
               ylabel="seconds per 1,000 documents")
        ax.set_ylim(bottom=0)
        ax.legend(fontsize=7)
    save_figure(fig, path)


def write_report(result: RecommendResult, folder: Path) -> None:
    """The report's files, written into a new folder beside `folder` that then takes its place: a reader sees the
    earlier report or this one, whole."""
    folder.parent.mkdir(parents=True, exist_ok=True)
    partial_folder = Path(tempfile.mkdtemp(prefix=f".{folder.name}.partial-", dir=folder.parent))
    try:
        plot(result, partial_folder / "cost.png")
        (partial_folder / "recommendation.md").write_text(markdown(result))
        (partial_folder / "recommendation.json").write_text(json.dumps(dataclasses.asdict(result), indent=1))
        old = folder.parent / f".{folder.name}.old-{os.getpid()}"
        if folder.exists():
            folder.rename(old)
        partial_folder.rename(folder)
        shutil.rmtree(old, ignore_errors=True)
    finally:
        shutil.rmtree(partial_folder, ignore_errors=True)


def check_output_dir(folder: Path) -> None:
    """Before measuring: the report replaces the folder, so it must hold nothing but an earlier report."""
    if folder.is_file():
        raise ValueError(f"--output_dir {folder} is a file; give a folder for the report")
    others = sorted(path.name for path in folder.iterdir() if path.name not in REPORT_FILES) if folder.is_dir() else []
    if others:
        raise ValueError(f"--output_dir {folder} holds files other than a report ({', '.join(others[:3])}); the report "
                         "replaces the folder: give a new or empty one")


# ----------------------------------------------------------------------------------------- the function and command
def recommend(train_file: str | None = None, dataset: str | None = None, task: str | None = None,
              text_column: str = "text", text_pair_column: str | None = None, model_name_or_path: str = MINILM,
              device: str | None = None, dtype: str = "float32", time_budget: float = 60.0,
              output_dir: str | Path = DEFAULT_OUTPUT_DIR, max_documents: int = 1000, cpu_time: bool = False,
              started: float | None = None, show: bool = True) -> RecommendResult:
    """Recommend a family and its settings for the documents of `train_file` (or the embedded `dataset`) on this
    machine's `device` ("cpu" or "cuda", default cuda when there is one), measured within `time_budget` seconds
    counted from `started` (time.time(); default: now), and write the report into `output_dir`.

    `task`: classification (the `text_column`, and `text_pair_column` as its pair) or question_answering (question
    and context), by default the embedded set's, else classification. `model_name_or_path`: the start checkpoint
    (folder, or minilm: all-MiniLM-L6-v2), whose tokenizer counts the tokens and whose size the candidates take.
    `dtype`: the forward runs under autocast to it. `max_documents`: tokenize at most this many (a fixed random
    sample). `cpu_time`: CPU seconds on one thread instead of wall-clock, so that other jobs on a shared machine do
    not move the ranking (CPU only). `show`: print the progress bar and the report.
    """
    started = time.time() if started is None else started
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    if dtype not in DTYPES:
        raise ValueError(f"--dtype {dtype}: choose from {', '.join(DTYPES)}")
    check_device(device)
    if cpu_time and device != "cpu":
        raise ValueError("--cpu_time measures CPU steps; on a GPU the wall-clock time is the measure")
    load = os.getloadavg()[0]
    if device == "cpu" and not cpu_time and show and load > 0.5 * os.cpu_count():
        print(f"recommend: load average {load:.1f} on {os.cpu_count()} cores: other jobs share this machine and "
              "wall-clock times follow them; --cpu_time measures CPU seconds on one thread instead", flush=True)
    output_dir = Path(output_dir)
    check_output_dir(output_dir)
    task = task_of_request(task, dataset)
    _, tokenizer, size, start_name = start_checkpoint(model_name_or_path)
    texts, rows, what = read_documents(train_file, dataset, task, text_column, text_pair_column, max_documents)
    profile = length_profile(token_counts(tokenizer, texts), rows)
    measurements = measure_candidates(profile, size, device, dtype, started + time_budget - REPORT_SECONDS, show,
                                      cpu_time)
    quality, source = load_published()
    recommendation = decide(measurements, quality, task)
    request = {"train_file": train_file, "dataset": None if train_file else dataset, "task": task,
               "text_column": text_column, "text_pair_column": text_pair_column,
               "model_name_or_path": model_name_or_path, "device": device, "dtype": dtype, "time_budget": time_budget,
               "cpu_time": cpu_time,
               "data": what, "start": start_name}
    if recommendation.best:
        recommendation.commands, recommendation.command_note = next_commands(recommendation.best, request)
    result = RecommendResult(request, measurements, recommendation, source, str(output_dir), time.time() - started)
    write_report(result, output_dir)
    if show:
        print(f"\n{markdown(result)}\nReport: {output_dir}/ ({', '.join(REPORT_FILES)})", flush=True)
    return result


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_option(parser, "train_file", help="your documents: a .jsonl/.json/.csv/.parquet/.txt file (QA: SQuAD format)")
    parser.add_argument("--dataset", choices=tuple(task_data.EMBEDDED_TASKS),
                        help="an embedded set instead of --train_file (its train split)")
    parser.add_argument("--task", choices=tuple(TASK_COLUMNS),
                        help="what you will fine-tune, and so which columns are read (default: the embedded "
                             "--dataset's task, else classification)")
    add_option(parser, "text_column", default="text", help="classification: the column of the text (default text)")
    add_option(parser, "text_pair_column", help="classification: the column of each example's second text")
    add_option(parser, "model_name_or_path", default=MINILM,
               help="the start checkpoint (its tokenizer and size): a RoBERTa/BERT folder, or minilm "
                    "(all-MiniLM-L6-v2, the default)")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cuda" if torch.cuda.is_available() else "cpu",
                        help="where to measure (default: cuda when available)")
    parser.add_argument("--dtype", choices=tuple(DTYPES), default="float32",
                        help="the forward runs under autocast to this type (default float32: none)")
    add_option(parser, "time_budget", type=float, default=60.0,
               help="seconds for the whole command, the measurements fitted into it (default 60)")
    add_option(parser, "max_documents", type=positive_int, default=1000,
               help="tokenize at most this many documents, a fixed random sample (default 1000)")
    add_option(parser, "cpu_time", action="store_true",
               help="CPU seconds of each step on one thread instead of wall-clock (for a machine other jobs share)")
    add_option(parser, "output_dir", default=DEFAULT_OUTPUT_DIR,
               help=f"the report folder, replaced by each run (default {DEFAULT_OUTPUT_DIR})")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> None:
    started = psutil.Process().create_time()  # the budget is the command's: imports and all
    recommend(args.train_file, args.dataset, args.task, args.text_column, args.text_pair_column,
              args.model_name_or_path, args.device, args.dtype, args.time_budget, args.output_dir,
              args.max_documents, args.cpu_time, started)
