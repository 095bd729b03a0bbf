"""Compare every registered family on one long input: fwd+bwd time and peak memory, as ratios to dense.

This is the quick side-by-side the README runs; the full benchmark grids live beside it.
"""

import argparse
from collections.abc import Sequence
from functools import partial
from pathlib import Path

from .measure import measure
from .options import family, positive_int
from .sizes import BENCHMARK_SIZE, benchmark_configs, build_model


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--length", type=positive_int, default=4096, help="tokens in the input (default 4096)")
    parser.add_argument("--families", type=family, nargs="*",
                        help="model types to include (default: every registered family)")
    parser.add_argument("--repeats", type=positive_int, default=2, help="timed repetitions, best kept (default 2)")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu", help="where to run (default cpu)")
    parser.add_argument("--markdown", help="also write the legend and the table to this Markdown file (docs/measured/)")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    rows = compare(args.length, args.families, args.repeats, args.device)
    table = format_table(rows, args.length)
    print(table)
    if args.markdown:
        Path(args.markdown).write_text(table + "\n")
    return 0


def compare(length: int, families: Sequence[str] | None, repeats: int, device: str) -> list[dict]:
    configs = benchmark_configs(length, families)
    rows = []
    for name, config in configs.items():
        result = measure(partial(build_model, config), length, backward=True, repeats=repeats, device=device)
        rows.append({"family": name, "seconds": result.seconds, "peak_mib": result.peak_mib, "error": result.error})
        print(f"  measured {name}: {result.seconds:.3f} s, {result.peak_mib:.0f} MiB", flush=True)
    return rows


def format_table(rows: list[dict], length: int) -> str:
    dense = next((row for row in rows if row["family"] == "hfe_roberta"), None)
    size = ", ".join(f"{key}={value}" for key, value in BENCHMARK_SIZE.items())
    lines = [
        f"One forward+backward at {length} tokens, batch 1 ({size}), wall-clock seconds, best of the repeats.",
        "peak = live tensor memory of the step; speed-up = dense time / family time; memory = family peak / dense peak (both from this run).",
        "",
        "| family | seconds | speed-up | peak MiB | memory |",
        "|---|---|---|---|---|",
    ]
    for row in rows:
        if row["error"]:
            lines.append(f"| {row['family']} | failed: {row['error']} | | | |")
            continue
        speedup = f"{dense['seconds'] / row['seconds']:.2f}x" if dense else "-"  # dense not in --families
        memory = f"{row['peak_mib'] / dense['peak_mib']:.2f}x" if dense and dense["peak_mib"] else "-"
        lines.append(f"| {row['family']} | {row['seconds']:.3f} | {speedup} | {row['peak_mib']:,.0f} | {memory} |")
    return "\n".join(lines)
