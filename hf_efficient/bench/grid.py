"""The benchmark grid: every family, the attention-free floor, dense over 512-token windows and transformers'
own long-input models, at each length, forward and forward+backward, time and peak memory as ratios to dense
sdpa over the whole input and to dense over overlapping 512-token windows (what users run on long documents).
With `--inference`, eval-mode forwards at each `--batch_sizes` instead: documents per second, against the same
yardsticks.

Each measurement runs in its own spawned process (see measure.py); all ratios in a table come from
the same run, so a shared, noisy machine shifts numerator and denominator together.
"""

import argparse
import json
import math
import re
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path

import torch
import transformers
from torch import nn

from ..models.attention import AttentionMechanism
from .measure import Measurement, measure, measure_compiled
from .options import add_option, family, non_negative_int, positive_int
from .sizes import BACKWARD_SETTINGS, MODEL_SIZES, VARIANTS, benchmark_configs, build_model

DEFAULT_LENGTHS = (128, 512, 1024, 2048, 4096, 8192, 16384)
MODES = ("forward", "forward+backward")
INFERENCE_BATCH_SIZES = (1, 8)
COMPILED = " compiled"  # suffix of a mode measured through torch.compile (`--compile`)
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
DENSE = "hfe_roberta"
FLOOR = "no attention (floor)"
WINDOWS = "hfe_roberta over 512-token windows"
WINDOW = 512  # RoBERTa's length: the model users slide over longer documents
DEFAULT_OVERLAP = 128  # transformers' question-answering examples' `doc_stride`
GLOBAL_TOKENS_FAMILY = "hfe_longformer"  # the family that takes per-call global tokens (`global_attention_mask`)


class IdentityAttention(AttentionMechanism):
    """The floor: the q/k/v projections every family pays, then each token 'attends' only to itself.

    Not registered: the floor model gets it by replacing its layers' attention (`build_floor`), so users'
    attention registry never holds a benchmark-only mechanism.
    """

    attention_type = "none (benchmark floor)"

    def forward(self, hidden_states, attention_mask=None, output_attentions=False, **kwargs):
        query, key, value = self.query(hidden_states), self.key(hidden_states), self.value(hidden_states)
        return value + 0 * (query + key), None


def build_floor(length: int, size: str = "benchmark") -> nn.Module:
    model = build_model(benchmark_configs(length, [DENSE], size)[DENSE])
    for index, layer in enumerate(model.encoder.layer):
        layer.attention.self = IdentityAttention(model.config, index)
    return model


def window_starts(length: int, window: int, overlap: int) -> list[int]:
    """First token of each window, as many as a tokenizer's overflowing windows (`stride=overlap`) cut.

    The last window ends with the document instead of being padded, so no window needs an attention mask:
    the cheapest way to run them.
    """
    if length <= window:
        return [0]
    step = window - overlap
    return [min(i * step, length - window) for i in range(1 + math.ceil((length - window) / step))]


class DocumentFeed(nn.Module):
    """A model fed one document the way a user would; `measure` reads `config` as on the model itself."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model, self.config = model, model.config


class Windowed(DocumentFeed):
    """The document as one batch of overlapping windows through a short model (QA examples, chunk pooling)."""

    def __init__(self, model: nn.Module, window: int, overlap: int):
        super().__init__(model)
        self.window, self.overlap = window, overlap

    def forward(self, input_ids: torch.Tensor):
        length = input_ids.shape[1]
        starts = torch.tensor(window_starts(length, self.window, self.overlap), device=input_ids.device)
        index = starts[:, None] + torch.arange(min(self.window, length), device=input_ids.device)
        return self.model(input_ids[:, index].flatten(0, 1))


class WithGlobalTokens(DocumentFeed):
    """Global attention on the document's first `count` tokens (a question, a summary prefix)."""

    def __init__(self, model: nn.Module, count: int):
        super().__init__(model)
        self.count = count

    def forward(self, input_ids: torch.Tensor):
        global_attention_mask = torch.zeros_like(input_ids, dtype=torch.bool)
        global_attention_mask[:, : self.count] = True
        return self.model(input_ids, global_attention_mask=global_attention_mask)


def build_windows(length: int, overlap: int, size: str = "benchmark") -> nn.Module:
    return Windowed(build_model(benchmark_configs(min(length, WINDOW), [DENSE], size)[DENSE]), WINDOW, overlap)


def build_with_global_tokens(length: int, count: int, size: str = "benchmark") -> nn.Module:
    config = benchmark_configs(length, [GLOBAL_TOKENS_FAMILY], size)[GLOBAL_TOKENS_FAMILY]
    return WithGlobalTokens(build_model(config), count)


def build_variant(name: str, length: int, size: str = "benchmark") -> nn.Module:
    model_type, settings = VARIANTS[name]
    config = benchmark_configs(length, [model_type], size)[model_type]
    global_tokens = settings.get("global_tokens", 0)
    for field, value in settings.items():
        if field != "global_tokens":
            setattr(config, field, value)
    config.check_fields()
    model = build_model(config)
    return WithGlobalTokens(model, global_tokens) if global_tokens else model


def _reference_common(length: int, size: str) -> dict:
    return {
        **MODEL_SIZES[size],
        "max_position_embeddings": length + 2,
        "hidden_dropout_prob": 0.0,
        "attention_probs_dropout_prob": 0.0,
    }


def build_transformers_longformer(length: int, size: str = "benchmark") -> nn.Module:
    config = transformers.LongformerConfig(**_reference_common(length, size), attention_window=256)
    return transformers.LongformerModel(config, add_pooling_layer=False)


def build_transformers_bigbird(length: int, size: str = "benchmark") -> nn.Module:
    config = transformers.BigBirdConfig(
        **_reference_common(length, size), attention_type="block_sparse", block_size=64, num_random_blocks=3
    )
    return transformers.BigBirdModel(config, add_pooling_layer=False)


def build_transformers_reformer(length: int, num_hashes: int, size: str = "benchmark") -> nn.Module:
    """transformers' default layer pattern (local and LSH alternating), chunks of 64, axial positions for `length`."""
    first_axis = 64 if length >= 4096 else 16
    dims = MODEL_SIZES[size]
    config = transformers.ReformerConfig(
        vocab_size=dims["vocab_size"],
        hidden_size=dims["hidden_size"],
        num_attention_heads=dims["num_attention_heads"],
        attention_head_size=dims["hidden_size"] // dims["num_attention_heads"],
        feed_forward_size=dims["intermediate_size"],
        attn_layers=["local", "lsh"] * (dims["num_hidden_layers"] // 2),
        num_hashes=num_hashes,
        lsh_attn_chunk_length=64,
        local_attn_chunk_length=64,
        max_position_embeddings=length,
        axial_pos_shape=(first_axis, length // first_axis),
        axial_pos_embds_dim=(64, dims["hidden_size"] - 64),
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
        lsh_attention_probs_dropout_prob=0.0,
        local_attention_probs_dropout_prob=0.0,
        is_decoder=False,
    )
    return transformers.ReformerModel(config)


# name -> (the family it is the outside reference for, its builder for a length).
REFERENCES: dict[str, tuple[str, Callable[..., nn.Module]]] = {
    "transformers Longformer": ("hfe_longformer", build_transformers_longformer),
    "transformers BigBird": ("hfe_bigbird", build_transformers_bigbird),
    "transformers Reformer 1 hash": ("hfe_reformer", partial(build_transformers_reformer, num_hashes=1)),
    "transformers Reformer 4 hashes": ("hfe_reformer", partial(build_transformers_reformer, num_hashes=4)),
}


def grid_modes(batch_sizes: Sequence[int] = (), dtypes: Sequence[torch.dtype] = (torch.float32,)
               ) -> dict[str, tuple[bool, int, torch.dtype]]:
    """mode -> (with backward, batch size, dtype): the training grid's two modes (one dtype), or one inference mode
    per batch size and dtype."""
    if batch_sizes:
        return {inference_mode(size, dtype if len(dtypes) > 1 else None): (False, size, dtype)
                for dtype in dtypes for size in batch_sizes}
    (dtype,) = dtypes
    return {"forward": (False, 1, dtype), "forward+backward": (True, 1, dtype)}


def inference_mode(batch_size: int, dtype: torch.dtype | None = None) -> str:
    """"inference, batch 8", with the dtype's name when a run measures several ("inference, batch 8, bfloat16")."""
    return f"inference, batch {batch_size}" + (f", {str(dtype).removeprefix('torch.')}" if dtype else "")


def global_tokens_name(count: int) -> str:
    return f"{GLOBAL_TOKENS_FAMILY}, {count} global tokens"


def entries(
    length: int,
    families: Sequence[str] | None,
    references: bool,
    overlap: int = DEFAULT_OVERLAP,
    global_tokens: Sequence[int] = (),
    size: str = "benchmark",
    yardsticks: bool = True,
    windows: bool | None = None,
    training: bool = True,
) -> dict[str, Callable[[], nn.Module]]:
    """name -> picklable model factory for everything measured at `length`, every model of `size` (`MODEL_SIZES`).

    Dense over windows is measured only where the document is longer than one window (else it is dense).
    Without `yardsticks`, the families (dense first), global tokens and references only: no floor or variants,
    and dense over windows only with `windows` (default: as `yardsticks`). Without `training` (inference), no variant
    that differs only in what backward keeps (`BACKWARD_SETTINGS`).
    """
    selected = {DENSE: partial(build_model, benchmark_configs(length, [DENSE], size)[DENSE])}
    if yardsticks:
        selected[FLOOR] = partial(build_floor, length, size)
    if (yardsticks if windows is None else windows) and length > WINDOW:
        selected[WINDOWS] = partial(build_windows, length, overlap, size)
    for name, config in benchmark_configs(length, families, size).items():
        selected.setdefault(name, partial(build_model, config))
    for name, (model_type, settings) in VARIANTS.items():
        backward_only = set(settings) - {"global_tokens"} <= BACKWARD_SETTINGS
        if yardsticks and (families is None or model_type in families) and (training or not backward_only):
            selected[name] = partial(build_variant, name, length, size)
    if families is None or GLOBAL_TOKENS_FAMILY in families:
        selected.update({global_tokens_name(count): partial(build_with_global_tokens, length, count, size)
                         for count in global_tokens if count})
    if references:
        selected.update({name: partial(build, length, size=size) for name, (model_type, build) in REFERENCES.items()
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
    overlap: int = DEFAULT_OVERLAP,
    global_tokens: Sequence[int] = (),
    same_process: bool = False,
    size: str = "benchmark",
    dtypes: Sequence[torch.dtype] = (torch.float32,),
    compiled: bool = False,
    batch_sizes: Sequence[int] = (),
) -> dict[int, dict[str, dict[str, Measurement]]]:
    """length -> name -> {"forward": ..., "forward+backward": ...}, with `compiled` also "forward compiled" and
    "forward+backward compiled" (`measure_compiled`: the two take turns in one process), for the families alone
    (no floor, windows or variants: those are the eager grid's yardsticks).

    `dtypes`: the forward runs under autocast to each (one, unless with `batch_sizes`).
    With `batch_sizes`, eval-mode forwards only, one mode per batch size and dtype (`grid_modes`); dense over windows
    is measured compiled too, as the inference yardstick.

    With `rounds` > 1 every model is measured again after all the others, and its best time kept:
    a burst of load from elsewhere then hits one sample of each model rather than all of one.
    """
    options = {"repeats": repeats, "device": device, "cpu_time": cpu_time, "same_process": same_process}
    results: dict[int, dict[str, dict[str, Measurement]]] = {}
    for length in lengths:
        results[length] = {}
        for _ in range(rounds):
            for name, factory in entries(length, families, references, overlap, global_tokens, size,
                                         not compiled, not compiled or bool(batch_sizes), not batch_sizes).items():
                row = {}
                for mode, (backward, batch_size, dtype) in grid_modes(batch_sizes, dtypes).items():
                    if compiled:
                        pair = measure_compiled(factory, length, backward, batch_size=batch_size, dtype=dtype,
                                                **options)
                        row[mode], row[mode + COMPILED] = pair["eager"], pair["compiled"]
                    else:
                        row[mode] = measure(factory, length, backward, batch_size=batch_size, dtype=dtype, **options)
                best = results[length].setdefault(name, row)
                for mode, measurement in row.items():
                    if measurement.seconds < best[mode].seconds:
                        best[mode] = measurement
                print(f"  {length:>6} {name:<34} " + "   ".join(
                    f"{mode.replace('forward', 'fwd').replace('backward', 'bwd')} {m.seconds:8.3f} s"
                    for mode, m in row.items()) + f"   {max(m.peak_mib for m in row.values()):8.0f} MiB", flush=True)
    return results


def _ratio(numerator: float, denominator: float | None) -> str:
    return f"{numerator / denominator:.2f}x" if denominator else "-"


def format_tables(results: dict[int, dict[str, dict[str, Measurement]]]) -> str:
    """One Markdown table per length: seconds, speed-ups over dense sdpa, and ratios to the attention-free floor
    and to dense over windows (model / windows: below 1 the model is the cheaper way to read the document)."""
    lines = []
    for length, rows in results.items():
        dense, floor, windows = rows[DENSE], rows.get(FLOOR), rows.get(WINDOWS)

        def reference(row: dict[str, Measurement] | None, mode: str, field: str = "seconds") -> float | None:
            return getattr(row[mode], field) if row and not row[mode].error else None

        lines += [
            f"### {length} tokens",
            "",
            "| model | fwd s | fwd speed-up | fwd+bwd s | fwd+bwd speed-up | peak MiB | memory vs dense | time vs floor "
            "| fwd / windows | fwd+bwd / windows | memory / windows |",
            "|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        for name, row in rows.items():
            forward, train = row["forward"], row["forward+backward"]
            if train.error or forward.error:
                lines.append(f"| {name} | failed: {(train.error or forward.error).replace('|', '/')} ||||||||||")
                continue
            lines.append(
                f"| {name} | {forward.seconds:.3f} | {_ratio(dense['forward'].seconds, forward.seconds)} "
                f"| {train.seconds:.3f} | {_ratio(dense['forward+backward'].seconds, train.seconds)} "
                f"| {train.peak_mib:.0f} | {_ratio(train.peak_mib, reference(dense, 'forward+backward', 'peak_mib'))} "
                f"| {_ratio(train.seconds, reference(floor, 'forward+backward'))} "
                f"| {_ratio(forward.seconds, reference(windows, 'forward'))} "
                f"| {_ratio(train.seconds, reference(windows, 'forward+backward'))} "
                f"| {_ratio(train.peak_mib, reference(windows, 'forward+backward', 'peak_mib'))} |"
            )
        lines.append("")
    return "\n".join(lines)


def format_compiled_tables(results: dict[int, dict[str, dict[str, Measurement]]]) -> str:
    """One Markdown table per length: each model eager and compiled, gain = eager time / compiled time (above 1:
    compiling pays), and the compiling steps' wall-clock seconds."""
    lines = []
    for length, rows in results.items():
        lines += [
            f"### {length} tokens, eager and compiled",
            "",
            "| model | fwd eager s | fwd compiled s | fwd gain | fwd+bwd eager s | fwd+bwd compiled s | fwd+bwd gain "
            "| compiling s, fwd / fwd+bwd |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for name, row in rows.items():
            error = next((m.error for m in row.values() if m.error), None)
            if error:
                lines.append(f"| {name} | failed: {error.replace('|', '/')} |||||||")
                continue
            cells = []
            for mode in MODES:
                eager, compiled = row[mode], row[mode + COMPILED]
                cells += [f"{eager.seconds:.3f}", f"{compiled.seconds:.3f}", _ratio(eager.seconds, compiled.seconds)]
            compiling = " / ".join(f"{row[mode + COMPILED].compile_seconds:.0f}" for mode in MODES)
            lines.append(f"| {name} | {' | '.join(cells)} | {compiling} |")
        lines.append("")
    return "\n".join(lines)


def format_inference_tables(results: dict[int, dict[str, dict[str, Measurement]]]) -> str:
    """One Markdown table per length: documents per second at each batch size (compiled too, when measured), and
    each model's speed over dense over windows (above 1: faster than sliding a 512-token model over the document)."""
    lines = []
    for length, rows in results.items():
        modes = list(next(iter(rows.values())))
        windows = rows.get(WINDOWS)
        lines += [f"### {length} tokens, inference (eval-mode forward)", "",
                  "| model | " + " | ".join(f"{mode.removeprefix('inference, ')} docs/s | vs windows" for mode in modes) + " |",
                  "|---|" + "---|---|" * len(modes)]
        for name, row in rows.items():
            cells = []
            for mode in modes:  # a mode that failed (one dtype, say) leaves the others' numbers
                if row[mode].error:
                    cells += [f"failed: {row[mode].error.replace('|', '/')}", "-"]
                    continue
                batch = int(re.search(r"batch (\d+)", mode)[1])
                base = windows[mode] if windows and not windows[mode].error else None
                cells += [f"{batch / row[mode].seconds:.2f}", _ratio(base.seconds, row[mode].seconds) if base else "-"]
            lines.append(f"| {name} | {' | '.join(cells)} |")
        lines.append("")
    return "\n".join(lines)


def window_overlap(text: str) -> int:
    value = non_negative_int(text)
    if value >= WINDOW:
        raise argparse.ArgumentTypeError(f"must be below the window ({WINDOW} tokens), got {value}")
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--lengths", type=positive_int, nargs="+", default=list(DEFAULT_LENGTHS),
                        help=f"input lengths in tokens, one table each (default {' '.join(map(str, DEFAULT_LENGTHS))})")
    parser.add_argument("--families", type=family, nargs="*",
                        help="model types (default: every registered family); dense, the floor and dense over windows "
                             "are always measured")
    add_option(parser, "no_references", action="store_true", help="skip transformers' own long-input models")
    parser.add_argument("--repeats", type=positive_int, default=2,
                        help="timed repetitions per measurement, best kept (more while they add up to under 2 s)")
    parser.add_argument("--rounds", type=positive_int, default=1,
                        help="measure every model this many times, interleaved, best kept (default 1)")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cuda" if torch.cuda.is_available() else "cpu",
                        help="where to run (default: cuda when available)")
    add_option(parser, "cpu_time", action="store_true",
               help="CPU seconds of each step on one thread instead of wall-clock (for a shared machine)")
    add_option(parser, "window_overlap", type=window_overlap, default=DEFAULT_OVERLAP,
               help=f"tokens shared by consecutive {WINDOW}-token windows of the dense-over-windows row "
                    f"(default {DEFAULT_OVERLAP}, transformers' QA doc_stride)")
    add_option(parser, "global_tokens", type=non_negative_int, nargs="*", default=[16],
               help=f"also measure {GLOBAL_TOKENS_FAMILY} with global attention on this many leading tokens "
                    "(default 16; none: skip)")
    parser.add_argument("--compile", action="store_true",
                        help="run each family (and --global_tokens, references) eager and through torch.compile, their "
                             "timed steps taking turns in one process, compilation timed apart; without the floor, "
                             "dense over windows and variants")
    parser.add_argument("--inference", action="store_true",
                        help="eval-mode forwards at each --batch_sizes instead of the training grid: documents per "
                             "second, and each model against dense over windows")
    add_option(parser, "batch_sizes", type=positive_int, nargs="+", default=list(INFERENCE_BATCH_SIZES),
               help=f"with --inference: documents per forward (default {' '.join(map(str, INFERENCE_BATCH_SIZES))})")
    parser.add_argument("--dtype", choices=tuple(DTYPES), nargs="+", default=["float32"],
                        help="run the forward under autocast to this type (default float32: no autocast; float16 "
                             "is for CUDA); with --inference several, side by side")
    add_option(parser, "same_process", action="store_true",
               help="measure every model in this process instead of a fresh one each (CPU; for a loaded machine, "
                    "where starting a process takes longer than measuring)")
    add_option(parser, "model_size", choices=sorted(MODEL_SIZES), default="benchmark",
               help="every model's size: benchmark (hidden 256, 4 layers) or minilm (all-MiniLM-L6-v2's: hidden 384, "
                    "6 layers, 12 heads) (default benchmark)")
    parser.add_argument("--output", help="also write the raw measurements to this JSON file")
    parser.add_argument("--markdown", help="also write the legend and the tables to this Markdown file (docs/measured/)")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    size = ", ".join(f"{key}={value}" for key, value in MODEL_SIZES[args.model_size].items())
    clock = "CPU seconds on one thread" if args.cpu_time else "wall-clock seconds"
    windows = f"windows: {WINDOWS}, overlap {args.window_overlap}, all of one document's windows as one batch."
    if args.inference:
        legend = (f"docs/s = batch / seconds of one forward; vs windows = windows' time / model's time; {windows}"
                  + (" Each mode eager and compiled (' compiled')." if args.compile else ""))
    else:
        legend = ("gain = eager time / compiled time (the compiled steps' best; compiling timed apart, wall-clock)."
                  if args.compile else f"speed-up = dense sdpa time / model time; {windows}")
    batches = args.batch_sizes if args.inference else ()
    if len(args.dtype) > 1 and not args.inference:
        raise ValueError("several --dtype values are measured side by side with --inference only")
    header = (f"Benchmark grid on {args.device}, batch {' / '.join(map(str, batches or [1]))}, {size}, {' / '.join(args.dtype)}, "
              f"{clock}. {legend}")
    print(header, flush=True)
    results = run_grid(args.lengths, args.families, not args.no_references, args.repeats, args.device, args.rounds,
                       args.cpu_time, args.window_overlap, args.global_tokens, args.same_process, args.model_size,
                       [DTYPES[name] for name in args.dtype], args.compile, batches)
    if args.inference:
        tables = format_inference_tables(results)
    else:
        tables = format_compiled_tables(results) if args.compile else format_tables(results)
    print(tables)
    if args.markdown:
        Path(args.markdown).write_text(f"{header}\n\n{tables}")
    if args.output:
        with open(args.output, "w") as file:
            json.dump({length: {name: {mode: vars(m) for mode, m in row.items()} for name, row in rows.items()}
                       for length, rows in results.items()}, file, indent=1)
    return 0
