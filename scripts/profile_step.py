#!/usr/bin/env python3
"""Where a windowed family's training step goes, against the attention-free floor (docs/measured/).

One training step (forward + backward) per model, one thread, the same models as `hf-efficient bench` (its
sizes, settings and floor), split by torch.profiler's self CPU time into the matrix products (the linear
layers, which the floor pays too), the fused attention kernel (`scaled_dot_product_attention`, forward and
backward) and everything else (gathers, copies, masks, activations, norms), each in floor steps, so that the
parts add up to the step's ratio to the floor. It says how close to the floor a family can get with the kernel
it runs (the floor's parts plus the kernel's), and the kernel's work is read against the pattern's:

    python scripts/profile_step.py --lengths 2048 4096 --markdown docs/measured/profile_2k_4k.md

- **keys per query, computed**: query-key pairs the attention kernel computes (from its calls' shapes), per query
  and head; **in the pattern**: the pairs the pattern allows (non-zero attention weights), per query and head.
- **step / floor**: the best of `--repeats` unprofiled steps, rows taking turns, over the floor's (the floor's own
  seconds in brackets).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch
from torch import nn
from torch.profiler import ProfilerActivity, profile

from hf_efficient.bench.grid import FLOOR, GLOBAL_TOKENS_FAMILY, WithGlobalTokens, build_floor, build_with_global_tokens
from hf_efficient.bench.measure import step
from hf_efficient.bench.sizes import MODEL_SIZES, benchmark_configs, build_model

WINDOWED = ("hfe_longformer", "hfe_bigbird", "hfe_blockbert")
GLOBAL_TOKENS = 16
MATRIX_PRODUCTS = ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm")
ATTENTION_KERNEL = "scaled_dot_product"
PARTS = ("matrix products", "attention kernel", "rest")
FUSED_KERNEL = "aten::_scaled_dot_product"  # the kernel the `scaled_dot_product_attention` wrapper dispatches to


def models(length: int, size: str) -> dict[str, Callable[[], nn.Module]]:
    """Row name -> factory: the floor, each windowed family at its benchmark settings, Longformer-style with global tokens."""
    rows: dict[str, Callable[[], nn.Module]] = {FLOOR: lambda: build_floor(length, size)}
    for family in WINDOWED:
        rows[family] = lambda family=family: build_model(benchmark_configs(length, [family], size)[family])
    rows[f"{GLOBAL_TOKENS_FAMILY}, {GLOBAL_TOKENS} global tokens"] = lambda: build_with_global_tokens(length, GLOBAL_TOKENS, size)
    return rows


def split(model: nn.Module, input_ids: torch.Tensor) -> dict[str, float]:
    """Seconds of one profiled step in matrix products, the attention kernel and the rest; the kernel's pairs per query."""
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as profiler:
        step(model, input_ids, True, torch.float32)
    parts = dict.fromkeys((*PARTS, "pairs"), 0.0)
    for event in profiler.events():
        if event.name in MATRIX_PRODUCTS:
            parts["matrix products"] += event.self_cpu_time_total / 1e6
        elif ATTENTION_KERNEL in event.name:
            parts["attention kernel"] += event.self_cpu_time_total / 1e6
        else:
            parts["rest"] += event.self_cpu_time_total / 1e6
        if event.name.startswith(FUSED_KERNEL) and "backward" not in event.name:
            query, key = event.input_shapes[0], event.input_shapes[1]
            parts["pairs"] += query[0] * query[1] * query[2] * key[2]
    return parts


def pattern_keys(length: int, row: str) -> float:
    """Keys per query and head that the pattern allows: non-zero attention weights, at the benchmark size (the pattern
    does not depend on the width)."""
    model = models(length, "benchmark")[row]().eval()
    input_ids = torch.randint(5, 900, (1, length))
    kwargs = {}
    if isinstance(model, WithGlobalTokens):
        kwargs["global_attention_mask"] = torch.zeros_like(input_ids, dtype=torch.bool)
        kwargs["global_attention_mask"][:, : model.count] = True
        model = model.model
    with torch.no_grad():
        attentions = model(input_ids, output_attentions=True, **kwargs).attentions
    return sum(float((weights[..., :length] > 0).sum()) / weights[0, :, :length].numel() * length
               for weights in attentions) / len(attentions)


def measure(length: int, size: str, repeats: int) -> list[dict]:
    input_ids = torch.randint(5, 900, (1, length))
    built = {}
    for row, factory in models(length, size).items():
        torch.manual_seed(0)
        built[row] = factory().train()
        step(built[row], input_ids, True, torch.float32)  # warm-up
    best = dict.fromkeys(built, float("inf"))
    for _ in range(repeats):
        for row, model in built.items():
            start = time.process_time()
            step(model, input_ids, True, torch.float32)
            best[row] = min(best[row], time.process_time() - start)
    config = MODEL_SIZES[size]
    results = []
    for row, model in built.items():
        parts = split(model, input_ids)
        total = parts["matrix products"] + parts["attention kernel"] + parts["rest"]
        results.append({
            "row": row, "seconds": best[row], "floor": best[FLOOR],
            **{name: parts[name] / total for name in PARTS},
            "computed": parts["pairs"] / (config["num_hidden_layers"] * config["num_attention_heads"] * length),
            "pattern": None if row == FLOOR else pattern_keys(length, row),
        })
    return results


def table(length: int, size: str, results: list[dict]) -> str:
    """One row per model: its step over the floor's, and that step's parts in floor steps (they add up to the ratio)."""
    lines = [f"### {length} tokens, {size} size", "",
             "| model | step / floor | matrix products | attention kernel | rest | keys per query, computed | in the pattern |",
             "|---|---|---|---|---|---|---|"]
    for r in results:
        ratio = r["seconds"] / r["floor"]
        parts = " | ".join(f"{r[name] * ratio:.2f}" for name in PARTS)
        pattern = "n/a" if r["pattern"] is None else f"{r['pattern']:.0f}"
        step = f"1.00 ({r['seconds']:.3f} s)" if r["row"] == FLOOR else f"{ratio:.2f}"
        lines.append(f"| {r['row']} | {step} | {parts} | {r['computed']:.0f} | {pattern} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lengths", type=int, nargs="+", default=[2048, 4096])
    parser.add_argument("--model_size", choices=list(MODEL_SIZES), default="benchmark")
    parser.add_argument("--repeats", type=int, default=3, help="unprofiled steps per model, best kept")
    parser.add_argument("--markdown", type=Path, help="also write the tables to this file")
    args = parser.parse_args(argv)
    if any(length < 1 for length in args.lengths) or args.repeats < 1:
        parser.error("--lengths and --repeats must be positive")
    torch.set_num_threads(1)
    header = (f"Training step (forward + backward), batch 1, {args.model_size} size, float32, CPU time on one thread, "
              "over the floor's; its parts in floor steps, from the shares of one profiled step's self CPU time.")
    tables = [table(length, args.model_size, measure(length, args.model_size, args.repeats)) for length in args.lengths]
    text = "\n\n".join([header, *tables]) + "\n"
    print(text)
    if args.markdown:
        args.markdown.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
