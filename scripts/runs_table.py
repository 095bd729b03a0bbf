#!/usr/bin/env python3
"""A Markdown table of finished `finetune` / `distill` classification runs, read from their folders (docs/measured/).

The docs' accuracy tables come from here, so a number on a page is the one a run wrote into its
`hfe_stage.json`, never retyped:

    python scripts/runs_table.py "full=runs/full-0" "full=runs/full-1" "LoRA=runs/lora-0" --markdown table.md

Each argument is LABEL=FOLDER. A second table gives each label's test scores beside the frozen-embedding
probe's and the majority class's; runs sharing a label (seeds of one setting) as their mean ± sample
standard deviation (range).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

STAGE_FILE = "hfe_stage.json"


def read_run(argument: str) -> tuple[str, dict]:
    label, separator, folder = argument.partition("=")
    path = Path(folder) / STAGE_FILE
    if not separator or not label:
        raise ValueError(f"{argument!r}: expected LABEL=FOLDER")
    if not path.is_file():
        raise ValueError(f"{path}: not found (is {folder} a finished finetune or distill run?)")
    results = json.loads(path.read_text())
    if "test_accuracy" not in results:
        raise ValueError(f"{path}: no test_accuracy (only classification runs are tabled)")
    return label, results


def trainable(results: dict) -> str:
    share = 100 * results["trainable_parameters"] / results["total_parameters"]
    return f"{results['trainable_parameters']:,} ({share:.2f}%)"


def run_row(label: str, results: dict) -> list[str]:
    cpu = results.get("process_cpu_seconds")
    scores = [f"{results['test_accuracy']:.3f}", f"{results['test_macro_f1']:.3f}"]
    cost = [str(results["global_step"]), "-" if cpu is None else f"{cpu:.0f}"]
    if results["stage"] == "distill":
        teacher, cache = results["teacher_test_accuracy"], results.get("teacher_output_cache")
        training = next(entry["train_runtime"] for entry in results["log_history"] if "train_runtime" in entry)
        return [label, f"{results['student_parameters'] / 1e6:.2f} M", f"{teacher:.3f}", *scores,
                f"{results['kept_fraction_of_teacher_accuracy']:.0%}", *cost, f"{training:.1f}",
                f"{cache['seconds']:.1f} s, {cache['bytes'] / 1e6:.2f} MB" if cache else "-"]
    validation = results["baselines"]["validation"]
    return [label, str(results["settings"]["seed"]), trainable(results), *scores,
            f"{validation['fine_tuned']['macro_f1']:.3f} / {validation['probe']['macro_f1']:.3f}",
            results["settings"].get("kept", "-"), *cost]


HEADERS = {
    "finetune": ["run", "seed", "trainable", "test accuracy", "test macro-F1",
                 "validation macro-F1 (fine-tuned / probe)", "kept", "steps", "CPU s"],
    "distill": ["run", "student parameters", "teacher test accuracy", "test accuracy", "test macro-F1",
                "kept of the teacher's accuracy", "steps", "CPU s", "training s (wall)",
                "teacher outputs cached before training (wall, disk)"],
}


def spread(values: list[float]) -> str:
    mean = statistics.mean(values)
    if len(values) == 1:
        return f"{mean:.3f}"
    return f"{mean:.3f} ± {statistics.stdev(values):.3f} ({min(values):.3f}-{max(values):.3f})"


def table(headers: list[str], rows: list[list[str]]) -> str:
    lines = [headers, ["---"] * len(headers), *rows]
    return "\n".join("| " + " | ".join(line) + " |" for line in lines)


def runs_table(runs: list[tuple[str, dict]]) -> str:
    """The runs, one row each (all `finetune` or all `distill`); for `finetune`, then each label's mean beside the
    baselines."""
    stages = {results["stage"] for _, results in runs}
    if len(stages) != 1 or not stages <= set(HEADERS):
        raise ValueError(f"the runs are of stages {sorted(stages)}: table finetune runs or distill runs, not both")
    stage = stages.pop()
    text = table(HEADERS[stage], [run_row(label, results) for label, results in runs])
    labels = {label: [results for name, results in runs if name == label] for label, _ in runs}
    if stage == "finetune":
        headers = ["run", "runs", "test accuracy, mean ± std (range)", "test macro-F1, mean ± std (range)",
                   "probe accuracy / macro-F1", "majority class accuracy / macro-F1"]
        rows = [[label, str(len(group)), *(spread([r[f"test_{key}"] for r in group]) for key in ("accuracy", "macro_f1")),
                 *(f"{statistics.mean(r[f'{kind}_accuracy'] for r in group):.3f} / "
                   f"{statistics.mean(r[f'{kind}_macro_f1'] for r in group):.3f}" for kind in ("probe", "majority"))]
                for label, group in labels.items()]
        text += "\n\n" + table(headers, rows)
    return text


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", metavar="LABEL=FOLDER")
    parser.add_argument("--markdown", help="also write the table to this Markdown file")
    args = parser.parse_args()
    try:
        text = runs_table([read_run(argument) for argument in args.runs])
    except ValueError as error:
        print(f"runs_table.py: error: {error}", file=sys.stderr)
        return 2
    print(text)
    if args.markdown:
        Path(args.markdown).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
