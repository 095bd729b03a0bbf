"""Training memory against depth (reversible layers), and one masked-LM training step on a very long input.

Depth: peak memory growth of one forward+backward (measure.py, a fresh process per model) at each
depth, for the families given; with reversible layers it should stay flat while the dense family's
grows with every layer. Long input: one MaskedLM step (15% of tokens labelled, the family's
default chunked loss) at `--long_length` tokens, its time and peak live tensor memory (measure.py).
"""

import argparse
import multiprocessing as mp
import time
from functools import partial
from pathlib import Path

import torch

from ..models.families import FAMILIES
from ..tensor_memory import LiveTensorBytes
from .measure import Measurement, measure
from .options import add_option, family, non_negative_int, positive_int
from .sizes import benchmark_configs, build_model


def depth_rows(length: int, depths: list[int], families: list[str]) -> list[dict]:
    rows = []
    for model_type in families:
        for depth in depths:
            config = benchmark_configs(length, [model_type], num_hidden_layers=depth)[model_type]
            result = measure(partial(build_model, config), length, backward=True, repeats=1)
            rows.append({"family": model_type, "layers": depth, "seconds": result.seconds,
                         "peak_mib": result.peak_mib, "error": result.error})
            print(f"  {model_type} {depth} layers: {result.seconds:.2f} s, {result.peak_mib:.0f} MiB", flush=True)
    return rows


def _masked_lm_step(queue, model_type: str, length: int) -> None:
    try:
        config = benchmark_configs(length, [model_type])[model_type]
        torch.manual_seed(0)
        model = FAMILIES[model_type].models["ForMaskedLM"](config).train()
        input_ids = torch.randint(5, config.vocab_size, (1, length))
        labels = input_ids.masked_fill(torch.rand(1, length) > 0.15, -100)
        # Counting costs microseconds per op, nothing beside the seconds of a step this long: one step gives both.
        with LiveTensorBytes() as counter:
            start = time.perf_counter()
            model(input_ids, labels=labels).loss.backward()
            seconds = time.perf_counter() - start
        queue.put(Measurement(seconds, counter.peak / 2**20))
    except Exception as error:  # reported rather than killing the benchmark
        queue.put(Measurement(float("nan"), float("nan"), f"{type(error).__name__}: {error}"[:200]))


def long_masked_lm_step(model_type: str, length: int) -> Measurement:
    """Seconds and peak memory growth (MiB) of one MaskedLM forward+backward, in a fresh process."""
    context = mp.get_context("spawn")
    queue = context.Queue()
    process = context.Process(target=_masked_lm_step, args=(queue, model_type, length))
    process.start()
    process.join()
    if queue.empty():
        return Measurement(float("nan"), float("nan"), f"child exited with code {process.exitcode} (out of memory?)")
    return queue.get()


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--length", type=positive_int, default=8192,
                        help="tokens for the depth comparison (default 8192)")
    parser.add_argument("--depths", type=positive_int, nargs="+", default=[2, 12], help="layer counts (default 2 12)")
    parser.add_argument("--families", type=family, nargs="+", default=["hfe_roberta", "hfe_reformer"],
                        help="model types compared by depth (default hfe_roberta hfe_reformer)")
    add_option(parser, "long_length", type=non_negative_int, default=65536,
               help="tokens of the long MaskedLM step (default 65536; 0: skip)")
    add_option(parser, "long_family", type=family, default="hfe_reformer",
               help="model type of the long MaskedLM step (default hfe_reformer)")
    parser.add_argument("--markdown", help="also write the tables to this Markdown file (docs/measured/)")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    rows = depth_rows(args.length, args.depths, args.families)
    lines = [f"Peak live tensor memory of one forward+backward at {args.length} tokens, batch 1, wall-clock seconds, by "
             f"depth (ratio to {args.depths[0]} layers):", "",
             "| family | layers | seconds | peak MiB | memory ratio |", "|---|---|---|---|---|"]
    for row in rows:
        shallowest = next(r for r in rows if r["family"] == row["family"])
        ratio = row["peak_mib"] / shallowest["peak_mib"] if shallowest["peak_mib"] else float("nan")
        lines.append(f"| {row['family']} | {row['layers']} | {row['seconds']:.2f} | {row['peak_mib']:,.0f} | {ratio:.2f}x |"
                     + (f" failed: {row['error']}" if row["error"] else ""))
    if args.long_length:
        result = long_masked_lm_step(args.long_family, args.long_length)
        lines += ["", f"One {args.long_family} MaskedLM forward+backward at {args.long_length:,} tokens: "
                  + (f"failed: {result.error}" if result.error else
                     f"{result.seconds:.1f} s, peak live tensor memory {result.peak_mib:,.0f} MiB.")]
    text = "\n".join(lines)
    print("\n" + text)
    if args.markdown:
        Path(args.markdown).write_text(text + "\n")
    return 0
