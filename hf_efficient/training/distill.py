"""Knowledge distillation: a teacher checkpoint supervises a smaller or more efficient student, through the Trainer.

`--task mlm` (a general or domain stage, as DistilBERT): the teacher's MLM logits at a temperature (KL, scaled by
T^2) + the student's own MLM loss + optionally the cosine between last hidden states (DistilBERT) and the MSE
between mapped per-layer hidden states (TinyBERT). Every task with distill options, through its `task.Task` in one
pipeline (`distill_task`): its data, read and scored as `finetune` does, and unlabelled in-domain rows
(`--unlabeled_file`) that the teacher alone supervises; the teacher's outputs of its head (`Task.logits`, over the
real tokens of a `per_token` task) and the student's own loss on its labels (`Task.targets`). The student is any
family, built from the teacher's config with fewer layers or other fields and initialised from the teacher where
shapes allow (every other layer, as DistilBERT), or an existing checkpoint (`--student_name_or_path`). The teacher
reads the first tokens of each input up to the length it was trained at (`--teacher_max_length`); the student reads
them all. See docs/distillation.md.
"""

from __future__ import annotations

import dataclasses
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import datasets
import torch
import torch.nn.functional as F
from transformers import PreTrainedConfig, PreTrainedModel, Trainer, TrainingArguments, set_seed

from ..convert import COPIED_FIELDS, run_family_hooks, tile_positions
from ..hub import load_tokenizer
from ..models.families import FAMILIES, check_family
from ..tasks import task_data
from ..tasks.task import (
    TASKS,
    Task,
    check_fast,
    check_options,
    head_of,
    label_fields,
    model_class,
    option_values,
    options_of,
)
from . import stage
from .mlm import mlm_inputs

# the teacher's and the student's head per --task: mlm's, and each task's with distill options (registered by __init__)
TASK_HEADS = {"mlm": "ForMaskedLM", **{name: TASKS[name].head for name in options_of("distill")}}
LOGIT_FIELDS = tuple(dict.fromkeys(field for name in options_of("distill") for field in TASKS[name].logits))
CACHE_FOLDER = "teacher_outputs"
# Config fields a student built from the teacher keeps, whatever its family (the rest are the family's defaults).
STUDENT_FIELDS = COPIED_FIELDS + ("position_numbering", "classifier_pooling", "mlm_loss_chunk_size", "problem_type")


@dataclass
class MLMArguments:
    """The options only `--task mlm` applies."""

    alpha_cos: float = field(default=0.0, metadata={"help": "mlm: weight of 1 - cosine of the last hidden states (DistilBERT; same width)"})
    alpha_hidden: float = field(default=0.0, metadata={"help": "mlm: weight of the MSE between mapped per-layer hidden states (TinyBERT; same width)"})
    layer_map: str | None = field(default=None, metadata={"help": "mlm: teacher layer aligned with each student layer, e.g. '2,4' (default: uniform, TinyBERT's)"})
    train_files: list[str] | None = field(default=None, metadata={"help": "mlm: local text files (default: the embedded corpus)"})
    text_column: str = field(default="text", metadata={"help": "column holding the text (token_classification: the words)"})


@dataclass
class TaskFiles:
    """The data options of every task but mlm."""

    train_file: str | None = field(default=None, metadata={"help": "the task's training split (classification: default the embedded task; token_classification, question_answering: required, as in finetune)"})
    validation_file: str | None = field(default=None, metadata={"help": "the task's validation split (default: cut from train)"})
    test_file: str | None = field(default=None, metadata={"help": "the task's test split (default: cut from train)"})
    unlabeled_file: str | None = field(default=None, metadata={"help": "unlabelled rows the teacher alone supervises: classification, token_classification: text ('domain' = the embedded corpus); question_answering: a SQuAD-format file, answers unread"})
    max_unlabeled_documents: int | None = field(default=None, metadata={"help": "use only this many unlabelled documents (question_answering: questions)"})


# the options each --task applies: mlm's, and every other task's files and own distill options
OWNERS = {"mlm": (MLMArguments,), **{name: (TaskFiles, *kinds) for name, kinds in options_of("distill").items()}}


@dataclass
class DistillArguments(*dict.fromkeys(kind for kinds in OWNERS.values() for kind in kinds), stage.OutputArguments):
    teacher_name_or_path: str | None = field(default=None, metadata={"help": "teacher checkpoint folder (an hf_efficient family; required)"})
    teacher_max_length: int | None = field(default=None, metadata={"help": "tokens the teacher reads, the first of each input (default: the max_length its last stage trained it at, else its position table)"})
    task: str = field(default="mlm", metadata={"help": "what to distil", "choices": tuple(TASK_HEADS)})
    student_name_or_path: str | None = field(default=None, metadata={"help": "start the student from this checkpoint instead of building it from the teacher"})
    student_model_type: str | None = field(default=None, metadata={"help": "the student's family (default: the teacher's)"})
    student_num_hidden_layers: int | None = field(default=None, metadata={"help": "student layers (default: half the teacher's)"})
    student_config_overrides: str | None = field(default=None, metadata={"help": "other student config fields, e.g. 'hidden_size=128,attention_window=64'"})
    temperature: float = field(default=2.0, metadata={"help": "softmax temperature of the soft targets"})
    alpha_kd: float = field(default=5.0, metadata={"help": "weight of the soft-target KL loss (DistilBERT's alpha_ce)"})
    alpha_mlm: float = field(default=2.0, metadata={"help": "weight of the student's own loss: MLM, or the labels' cross-entropy"})
    dataset: str | None = field(default=None, metadata={"help": "embedded data when no files: mlm general|domain (default domain); classification kernel_docs"})
    max_length: int | None = field(default=None, metadata={"help": "student tokens per sequence (default: what the teacher reads, at most 512 for mlm)"})
    max_train_samples: int | None = field(default=None, metadata={"help": "use only this many training documents/examples"})
    max_eval_samples: int | None = field(default=None, metadata={"help": "use only this many validation/test examples"})


# ----------------------------------------------------------------------------------------- losses
def soft_target_loss(student_logits: torch.Tensor, teacher_logits: torch.Tensor, temperature: float,
                     mask: torch.Tensor | None = None, independent: bool = False) -> torch.Tensor:
    """KL(teacher || student) of the softmaxes at `temperature` over the last dimension, times T^2 (Hinton et al.:
    keeps the gradient's scale independent of T), averaged over rows (those where `mask` is true, if given).

    Positions where `mask` is false along the last dimension are excluded from both distributions when
    `mask` has the logits' shape (QA start/end over tokens); a mask of the leading shape selects rows.
    `independent` logits (multi-label: one sigmoid per label, no distribution) are compared label by label: the
    binary cross-entropy of the student's sigmoids against the teacher's, at `temperature`, times T^2.
    """
    student = student_logits.float() / temperature
    teacher = teacher_logits.float() / temperature
    if independent:
        return F.binary_cross_entropy_with_logits(student, torch.sigmoid(teacher)) * temperature**2
    if mask is not None and mask.shape == student.shape:  # mask entries of the distribution (padding tokens)
        student, teacher = student.masked_fill(~mask, -1e9), teacher.masked_fill(~mask, -1e9)
        mask = None
    log_student, log_teacher = F.log_softmax(student, dim=-1), F.log_softmax(teacher, dim=-1)
    kl = (log_teacher.exp() * (log_teacher - log_student)).sum(-1)
    return (kl if mask is None else kl[mask]).mean() * temperature**2


def task_distillation_loss(student_outputs, teacher_outputs, temperature: float,
                           attention_mask: torch.Tensor | None = None, independent: bool = False) -> torch.Tensor:
    """Soft-target loss over every logits field both outputs have (the tasks' `logits`), averaged over the fields; a
    per-token task's `attention_mask` keeps the real tokens (rows of per-token logits, entries of QA's start/end);
    `independent`: multi-label logits (see `soft_target_loss`)."""
    mask = None if attention_mask is None else attention_mask.bool()
    losses = []
    for name in LOGIT_FIELDS:
        student, teacher = student_outputs.get(name), teacher_outputs.get(name)
        if student is None or teacher is None:
            continue
        if student.shape != teacher.shape:
            raise ValueError(f"student {name} of shape {tuple(student.shape)} cannot learn from the teacher's "
                             f"{tuple(teacher.shape)}")
        losses.append(soft_target_loss(student, teacher, temperature, mask, independent))
    if not losses:
        raise ValueError(f"the outputs share none of the logits fields {LOGIT_FIELDS}")
    return torch.stack(losses).mean()


def label_loss(pairs: Sequence[tuple[torch.Tensor, torch.Tensor]]) -> torch.Tensor | None:
    """The student's own loss on the batch's labels: the mean over the (logits, labels) pairs (a task's `logits` and
    `targets`: QA's start and end) of the cross-entropy over the rows, tokens or windows that have a label (-100:
    none, by the first pair's labels); None if none has. Float label vectors are multi-label (as transformers infers
    its `problem_type`): binary cross-entropy per label over the rows that have them."""
    labels = pairs[0][1]
    independent = labels.is_floating_point()
    labelled = (labels != -100).all(-1) if independent else labels != -100
    if not labelled.any():
        return None
    loss = F.binary_cross_entropy_with_logits if independent else F.cross_entropy
    return torch.stack([loss(logits[labelled].float(), target[labelled]) for logits, target in pairs]).mean()


def uniform_layer_map(student_layers: int, teacher_layers: int) -> list[int]:
    """TinyBERT's g(m) = m * N / M: the teacher layer (1-based output) each student layer's output is aligned with."""
    return [(i + 1) * teacher_layers // student_layers for i in range(student_layers)]


def copied_layers(student_layers: int, teacher_layers: int) -> list[int]:
    """Teacher layer copied into each student layer: every other one when halving (DistilBERT), in general i*N//M."""
    return [i * teacher_layers // student_layers for i in range(student_layers)]


@dataclass
class Weights:
    temperature: float
    alpha_kd: float
    alpha_mlm: float
    alpha_cos: float = 0.0
    alpha_hidden: float = 0.0
    layer_map: list[int] = field(default_factory=list)


class DistillationTrainer(Trainer):
    """A Trainer whose training loss is the weighted distillation loss; evaluation scores the student alone.

    The teacher stays in eval mode on the student's device (it is not saved: checkpoints hold the student,
    so `--resume` works as in every stage) and reads the first `teacher_length` tokens of each input. A
    `teacher_logits` column (cached outputs) replaces the teacher's forward pass. Every term is a per-batch
    mean, so the Trainer scales it for gradient accumulation.
    """

    def __init__(self, *args, teacher: PreTrainedModel, teacher_length: int, weights: Weights, task: str, **kwargs):
        super().__init__(*args, **kwargs)
        self.teacher = teacher.to(self.args.device).eval().requires_grad_(False)
        self.weights, self.task = weights, task
        self.teacher_length = teacher_length
        self.model_accepts_loss_kwargs = False
        self.loss_is_scaled_for_ga = False

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        cached = inputs.pop("teacher_logits", None)
        if not model.training:
            return super().compute_loss(model, inputs, return_outputs, num_items_in_batch)
        losses = self.task_losses(model, inputs, cached) if self.task != "mlm" else self.mlm_losses(model, inputs)
        weighted = {name: getattr(self.weights, f"alpha_{name}") * value for name, value in losses.items()}
        loss = torch.stack(list(weighted.values())).sum()
        if self.state.global_step % max(1, self.args.logging_steps) == 0:
            self.parts = {f"loss_{name}": value.item() for name, value in losses.items()}
        return (loss, None) if return_outputs else loss

    def log(self, logs: dict, *args, **kwargs) -> None:
        """Adds the unweighted terms of the last logged step (loss_kd, loss_mlm, ...) to the training logs."""
        if "loss" in logs and getattr(self, "parts", None):
            logs = {**logs, **self.parts}
        super().log(logs, *args, **kwargs)

    def mlm_losses(self, model, inputs: dict) -> dict[str, torch.Tensor]:
        hidden_wanted = self.weights.alpha_cos > 0 or self.weights.alpha_hidden > 0
        student = model(**inputs, output_hidden_states=True)
        with torch.no_grad():
            teacher = self.teacher(**teacher_batch(inputs, self.teacher_length), output_hidden_states=hidden_wanted)
        length = teacher.logits.shape[1]
        selected = inputs["labels"][:, :length] != -100
        head = self.accelerator.unwrap_model(model).lm_head
        last = student.hidden_states[-1][:, :length]
        losses = {"mlm": student.loss,
                  "kd": soft_target_loss(head(last[selected]), teacher.logits[selected], self.weights.temperature)}
        losses.update(self.hidden_losses(student.hidden_states, teacher.hidden_states, inputs, length))
        return losses

    def task_losses(self, model, inputs: dict, cached: torch.Tensor | None) -> dict[str, torch.Tensor]:
        """The task's (`Task.logits`, `targets`, `per_token`) KD term and its own loss on the labelled rows."""
        task = TASKS[self.task]
        targets = [inputs.pop(key) for key in task.targets]
        student = model(**inputs)
        if self.weights.alpha_kd == 0:  # labels only: no teacher pass
            teacher = None
        elif cached is None:
            with torch.no_grad():
                teacher = self.teacher(**teacher_batch(inputs, self.teacher_length))
        else:
            teacher = {"logits": cached}
        mask = inputs.get("attention_mask") if task.per_token else None
        independent = targets[0].is_floating_point()  # multi-label (see `label_loss`)
        losses = {} if teacher is None else {"kd": task_distillation_loss(student, teacher, self.weights.temperature,
                                                                          mask, independent)}
        pairs = [(student[name], target) for name, target in zip(task.logits, targets, strict=True)]
        own = label_loss(pairs) if self.weights.alpha_mlm > 0 else None
        if own is not None:
            losses["mlm"] = own
        return losses or {"mlm": sum(student[name].sum() for name in task.logits) * 0}  # nothing to learn

    def hidden_losses(self, student_states, teacher_states, inputs: dict, length: int) -> dict[str, torch.Tensor]:
        """DistilBERT's cosine on the last hidden states and TinyBERT's per-layer MSE, over the real tokens."""
        losses = {}
        real = inputs["attention_mask"][:, :length].bool() if "attention_mask" in inputs else None

        def rows(states: torch.Tensor) -> torch.Tensor:
            states = states[:, :length].float()
            return states[real] if real is not None else states.flatten(0, 1)

        if self.weights.alpha_cos > 0:
            losses["cos"] = (1 - F.cosine_similarity(rows(student_states[-1]), rows(teacher_states[-1]), dim=-1)).mean()
        if self.weights.alpha_hidden > 0:
            pairs = [(0, 0), *((i + 1, j) for i, j in enumerate(self.weights.layer_map))]  # embeddings, then layers
            losses["hidden"] = torch.stack([F.mse_loss(rows(student_states[i]), rows(teacher_states[j]))
                                            for i, j in pairs]).mean()
        return losses


# ----------------------------------------------------------------------------------------- models
def load_teacher(args: DistillArguments) -> PreTrainedModel:
    """The teacher checkpoint with the head `args.task` needs, or one line saying why not."""
    head = TASK_HEADS[args.task]
    if not args.teacher_name_or_path:
        raise ValueError("distill needs a teacher: give --teacher_name_or_path FOLDER")
    config = stage.checkpoint_config(args.teacher_name_or_path, tuple(TASK_HEADS.values()) + ("Model",), "distill")
    heads = [head_of(name) for name in config.architectures or []]
    if head not in heads:
        raise ValueError(f"the teacher {args.teacher_name_or_path} has no {head} head (it has {heads or ['none']}); "
                         f"--task {args.task} needs a teacher {'trained with MLM' if args.task == 'mlm' else 'fine-tuned on the task'}")
    return model_class(config, head).from_pretrained(args.teacher_name_or_path)


def teacher_reads(args: DistillArguments, teacher: PreTrainedConfig) -> int:
    """The tokens the teacher reads: `--teacher_max_length`, else the `max_length` its last stage (finetune, pretrain,
    a distill) recorded in the teacher folder's stage file, else its position table. A teacher fine-tuned on
    128 tokens with a 256-token table has only learnt its task on 128."""
    recorded = (stage.finished_stage(args.teacher_name_or_path) or {}).get("max_length")
    length = args.teacher_max_length or recorded or teacher.max_sequence_length
    if length <= 0 or length > teacher.max_sequence_length:
        raise ValueError(f"--teacher_max_length {length} must be between 1 and the {teacher.max_sequence_length} "
                         "tokens of the teacher's position table")
    return length


def teacher_batch(batch: dict, length: int) -> dict:
    """The teacher's inputs of a collated batch: its per-token inputs cut to the first `length` tokens."""
    return {key: batch[key][:, :length] for key in task_data.MODEL_INPUTS if key in batch}


def student_config(args: DistillArguments, teacher: PreTrainedConfig, max_length: int) -> PreTrainedConfig:
    """The teacher's architecture in the student's family, with the student's layers, length and overrides."""
    model_type = args.student_model_type or teacher.model_type
    check_family(model_type, "--student_model_type")
    layers = args.student_num_hidden_layers or max(1, teacher.num_hidden_layers // 2)
    if not 0 < layers <= teacher.num_hidden_layers:
        raise ValueError(f"--student_num_hidden_layers {layers} cannot be initialised from the teacher's "
                         f"{teacher.num_hidden_layers} layers: give 1 to {teacher.num_hidden_layers}")
    config_class = FAMILIES[model_type].config_class
    fields = {name: getattr(teacher, name) for name in STUDENT_FIELDS if hasattr(teacher, name)}
    fields["id2label"] = {int(k): v for k, v in teacher.id2label.items()}
    fields["label2id"] = dict(teacher.label2id)
    overrides = stage.parse_overrides(args.student_config_overrides, "--student_config_overrides")
    fixed = sorted(set(overrides) & {"vocab_size", "num_hidden_layers", "max_position_embeddings", "position_numbering"})
    if fixed:
        raise ValueError(f"--student_config_overrides may not set {fixed}: the vocabulary is the teacher's, "
                         "the layers are --student_num_hidden_layers and the length --max_length")
    fields.update(overrides, num_hidden_layers=layers)
    offset = config_class.position_offset_for(**fields)
    fields["max_position_embeddings"] = max(max_length, teacher.max_sequence_length) + offset
    return config_class(**fields)


def init_from_teacher(student: PreTrainedModel, teacher: PreTrainedModel) -> dict:
    """Copy every teacher tensor whose shape fits into the student (teacher layer `copied_layers()[i]` into
    student layer i; a longer position table tiled, as convert does); report what was copied and what stayed random."""
    layers = copied_layers(student.config.num_hidden_layers, teacher.config.num_hidden_layers)
    source = teacher.state_dict()
    copied, random, notes = [], {}, []
    state = student.state_dict()
    with torch.no_grad():
        for name, tensor in state.items():
            parts = name.split(".")
            if "layer" in parts and parts[parts.index("layer") - 1] == "encoder":
                index = parts.index("layer") + 1
                parts[index] = str(layers[int(parts[index])])
            teacher_name = ".".join(parts)
            value = source.get(teacher_name)
            if value is not None and name.endswith("position_embeddings.weight") and value.shape[0] < tensor.shape[0]:
                value = tile_positions(value, teacher.config.position_offset, tensor.shape[0])
                notes.append(f"{name} tiled from the teacher's {source[teacher_name].shape[0]} rows to {tensor.shape[0]}")
            if value is None:
                random[name] = "not in the teacher"
            elif value.shape != tensor.shape:
                random[name] = f"shape {tuple(tensor.shape)}, the teacher's {teacher_name} is {tuple(value.shape)}"
            else:
                tensor.copy_(value)
                copied.append(name)
        hooked = run_family_hooks(student, set(copied))
    random = {name: reason for name, reason in random.items() if name not in hooked}
    buffers = {name for name, _ in student.named_buffers()}
    return {"copied_layers": {str(i): j for i, j in enumerate(layers)}, "copied_tensors": len(copied),
            "initialised_by_family": hooked, "notes": notes,
            "random": {name: reason for name, reason in random.items() if name not in buffers}}


def init_summary(report: dict) -> str:
    """The report in a few lines: per-layer tensors named once, as `layer.*`."""
    layers = ", ".join(f"{i}<-{j}" for i, j in report["copied_layers"].items())
    lines = [f"distill: student initialised from the teacher: layers (student<-teacher) {layers}; "
             f"{report['copied_tensors']} tensors copied"]
    lines += [f"  {note}" for note in report["notes"]]
    for verb, entries in (("initialised", report["initialised_by_family"]), ("left random", report["random"])):
        grouped: dict[tuple[str, str], int] = {}
        for name, why in entries.items():
            key = (re.sub(r"\.layer\.\d+\.", ".layer.*.", name), re.sub(r"\.layer\.\d+\.", ".layer.*.", why))
            grouped[key] = grouped.get(key, 0) + 1
        lines += [f"  {verb} {name}{f' ({count} layers)' if count > 1 else ''}: {why}"
                  for (name, why), count in grouped.items()]
    return "\n".join(lines)


def check_same_tokenizer(student_path: str, teacher_path: str, student: PreTrainedConfig,
                         teacher: PreTrainedConfig) -> None:
    """The logits only compare token by token when both models read and predict the same vocabulary."""
    if student.vocab_size != teacher.vocab_size or \
            load_tokenizer(student_path).get_vocab() != load_tokenizer(teacher_path).get_vocab():
        raise ValueError(f"the student {student_path} and the teacher {teacher_path} have different vocabularies or "
                         "tokenizers; distillation needs the same tokenizer (build the student from the teacher)")


def build_student(args: DistillArguments, teacher: PreTrainedModel, max_length: int, head: str,
                  extra: dict) -> tuple[PreTrainedModel, dict]:
    """The student with `head` and its initialisation report; `extra` are config fields of the task (labels)."""
    if args.student_name_or_path:
        config = stage.checkpoint_config(args.student_name_or_path, ("ForMaskedLM", "Model", head), "distill")
        check_same_tokenizer(args.student_name_or_path, args.teacher_name_or_path, config, teacher.config)
        stage.check_max_length(max_length, config)
        model = model_class(config, head).from_pretrained(args.student_name_or_path, **extra)
        return model, {"from_checkpoint": args.student_name_or_path}
    config = student_config(args, teacher.config, max_length)
    for key, value in extra.items():
        setattr(config, key, value)
    model = model_class(config, head)(config)
    return model, init_from_teacher(model, teacher)


def check_weights(args: DistillArguments, student: PreTrainedConfig, teacher: PreTrainedConfig) -> Weights:
    layer_map = ([int(x) for x in args.layer_map.split(",")] if args.layer_map else
                 uniform_layer_map(student.num_hidden_layers, teacher.num_hidden_layers))
    if not any(weight > 0 for weight in (args.alpha_kd, args.alpha_mlm, args.alpha_cos, args.alpha_hidden)):
        raise ValueError("every loss weight (--alpha_kd, --alpha_mlm, --alpha_cos, --alpha_hidden) is 0: nothing to train")
    if args.temperature <= 0:
        raise ValueError(f"--temperature must be positive, got {args.temperature}")
    if (args.alpha_cos > 0 or args.alpha_hidden > 0) and student.hidden_size != teacher.hidden_size:
        raise ValueError(f"--alpha_cos and --alpha_hidden compare hidden states: the student's width "
                         f"{student.hidden_size} differs from the teacher's {teacher.hidden_size}")
    if args.alpha_hidden > 0 and (len(layer_map) != student.num_hidden_layers or
                                  not all(1 <= j <= teacher.num_hidden_layers for j in layer_map)):
        raise ValueError(f"--layer_map {layer_map} must give one teacher layer (1..{teacher.num_hidden_layers}) per "
                         f"student layer ({student.num_hidden_layers})")
    return Weights(args.temperature, args.alpha_kd, args.alpha_mlm, args.alpha_cos, args.alpha_hidden, layer_map)


# ----------------------------------------------------------------------------------------- stages
def distill(args: DistillArguments, training_args: TrainingArguments, callbacks: Sequence = ()) -> dict:
    """Distil the teacher into a student (`args.task`: a key of TASK_HEADS); returns the stage's results."""
    if args.task not in TASK_HEADS:
        raise ValueError(f"--task {args.task!r}: distill runs {', '.join(TASK_HEADS)}")
    check_options(args.task, OWNERS, option_values(args))
    teacher = load_teacher(args)
    args = dataclasses.replace(args, teacher_max_length=teacher_reads(args, teacher.config))
    tokenizer = load_tokenizer(args.teacher_name_or_path)
    task = TASKS.get(args.task)
    if task is not None and task.per_token:
        check_fast(task, tokenizer)
        if (args.max_length or 0) > args.teacher_max_length:
            raise ValueError(f"--task {args.task} compares the logits of every token: --max_length {args.max_length} "
                             f"exceeds the {args.teacher_max_length} tokens the teacher reads")
    checkpoint = stage.resume_checkpoint(training_args.output_dir, args)  # after the checks: it may clean up
    if task is None:
        return distill_mlm(args, training_args, teacher, tokenizer, checkpoint, callbacks)
    return distill_task(task, args, training_args, teacher, tokenizer, checkpoint, callbacks)


def start_student(args, training_args, teacher, head: str, max_length: int, extra: dict) -> tuple:
    """(the student with `head` for `max_length` tokens, its initialisation report, the loss weights), checked."""
    set_seed(training_args.seed)
    student, init = build_student(args, teacher, max_length, head, extra)
    weights = check_weights(args, student.config, teacher.config)
    if training_args.process_index == 0 and "copied_layers" in init:
        print(init_summary(init), flush=True)
    stage.check_max_length(max_length, student.config)
    return student, init, weights


def distill_mlm(args, training_args, teacher, tokenizer, checkpoint, callbacks) -> dict:
    max_length = args.max_length or min(512, args.teacher_max_length)
    student, init, weights = start_student(args, training_args, teacher, "ForMaskedLM", max_length, {})
    corpus = task_data.load_corpus(args.train_files, args.dataset or "domain", args.text_column)
    inputs = mlm_inputs(task_data.subset(corpus, args.max_train_samples), 0.02, args.max_eval_samples or 32,
                        args.text_column, student, tokenizer, max_length, training_args, callbacks)
    trainer = DistillationTrainer(model=student, args=training_args, processing_class=tokenizer, teacher=teacher,
                                  teacher_length=args.teacher_max_length, weights=weights, task="mlm", **inputs)
    teacher_loss = evaluate_teacher(trainer, inputs["eval_dataset"])
    stage.train(trainer, checkpoint, args.auto_fit_batch)
    after = trainer.evaluate(metric_key_prefix="after")["after_loss"]
    results = {**base_results(args, student, teacher, trainer, init, max_length),
               "train_sequences": len(inputs["train_dataset"]), "held_out_sequences": len(inputs["eval_dataset"]),
               "teacher_mlm_loss": teacher_loss, "student_mlm_loss": after}
    if trainer.is_world_process_zero():
        print(f"distill: held-out MLM loss: teacher {teacher_loss:.3f}, student {after:.3f} after "
              f"{trainer.state.global_step} steps", flush=True)
    return stage.finish(trainer, results)


def evaluate_teacher(trainer: DistillationTrainer, dataset, **evaluate) -> float | dict:
    """The teacher's held-out loss (MLM) or metrics (the tasks), through the same evaluation loop (`evaluate`: its
    further arguments), on the first tokens it reads, as in training."""
    length = trainer.teacher_length
    dataset = dataset.map(lambda row: {key: row[key][:length] for key in (*task_data.MODEL_INPUTS, "labels")
                                       if key in row and isinstance(row[key], list)}, desc="Cutting to the teacher's length")
    model = trainer.model
    trainer.model = trainer.teacher
    try:
        metrics = trainer.evaluate(dataset, metric_key_prefix="teacher", **evaluate)
    finally:
        trainer.model = model
    return metrics["teacher_loss"] if trainer.task == "mlm" else metrics


def with_unlabeled(train: datasets.Dataset, unlabeled: datasets.Dataset) -> datasets.Dataset:
    """The labelled training rows followed by the unlabelled ones (their labels -100), in the training rows' columns."""
    return datasets.concatenate_datasets([train, unlabeled.select_columns(train.column_names).cast(train.features)])


def teacher_logits(teacher: PreTrainedModel, encoded: datasets.Dataset, collator, length: int, device,
                   batch_size: int) -> list[list[float]]:
    """The teacher's logits for every example (in order) on its first `length` tokens, on `device`."""
    teacher.to(device).eval()
    return task_data.batch_outputs(lambda batch: teacher(**teacher_batch(batch, length)).logits, encoded,
                                       collator, batch_size, device).tolist()


def cached_training_set(training_args, teacher, length: int, encoded, collator) -> tuple[datasets.Dataset, dict]:
    """The training set with a `teacher_logits` column, computed once and kept in `<output_dir>/teacher_outputs`
    (reused on --resume); its cost in seconds and bytes."""
    folder = Path(training_args.output_dir) / CACHE_FOLDER
    started = time.perf_counter()
    if not (folder / "dataset_info.json").is_file():
        with training_args.main_process_first(desc="caching the teacher's outputs"):
            if training_args.process_index == 0:
                logits = teacher_logits(teacher, encoded, collator, length, training_args.device,
                                        training_args.per_device_eval_batch_size)
                encoded.add_column("teacher_logits", logits).save_to_disk(folder)
    cached = datasets.load_from_disk(folder)
    seconds = time.perf_counter() - started
    size = sum(path.stat().st_size for path in folder.rglob("*") if path.is_file())
    return cached, {"seconds": seconds, "bytes": size, "columns": "full logits"}


def distill_task(task: Task, args, training_args, teacher, tokenizer, checkpoint, callbacks) -> dict:
    """Every task's pipeline: the teacher's outputs of the task's head (`Task.logits`) and the student's own loss on
    `Task.targets` supervise it, on the task's data (read and checked as `finetune` does) and the unlabelled rows."""
    max_length = args.max_length or args.teacher_max_length
    data = task.data(args, args, tokenizer, max_length, "distill", training_args.process_index == 0)
    unlabeled = task.unlabeled(args, tokenizer, max_length, data)
    if unlabeled is not None:
        data.features["train"] = with_unlabeled(data.features["train"], unlabeled)
    data.notes["unlabeled"] = 0 if unlabeled is None else len(unlabeled)
    labels = {} if data.labels is None else task_labels(teacher, data.labels)
    student, init, weights = start_student(args, training_args, teacher, task.head, max_length, labels)
    collator = task.collator(tokenizer, stage.pad_multiple(student, max_length))
    cache = None
    if args.cache_teacher_outputs:
        data.features["train"], cache = cached_training_set(training_args, teacher, args.teacher_max_length,
                                                            data.features["train"], collator)
    trainer_class = DistillationTrainer
    if task.trainer_class is not Trainer:  # the task's evaluation (QA: answers over windows) or optimizer
        trainer_class = type(f"{task.trainer_class.__name__}Distillation", (DistillationTrainer, task.trainer_class), {})
    trainer = trainer_class(model=student, args=training_args, data_collator=collator,
                            train_dataset=data.features["train"], eval_dataset=data.features["validation"],
                            processing_class=tokenizer, teacher=teacher, teacher_length=args.teacher_max_length,
                            weights=weights, task=task.name, callbacks=list(callbacks),
                            **task.trainer_options(data, args, args))
    scores = train_and_score(trainer, checkpoint, args.auto_fit_batch, data.features["test"], task.scores,
                             **task.evaluation(data, "test"))
    fields = task.data_fields(data)
    results = {**base_results(args, student, teacher, trainer, init, max_length),
               "examples": {name: len(split) for name, split in data.examples.items()}, **fields, **scores,
               "teacher_output_cache": cache}
    return stage.finish(trainer, results)


def task_labels(teacher: PreTrainedModel, names: list[str]) -> dict:
    """The student's label fields for the data's `names`, which must be the teacher's labels, in its id order."""
    config = teacher.config
    if config.num_labels != len(names):
        raise ValueError(f"the teacher classifies into {config.num_labels} labels, the data has {len(names)} ({names})")
    taught = [config.id2label[i] for i in range(config.num_labels)]
    if taught != names and taught != [f"LABEL_{i}" for i in range(len(names))]:  # LABEL_i: the teacher named none
        raise ValueError(f"the teacher's labels {taught} are not the data's {names} (in id order)")
    return label_fields(names)


def train_and_score(trainer: DistillationTrainer, checkpoint: str | None, auto_fit_batch: bool, test: datasets.Dataset,
                    metrics: dict[str, str], **evaluate) -> dict:
    """Score the teacher on the test split, train the student and score it (`metrics`: result key -> printed name;
    the first is the one whose kept fraction is reported); the scores, also printed in one line."""
    teacher = evaluate_teacher(trainer, test, **evaluate)
    stage.train(trainer, checkpoint, auto_fit_batch)
    student = trainer.evaluate(test, metric_key_prefix="test", **evaluate)
    scores = {f"{who}test_{key}": result[f"{prefix}_{key}"] for key in metrics
              for who, result, prefix in (("teacher_", teacher, "teacher"), ("", student, "test"))}
    main = next(iter(metrics))
    scores[f"kept_fraction_of_teacher_{main}"] = scores[f"test_{main}"] / max(scores[f"teacher_test_{main}"], 1e-9)
    if trainer.is_world_process_zero():
        parts = [f"{name} {scores[f'teacher_test_{key}']:.3f} -> {scores[f'test_{key}']:.3f}" for key, name in metrics.items()]
        parts[0] = (f"{metrics[main]} teacher {scores[f'teacher_test_{main}']:.3f} -> student {scores[f'test_{main}']:.3f} "
                    f"({scores[f'kept_fraction_of_teacher_{main}']:.1%} kept)")
        print(f"distill: test {', '.join(parts)}", flush=True)
    return scores


def base_results(args, student, teacher, trainer, init: dict, max_length: int) -> dict:
    return {"stage": "distill", "task": args.task, "model_type": student.config.model_type,
            "teacher": args.teacher_name_or_path, "teacher_model_type": teacher.config.model_type,
            "student_layers": student.config.num_hidden_layers, "teacher_layers": teacher.config.num_hidden_layers,
            "student_parameters": student.num_parameters(), "teacher_parameters": teacher.num_parameters(),
            "max_length": max_length, "teacher_max_length": trainer.teacher_length, "weights": vars(trainer.weights),
            "initialisation": init}
