"""One process of the multi-process tests (tests/test_distributed.py), started by `torchrun --nproc_per_node 2`.

For each family it trains an MLM stage and a fine-tuning (sequence classification) stage on a fixed
synthetic batch stream, and interrupts each run at step 2 and resumes it:
- `--mode trainer`: through the Trainer (DDP on gloo), checkpoints by `save_steps`;
- `--mode trainer-fsdp`: the Trainer asked for FSDP2 through accelerate (records whether it really sharded);
- `--mode trainer-zero2` / `trainer-zero3`: the Trainer with DeepSpeed ZeRO-2 / ZeRO-3 (the shipped
  examples/accelerate/ds_zero*.json; DeepSpeed's CPU accelerator, gloo), checkpoints by `save_steps`;
- `--mode trainer-sharded`: the Trainer given a model that transformers sharded with FSDP2 (`DistributedConfig`,
  each encoder layer a unit, activation checkpointing), after the model was built (`--mode trainer-loaded`: by
  `from_pretrained(distributed_config=...)`, which breaks tied weights, see tests/test_distributed.py);
- `--mode torch`: plain DDP and FSDP2 `fully_shard` (each `HfeLayer`, then the root; activation
  checkpointing on each layer) in one loop, resumed from a sharded torch.distributed.checkpoint.
Rank 0 writes what happened (losses per step, how the model was wrapped) to a JSON file; the test
asserts, this file only records.
"""

import argparse
import json
import os
import sys
from pathlib import Path

import torch
import torch.distributed.checkpoint as dcp
from transformers import Trainer, TrainerCallback, TrainingArguments
from transformers.distributed import DistributedConfig

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import hf_efficient  # noqa: E402
from tests.families import TINY, tiny_config  # noqa: E402

LENGTH, EXAMPLES, STEPS = 64, 16, 4
STAGES = {"mlm": "ForMaskedLM", "classification": "ForSequenceClassification"}  # the head each stage trains
CHECKPOINTING_MODES = ("trainer", "trainer-fsdp", "trainer-zero2", "trainer-zero3")  # resumed from checkpoint-2
ZERO_CONFIGS = {f"trainer-zero{stage}": Path(__file__).resolve().parents[1] / "examples" / "accelerate" /
                f"ds_zero{stage}.json" for stage in (2, 3)}


def examples(model_type: str, stage: str) -> list[dict]:
    """The same examples on every rank and in every mode: padding in every other one, 15% of tokens as MLM targets."""
    generator = torch.Generator().manual_seed(11)
    attention_names = model_classes(model_type, stage)(tiny_config(model_type)).base_model.attention_inputs()
    rows = []
    for index in range(EXAMPLES):
        ids = torch.randint(3, TINY["vocab_size"], (LENGTH,), generator=generator)
        mask = torch.ones(LENGTH, dtype=torch.long)
        if index % 2:
            mask[LENGTH - 9:] = 0
            ids[LENGTH - 9:] = 1
        row = {"input_ids": ids, "attention_mask": mask}
        for name in attention_names:  # the first token is marked (e.g. global attention)
            row[name] = torch.zeros(LENGTH, dtype=torch.bool).index_fill_(0, torch.tensor([0]), True)
        if stage == "mlm":
            targets = (torch.rand(LENGTH, generator=generator) < 0.15) & mask.bool()
            row["labels"] = torch.where(targets, ids, torch.full_like(ids, -100))
        else:
            row["labels"] = torch.tensor(index % 3)
        rows.append(row)
    return rows


def model_classes(model_type: str, stage: str):
    return hf_efficient.FAMILIES[model_type].models[STAGES[stage]]


class Record(TrainerCallback):
    """The model's wrapping as the Trainer trains it (FSDP2 changes module classes in place)."""

    def __init__(self):
        self.wrapping: dict = {}

    def on_step_end(self, args, state, control, model=None, **kwargs):
        if not self.wrapping and model is not None:
            layer = model.base_model.encoder.layer[0]
            self.wrapping = {
                "layer_classes": sorted({type(module).__name__ for module in layer.modules()}),
                "activation_checkpointing": layer.gradient_checkpointing,
                "dtensor_parameters": sum(type(p).__name__ == "DTensor" for p in model.parameters()),
                "zero3_parameters": sum(hasattr(p, "ds_tensor") for p in model.parameters()),  # partitioned
                "parameters": sum(1 for _ in model.parameters()),
            }


def sharded(model: torch.nn.Module, folder: Path, at_load: bool) -> torch.nn.Module:
    """`model` sharded by transformers' FSDP2 (the config's `base_model_fsdp_plan`) over every process: by
    `from_pretrained(distributed_config=...)` of a saved copy (`at_load`), or by the step it takes after building
    the model (`maybe_distribute_model`), here applied to the built model, whose weights are already tied."""
    config = DistributedConfig(fsdp_size=torch.distributed.get_world_size())
    model_class = type(model)
    if at_load:
        if torch.distributed.get_rank() == 0:
            model.save_pretrained(folder)
        torch.distributed.barrier()
        return model_class.from_pretrained(folder, distributed_config=config)
    config, _, mesh = model_class.prepare_distribute_model(config)
    return model_class.maybe_distribute_model(model, config, mesh)


def train(model_type: str, stage: str, output_dir: Path, mode: str, resume_from: str | None = None) -> dict:
    """Through the Trainer: checkpoints at step 2, `resume_from` continues from one (not for models sharded by
    transformers: the Trainer refuses to checkpoint their optimizer state)."""
    torch.manual_seed(0)
    model = model_classes(model_type, stage)(tiny_config(model_type, num_labels=3))
    options = {"save_strategy": "steps", "save_steps": 2}
    if mode == "trainer-fsdp":
        options["fsdp"] = "full_shard auto_wrap"
        options["fsdp_config"] = {"fsdp_version": 2, "transformer_layer_cls_to_wrap": ["HfeLayer"],
                                  "activation_checkpointing": True, "state_dict_type": "SHARDED_STATE_DICT"}
    elif mode in ZERO_CONFIGS:
        options["deepspeed"] = str(ZERO_CONFIGS[mode])
    elif mode in ("trainer-sharded", "trainer-loaded"):
        model = sharded(model, output_dir / "initial", at_load=mode == "trainer-loaded")
        options = {"save_strategy": "no", "activation_checkpointing": True}
    args = TrainingArguments(
        output_dir=str(output_dir), use_cpu=not torch.cuda.is_available(), max_steps=STEPS, per_device_train_batch_size=2,
        learning_rate=3e-3, lr_scheduler_type="constant", seed=5, data_seed=5, logging_steps=1,
        report_to="none", disable_tqdm=True, **options,
    )
    record = Record()
    trainer = Trainer(model=model, args=args, train_dataset=examples(model_type, stage), callbacks=[record])
    trainer.train(resume_from_checkpoint=resume_from)
    losses = {entry["step"]: entry["loss"] for entry in trainer.state.log_history if "loss" in entry}
    zero_stage = trainer.deepspeed.zero_optimization_stage() if trainer.is_deepspeed_enabled else 0
    return {"losses": losses, "zero_stage": zero_stage, **record.wrapping}


def train_in_torch(model_type: str, stage: str, sharding: str, folder: Path, save_at: int | None = None,
                   resume: bool = False) -> dict:
    """A plain loop: DDP (`sharding="none"`) or FSDP2, `fully_shard` on each encoder layer with activation
    checkpointing (`"layer"`) or on the whole encoder (`"encoder"`), then on the root."""
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import apply_activation_checkpointing
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
    from torch.distributed.fsdp import fully_shard
    from torch.nn.parallel import DistributedDataParallel

    from hf_efficient.models.backbone import HfeLayer

    rank, world = torch.distributed.get_rank(), torch.distributed.get_world_size()
    rows = examples(model_type, stage)  # builds a model: before the seeding and the RNG restore below
    torch.manual_seed(0)
    model = model_classes(model_type, stage)(tiny_config(model_type, num_labels=3)).train()
    if sharding == "layer":
        apply_activation_checkpointing(model, check_fn=lambda module: isinstance(module, HfeLayer))
        for layer in model.base_model.encoder.layer:
            fully_shard(layer)
    elif sharding == "encoder":
        fully_shard(model.base_model.encoder)
    if sharding != "none":
        fully_shard(model)
        wrapped = model
    else:
        wrapped = DistributedDataParallel(model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    first = 1
    if resume:
        state = {"model": get_state_dict(model, optimizer)[0], "optimizer": get_state_dict(model, optimizer)[1]}
        dcp.load(state, checkpoint_id=str(folder))
        set_state_dict(model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optimizer"])
        torch.set_rng_state(torch.load(folder / f"rng-{rank}.pt"))  # training-time hashing and dropout draw from it
        first = save_at + 1
    batch = 2
    losses = {}
    for step in range(first, STEPS + 1):
        start = (step - 1) * batch * world + rank * batch  # the DistributedSampler's split, without shuffling
        inputs = {key: torch.stack([row[key] for row in rows[start:start + batch]]) for key in rows[0]}
        loss = wrapped(**inputs).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        mean = loss.detach().clone()
        torch.distributed.all_reduce(mean)
        losses[step] = mean.item() / world
        if step == save_at and not resume:
            model_state, optimizer_state = get_state_dict(model, optimizer)
            dcp.save({"model": model_state, "optimizer": optimizer_state}, checkpoint_id=str(folder))
            torch.save(torch.get_rng_state(), folder / f"rng-{rank}.pt")
    layer = model.base_model.encoder.layer[0]
    return {"losses": losses, "layer_classes": sorted({type(module).__name__ for module in layer.modules()}),
            "dtensor_parameters": sum(type(p).__name__ == "DTensor" for p in model.parameters()),
            "parameters": sum(1 for _ in model.parameters())}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mode", choices=[*CHECKPOINTING_MODES, "trainer-sharded", "trainer-loaded", "torch"],
                        required=True)
    parser.add_argument("--output", required=True)
    parser.add_argument("--families", nargs="+", default=sorted(hf_efficient.FAMILIES))
    parser.add_argument("--stages", nargs="+", default=list(STAGES), choices=list(STAGES))
    args = parser.parse_args()
    folder = Path(args.output).parent
    results = {}
    for model_type in args.families:
        for stage in args.stages:
            name = f"{model_type}-{stage}"
            if args.mode == "torch":
                for sharding in ("none", "layer", "encoder"):
                    checkpoint = folder / f"{name}-{sharding}-step2"
                    result = results[f"{name}-{sharding}"] = run_safely(train_in_torch, model_type, stage, sharding,
                                                                         checkpoint, 2)
                    if "error" not in result:
                        result["resumed"] = run_safely(train_in_torch, model_type, stage, sharding, checkpoint, 2,
                                                       True).get("losses")
            else:
                result = results[name] = run_safely(train, model_type, stage, folder / name, args.mode)
                if "error" not in result and args.mode in CHECKPOINTING_MODES:
                    result["resumed"] = run_safely(train, model_type, stage, folder / f"{name}-resumed", args.mode,
                                                   str(folder / name / "checkpoint-2")).get("losses")
    if torch.distributed.get_rank() == 0:
        Path(args.output).write_text(json.dumps({"world_size": torch.distributed.get_world_size(),
                                                 "results": results}, indent=1))


def run_safely(function, *args) -> dict:
    """The error of a run that fails (the same on every rank here), so one family's failure does not hide the others'."""
    try:
        return function(*args)
    except Exception as error:  # noqa: BLE001 - recorded for the test to report
        return {"error": f"{type(error).__name__}: {str(error)[:500]}"}


def leave_process_group() -> None:
    """End a rank whose work is done: both ranks finish before either tears gloo down (a rank closing its pairs first
    aborted the other once), then leave without finalising the interpreter. Gloo's worker threads can still hold
    tensors when it finalises, which aborts the process after its work is done ("terminate called without an active
    exception", SIGABRT; pytorch/pytorch#179291)."""
    torch.distributed.barrier()
    torch.distributed.destroy_process_group()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    if torch.cuda.is_available():  # one GPU per process (scripts/gpu_check.sh); the Trainer runs on it
        torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    if not torch.distributed.is_initialized():
        torch.distributed.init_process_group("cuda:nccl,cpu:gloo" if torch.cuda.is_available() else "gloo")
    main()
    leave_process_group()
