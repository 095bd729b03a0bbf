#!/usr/bin/env python3
"""bench-quality's learning curve: the same rows at each output folder's number of training examples, one seed.

The learning-rate and sample-size experiments each keep their runs in their own `--output_dir` (one budget per
folder), so the curve is read from the runs the folders keep, never retyped (docs/quality/):

    python scripts/learning_curve.py docs/quality docs/quality/far_qa-447 docs/quality/long_qa-400 --seed 0 \
        --markdown docs/quality/learning_curve.md

A (task, row) is tabled where folders at two or more training sizes ran it at that seed; TF-IDF, which has no
seed, at each size its folders ran it.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path

from hf_efficient.bench.quality import kept_runs, task_of


def curve(folders: list[Path], seed: int) -> list[dict]:
    """One entry per (task, row, training examples): that run's steps, metric and training CPU-seconds."""
    points, sizes = defaultdict(dict), {}
    for folder in folders:
        budget = folder / "budget.json"
        if not budget.is_file():
            raise ValueError(f"{folder}: no budget.json (not a bench-quality --output_dir)")
        train = json.loads(budget.read_text())["train"]
        for run in kept_runs(folder):
            if run["seed"] not in (seed, None):
                continue
            key = run["task"], run["row"]
            if train in points[key]:
                raise ValueError(f"{folder} and {sizes[key, train]} both ran {run['row']} on {run['task']} at {train} "
                                 "training examples: give one of them")
            points[key][train], sizes[key, train] = run, folder
    return [{"task": task, "row": row, "train": train, "steps": run["global_step"], "metric": run["metric"],
             "cpu_seconds": run["cpu_seconds"]} for (task, row), runs in points.items() if len(runs) > 1 for train, run in sorted(runs.items())]


def markdown(points: list[dict], seed: int) -> str:
    lines = [f"Seed {seed} (TF-IDF: no seed); each row at each number of training examples.", "",
             "| task | row | training examples | steps | metric (%) | value | training CPU-s |", "|---|---|---|---|---|---|---|"]
    lines += [f"| {p['task']} | {p['row']} | {p['train']} | {p['steps'] or '-'} | test {next(iter(task_of(p['task']).scores.values()))} | "
              f"{p['metric']:.1f} | {p['cpu_seconds']:.1f} |" for p in points]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("folders", nargs="+", type=Path, help="bench-quality --output_dir folders")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--markdown", type=Path, help="also write the table to this file")
    args = parser.parse_args(argv)
    try:
        table = markdown(curve(args.folders, args.seed), args.seed)
    except ValueError as error:
        print(f"learning_curve: {error}", file=sys.stderr)
        return 2
    if args.markdown:
        args.markdown.write_text(table)
    print(table, end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
