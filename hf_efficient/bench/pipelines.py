"""Pipelines on long documents: seconds per document through transformers' pipelines, each family reading the
whole document against a dense 512-token model read the way its pipeline reads a longer one.

Question answering (`extractive-question-answering`, hf_efficient/pipelines.py): a family reads the question and
the document in one window, Longformer-style with global attention on the question (its QA head's default); the
dense model reads them in 512-token windows sharing `--doc_stride` tokens. Text classification (transformers'
`text-classification`): a family reads the whole document, truncation off; the dense model reads the first 512
tokens (`truncation=True`: the pipeline has no windows for classification, so truncation is what it offers a
short model).

Random weights of a `MODEL_SIZES` size (the cost does not depend on them), a real tokenizer (all-MiniLM-L6-v2's
by default) and the embedded kernel documentation cut to the length. Time is the CPU time of the whole pipeline
call (tokenizing, forward, answer search) on one thread; the pipelines of one task and length take turns, best
kept (measure.py's `best_times`), so every ratio in a table comes from one run.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path

import torch
import transformers

from ..data import load_domain_corpus
from ..models.families import FAMILIES
from ..pipelines import TASK as QA_TASK
from ..training.long_context import minilm_folder
from .grid import DEFAULT_OVERLAP, DENSE, WINDOW, window_overlap
from .measure import best_times
from .options import add_option, family, positive_int
from .sizes import MODEL_SIZES, benchmark_configs

CLASSIFICATION_TASK = "text-classification"
TASKS = {QA_TASK: "ForQuestionAnswering", CLASSIFICATION_TASK: "ForSequenceClassification"}
DEFAULT_LENGTHS = (2048, 4096)
QUESTION = "Which function releases the memory that the driver allocated?"


def document(tokenizer: transformers.PreTrainedTokenizerBase, tokens: int, question: str | None = None) -> str:
    """Kernel documentation cut so that it (after `question`, specials included) takes at most `tokens` tokens."""
    text = "\n\n".join(load_domain_corpus()["text"])[:10 * tokens]  # a token is rarely longer than 10 characters
    encoded = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True, verbose=False)
    asked = len(tokenizer(question, add_special_tokens=False)["input_ids"]) if question else 0
    budget = tokens - asked - tokenizer.num_special_tokens_to_add(pair=question is not None)
    if budget < 1 or budget > len(encoded["input_ids"]):
        raise ValueError(f"cannot cut a document of {tokens} tokens from the embedded text")
    while True:  # a cut inside a word can tokenize longer
        cut = text[:encoded["offset_mapping"][budget - 1][1]]
        pair = (question, cut) if question else (cut,)
        if len(tokenizer(*pair, verbose=False)["input_ids"]) <= tokens:
            return cut
        budget -= 8


def build_pipeline(task: str, model_type: str, length: int, size: str, tokenizer_path: str | Path
                   ) -> transformers.Pipeline:
    """`task`'s pipeline on a random `model_type` model of `size` that reads `length` tokens, with a tokenizer whose
    `model_max_length` is `length`; the model's vocabulary and special tokens are the tokenizer's."""
    tokenizer = transformers.AutoTokenizer.from_pretrained(tokenizer_path, model_max_length=length)
    config = benchmark_configs(length, [model_type], size, vocab_size=len(tokenizer), type_vocab_size=2,
                               pad_token_id=tokenizer.pad_token_id, sep_token_id=tokenizer.sep_token_id)[model_type]
    torch.manual_seed(0)
    model = FAMILIES[model_type].models[TASKS[task]](config).eval()
    return transformers.pipeline(task, model=model, tokenizer=tokenizer, device="cpu")


def short_name(task: str, doc_stride: int) -> str:
    """The row of the dense 512-token model, read as its pipeline reads a longer document."""
    read = f"windows sharing {doc_stride} tokens" if task == QA_TASK else "the first 512 tokens (truncation)"
    return f"{DENSE}, {WINDOW} tokens, {read}"


def calls(task: str, length: int, families: Sequence[str] | None, size: str, tokenizer_path: str | Path,
          doc_stride: int) -> dict[str, Callable[[], object]]:
    """name -> one pipeline call on one document of `length` tokens: the dense 512-token model first, then each
    family (dense `hfe_roberta` too) reading the whole document."""
    short = build_pipeline(task, DENSE, WINDOW, size, tokenizer_path)
    question = QUESTION if task == QA_TASK else None
    text = document(short.tokenizer, length, question)
    if task == QA_TASK:
        selected = {short_name(task, doc_stride): partial(short, question=question, context=text,
                                                          doc_stride=doc_stride)}
    else:
        selected = {short_name(task, doc_stride): partial(short, text, truncation=True)}
    for model_type in benchmark_configs(length, families, size):
        whole = build_pipeline(task, model_type, length, size, tokenizer_path)
        selected[f"{model_type}, whole document"] = (partial(whole, question=question, context=text)
                                                     if task == QA_TASK else partial(whole, text))
    return selected


def run_pipelines(tasks: Sequence[str], lengths: Sequence[int], families: Sequence[str] | None, size: str,
                  tokenizer_path: str | Path, doc_stride: int, repeats: int) -> dict[str, dict[int, dict[str, float]]]:
    """task -> length -> name -> best CPU seconds of one pipeline call on one document, on one thread."""
    torch.set_num_threads(1)
    results: dict[str, dict[int, dict[str, float]]] = {}
    for task in tasks:
        for length in lengths:
            steps = calls(task, length, families, size, tokenizer_path, doc_stride)
            for step in steps.values():
                step()  # warm-up
            results.setdefault(task, {})[length] = best_times(steps, time.process_time, repeats, "cpu")
            print(f"  {task} {length}: " + ", ".join(f"{name} {seconds:.3f} s"
                                                   for name, seconds in results[task][length].items()), flush=True)
    return results


def format_tables(results: dict[str, dict[int, dict[str, float]]]) -> str:
    """One Markdown table per task and length: seconds per document, and each over the dense 512-token model's
    (the first row; below 1 reading the whole document costs less)."""
    lines = []
    for task, by_length in results.items():
        for length, rows in by_length.items():
            short = next(iter(rows.values()))
            lines += [f"### {task}, {length} tokens", "", "| pipeline model | s per document | / dense 512 |",
                      "|---|---|---|"]
            lines += [f"| {name} | {seconds:.3f} | {seconds / short:.2f}x |" for name, seconds in rows.items()]
            lines.append("")
    return "\n".join(lines)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--lengths", type=positive_int, nargs="+", default=list(DEFAULT_LENGTHS),
                        help=f"document lengths in tokens, question included (default {' '.join(map(str, DEFAULT_LENGTHS))})")
    parser.add_argument("--families", type=family, nargs="*",
                        help="model types reading the whole document (default: every registered family)")
    parser.add_argument("--tasks", choices=tuple(TASKS), nargs="+", default=list(TASKS), help="pipelines (default both)")
    add_option(parser, "model_size", choices=sorted(MODEL_SIZES), default="benchmark",
               help="every model's size, as `bench --model_size` (default benchmark)")
    add_option(parser, "doc_stride", type=window_overlap, default=DEFAULT_OVERLAP,
               help=f"question answering: tokens shared by the dense model's {WINDOW}-token windows "
                    f"(default {DEFAULT_OVERLAP})")
    parser.add_argument("--tokenizer", default="minilm",
                        help="tokenizer folder, or minilm (all-MiniLM-L6-v2's, the default)")
    parser.add_argument("--repeats", type=positive_int, default=2,
                        help="timed calls per pipeline, best kept (more while they add up to under 2 s)")
    parser.add_argument("--markdown", help="also write the tables to this Markdown file")
    parser.set_defaults(run=measure_pipelines)


def measure_pipelines(args: argparse.Namespace) -> None:
    tokenizer, tokenizer_name = args.tokenizer, args.tokenizer
    if tokenizer == "minilm":
        tokenizer, tokenizer_name = minilm_folder(), "all-MiniLM-L6-v2"
    size = ", ".join(f"{key}={value}" for key, value in MODEL_SIZES[args.model_size].items() if key != "vocab_size")
    legend = (f"Pipelines on long documents, CPU seconds per document on one thread ({size}, the vocabulary and "
              f"special tokens of the tokenizer {tokenizer_name}). / dense 512 = the row's time over the first row's "
              "(from this run).")
    print(legend, flush=True)
    results = run_pipelines(args.tasks, args.lengths, args.families, args.model_size, tokenizer,
                            args.doc_stride, args.repeats)
    tables = format_tables(results)
    print(tables)
    if args.markdown:
        Path(args.markdown).write_text(f"{legend}\n\n{tables}")
