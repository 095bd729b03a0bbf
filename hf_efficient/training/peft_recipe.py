"""Parameter-efficient training for the stages (`--peft lora | ia3`), on peft.

The encoder is frozen and wrapped by `peft.get_peft_model`; only the adapters and the stage's new
task head (`modules_to_save`: it starts from random weights, so it must be trained whole) learn.
Targets default to the family's entry in peft's tables (`hf_efficient.integrations`); presets name
a family's own projections, and peft's `all-linear` every linear layer of the encoder. Without `--merge` the stage's folder holds the adapter (load it with
`PeftModel.from_pretrained` on top of the checkpoint it started from); with `--merge` it holds a
plain checkpoint (`merge_and_unload`) that the next stage or `from_pretrained` reads, and the
adapter in `adapter/`.

Every option is checked, and every target matched against the model, before training starts.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from peft import IA3Config, LoraConfig, PeftConfig, PeftModel, TaskType, get_peft_model
from peft.utils import ModulesToSaveWrapper
from peft.utils.constants import INCLUDE_LINEAR_LAYERS_SHORTHAND as ALL_LINEAR
from transformers import PreTrainedModel, Trainer

from ..models.attention_sliding import GLOBAL_PROJECTIONS

METHODS = ("lora", "ia3")

# Named target lists for `--peft_target_modules`. Longformer-style global tokens have their own
# query/key/value projections, which the default targets (query, value) leave untouched.
TARGET_PRESETS: dict[str, list[str]] = {
    "attention": ["query", "key", "value"],
    "attention_and_global": ["query", "key", "value", *GLOBAL_PROJECTIONS],
    "global": list(GLOBAL_PROJECTIONS),
}
# peft's own `all-linear` (ALL_LINEAR) is passed on as it is: every linear layer but the task head (attention,
# global and feed-forward projections), so it covers any other linear layer named beside it.
# Presets that name parameters rather than linear layers (peft's `target_parameters`, LoRA only): Linformer's
# stacked length projections E/F, applied to the first L of their columns, so no linear layer can stand in.
PARAMETER_PRESETS: dict[str, list[str]] = {"length_projection": ["length_projection.weight"]}
# IA3 rescales the inputs of these targets (feed-forward) rather than their outputs; peft needs them named.
FEEDFORWARD = ("output.dense", "intermediate.dense")

# Head -> peft's task type (its wrapper's forward); another head gets peft's generic one.
TASK_TYPES = {"ForSequenceClassification": TaskType.SEQ_CLS, "ForTokenClassification": TaskType.TOKEN_CLS,
              "ForQuestionAnswering": TaskType.QUESTION_ANS}


@dataclass
class PeftArguments:
    peft: str | None = field(default=None, metadata={"help": f"train adapters instead of the whole encoder: {' | '.join(METHODS)}"})
    peft_target_modules: list[str] | None = field(default=None, metadata={"help": f"modules to adapt (peft's suffix match), or a preset: {', '.join([*TARGET_PRESETS, ALL_LINEAR, *PARAMETER_PRESETS])} (default: the family's registered targets)"})
    lora_r: int = field(default=8, metadata={"help": "LoRA rank"})
    lora_alpha: int = field(default=16, metadata={"help": "LoRA scaling numerator (the update is scaled by lora_alpha / lora_r)"})
    lora_dropout: float = field(default=0.0, metadata={"help": "dropout on the LoRA branch's input"})
    merge: bool = field(default=False, metadata={"help": "save a plain checkpoint with the adapter merged in (adapter kept in adapter/)"})


def check_peft_options(args: PeftArguments, pretrained: bool = True) -> None:
    """ValueError naming the first option that cannot work (by `wrap`, before the Trainer is built; `pretrained`
    False: the model is built from scratch, and adapters would leave a random encoder frozen)."""
    if args.peft is not None and not pretrained:
        raise ValueError("--peft trains adapters on a pretrained encoder; start from one with --model_name_or_path")
    if args.peft is None:
        if args.merge or args.peft_target_modules:
            given = "--merge" if args.merge else "--peft_target_modules"
            raise ValueError(f"{given} needs an adapter: add --peft {' | '.join(METHODS)}")
        return
    if args.peft not in METHODS:
        raise ValueError(f"unknown --peft method {args.peft!r}; choose from {', '.join(METHODS)}")
    if args.lora_r <= 0:
        raise ValueError(f"--lora_r must be positive, got {args.lora_r}")
    if not 0 <= args.lora_dropout < 1:
        raise ValueError(f"--lora_dropout must be in [0, 1), got {args.lora_dropout}")
    presets = [item for item in args.peft_target_modules or () if item in PARAMETER_PRESETS]
    if presets and args.peft != "lora":
        raise ValueError(f"--peft_target_modules {presets[0]} adapts a parameter, which only --peft lora can")
    if presets and args.lora_dropout:
        raise ValueError(f"--peft_target_modules {presets[0]} needs --lora_dropout 0 (peft's adapters on a parameter "
                         f"have no dropout), got {args.lora_dropout}")


def target_modules(args: PeftArguments) -> list[str] | str | None:
    """The linear layers named on the command line, presets expanded; None for the family's defaults
    ([] when only parameters are named); peft's "all-linear" when it is among them."""
    if not args.peft_target_modules:
        return None
    if ALL_LINEAR in args.peft_target_modules:
        return ALL_LINEAR
    names = [name for item in args.peft_target_modules if item not in PARAMETER_PRESETS
             for name in TARGET_PRESETS.get(item, [item])]
    return list(dict.fromkeys(names))


def target_parameters(args: PeftArguments) -> list[str]:
    """The parameters the parameter presets on the command line name."""
    return [name for item in args.peft_target_modules or () for name in PARAMETER_PRESETS.get(item, [])]


def unmatched(names: list[str], candidates) -> list[str]:
    """The `names` that match none of the `candidates` (module or parameter names) by peft's rule for a list
    (the full name, or its last dot-separated part(s))."""
    candidates = list(candidates)
    return [target for target in names if not any(name == target or name.endswith(f".{target}") for name in candidates)]


def peft_config(args: PeftArguments, model: PreTrainedModel, head: str) -> PeftConfig:
    """The peft config for `model` under its `head`; ValueError for targets the model does not have."""
    task_type, head_modules = TASK_TYPES.get(head), task_head(model, head)
    targets, parameters = target_modules(args), target_parameters(args)
    missing = unmatched(targets if isinstance(targets, list) else [], (name for name, _ in model.named_modules()))
    missing += unmatched(parameters, (name for name, _ in model.named_parameters()))
    if missing:
        raise ValueError(f"--peft_target_modules {', '.join(missing)} match no module of this "
                         f"{model.config.model_type} model (e.g. {', '.join(sorted(module_names(model))[:8])})")
    options = {"task_type": task_type, "target_modules": targets, "modules_to_save": head_modules or None}
    if args.peft == "lora":
        return LoraConfig(r=args.lora_r, lora_alpha=args.lora_alpha, lora_dropout=args.lora_dropout,
                          target_parameters=parameters or None, **options)
    feedforward = (None if targets is None else list(FEEDFORWARD) if targets == ALL_LINEAR
                   else [name for name in targets if name.endswith(FEEDFORWARD)])
    return IA3Config(feedforward_modules=feedforward, **options)


def task_head(model: PreTrainedModel, head: str) -> list[str]:
    """The modules of a task head, new weights that are trained whole: the model's children with weights beside the
    encoder. None for MLM: adapt keeps the pretrained LM head (tied to the embeddings) frozen."""
    if head == "ForMaskedLM":
        return []
    return [name for name, child in model.named_children()
            if child is not model.base_model and next(child.parameters(), None) is not None]


def module_names(model: PreTrainedModel) -> set[str]:
    """The last part of every linear layer's name, the usual targets."""
    return {name.rsplit(".", 1)[-1] for name, module in model.named_modules() if hasattr(module, "in_features")}


def wrap(model: PreTrainedModel, args: PeftArguments, head: str, pretrained: bool = True) -> PreTrainedModel | PeftModel:
    """`model` with `args.peft` adapters (frozen encoder, trainable adapters and head), or `model` when no --peft.

    Checks every option first; `pretrained` False (a model built from scratch) refuses adapters, which
    would leave a random encoder frozen.
    """
    check_peft_options(args, pretrained)
    if args.peft is None:
        return model
    return get_peft_model(model, peft_config(args, model, head))


def trainable_summary(model) -> dict[str, int]:
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    return {"trainable_parameters": trainable, "total_parameters": sum(p.numel() for p in model.parameters())}


def save_model(trainer: Trainer, merge: bool) -> None:
    """Save the stage's model at the top of its output folder: plain, the adapter, or (`merge`) merged + adapter/."""
    model = trainer.model
    if not (merge and isinstance(model, PeftModel)):
        trainer.save_model()
        return
    output = Path(trainer.args.output_dir)
    trainer.save_model(str(output / "adapter"))
    trainer.accelerator.wait_for_everyone()
    if trainer.is_world_process_zero():
        merged(model).save_pretrained(output)  # the Trainer is done with the model
        trainer.processing_class.save_pretrained(output)


def merged(model: PeftModel) -> PreTrainedModel:
    """`model.merge_and_unload()`, with the trained copies of the `modules_to_save` put in place first.

    peft's generic unload (IA3's) expects each saved module to be a single layer with a `weight`; a
    RoBERTa-style classification head is two (`dense`, `out_proj`), so peft would fail on it.
    """
    inner = model.get_base_model()
    for name, module in list(inner.named_modules()):
        if isinstance(module, ModulesToSaveWrapper):
            parent, _, child = name.rpartition(".")
            setattr(inner.get_submodule(parent), child, module.modules_to_save[model.active_adapter])
    return model.merge_and_unload()
