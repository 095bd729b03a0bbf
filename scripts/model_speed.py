#!/usr/bin/env python3
"""Inference and training-step cost of trained models' architectures, each against the first (docs/distillation.md).

A teacher and its students compared at the shapes of their folders' configs, with random weights (the
cost does not depend on the weights): one forward, and one forward + backward with the model's
dropout, batch 1, CPU seconds on one thread (`bench.measure`, in this process: CPU time and live tensors do not
depend on a fresh one), and the step's peak live tensor memory. The position tables are extended to the longest length.

    python scripts/model_speed.py "teacher=teacher" "student=student" [--lengths 512 4096] [--markdown table.md]
"""

from __future__ import annotations

import argparse
import sys
from functools import partial
from pathlib import Path

from transformers import AutoConfig

import hf_efficient  # noqa: F401  (registers the families)
from hf_efficient.bench.measure import measure
from hf_efficient.bench.sizes import build_model


def speed_table(models: list[tuple[str, str]], lengths: list[int]) -> str:
    rows = ["| model | tokens | inference s | training step s | training peak MiB | inference speed-up | "
            "training speed-up |", "|---|---|---|---|---|---|---|"]
    for length in lengths:
        first = None
        for label, folder in models:
            config = AutoConfig.from_pretrained(folder)
            config.max_position_embeddings = max(lengths) + config.position_offset
            inference, training = (measure(partial(build_model, config), length, backward, cpu_time=True,
                                           same_process=True) for backward in (False, True))
            first = first or (inference, training)
            rows.append(f"| {label} | {length} | {inference.seconds:.3f} | {training.seconds:.3f} | "
                        f"{training.peak_mib:,.0f} | {first[0].seconds / inference.seconds:.1f}x | "
                        f"{first[1].seconds / training.seconds:.1f}x |")
            print(rows[-1], flush=True)
    return "\n".join(rows)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="+", metavar="LABEL=FOLDER")
    parser.add_argument("--lengths", type=int, nargs="+", default=[512, 4096])
    parser.add_argument("--markdown", type=Path, help="also write the table to this Markdown file")
    args = parser.parse_args()
    models = [argument.partition("=")[::2] for argument in args.models]
    missing = [folder for _, folder in models if not (Path(folder) / "config.json").is_file()]
    if missing or not all(label for label, _ in models):
        print(f"model_speed.py: error: expected LABEL=FOLDER with a config.json in FOLDER: {missing or args.models}",
              file=sys.stderr)
        return 2
    table = speed_table(models, args.lengths)
    if args.markdown:
        args.markdown.write_text(table + "\n")
    return 0


if __name__ == "__main__":  # measure() spawns children that import this file
    sys.exit(main())
