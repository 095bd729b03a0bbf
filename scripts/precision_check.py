"""Benchmark (not a unit test): every family pretrains N MLM steps in fp32 and under bf16, same data and seed.

Both runs go through the workflow's own `pretrain` stage (the Trainer; `bf16=True` is CPU autocast on
CPU, CUDA autocast on a GPU). Target: every bf16 loss finite and the bf16 loss curve within 2% of fp32's
at every logged step. Prints one row per family; exit status 1 when a family misses the target.

    python scripts/precision_check.py --steps 50 [--device cuda] [--families hfe_roberta ...] [--markdown FILE]
"""

import argparse
import math
import sys
import tempfile
from pathlib import Path

import torch
from transformers import TrainerCallback, TrainingArguments

import hf_efficient
from hf_efficient.training import PretrainArguments, pretrain

LENGTH = 256
# Settings under which each family's sparse pattern is active at 256 tokens.
FAMILY_SETTINGS = {
    "hfe_longformer": {"attention_window": 32},
    "hfe_bigbird": {"block_size": 16, "num_random_blocks": 1},
    "hfe_blockbert": {"num_blocks": 4},
    "hfe_linformer": {"projected_length": 32},
    "hfe_reformer": {"lsh_chunk_length": 32, "local_chunk_length": 32, "num_hashes": 2,
                     "full_attention_max_length": 0},
}


class Losses(TrainerCallback):
    """The logged training losses, and whether the model's forward really ran under bf16 autocast."""

    def __init__(self):
        self.losses: list[float] = []
        self.autocast: set[bool] = set()

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        device = "cuda" if next(model.parameters()).is_cuda else "cpu"
        # On a submodule: accelerate enters autocast inside the patched `model.forward`, after the model's own hooks.
        model.base_model.encoder.register_forward_pre_hook(lambda module, inputs: self.autocast.add(
            torch.is_autocast_enabled(device) and torch.get_autocast_dtype(device) == torch.bfloat16))

    def on_log(self, args, state, control, logs=None, **kwargs):
        if logs and "loss" in logs:
            self.losses.append(float(logs["loss"]))


def train(model_type: str, bf16: bool, steps: int, folder: Path, tokenizer: Path | None, device: str) -> Losses:
    args = PretrainArguments(model_type=model_type, size="tiny", vocab_size=400, max_length=LENGTH,
                             max_train_documents=1500, held_out_fraction=0.05, max_held_out_sequences=4,
                             config_overrides=FAMILY_SETTINGS.get(model_type, {}),
                             tokenizer_name=str(tokenizer) if tokenizer else None)
    training = TrainingArguments(output_dir=str(folder), max_steps=steps, per_device_train_batch_size=4,
                                 learning_rate=1e-3, logging_steps=1, seed=7, data_seed=7, bf16=bf16,
                                 use_cpu=device == "cpu", save_strategy="no", report_to="none", disable_tqdm=True)
    losses = Losses()
    pretrain(args, training, callbacks=[losses])
    assert losses.autocast == {bf16}, f"{model_type}: bf16 autocast {losses.autocast}, expected {bf16}"
    return losses


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--families", nargs="*", default=sorted(hf_efficient.FAMILIES))
    parser.add_argument("--device", default="cpu", help="cpu or cuda")
    parser.add_argument("--tolerance", type=float, default=0.02, help="largest relative gap at any logged step")
    parser.add_argument("--markdown", help="also write the table to this Markdown file (docs/measured/)")
    args = parser.parse_args()
    rows, failed = [], False
    with tempfile.TemporaryDirectory() as work:
        for model_type in args.families:
            fp32 = train(model_type, False, args.steps, Path(work) / f"{model_type}-fp32", None, args.device).losses
            tokenizer = Path(work) / f"{model_type}-fp32"  # the same tokenizer for the bf16 run
            bf16 = train(model_type, True, args.steps, Path(work) / f"{model_type}-bf16", tokenizer, args.device).losses
            gaps = [abs(b - f) / f for b, f in zip(bf16, fp32, strict=True)]
            ok = len(bf16) == args.steps and all(math.isfinite(x) for x in bf16) and max(gaps) <= args.tolerance
            failed |= not ok
            rows.append(f"| {model_type} | {fp32[0]:.3f} -> {fp32[-1]:.3f} | {bf16[0]:.3f} -> {bf16[-1]:.3f} | "
                        f"{max(gaps):.3%} | {sum(gaps) / len(gaps):.3%} | {'yes' if ok else 'NO'} |")
    table = "\n".join([
        f"{args.steps} MLM steps, batch 4 x {LENGTH} tokens, tiny size, {args.device}.", "",
        "| family | fp32 loss (first -> last) | bf16 loss (first -> last) | largest step gap | mean gap | "
        f"within {args.tolerance:.0%} |", "|---|---|---|---|---|---|", *rows]) + "\n"
    print(table, end="")
    if args.markdown:
        Path(args.markdown).write_text(table)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
