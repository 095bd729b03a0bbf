#!/usr/bin/env python3
"""bench-quality's learning curve: the same rows at each output folder's number of training examples, over seeds.

The learning-rate and sample-size experiments each keep their runs in their own `--output_dir` (one budget per
folder), so the curve is read from the runs the folders keep, never retyped (docs/quality/):

    python scripts/learning_curve.py docs/quality/batch-4 docs/quality/far_qa-447 docs/quality/long_qa-400 \
        --seeds 0 1 2 --markdown docs/quality/learning_curve.md

A (task, row) is tabled where folders at two or more training sizes ran it at one of the seeds: its metric as mean ±
sample std over the seeds each folder ran (the seeds column), as `bench-quality` reports it; TF-IDF, which has no
seed, at each size its folders ran it.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path

from hf_efficient.bench.quality import kept_runs, mean_and_spread, summarise, task_of


def curve(folders: list[Path], seeds: list[int]) -> list[dict]:
    """One entry per (task, row, training examples): `summarise`'s entry over the seeds run, with the mean steps."""
    points, sizes = defaultdict(dict), {}
    for folder in folders:
        budget = folder / "budget.json"
        if not budget.is_file():
            raise ValueError(f"{folder}: no budget.json (not a bench-quality --output_dir)")
        train = json.loads(budget.read_text())["train"]
        runs = [run for run in kept_runs(folder) if run["seed"] in (*seeds, None)]
        for entry in summarise(runs):
            key = entry["task"], entry["row"]
            if train in points[key]:
                raise ValueError(f"{folder} and {sizes[key, train]} both ran {entry['row']} on {entry['task']} at "
                                 f"{train} training examples: give one of them")
            steps = [run["global_step"] for run in runs if (run["task"], run["row"]) == key and run["global_step"]]
            points[key][train] = {**entry, "train": train, "steps": round(statistics.mean(steps)) if steps else None}
            sizes[key, train] = folder
    return [point for runs in points.values() if len(runs) > 1 for _, point in sorted(runs.items())]


def markdown(points: list[dict], seeds: list[int]) -> str:
    lines = [f"Seeds {', '.join(map(str, seeds))} where run (TF-IDF: no seed); each row at each number of training "
             "examples, steps and training CPU-seconds the mean over its seeds.", "",
             "| task | row | training examples | steps | metric (%) | mean ± std | training CPU-s | seeds |",
             "|---|---|---|---|---|---|---|---|"]
    lines += [f"| {p['task']} | {p['row']} | {p['train']} | {p['steps'] or '-'} | "
              f"test {next(iter(task_of(p['task']).scores.values()))} | {mean_and_spread(p)} | "
              f"{p['cpu_seconds']:.1f} | {p['seeds']} |" for p in points]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("folders", nargs="+", type=Path, help="bench-quality --output_dir folders")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--markdown", type=Path, help="also write the table to this file")
    args = parser.parse_args(argv)
    try:
        table = markdown(curve(args.folders, args.seeds), args.seeds)
    except ValueError as error:
        print(f"learning_curve: {error}", file=sys.stderr)
        return 2
    if args.markdown:
        args.markdown.write_text(table)
    print(table, end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
