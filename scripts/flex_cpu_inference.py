#!/usr/bin/env python3
"""CPU inference through compiled FlexAttention against each family's hand-blocked kernel, side by side.

Every family at the benchmark size (Longformer-style with and without 16 global tokens, BigBird-style, BlockBERT) runs
its default CPU path (the blocked kernel) and its fused path (`attn_implementation="flex_attention"`: the compiled
FlexAttention forward), beside dense over 512-token windows (overlap 128) and dense over the whole input, at each
batch size and length: eval-mode forwards without gradients, fp32, CPU seconds on one thread, the models taking turns
(best of --repeats), all in this process. The fused path's first forward at a shape (compilation included, wall-clock)
is reported apart; its plan pads lengths to a multiple of 128, so one compiled shape serves every length of a bucket
(the table shows a shorter document's first forward after its bucket's compilation).

    taskset -c 1 python scripts/flex_cpu_inference.py --markdown docs/measured/flex_cpu_inference.md
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from functools import partial
from pathlib import Path

import torch

import hf_efficient  # noqa: F401  (registers the families)
from hf_efficient.bench.grid import DEFAULT_OVERLAP, WINDOW, WithGlobalTokens, build_windows
from hf_efficient.bench.sizes import BENCHMARK_SIZE, benchmark_configs, build_model

FAMILIES = ("hfe_longformer", "hfe_longformer, 16 global tokens", "hfe_bigbird", "hfe_blockbert")
WINDOWS, DENSE = f"hfe_roberta over {WINDOW}-token windows", "hfe_roberta"


def build(name: str, length: int) -> torch.nn.Module:
    model_type = name.split(",")[0]
    model = build_model(benchmark_configs(length, [model_type])[model_type])
    return (WithGlobalTokens(model, 16) if "global" in name else model).eval()


def forward(model: torch.nn.Module, input_ids: torch.Tensor, implementation: str) -> None:
    model.config._attn_implementation = implementation
    with torch.no_grad():
        model(input_ids)


def compile_seconds(model: torch.nn.Module, input_ids: torch.Tensor) -> float:
    start = time.perf_counter()
    forward(model, input_ids, "flex_attention")
    return time.perf_counter() - start


def measure(length: int, batch: int, repeats: int) -> list[dict]:
    """One row per model: CPU seconds of one forward, blocked and fused (the families), and the fused compile time."""
    torch.manual_seed(0)
    input_ids = torch.randint(5, BENCHMARK_SIZE["vocab_size"], (batch, length))
    models = {WINDOWS: build_windows(length, DEFAULT_OVERLAP), DENSE: build(DENSE, length),
              **{name: build(name, length) for name in FAMILIES}}
    steps = {(name, "sdpa"): partial(forward, model, input_ids, "sdpa") for name, model in models.items()}
    compiled, reused = {}, {}
    for name in FAMILIES:
        compiled[name] = compile_seconds(models[name], input_ids)
        # A document 96 tokens shorter pads to the same multiple of 128: its first forward compiles nothing.
        reused[name] = compile_seconds(models[name], input_ids[:, : length - 96])
        steps[name, "flex_attention"] = partial(forward, models[name], input_ids, "flex_attention")
    for run in steps.values():
        run()  # warm-up
    best = dict.fromkeys(steps, float("inf"))
    for _ in range(repeats):
        for key, run in steps.items():
            start = time.process_time()
            run()
            best[key] = min(best[key], time.process_time() - start)
    windows = best[WINDOWS, "sdpa"]
    rows = []
    for name in models:
        blocked, fused = best[name, "sdpa"], best.get((name, "flex_attention"))
        rows.append({"model": name, "blocked": blocked, "fused": fused, "windows": windows,
                     "compile": compiled.get(name), "reused": reused.get(name), "batch": batch})
    return rows


def table(length: int, batch: int, rows: list[dict]) -> str:
    lines = [f"### {length} tokens, batch {batch}", "",
             "| model | default path docs/s | vs windows | compiled flex docs/s | vs windows | flex vs default | "
             "first flex forward s (compile) | shorter document's first s |",
             "|---|---|---|---|---|---|---|---|"]
    for row in rows:
        cells = [f"{batch / row['blocked']:.2f}", f"{row['windows'] / row['blocked']:.2f}x"]
        if row["fused"] is None:
            cells += ["-"] * 5
        else:
            cells += [f"{batch / row['fused']:.2f}", f"{row['windows'] / row['fused']:.2f}x",
                      f"{row['blocked'] / row['fused']:.2f}x", f"{row['compile']:.1f}", f"{row['reused']:.2f}"]
        lines.append(f"| {row['model']} | {' | '.join(cells)} |")
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", type=int, nargs="+", default=[2048, 4096])
    parser.add_argument("--batch_sizes", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--repeats", type=int, default=2, help="timed forwards per model, best kept (default 2)")
    parser.add_argument("--markdown", type=Path, help="also write the tables to this Markdown file")
    args = parser.parse_args()
    torch.set_num_threads(1)
    # A fresh compile cache, so that the first forwards pay the whole compilation, as a new installation does.
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp(prefix="flex-cpu-inductor-")
    # Each shape is compiled apart on CPU (see attention_flex.fused_attention): more than torch's default 8.
    torch._dynamo.config.recompile_limit = 64
    size = ", ".join(f"{key}={value}" for key, value in BENCHMARK_SIZE.items())
    text = [
        f"Compiled FlexAttention against the default (hand-blocked) CPU path, inference, {size}, fp32, torch "
        f"{torch.__version__}, CPU seconds on one thread, best of {args.repeats}; docs/s = batch / seconds of one "
        f"eval-mode forward; vs windows = {WINDOWS}' (overlap {DEFAULT_OVERLAP}, one batch of windows per document) time "
        "/ the model's; flex vs default = the default path's time / compiled flex's. The first flex forward at a shape "
        "compiles it (wall-clock, an empty compile cache, the forward itself included); a document 96 tokens shorter pads to the same multiple of 128 and reuses it. "
        "Written by `taskset -c 1 python scripts/flex_cpu_inference.py --markdown docs/measured/flex_cpu_inference.md`.",
        "",
    ]
    for length in args.lengths:
        for batch in args.batch_sizes:
            text.append(table(length, batch, measure(length, batch, args.repeats)))
            print(text[-1], flush=True)
    if args.markdown:
        args.markdown.write_text("\n".join(text))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
