#!/usr/bin/env python3
"""Where a windowed family's training step (or inference forward) goes, against the attention-free floor (docs/measured/).

One training step (forward + backward) per model, or with `--inference` one eval-mode forward without autograd of
`--batch_size` documents, one thread, the same models as `hf-efficient bench` (its sizes, settings, floor and
dense model over 512-token windows), split by the CPU time of each op it runs into the matrix products (the linear
layers, which the floor pays too), the fused attention kernel (`scaled_dot_product_attention`, forward and
backward) and everything else (gathers, copies, masks, activations, norms), each in floor steps, so that the
parts add up to the step's ratio to the floor. It says how close to the floor a family can get with the kernel
it runs, and what its pattern allows at best:

    python scripts/profile_step.py --lengths 2048 4096 8192 --markdown docs/measured/profile_2k_8k.md
    python scripts/profile_step.py --inference --batch_size 8 --lengths 4096 --markdown docs/measured/profile_inference_4k.md

- **keys per query, computed**: query-key pairs the attention kernel computes (from its calls' shapes), per
  document token and head (the windows compute their overlap twice); **in the pattern**: the pairs the pattern
  allows (non-zero attention weights), per query and head.
- **step / floor**: the best of `--repeats` steps run without the op clock, rows taking turns, over the floor's (the floor's own
  seconds in brackets).
- **kernel's rate / products'**: the attention kernel's floating-point operations per second (two products of each
  query-key pair forward, four backward) over the matrix products' in the same step.
- **least step / floor**: the floor's step plus what the model must multiply beyond the floor's matrix products (a
  forward's products, three times in training, as a backward computes two of each, and the kernel's work cut to the
  pattern's pairs), all at the floor's products' rate: what no kernel can go below.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import FlopCounterMode

from hf_efficient.bench.grid import (
    DEFAULT_OVERLAP,
    FLOOR,
    GLOBAL_TOKENS_FAMILY,
    WINDOWS,
    WithGlobalTokens,
    build_floor,
    build_windows,
    build_with_global_tokens,
)
from hf_efficient.bench.measure import step
from hf_efficient.bench.sizes import MODEL_SIZES, benchmark_configs, build_model

WINDOWED = ("hfe_longformer", "hfe_bigbird", "hfe_blockbert")
GLOBAL_TOKENS = 16
MATRIX_PRODUCTS = ("mm", "addmm", "bmm", "baddbmm")
ATTENTION_KERNEL = "_scaled_dot_product"  # the fused kernels `scaled_dot_product_attention` dispatches to
PARTS = ("matrix products", "attention kernel", "rest")


def models(length: int, size: str) -> dict[str, Callable[[], nn.Module]]:
    """Row name -> factory: the floor, the windows, each windowed family at its benchmark settings, Longformer-style
    with global tokens."""
    rows: dict[str, Callable[[], nn.Module]] = {FLOOR: lambda: build_floor(length, size),
                                                WINDOWS: lambda: build_windows(length, DEFAULT_OVERLAP, size)}
    for family in WINDOWED:
        rows[family] = lambda family=family: build_model(benchmark_configs(length, [family], size)[family])
    rows[f"{GLOBAL_TOKENS_FAMILY}, {GLOBAL_TOKENS} global tokens"] = lambda: build_with_global_tokens(length, GLOBAL_TOKENS, size)
    return rows


def product_flops(shapes: list[tuple[int, ...]]) -> int:
    """Floating-point operations of a matrix product from its tensor inputs' shapes: the factors are the last two,
    [..., m, k] and [..., k, n] (addmm's and baddbmm's first input is what they add)."""
    left, right = shapes[-2:]
    return 2 * math.prod(left) * right[-1]


class OpClock(TorchDispatchMode):
    """CPU seconds of each aten op a step runs (forward and backward), by kind, with the floating-point operations of
    the matrix products and of the attention kernel from their operands' shapes, and the pairs the kernel computes.

    Timed at the dispatcher, around each op as a whole: torch.profiler's self times put part of the step's time in
    ops it did not run in (a blocked family's gelu backward read several times the floor's there, not here)."""

    def __init__(self):
        super().__init__()
        self.parts = dict.fromkeys((*PARTS, "pairs", "product flops", "kernel flops"), 0.0)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        start = time.process_time()
        output = func(*args, **(kwargs or {}))
        seconds = time.process_time() - start
        name = func.overloadpacket.__name__
        if name in MATRIX_PRODUCTS:
            self.parts["matrix products"] += seconds
            self.parts["product flops"] += product_flops([tuple(a.shape) for a in args if isinstance(a, torch.Tensor)])
        elif name.startswith(ATTENTION_KERNEL):
            # [batch, heads, queries, head_dim] and [batch, heads, keys, head_dim]: the query and the key
            backward = name.endswith("backward")
            query, key = args[1 if backward else 0].shape, args[2 if backward else 1].shape
            pairs = query[0] * query[1] * query[2] * key[2]
            self.parts["attention kernel"] += seconds
            self.parts["kernel flops"] += (8 if backward else 4) * pairs * query[3]
            self.parts["pairs"] += 0 if backward else pairs
        else:
            self.parts["rest"] += seconds
        return output


def split(model: nn.Module, input_ids: torch.Tensor, training: bool) -> dict[str, float]:
    """Seconds of one step in matrix products, the attention kernel and the rest; the pairs the kernel computes; the
    floating-point operations of the matrix products and of the kernel."""
    with OpClock() as clock:
        step(model, input_ids, training, torch.float32)
    return clock.parts


def needed_product_flops(model: nn.Module, input_ids: torch.Tensor, training: bool) -> float:
    """Floating-point operations of the matrix products a step needs: a forward's, three times in training (the
    backward computes two of each: the gradients of both factors), whatever a step recomputes in backward left out.
    FlopCounterMode counts the products and not the attention kernel on CPU (it knows no formula for it)."""
    with FlopCounterMode(display=False) as counter, torch.set_grad_enabled(training):
        model(input_ids)
    return (3.0 if training else 1.0) * counter.get_total_flops()


def pattern_keys(length: int, row: str) -> float | None:
    """Keys per query and head that the pattern allows: non-zero attention weights, at the benchmark size (the pattern
    does not depend on the width); None for the floor and the windows, which have no pattern to cut their work to."""
    if row in (FLOOR, WINDOWS):
        return None
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


def measure(length: int, size: str, repeats: int, training: bool = True, batch_size: int = 1) -> list[dict]:
    input_ids = torch.randint(5, 900, (batch_size, length))
    built = {}
    for row, factory in models(length, size).items():
        torch.manual_seed(0)
        built[row] = factory().train(training)
        step(built[row], input_ids, training, torch.float32)  # warm-up
    best = dict.fromkeys(built, float("inf"))
    for _ in range(repeats):
        for row, model in built.items():
            start = time.process_time()
            step(model, input_ids, training, torch.float32)
            best[row] = min(best[row], time.process_time() - start)
    config = MODEL_SIZES[size]
    timed = {row: split(model, input_ids, training) for row, model in built.items()}
    floor = timed[FLOOR]
    floor_products = floor["matrix products"] / sum(floor[name] for name in PARTS)  # in floor steps
    floor_needed = needed_product_flops(built[FLOOR], input_ids, training)
    results = []
    for row, parts in timed.items():
        computed = parts["pairs"] / (config["num_hidden_layers"] * config["num_attention_heads"] * length * batch_size)
        pattern = pattern_keys(length, row)
        kernel_needed = parts["kernel flops"] * (1 if pattern is None else pattern / computed)
        needed = needed_product_flops(built[row], input_ids, training) + kernel_needed
        kernel_rate = parts["kernel flops"] / parts["attention kernel"] if parts["attention kernel"] else None
        results.append({
            "row": row, "seconds": best[row], "floor": best[FLOOR],
            **{name: parts[name] / sum(parts[name] for name in PARTS) for name in PARTS},
            "computed": computed, "pattern": pattern,
            "rate": kernel_rate and kernel_rate / (parts["product flops"] / parts["matrix products"]),
            "least": 1 + floor_products * (needed / floor_needed - 1),
        })
    return results


def table(length: int, size: str, results: list[dict]) -> str:
    """One row per model: its step over the floor's, and that step's parts in floor steps (they add up to the ratio)."""
    lines = [f"### {length} tokens, {size} size", "",
             "| model | step / floor | matrix products | attention kernel | rest | keys per query, computed | in the pattern "
             "| kernel's rate / products' | least step / floor |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        ratio = r["seconds"] / r["floor"]
        parts = " | ".join(f"{r[name] * ratio:.2f}" for name in PARTS)
        pattern = "n/a" if r["pattern"] is None else f"{r['pattern']:.0f}"
        rate = "n/a" if r["rate"] is None else f"{r['rate']:.2f}"
        step = f"1.00 ({r['seconds']:.3f} s)" if r["row"] == FLOOR else f"{ratio:.2f}"
        lines.append(f"| {r['row']} | {step} | {parts} | {r['computed']:.0f} | {pattern} | {rate} | {r['least']:.2f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lengths", type=int, nargs="+", default=[2048, 4096])
    parser.add_argument("--model_size", choices=list(MODEL_SIZES), default="benchmark")
    parser.add_argument("--inference", action="store_true", help="an eval-mode forward without autograd instead of a training step")
    parser.add_argument("--batch_size", type=int, default=1, help="documents per step")
    parser.add_argument("--repeats", type=int, default=3, help="steps per model, timed as a whole, best kept")
    parser.add_argument("--markdown", type=Path, help="also write the tables to this file")
    args = parser.parse_args(argv)
    if any(length < 1 for length in args.lengths) or args.repeats < 1 or args.batch_size < 1:
        parser.error("--lengths, --batch_size and --repeats must be positive")
    torch.set_num_threads(1)
    what = "Inference (eval-mode forward)" if args.inference else "Training step (forward + backward)"
    header = (f"{what}, batch {args.batch_size}, {args.model_size} size, float32, CPU time on one thread, over the "
              "floor's; its parts in floor steps, from the shares of one timed step's CPU time op by op.")
    tables = [table(length, args.model_size,
                    measure(length, args.model_size, args.repeats, not args.inference, args.batch_size))
              for length in args.lengths]
    text = "\n\n".join([header, *tables]) + "\n"
    print(text)
    if args.markdown:
        args.markdown.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
