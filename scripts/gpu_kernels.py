#!/usr/bin/env python3
"""The fused attention kernels on a GPU: correctness against the reference paths, then speed and memory (issue 50).

    python scripts/gpu_kernels.py check --out DIR            # every family's fused path against its reference path
    python scripts/gpu_kernels.py speed --size roberta-base --out DIR

`check`: every block-sparse family (Longformer-style with per-head dilation and global tokens, BigBird-style,
BlockBERT) and dense flex, on a padded batch: the fused path (the default on CUDA) against the reference path
(`attn_implementation="eager"`: the blocked kernels, never fused) in fp32, forward and the gradient of every parameter,
and the fused path under bf16 autocast against the fp32 reference (relative error of the outputs, and the largest over
the parameters' gradients). Writes DIR/gpu_kernels_check.md; exits 1 when an error is past its tolerance. On CPU
(`--device cpu`, a dry run) forward only: torch has no FlexAttention backward there.

`speed`: in one process, bf16 autocast, a training step (forward + backward, batch 1) and inference (eval, no
gradients) at batch 1 and 8, at each length, for every family on its default path for the device, Longformer-style
with 16 global tokens, dense sdpa over the whole input (flash), dense over 512-token windows (overlap 128, one batch
of windows per document), transformers' LongformerModel and BigBirdModel, and ModernBertModel (window 256, a global
layer every third, flash-attn where installed, else flex_attention) where transformers has it. Tokens/s (CUDA
synchronised wall time, best of --repeats after a warm-up that compiles) and peak memory (allocated during the
step); what does not fit is reported as such. The table file DIR/gpu_kernels_SIZE.md is rewritten after every
measurement, so a run cut off by its time limit leaves what it measured. `--smoke`: tiny shapes, for a dry run on CPU.
"""

from __future__ import annotations

import argparse
import math
import time
from functools import partial
from pathlib import Path

import torch
import transformers
from torch import nn

import hf_efficient  # noqa: F401  (registers the families)
from hf_efficient.bench.grid import DEFAULT_OVERLAP, WINDOW, Windowed, WithGlobalTokens
from hf_efficient.bench.sizes import MINILM_SIZE, benchmark_configs, build_model

SIZES = {
    "minilm": MINILM_SIZE,
    "roberta-base": {"hidden_size": 768, "num_hidden_layers": 12, "num_attention_heads": 12, "intermediate_size": 3072,
                     "vocab_size": 50265},
    "smoke": {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 128,
              "vocab_size": 1000},
}
FAMILIES = ("hfe_longformer", "hfe_bigbird", "hfe_blockbert")
DENSE = "hfe_roberta (sdpa, whole input)"
WINDOWS = f"hfe_roberta over {WINDOW}-token windows"
GLOBAL = "hfe_longformer, 16 global tokens"
MODES = ("training, batch 1", "inference, batch 1", "inference, batch 8")


# ---- check ---------------------------------------------------------------------------------------------------------

CHECK_SETTINGS = {
    "hfe_longformer": {"attention_window": [256, 128], "attention_dilation": [1, 2, 1, 1]},
    "hfe_bigbird": {"block_size": 64, "num_random_blocks": 3},
    "hfe_blockbert": {"num_blocks": 4},
    "hfe_roberta": {},
}


def relative(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a.float() - b.float()).norm() / b.float().norm().clamp(min=1e-12)).item()


def run_check(model, ids, mask, extra, implementation: str, dtype: torch.dtype, gradients: bool):
    """Hidden states of the real tokens, and every parameter's gradient of their mean square (with `gradients`)."""
    model.config._attn_implementation = implementation
    model.zero_grad(set_to_none=True)
    with torch.autocast(ids.device.type, dtype=dtype, enabled=dtype != torch.float32), torch.set_grad_enabled(gradients):
        hidden = model(ids, attention_mask=mask, **extra).last_hidden_state.float() * mask[..., None]
    paths = sorted({layer.attention.self.plan(ids.shape[1]).path for layer in model.encoder.layer})
    if not gradients:
        return hidden.detach(), {}, paths
    hidden.pow(2).mean().backward()
    grads = {name: p.grad.detach().clone() for name, p in model.named_parameters() if p.grad is not None}
    return hidden.detach(), grads, paths


def check(args) -> int:
    device = torch.device(args.device)
    gradients = device.type == "cuda"
    length = 512 if args.smoke else 2048
    lines = [f"Fused path (default on CUDA) against the reference path (attn_implementation=\"eager\": blocked kernels), "
             f"{args.device}, hidden 256, 2 layers, 4 heads, batch 2 of {length} tokens (the second padded to "
             f"{length * 5 // 8}), torch {torch.__version__}. Relative error: ||fused - reference|| / ||reference||; "
             "gradients: the largest over the parameters" + ("" if gradients else " (not on CPU: forward only)") + "; "
             "compiled model: the fused path inside torch.compile(model), inference (Longformer-style).",
             "", "| family | fused paths | fp32 output | fp32 gradients | bf16 output | bf16 gradients | "
             "compiled model, fp32 output | result |", "|---|---|---|---|---|---|---|---|"]
    failed = False
    for model_type, settings in CHECK_SETTINGS.items():
        torch.manual_seed(0)
        config = hf_efficient.FAMILIES[model_type].config_class(
            hidden_size=256, num_hidden_layers=2, num_attention_heads=4, intermediate_size=512, vocab_size=1000,
            max_position_embeddings=length + 2, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, **settings)
        model = build_model(config).to(device)
        ids = torch.randint(5, 1000, (2, length), device=device)
        mask = torch.ones(2, length, dtype=torch.long, device=device)
        mask[1, length * 5 // 8:] = 0
        extra = {}
        if model_type == "hfe_longformer":
            extra["global_attention_mask"] = torch.zeros_like(mask)
            extra["global_attention_mask"][:, [0, 1, 300]] = 1
        try:
            reference, reference_grads, _ = run_check(model, ids, mask, extra, "eager", torch.float32, gradients)
            fused, fused_grads, paths = run_check(model, ids, mask, extra, "flex_attention", torch.float32, gradients)
            errors = [relative(fused, reference), max((relative(fused_grads[n], g) for n, g in reference_grads.items()
                                                       if g.norm() > 0), default=float("nan"))]
            if device.type == "cuda":
                low, low_grads, _ = run_check(model, ids, mask, extra, "flex_attention", torch.bfloat16, gradients)
                errors += [relative(low, reference), max(relative(low_grads[n], g) for n, g in reference_grads.items()
                                                         if g.norm() > 0)]
            else:
                errors += [float("nan"), float("nan")]
            # The fused path inside a compiled model (inference; one family, for the step's time): the model's graph
            # takes the kernel in.
            errors.append(float("nan"))
            if model_type == "hfe_longformer":
                model.config._attn_implementation = "flex_attention"
                with torch.no_grad():
                    compiled = torch.compile(model)(ids, attention_mask=mask, **extra).last_hidden_state.float()
                errors[-1] = relative(compiled * mask[..., None], reference)
            tolerances = [1e-4, 1e-3, 2e-2, 5e-2, 1e-4]
            ok = all(math.isnan(e) or e <= t for e, t in zip(errors, tolerances, strict=True))
            result = "ok" if ok else f"PAST TOLERANCE ({', '.join(map(str, tolerances))})"
            cells = [", ".join(paths), *("-" if math.isnan(e) else f"{e:.1e}" for e in errors), result]
        except Exception as error:  # reported in the table, and a failure
            ok, cells = False, ["-"] * 6 + [f"{type(error).__name__}: {error}"[:200].replace("|", "/")]
        failed |= not ok
        lines.append(f"| {model_type} | {' | '.join(cells)} |")
        print(lines[-1], flush=True)
        Path(args.out, "gpu_kernels_check.md").write_text("\n".join(lines) + "\n")  # what a time limit leaves
    return 1 if failed else 0


# ---- speed ---------------------------------------------------------------------------------------------------------

def reference_config(dims: dict, length: int) -> dict:
    return {**dims, "max_position_embeddings": length + 2, "hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0}


def modernbert_implementation(device: str) -> str:
    if device != "cuda":
        return "sdpa"
    try:
        import flash_attn  # noqa: F401
        return "flash_attention_2"
    except ImportError:
        return "flex_attention"


def builders(dims: dict, length: int, device: str) -> dict:
    """name -> a function building the model (on the CPU) for inputs of `length` tokens."""
    def family(model_type: str, global_tokens: int = 0) -> nn.Module:
        model = build_model(benchmark_configs(length, [model_type], **dims)[model_type])
        return WithGlobalTokens(model, global_tokens) if global_tokens else model

    models = {
        DENSE: partial(family, "hfe_roberta"),
        WINDOWS: lambda: Windowed(build_model(benchmark_configs(min(length, WINDOW), ["hfe_roberta"], **dims)["hfe_roberta"]),
                                  WINDOW, DEFAULT_OVERLAP),
        **{name: partial(family, name) for name in FAMILIES},
        GLOBAL: partial(family, "hfe_longformer", 16),
        "transformers Longformer": lambda: transformers.LongformerModel(
            transformers.LongformerConfig(**reference_config(dims, length), attention_window=256), add_pooling_layer=False),
        "transformers BigBird": lambda: transformers.BigBirdModel(transformers.BigBirdConfig(
            **reference_config(dims, length), attention_type="block_sparse", block_size=64, num_random_blocks=3),
            add_pooling_layer=False),
    }
    if hasattr(transformers, "ModernBertModel"):
        implementation = modernbert_implementation(device)
        models[f"ModernBertModel (window 256, {implementation})"] = lambda: transformers.ModernBertModel(
            transformers.ModernBertConfig(**{**dims, "max_position_embeddings": length}, local_attention=256,
                                          pad_token_id=1, bos_token_id=0, eos_token_id=2, cls_token_id=0,
                                          sep_token_id=2, attn_implementation=implementation))
    return models


def paths_of(model: nn.Module, length: int, training: bool) -> str:
    """The attention paths an hf_efficient model takes for this call ('-' for other models)."""
    encoder = getattr(getattr(model, "model", model), "encoder", None)
    if encoder is None or not hasattr(encoder, "plans"):
        return "-"
    with torch.set_grad_enabled(training):
        return "/".join(sorted({plan.path for plan in encoder.plans(length)}))


def one_step(model: nn.Module, ids: torch.Tensor, training: bool) -> None:
    # bf16 autocast on CUDA; fp32 on CPU (a dry run), where transformers' BigBirdModel fails under bf16 autocast
    # (scatter of mixed dtypes)
    cuda = ids.device.type == "cuda"
    with torch.autocast(ids.device.type, dtype=torch.bfloat16, enabled=cuda), torch.set_grad_enabled(training):
        output = model(ids)
    if training:
        output.last_hidden_state.float().pow(2).mean().backward()
        model.zero_grad(set_to_none=True)


def time_step(model: nn.Module, ids: torch.Tensor, training: bool, repeats: int, device: str) -> tuple[float, float, float]:
    """(best seconds, first step's seconds (compilation included), peak MiB allocated during a step)."""
    synchronize = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    start = time.perf_counter()
    one_step(model, ids, training)
    synchronize()
    first = time.perf_counter() - start
    one_step(model, ids, training)
    if device == "cuda":
        synchronize()
        base = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        one_step(model, ids, training)
        synchronize()
        best = min(best, time.perf_counter() - start)
    peak = (torch.cuda.max_memory_allocated() - base) / 2**20 if device == "cuda" else float("nan")
    return best, first, peak


def ratio(base: dict | None, row: dict) -> str:
    """`base`'s step time over `row`'s ('-' where `base` was not measured)."""
    return f"{base['seconds'] / row['seconds']:.2f}x" if base and "error" not in base else "-"


def render(args, results: dict) -> str:
    dims = SIZES[args.size]
    lines = [f"GPU kernels, {args.device}, size {args.size} ({', '.join(f'{k}={v}' for k, v in dims.items())}), "
             f"{'bf16 autocast' if args.device == 'cuda' else 'fp32'}, torch {torch.__version__}, transformers {transformers.__version__}. tok/s = batch x length / "
             f"seconds of one step (best of {args.repeats}, synchronised wall time); vs dense / vs windows = their "
             f"step time / the model's; peak = MiB allocated during the step above what the model holds; first = the "
             "first step's seconds (compilation included). Training: forward + backward at batch 1; inference: eval, no "
             f"gradients. Written by `python scripts/gpu_kernels.py speed --size {args.size}`.", ""]
    for length, modes in results.items():
        for mode, rows in modes.items():
            lines += [f"### {length} tokens, {mode}", "",
                      "| model | path | tok/s | vs dense | vs windows | peak MiB | first s |", "|---|---|---|---|---|---|---|"]
            dense, windows = rows.get(DENSE), rows.get(WINDOWS)
            for name, row in rows.items():
                if "error" in row:
                    lines.append(f"| {name} | {row['path']} | {row['error']} | - | - | - | - |")
                    continue
                lines.append(f"| {name} | {row['path']} | {row['tokens'] / row['seconds']:,.0f} | {ratio(dense, row)} | "
                             f"{ratio(windows, row)} | {row['peak']:,.0f} | {row['first']:.1f} |")
            lines.append("")
    return "\n".join(lines)


def speed(args) -> int:
    device = args.device
    torch._dynamo.config.recompile_limit = 64  # every family's mask code, grad modes and shapes in one process
    output = Path(args.out, f"gpu_kernels_{args.size}.md")
    results: dict = {}
    settings = {"training, batch 1": (True, 1), "inference, batch 1": (False, 1), "inference, batch 8": (False, 8)}
    deadline = time.monotonic() + args.budget
    for length in args.lengths:
        for name, build in builders(SIZES[args.size], length, device).items():
            model = None
            for mode in args.modes:
                training, batch = settings[mode]
                rows = results.setdefault(length, {}).setdefault(mode, {})
                try:
                    if time.monotonic() > deadline:
                        raise TimeoutError(f"not measured: past the {args.budget:.0f} s budget")
                    if model is None:
                        torch.manual_seed(0)
                        with torch.device(device):
                            model = build()
                        if args.attn_implementation and hasattr(model.config, "attention_type"):  # hf_efficient's
                            model.config._attn_implementation = args.attn_implementation
                    model.train(training)
                    path = paths_of(model, length, training)
                    ids = torch.randint(5, SIZES[args.size]["vocab_size"], (batch, length), device=device)
                    seconds, first, peak = time_step(model, ids, training, args.repeats, device)
                    rows[name] = {"path": path, "seconds": seconds, "first": first, "peak": peak, "tokens": batch * length}
                except torch.cuda.OutOfMemoryError:
                    rows[name] = {"path": "-", "error": "out of memory"}
                except TimeoutError as error:
                    rows[name] = {"path": "-", "error": str(error)}
                except Exception as error:  # reported in the table rather than ending the run
                    rows[name] = {"path": "-", "error": f"{type(error).__name__}: {error}"[:160].replace("|", "/")}
                if device == "cuda":
                    torch.cuda.empty_cache()
                output.write_text(render(args, results))
                print(length, mode, name, rows[name], flush=True)
            del model
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("part", choices=("check", "speed"))
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--size", choices=sorted(SIZES), default="roberta-base")
    parser.add_argument("--lengths", type=int, nargs="+", default=[4096, 8192, 16384, 32768])
    parser.add_argument("--modes", nargs="+", choices=MODES, default=list(MODES))
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--budget", type=float, default=float("inf"),
                        help="seconds: measurements not started by then are listed as not measured (the run ends)")
    parser.add_argument("--attn_implementation", choices=("eager", "sdpa", "flex_attention"),
                        help="force this path on the hf_efficient models (default: the default path for the device)")
    parser.add_argument("--out", default=".", help="folder for the markdown files")
    parser.add_argument("--smoke", action="store_true",
                        help="a dry run at tiny shapes (the smoke size, 1024 tokens, one repeat; check at 512 tokens)")
    args = parser.parse_args()
    if args.smoke:
        args.size, args.lengths, args.repeats = "smoke", [1024], 1
    Path(args.out).mkdir(parents=True, exist_ok=True)
    return check(args) if args.part == "check" else speed(args)


if __name__ == "__main__":
    raise SystemExit(main())
