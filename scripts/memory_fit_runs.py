#!/usr/bin/env python3
"""The default question-answering, classification and token-classification runs of all-MiniLM-L6-v2 converted
Longformer-style at 2048 and 4096 tokens (issue 24; `--lengths` for fewer): the batch `--auto_fit_batch` chose, the
peak resident memory from each run's results, its CPU seconds; written to docs/measured/memory_fit.md.

Each run is `hf-efficient finetune` with the task's defaults (batch 8, the family's window 512), cut short: one
training step (an effective batch of 8), an evaluation and the test on a few examples, every input about as long as
the model (batches are padded to their longest, so shorter inputs would measure a shorter model): classification
reads kernel_docs' documents of at least that many tokens; question answering long_qa's questions, each context
preceded by the next documents' contexts up to the length; token classification those contexts, the answer's words
tagged B-ANSWER / I-ANSWER.

    taskset -c 1 env OMP_NUM_THREADS=1 python scripts/memory_fit_runs.py /tmp/memory_fit [--lengths 2048]
"""

from __future__ import annotations

import argparse
import json
import re
import resource
import subprocess
import sys
from pathlib import Path

import psutil
from build_long_tasks import QA_MIN_CONTEXT_TOKENS, count_tokens, cut_at_tokens
from transformers import AutoTokenizer

from hf_efficient.data import load_kernel_docs, load_long_qa
from hf_efficient.training.long_context import minilm_folder
from hf_efficient.training.stage import STAGE_FILE

LENGTHS = (2048, 4096)
TRAIN_ROWS, EVAL_ROWS = 16, 4
SHORT = ["--max_steps", "1", "--max_train_samples", str(TRAIN_ROWS), "--max_eval_samples", str(EVAL_ROWS),
         "--disable_tqdm", "true"]
OUTPUT = Path(__file__).resolve().parents[1] / "docs" / "measured" / "memory_fit.md"


def hf_efficient(*arguments: str) -> list[str]:
    return [sys.executable, "-c", "import sys; from hf_efficient_cli import main; sys.exit(main())", *arguments]


def write_splits(folder: Path, name: str, splits: dict[str, list[dict]]) -> list[str]:
    """Each split as `folder/name_split.jsonl`; the finetune options that read them."""
    files = []
    for split, rows in splits.items():
        path = folder / f"{name}_{split}.jsonl"
        path.write_text("".join(json.dumps(row) + "\n" for row in rows))
        files += [f"--{split}_file", str(path)]
    return files


def long_documents(tokenizer, length: int) -> dict[str, list[dict]]:
    """A seeded draw of kernel_docs' documents of at least `length` tokens per split (in path order the first are all
    of one subsystem), held-out ones of the training rows' labels only (classification needs to have seen them)."""
    splits, labels = load_kernel_docs().shuffle(seed=0), set()
    names = splits["train"].features["label"].names
    chosen = {}
    for split, rows in splits.items():
        long = [{"text": row["text"], "label": names[row["label"]]} for row in rows
                if len(tokenizer(row["text"])["input_ids"]) >= length and (not labels or names[row["label"]] in labels)]
        chosen[split] = long[: TRAIN_ROWS if split == "train" else EVAL_ROWS]
        labels = labels or {row["label"] for row in chosen[split]}
    return chosen


def long_questions(tokenizer, length: int) -> dict[str, list[dict]]:
    """long_qa's first questions per split, each context preceded by the contexts of the documents after its own, cut
    at a paragraph so that question and context fill about `length` tokens (the answer moves with its context)."""
    chosen = {}
    for split, rows in load_long_qa().items():
        contexts = list(dict.fromkeys(rows["context"]))  # one per document, in order
        chosen[split] = []
        for row in rows.select(range(TRAIN_ROWS if split == "train" else EVAL_ROWS)):
            after = contexts.index(row["context"]) + 1
            others = "\n\n".join((contexts * 2)[after : after + length // QA_MIN_CONTEXT_TOKENS])
            room = length - 3 - count_tokens(tokenizer, row["question"]) - count_tokens(tokenizer, row["context"])
            before = cut_at_tokens(others, tokenizer, max(room, 0)) + "\n\n"
            answers = {"text": row["answers"]["text"],
                       "answer_start": [start + len(before) for start in row["answers"]["answer_start"]]}
            chosen[split].append({"id": row["id"], "question": row["question"], "context": before + row["context"],
                                  "answers": answers})
    return chosen


def answer_tags(questions: dict[str, list[dict]]) -> dict[str, list[dict]]:
    """The questions' contexts as token-classification rows: the context's words, the answer's tagged."""
    splits = {}
    for split, rows in questions.items():
        splits[split] = []
        for row in rows:
            begin = row["answers"]["answer_start"][0]
            end = begin + len(row["answers"]["text"][0])
            words, tags = [], []
            for word in re.finditer(r"\S+", row["context"]):
                inside = word.start() < end and word.end() > begin
                tags.append("O" if not inside else "I-ANSWER" if tags and tags[-1] != "O" else "B-ANSWER")
                words.append(word.group())
            splits[split].append({"tokens": words, "ner_tags": tags})
    return splits


def task_options(folder: Path, length: int) -> dict[str, tuple[list[str], int]]:
    """Each task's finetune options, reading inputs of about `length` tokens written to `folder`, and the fewest
    tokens a training input has (special tokens counted, at most `length`)."""
    tokenizer = AutoTokenizer.from_pretrained(minilm_folder())
    questions, documents = long_questions(tokenizer, length), long_documents(tokenizer, length)
    answers = answer_tags(questions)
    encoded = {"question_answering": tokenizer([row["question"] for row in questions["train"]],
                                               [row["context"] for row in questions["train"]]),
               "classification": tokenizer([row["text"] for row in documents["train"]]),
               "token_classification": tokenizer([row["tokens"] for row in answers["train"]], is_split_into_words=True)}
    options = {"question_answering": ["--task", "question_answering",
                                      *write_splits(folder, f"questions_{length}", questions)],
               "classification": write_splits(folder, f"documents_{length}", documents),
               "token_classification": ["--task", "token_classification",
                                        *write_splits(folder, f"answers_{length}", answers)]}
    return {name: (options[name], min(min(len(ids), length) for ids in encoded[name]["input_ids"])) for name in options}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("work", type=Path, help="folder for the converted models, data and runs")
    parser.add_argument("--lengths", type=int, nargs="+", default=LENGTHS, help="the models' --max_length")
    args = parser.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    rows = []
    for length in args.lengths:
        model = args.work / f"minilm_longformer_{length}"
        if not (model / "config.json").is_file():
            subprocess.run(hf_efficient("convert", str(minilm_folder()), str(model), "--family", "hfe_longformer",
                                        "--max_length", str(length)), check=True)
        for name, (options, tokens) in task_options(args.work, length).items():
            output = args.work / f"{name}_{length}"
            free = psutil.virtual_memory().available
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            subprocess.run(hf_efficient("finetune", "--model_name_or_path", str(model), *options, "--output_dir",
                                        str(output), "--overwrite_output_dir", "true", *SHORT), check=True)
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            results = json.loads((output / STAGE_FILE).read_text())
            rows.append(f"| {name} | {length} | {tokens} | {results['per_device_train_batch_size']} x "
                        f"{results['gradient_accumulation_steps']} | {results['peak_rss_mib']:.0f} | "
                        f"{free / 2**20:.0f} | {after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime:.0f} |")
            print(rows[-1], flush=True)
    total = psutil.virtual_memory().total / 2**30
    OUTPUT.write_text(
        f"all-MiniLM-L6-v2 converted Longformer-style (window 512) at {' and '.join(map(str, args.lengths))} tokens, "
        "`finetune` defaults (batch 8), one training step, every input about as long as the model (its shortest training "
        f"input in the table), on a machine of {total:.1f} GiB, written by "
        f"`scripts/memory_fit_runs.py WORK --lengths {' '.join(map(str, args.lengths))}`.\n\n"
        "| task | model tokens | shortest training input, tokens | batch x accumulation | peak resident MiB | "
        "available MiB at start | CPU s |\n|---|---|---|---|---|---|---|\n" + "\n".join(rows) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
