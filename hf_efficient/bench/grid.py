"""The benchmark grid: every family, the attention-free floor and transformers' own long-input models,
at each length, forward and forward+backward, time and peak memory as ratios to dense sdpa.

Each measurement runs in its own spawned process (see measure.py); all ratios in a table come from
the same run, so a shared, noisy machine shifts numerator and denominator together.
"""

import argparse
import json
from collections.abc import Callable, Sequence
from functools import partial

import torch
import transformers
from torch import nn

from ..models.attention import AttentionMechanism, register_attention
from .measure import Measurement, measure
from .sizes import BENCHMARK_SIZE, VARIANTS, benchmark_configs, build_model

DEFAULT_LENGTHS = (128, 512, 1024, 2048, 4096, 8192, 16384)
DENSE = "hfe_roberta"
FLOOR = "no attention (floor)"


@register_attention("bench_identity")
class IdentityAttention(AttentionMechanism):
    """The floor: the q/k/v projections every family pays, then each token 'attends' only to itself."""

    def forward(self, hidden_states, attention_mask=None, output_attentions=False, **kwargs):
        query, key, value = self.query(hidden_states), self.key(hidden_states), self.value(hidden_states)
        return value + 0 * (query + key), None


def build_floor(length: int) -> nn.Module:
    config = benchmark_configs(length, [DENSE])[DENSE]
    config.attention_type = "bench_identity"
    return build_model(config)


def build_variant(name: str, length: int) -> nn.Module:
    model_type, settings = VARIANTS[name]
    config = benchmark_configs(length, [model_type])[model_type]
    for field, value in settings.items():
        setattr(config, field, value)
    config.check_fields()
    return build_model(config)


def _reference_common(length: int) -> dict:
    return {
        "vocab_size": BENCHMARK_SIZE["vocab_size"],
        "hidden_size": BENCHMARK_SIZE["hidden_size"],
        "num_hidden_layers": BENCHMARK_SIZE["num_hidden_layers"],
        "num_attention_heads": BENCHMARK_SIZE["num_attention_heads"],
        "intermediate_size": BENCHMARK_SIZE["intermediate_size"],
        "max_position_embeddings": length + 2,
        "hidden_dropout_prob": 0.0,
        "attention_probs_dropout_prob": 0.0,
    }


def build_transformers_longformer(length: int) -> nn.Module:
    config = transformers.LongformerConfig(**_reference_common(length), attention_window=256)
    return transformers.LongformerModel(config, add_pooling_layer=False)


def build_transformers_bigbird(length: int) -> nn.Module:
    config = transformers.BigBirdConfig(
        **_reference_common(length), attention_type="block_sparse", block_size=64, num_random_blocks=3
    )
    return transformers.BigBirdModel(config, add_pooling_layer=False)


def build_transformers_reformer(length: int, num_hashes: int) -> nn.Module:
    """transformers' default layer pattern (local and LSH alternating), chunks of 64, axial positions for `length`."""
    first_axis = 64 if length >= 4096 else 16
    config = transformers.ReformerConfig(
        vocab_size=BENCHMARK_SIZE["vocab_size"],
        hidden_size=BENCHMARK_SIZE["hidden_size"],
        num_attention_heads=BENCHMARK_SIZE["num_attention_heads"],
        attention_head_size=BENCHMARK_SIZE["hidden_size"] // BENCHMARK_SIZE["num_attention_heads"],
        feed_forward_size=BENCHMARK_SIZE["intermediate_size"],
        attn_layers=["local", "lsh"] * (BENCHMARK_SIZE["num_hidden_layers"] // 2),
        num_hashes=num_hashes,
        lsh_attn_chunk_length=64,
        local_attn_chunk_length=64,
        max_position_embeddings=length,
        axial_pos_shape=(first_axis, length // first_axis),
        axial_pos_embds_dim=(64, BENCHMARK_SIZE["hidden_size"] - 64),
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
        lsh_attention_probs_dropout_prob=0.0,
        local_attention_probs_dropout_prob=0.0,
        is_decoder=False,
    )
    return transformers.ReformerModel(config)


# name -> (the family it is the outside reference for, its builder for a length).
REFERENCES: dict[str, tuple[str, Callable[[int], nn.Module]]] = {
    "transformers Longformer": ("hfe_longformer", build_transformers_longformer),
    "transformers BigBird": ("hfe_bigbird", build_transformers_bigbird),
    "transformers Reformer 1 hash": ("hfe_reformer", partial(build_transformers_reformer, num_hashes=1)),
    "transformers Reformer 4 hashes": ("hfe_reformer", partial(build_transformers_reformer, num_hashes=4)),
}


def entries(length: int, families: Sequence[str] | None, references: bool) -> dict[str, Callable[[], nn.Module]]:
    """name -> picklable model factory for everything measured at `length`."""
    selected = {DENSE: partial(build_model, benchmark_configs(length, [DENSE])[DENSE]), FLOOR: partial(build_floor, length)}
    for name, config in benchmark_configs(length, families).items():
        selected.setdefault(name, partial(build_model, config))
    for name, (model_type, _) in VARIANTS.items():
        if families is None or model_type in families:
            selected[name] = partial(build_variant, name, length)
    if references:
        selected.update({name: partial(build, length) for name, (model_type, build) in REFERENCES.items()
                         if families is None or model_type in families})
    return selected


def run_grid(
    lengths: Sequence[int],
    families: Sequence[str] | None,
    references: bool,
    repeats: int,
    device: str,
    rounds: int = 1,
    cpu_time: bool = False,
) -> dict[int, dict[str, dict[str, Measurement]]]:
    """length -> name -> {"forward": ..., "forward+backward": ...}.

    With `rounds` > 1 every model is measured again after all the others, and its best time kept:
    a burst of load from elsewhere then hits one sample of each model rather than all of one.
    """
    results: dict[int, dict[str, dict[str, Measurement]]] = {}
    for length in lengths:
        results[length] = {}
        for _ in range(rounds):
            for name, factory in entries(length, families, references).items():
                row = {mode: measure(factory, length, backward=mode == "forward+backward", repeats=repeats, device=device,
                                     cpu_time=cpu_time)
                       for mode in ("forward", "forward+backward")}
                best = results[length].setdefault(name, row)
                for mode, measurement in row.items():
                    if measurement.seconds < best[mode].seconds:
                        best[mode] = measurement
                print(f"  {length:>6} {name:<32} fwd {row['forward'].seconds:8.3f} s   "
                      f"fwd+bwd {row['forward+backward'].seconds:8.3f} s   "
                      f"{row['forward+backward'].peak_mib:8.0f} MiB", flush=True)
    return results


def format_tables(results: dict[int, dict[str, dict[str, Measurement]]]) -> str:
    """One Markdown table per length: seconds and ratios to dense sdpa and to the attention-free floor."""
    lines = []
    for length, rows in results.items():
        dense, floor = rows[DENSE], rows.get(FLOOR)
        lines += [
            f"### {length} tokens",
            "",
            "| model | fwd s | fwd speed-up | fwd+bwd s | fwd+bwd speed-up | peak MiB | memory vs dense | time vs floor |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for name, row in rows.items():
            forward, train = row["forward"], row["forward+backward"]
            if train.error or forward.error:
                lines.append(f"| {name} | failed: {(train.error or forward.error).replace('|', '/')} |||||||")
                continue
            over_floor = train.seconds / floor["forward+backward"].seconds if floor else float("nan")
            memory = train.peak_mib / dense["forward+backward"].peak_mib if dense["forward+backward"].peak_mib else float("nan")
            lines.append(
                f"| {name} | {forward.seconds:.3f} | {dense['forward'].seconds / forward.seconds:.2f}x "
                f"| {train.seconds:.3f} | {dense['forward+backward'].seconds / train.seconds:.2f}x "
                f"| {train.peak_mib:.0f} | {memory:.2f}x | {over_floor:.2f}x |"
            )
        lines.append("")
    return "\n".join(lines)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--lengths", type=int, nargs="+", default=list(DEFAULT_LENGTHS))
    parser.add_argument("--families", nargs="*", help="model types (default: every registered family)")
    parser.add_argument("--no-references", action="store_true", help="skip transformers' own long-input models")
    parser.add_argument("--repeats", type=int, default=2, help="timed repetitions per measurement, best kept")
    parser.add_argument("--rounds", type=int, default=1, help="measure every model this many times, best kept")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--cpu-time", action="store_true",
                        help="CPU seconds of each step on one thread instead of wall-clock (for a shared machine)")
    parser.add_argument("--output", help="also write the raw measurements to this JSON file")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    size = ", ".join(f"{key}={value}" for key, value in BENCHMARK_SIZE.items())
    clock = "CPU seconds on one thread" if args.cpu_time else "wall-clock seconds"
    print(f"Benchmark grid on {args.device}, batch 1, {size}, {clock}. speed-up = dense sdpa time / model time.")
    results = run_grid(args.lengths, args.families, not args.no_references, args.repeats, args.device, args.rounds,
                       args.cpu_time)
    print(format_tables(results))
    if args.output:
        with open(args.output, "w") as file:
            json.dump({length: {name: {mode: vars(m) for mode, m in row.items()} for name, row in rows.items()}
                       for length, rows in results.items()}, file, indent=1)
    return 0
