#!/usr/bin/env python3
"""Peak training memory of a classifier, fully fine-tuned or with `--peft` adapters (docs/peft.md).

Peak memory is counted in live tensor bytes, not RSS (which on CPU mostly shows the allocator's caching):
parameters + gradients + AdamW's two moments (of the trainable parameters) + the activations autograd
saves for backward in one step (each storage once, recorded by `saved_tensors_hooks`). That is the
peak at the start of backward, less backward's short-lived temporaries.

    python scripts/peft_memory.py CHECKPOINT [--peft lora|ia3 ...] [--max_length 128] [--batch 8] [--markdown FILE]

Each run measures one checkpoint and method and prints its table row; `--markdown` appends the row to a
table file (writing the header when the file is new), so a loop of runs builds docs/measured/peft_memory.md.

Time per step comes from the stage's own runs (train_runtime / global_step), not from here.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch
from transformers import AutoConfig, AutoModelForSequenceClassification, AutoTokenizer, HfArgumentParser

import hf_efficient  # noqa: F401  (registers the families)
from hf_efficient.data import load_kernel_docs
from hf_efficient.training.peft_recipe import PeftArguments, trainable_summary, wrap


def saved_activation_bytes(model: torch.nn.Module, step) -> int:
    """Bytes of the distinct storages, other than parameters, that autograd saves for backward in `step()`."""
    parameters = {p.untyped_storage().data_ptr() for p in model.parameters()}
    storages: dict[int, int] = {}

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        storage = tensor.untyped_storage()
        if storage.data_ptr() not in parameters:
            storages[storage.data_ptr()] = storage.nbytes()
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        loss = step()
    loss.backward()
    return sum(storages.values())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checkpoint")
    parser.add_argument("--max_length", type=int, default=128)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--markdown", type=Path, help="append the row to this Markdown table (its header first when new)")
    parser._add_container_actions(HfArgumentParser([PeftArguments], add_help=False))
    args = parser.parse_args()
    peft_args = PeftArguments(**{name: getattr(args, name) for name in PeftArguments.__dataclass_fields__})
    torch.manual_seed(0)
    labels = load_kernel_docs()["train"].features["label"].num_classes
    model = AutoModelForSequenceClassification.from_pretrained(args.checkpoint, num_labels=labels)
    model = wrap(model, peft_args, "ForSequenceClassification").train()
    tokenizer = AutoTokenizer.from_pretrained(args.checkpoint)
    texts = load_kernel_docs()["train"][: args.batch]
    batch = tokenizer(texts["text"], truncation=True, max_length=args.max_length, padding="max_length",
                      return_tensors="pt")
    batch["labels"] = torch.tensor(texts["label"])
    trainable = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(trainable, lr=1e-4)
    activations = saved_activation_bytes(model, lambda: model(**batch).loss)
    optimizer.step()  # creates AdamW's moments
    counts = trainable_summary(model)
    parameter_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    state_bytes = sum(t.numel() * t.element_size() for state in optimizer.state.values() for t in state.values()
                      if torch.is_tensor(t) and t.dim() > 0)
    gradient_bytes = sum(p.numel() * p.element_size() for p in trainable)
    peak = parameter_bytes + gradient_bytes + state_bytes + activations
    config = AutoConfig.from_pretrained(args.checkpoint)
    method = {None: "full", "lora": "LoRA", "ia3": "IA3"}.get(peft_args.peft, peft_args.peft)
    if peft_args.peft_target_modules:
        method += f" on `{' '.join(peft_args.peft_target_modules)}`"
    row = (f"| {config.model_type} | {method} | {counts['trainable_parameters']:,} | "
           f"{100 * counts['trainable_parameters'] / counts['total_parameters']:.2f}% | {peak / 2**20:.1f} | "
           f"{activations / 2**20:.1f} | {(gradient_bytes + state_bytes) / 2**20:.1f} |")
    print(row)
    if args.markdown:
        header = "" if args.markdown.exists() else (
            f"Peak live tensor memory of one training step, batch {args.batch} x {args.max_length} tokens "
            "(parameters, gradients, AdamW moments, activations saved for backward); trainable = the adapters "
            "and the head's trained copy.\n\n| family | method | trainable | % | peak MiB | activations MiB | "
            "gradients + AdamW MiB |\n|---|---|---|---|---|---|---|\n")
        with args.markdown.open("a") as file:
            file.write(header + row + "\n")


if __name__ == "__main__":
    main()
