"""Fit a stage's training batch into the memory there is, before the first step (`--auto_fit_batch`, on by default).

A CPU run that outgrows memory is killed by the kernel (SIGKILL: nothing saved, nothing to catch), and transformers'
`auto_find_batch_size` reacts to CUDA out-of-memory errors only and halves the effective batch. So `fit_batch`
measures one training step at batch 1 on the longest training row, adds the gradients and AdamW's two states of
the trainable parameters, and when the requested per-device batch would not fit in `USABLE` of the free memory
trains with a smaller one and more gradient accumulation, their product unchanged; when not even one row fits it
stops with one line naming what to change.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import datasets
import numpy as np
import psutil
import pyarrow as pa
import pyarrow.compute as pc
import torch
from transformers import Trainer

from ..tensor_memory import PeakAllocated

# What a step may use of the free memory; the rest is for what the live-tensor count does not see: the allocator's
# fragmentation and caching, kernels' scratch buffers on CPU, the evaluation between steps. The default runs it was
# checked on, and the batches it chose: docs/measured/memory_fit.md (`scripts/memory_fit_runs.py`, issue 24).
USABLE = 0.8
CGROUP_FILES = (  # limit, usage, and the reclaimable page cache in memory.stat: cgroup v2, then v1
    ("memory.max", "memory.current", "inactive_file"),
    ("memory/memory.limit_in_bytes", "memory/memory.usage_in_bytes", "total_inactive_file"),
)


@dataclasses.dataclass
class Estimate:
    """Bytes a training step allocates beyond what is allocated before training: `per_sequence`, the measured peak of
    a step at batch 1 of `tokens` tokens (it holds some of the gradients, so batches of more err high), and `fixed`,
    the gradients and AdamW's two states of the trainable parameters, alive across steps."""

    per_sequence: int
    fixed: int
    tokens: int

    def needed(self, batch: int) -> int:
        return self.fixed + batch * self.per_sequence


def longest_row(dataset: datasets.Dataset) -> int:
    """The index of the row whose batch of one is largest: the most tokens (multiple choice: choices x the longest)."""
    column = dataset.with_format("arrow")["input_ids"].combine_chunks()  # after select() and shuffle()
    lengths = pc.list_value_length(column).to_numpy(zero_copy_only=False)
    if pa.types.is_list(column.type.value_type):  # a row of choices, padded to its longest
        longest = np.zeros(len(column), dtype=np.int64)
        np.maximum.at(longest, pc.list_parent_indices(column).to_numpy(),
                      pc.list_value_length(pc.list_flatten(column)).to_numpy(zero_copy_only=False))
        lengths = lengths * longest
    return int(np.argmax(lengths))


def measure(trainer: Trainer) -> Estimate:
    """One forward and backward of the trainer's own loss (a distillation's teacher pass included) on the longest
    training row, under the run's autocast; the random streams and the gradients are left as they were."""
    model, args = trainer.model, trainer.args
    rows = trainer._remove_unused_columns(trainer.train_dataset, description="training")
    inputs = trainer._prepare_inputs(trainer.data_collator([rows[longest_row(trainer.train_dataset)]]))
    if args.activation_checkpointing:  # the Trainer switches it on when training starts; the step must see it
        options = dict(args.activation_checkpointing_kwargs or {})
        every, offload = options.pop("every_n_layers", 1), options.pop("offload", False)
        model.activation_checkpointing_enable(options or None, every, offload)
    training = model.training
    model.train()
    devices = [args.device] if args.device.type == "cuda" else []
    with torch.random.fork_rng(devices=devices), PeakAllocated(args.device) as memory:
        with trainer.compute_loss_context_manager(), trainer.accelerator.autocast():
            loss = trainer.compute_loss(model, inputs)
        loss.backward()
        del loss
    model.zero_grad(set_to_none=True)
    model.train(training)
    trainable = sum(p.numel() * p.element_size() for p in model.parameters() if p.requires_grad)
    return Estimate(memory.peak, 3 * trainable, inputs["input_ids"].shape[-1])


def available_bytes(device: torch.device) -> int:
    """What this process may still allocate. CUDA: the device's free memory and PyTorch's cache. CPU: what the system
    can give without swapping (psutil's `available`) or, when lower, what this process's cgroup still allows, shared
    by this machine's processes of the run."""
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        return free + torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device)
    free = min(psutil.virtual_memory().available, cgroup_free())
    return free // int(os.environ.get("LOCAL_WORLD_SIZE", "1"))


def cgroup_free() -> float:
    """The cgroup's limit less its usage, the page cache it can reclaim not counted as used; inf without a limit."""
    root = Path("/sys/fs/cgroup")
    for limit, usage, cache in CGROUP_FILES:
        try:
            cap = (root / limit).read_text().strip()
            stat = dict(line.split() for line in ((root / limit).parent / "memory.stat").read_text().splitlines())
            used = int((root / usage).read_text()) - int(stat.get(cache, 0))
        except (OSError, ValueError):
            continue
        return float("inf") if cap == "max" else int(cap) - used
    return float("inf")


def size(nbytes: float) -> str:
    return f"{nbytes / 2**30:.1f} GiB" if nbytes >= 2**30 else f"{nbytes / 2**20:.1f} MiB"


def largest_batch(estimate: Estimate, budget: float, requested: int, effective: int) -> int:
    """The largest per-device batch up to `requested` that divides `effective` and fits in `budget` bytes; 0: none."""
    return next((batch for batch in range(requested, 0, -1)
                 if effective % batch == 0 and estimate.needed(batch) <= budget), 0)


def fit_batch(trainer: Trainer) -> None:
    """Lower `trainer`'s per-device batch and raise its gradient accumulation in the same proportion (in place), when
    the batch would not fit in memory; a ValueError naming what to change when not even one row fits.

    Every process of a distributed run trains with the smallest batch any of them needs. Sharded runs (DeepSpeed,
    FSDP) are left alone: their per-process states are not the parameters'.
    """
    args = trainer.args
    if trainer.is_deepspeed_enabled or trainer.is_fsdp_enabled:
        return
    estimate = measure(trainer)
    free = available_bytes(args.device)
    requested, accumulation = args.per_device_train_batch_size, args.gradient_accumulation_steps
    batch = largest_batch(estimate, USABLE * free, requested, requested * accumulation)
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        agreed = torch.tensor(batch, device=args.device)
        torch.distributed.all_reduce(agreed, op=torch.distributed.ReduceOp.MIN)
        batch = int(agreed)
    if batch == requested:
        return

    def needs(sequences: int) -> str:
        return (f"{sequences} sequence{'s' * (sequences > 1)} of {estimate.tokens} tokens need"
                f"{'s' * (sequences == 1)} ~{size(estimate.needed(sequences))} to train, more than {USABLE:.0%} of "
                f"the {size(free)} free")

    if batch == 0:
        room = USABLE * free - estimate.fixed
        fits = int(estimate.tokens * room / estimate.per_sequence) // 64 * 64  # memory grows at least with the length
        ways = [] if args.activation_checkpointing or room <= 0 else ["pass --activation_checkpointing"]
        ways.append(f"pass --max_length {fits} or less" if fits >= 64 else "start from a smaller model")
        raise ValueError(f"{needs(1)}: {' or '.join(ways)} (--auto_fit_batch false trains anyway)")
    args.per_device_train_batch_size = batch
    args.gradient_accumulation_steps = requested * accumulation // batch
    trainer._train_batch_size = args.train_batch_size  # what the Trainer's dataloader reads
    if trainer.is_world_process_zero():
        print(f"memory: {needs(requested)}: training with per_device_train_batch_size {batch} x "
              f"gradient_accumulation_steps {args.gradient_accumulation_steps} (the same effective batch; "
              "--auto_fit_batch false keeps the batch)", flush=True)
