#!/usr/bin/env python3
"""The default question-answering, classification and token-classification runs of all-MiniLM-L6-v2 converted
Longformer-style at 2048 and 4096 tokens (issue 24; `--lengths` for fewer): the batch `--auto_fit_batch` chose, the
peak resident memory from each run's results, its CPU seconds; written to docs/measured/memory_fit.md.

Each run is `hf-efficient finetune` with the task's defaults (batch 8, the family's window 512), cut short: one
training step (an effective batch of 8), an evaluation and the test on a few examples. Token classification has no
embedded data: long_qa's contexts, their answer's words tagged B-ANSWER / I-ANSWER.

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

from hf_efficient.data import load_long_qa
from hf_efficient.workflow.long_context import minilm_folder
from hf_efficient.workflow.stage import STAGE_FILE

LENGTHS = (2048, 4096)
TASKS = {"question_answering": ["--dataset", "long_qa"], "classification": ["--dataset", "kernel_docs"]}
SHORT = ["--max_steps", "1", "--max_train_samples", "16", "--max_eval_samples", "4", "--disable_tqdm", "true"]
OUTPUT = Path(__file__).resolve().parents[1] / "docs" / "measured" / "memory_fit.md"


def hf_efficient(*arguments: str) -> list[str]:
    return [sys.executable, "-c", "import sys; from hf_efficient_cli import main; sys.exit(main())", *arguments]


def answer_tags(folder: Path) -> list[str]:
    """long_qa's splits as token-classification files in `folder`: the context's words, the answer's tagged."""
    files = []
    for split, rows in load_long_qa().items():
        path = folder / f"answers_{split}.jsonl"
        with path.open("w") as out:
            for row in rows:
                begin = row["answers"]["answer_start"][0]
                end = begin + len(row["answers"]["text"][0])
                words, tags = [], []
                for word in re.finditer(r"\S+", row["context"]):
                    inside = word.start() < end and word.end() > begin
                    tags.append("O" if not inside else "I-ANSWER" if tags and tags[-1] != "O" else "B-ANSWER")
                    words.append(word.group())
                out.write(json.dumps({"tokens": words, "ner_tags": tags}) + "\n")
        files += [f"--{split}_file", str(path)]
    return files


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("work", type=Path, help="folder for the converted models, data and runs")
    parser.add_argument("--lengths", type=int, nargs="+", default=LENGTHS, help="the models' --max_length")
    args = parser.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    tasks = {**TASKS, "token_classification": ["--task", "token_classification", *answer_tags(args.work)]}
    rows = []
    for length in args.lengths:
        model = args.work / f"minilm_longformer_{length}"
        if not (model / "config.json").is_file():
            subprocess.run(hf_efficient("convert", str(minilm_folder()), str(model), "--family", "hfe_longformer",
                                        "--max_length", str(length)), check=True)
        for name, options in tasks.items():
            output = args.work / f"{name}_{length}"
            free = psutil.virtual_memory().available
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            subprocess.run(hf_efficient("finetune", "--model_name_or_path", str(model), *options, "--output_dir",
                                        str(output), "--overwrite_output_dir", "true", *SHORT), check=True)
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            results = json.loads((output / STAGE_FILE).read_text())
            rows.append(f"| {name} | {length} | {results['per_device_train_batch_size']} x "
                        f"{results['gradient_accumulation_steps']} | {results['peak_rss_mib']:.0f} | "
                        f"{free / 2**20:.0f} | {after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime:.0f} |")
            print(rows[-1], flush=True)
    total = psutil.virtual_memory().total / 2**30
    OUTPUT.write_text(
        f"all-MiniLM-L6-v2 converted Longformer-style (window 512) at {' and '.join(map(str, args.lengths))} tokens, "
        f"`finetune` defaults (batch 8), one training step, on a machine of {total:.1f} GiB, written by "
        f"`scripts/memory_fit_runs.py WORK --lengths {' '.join(map(str, args.lengths))}`.\n\n"
        "| task | tokens | batch x accumulation | peak resident MiB | available MiB at start | CPU s |\n"
        "|---|---|---|---|---|---|\n" + "\n".join(rows) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
