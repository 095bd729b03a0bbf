"""The interface every fine-tuning task implements and what the tasks share.

A task is one module of this folder (classification.py, token_classification.py, question_answering.py,
multiple_choice.py) that registers one `Task`: its options (dataclasses), its data (read by `data.load_splits`,
every row checked before a model is built, a bad row one line naming the file, the row and the field), its
features, its head, its metrics, its model-free baseline and its report fields. The runners above (`finetune`
and `distill` in training/, `bench-quality` in bench/) reach the tasks through this interface only, and keep
their own per-task parts (distillation's outputs and targets, the bench's score) in their own layer. An option
that the chosen task does not apply stops the run, naming the tasks that apply it (`check_options`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import datasets
from transformers import (
    DataCollatorWithPadding,
    PreTrainedConfig,
    PreTrainedModel,
    PreTrainedTokenizerBase,
    Trainer,
    TrainingArguments,
)

from ..models.families import FAMILIES, HEADS

TASKS: dict[str, Task] = {}  # name -> task, in the order the task modules register (`register`)


@dataclass
class TaskData:
    """A task's checked data: per split, the examples and the features the model reads (QA: windows)."""

    examples: dict[str, datasets.Dataset]
    features: dict[str, datasets.Dataset]
    labels: list[str] | None = None  # the label names in id order, for a task with named labels
    notes: dict = field(default_factory=dict)  # what the task reports about its data (truncated words, skipped rows)


class Task:
    """One fine-tuning task. A subclass sets the attributes and the methods that raise NotImplementedError."""

    name: str
    head: str  # a key of HEADS
    metric: str  # what picks the best checkpoint and stops early (`metric_for_best_model`)
    arguments: tuple[type, ...] = ()  # its own dataclasses, given to its Python function after FinetuneArguments
    options: dict[str, tuple[type, ...]] = {}  # command -> the dataclasses of the options it applies (`check_options`)
    scores: dict[str, str] = {}  # test score -> printed name (`distill` prints them), the first the main one
    trainer_class: type[Trainer] = Trainer
    per_token = True  # it maps tokens to characters (a fast tokenizer) and `distill` compares logits token by token
    logits: tuple[str, ...] = ("logits",)  # its head's outputs, which `distill` compares with the teacher's
    targets: tuple[str, ...] = ("labels",)  # the batch's labels of each of its `logits` (-100: none), for `distill`
    windowed = False  # it reads an input longer than max_length over windows itself (bench-quality's windows row)
    keeps_start = False  # its start is a model of the task (`start_scores`), which validation can keep over fine-tuning
    warning = "{}"  # each of its `warnings` as `finetune` prints it

    def check(self, args, config: PreTrainedConfig) -> None:
        """Checks of its options against the checkpoint's config, before the data is read."""

    def data(self, args, task_args, tokenizer: PreTrainedTokenizerBase, max_length: int, command: str,
             show: bool) -> TaskData:
        """The checked splits and their features (`args`: `finetune`'s or `distill`'s file, column and sample
        options; `task_args`: its own); what `command` prints about them, when `show`."""
        raise NotImplementedError

    def head_settings(self, data: TaskData, args, config: PreTrainedConfig) -> tuple[dict, str]:
        """(config fields of its head for `data` and `config`, what its outputs are, for a message about the head)."""
        return label_fields(data.labels), f"labels {data.labels}"

    def collator(self, tokenizer: PreTrainedTokenizerBase, pad_to_multiple_of: int | None):
        return DataCollatorWithPadding(tokenizer, pad_to_multiple_of=pad_to_multiple_of)

    def model_init(self, args, config: PreTrainedConfig, settings: dict, data: TaskData, collator: Callable,
                   training_args: TrainingArguments, wrap: Callable[[PreTrainedModel], PreTrainedModel],
                   ) -> tuple[Callable[..., PreTrainedModel], dict]:
        """(what builds its model, again for a search's trials and to restore the start; what the results report of
        it under `settings`): the checkpoint with the head `settings`, given to `wrap` (the runner's `--peft`).
        `collator(model)` batches."""

        def init(trial=None) -> PreTrainedModel:
            return wrap(model_class(config, self.head).from_pretrained(args.model_name_or_path, **settings))

        return init, {}

    def trainer_options(self, data: TaskData, args, task_args) -> dict:
        """Its `trainer_class`'s arguments beyond the Trainer's common ones (compute_metrics, examples)."""
        return {}

    def search(self, trainer: Callable, args, training_args: TrainingArguments) -> dict | None:
        """A hyperparameter search's results (None: none) on `trainer(training_args)`, trained with its "best"."""

    def start_scores(self, data: TaskData) -> dict | None:
        """The start's validation scores when it is a model of the task already, a candidate (`keep_start`)."""

    def evaluate(self, trainer: Trainer, data: TaskData) -> dict:
        """What `report` gets of the fine-tuned model (`test`): the test split's scores."""
        return trainer.evaluate(data.features["test"], metric_key_prefix="test", **self.evaluation(data, "test"))

    def evaluation(self, data: TaskData, split: str) -> dict:
        """Arguments of `trainer.evaluate` beyond the features, to score `split`."""
        return {}

    def unlabeled(self, args, tokenizer: PreTrainedTokenizerBase, max_length: int,
                  data: TaskData) -> datasets.Dataset | None:
        """`distill --unlabeled_file`'s rows as features without labels (-100, in the shape of `data`'s), or None
        without the option."""
        return None

    def baseline(self, data: TaskData) -> dict:
        """The model-free baseline's test scores, reported next to the model's."""
        raise NotImplementedError

    def report(self, data: TaskData, test: dict, baseline: dict) -> tuple[dict, str]:
        """(its fields of `finetune`'s results from `test` (`evaluate`'s) and the baseline, their one-line summary)."""
        raise NotImplementedError

    def data_fields(self, data: TaskData) -> dict:
        """What `distill`'s results record of its data, the unlabelled rows (`data.notes["unlabeled"]`) among it."""
        raise NotImplementedError

    def warnings(self, trainer: Trainer, data: TaskData, test: dict, results: dict) -> list[str]:
        """Why the fine-tuned model looks broken, recorded under `warnings` and printed as `warning` says."""
        return []


def label_fields(names: list[str]) -> dict:
    """The config fields of a head that classifies into `names`, in id order."""
    return {"num_labels": len(names), "id2label": dict(enumerate(names)), "label2id": {n: i for i, n in enumerate(names)}}


def head_of(architecture: str) -> str:
    """"HfeLongformerForMaskedLM" -> "ForMaskedLM"; a bare encoder class -> "Model"."""
    return next((head for head in HEADS if head != "Model" and architecture.endswith(head)), "Model")


def model_class(config: PreTrainedConfig, head: str) -> type[PreTrainedModel]:
    return FAMILIES[config.model_type].models[head]


def has_head(config: PreTrainedConfig, head: str) -> bool:
    return any(head_of(name) == head for name in config.architectures or [])


def check_head_size(args, config: PreTrainedConfig, head: str, num_labels: int, what: str) -> None:
    """A checkpoint that already has this task's head must have `num_labels` outputs."""
    if has_head(config, head) and config.num_labels != num_labels:
        raise ValueError(f"{args.model_name_or_path}'s {head} head classifies into {config.num_labels} labels, the "
                         f"data has {num_labels} ({what}); start from the MLM checkpoint instead")


def check_fast(task: Task, tokenizer: PreTrainedTokenizerBase) -> None:
    if task.per_token and not tokenizer.is_fast:
        raise ValueError(f"--task {task.name} needs a fast tokenizer (it maps tokens to characters); this one is slow")


def register(task: Task) -> Task:
    TASKS[task.name] = task
    return task


# ----------------------------------------------------------------------------------------- options
def check_options(task: str, owners: dict[str, Sequence[type]], values: dict) -> None:
    """ValueError naming the first option in `values` that differs from its default although `task` does not apply
    it, and the tasks that do. `owners` maps each task of the command to the dataclasses of the options it applies
    (`options_of`); an option in none of them is every task's."""
    fields = {name: {option.name: option for kind in kinds for option in dataclasses.fields(kind)}
              for name, kinds in owners.items()}
    for options in fields.values():
        for option in options.values():
            default = option.default_factory() if option.default is dataclasses.MISSING else option.default
            if option.name in values and values[option.name] != default and option.name not in fields.get(task, {}):
                listed = [name for name, each in fields.items() if option.name in each]
                names = f"{', '.join(listed[:-1])} and {listed[-1]}" if len(listed) > 1 else listed[0]
                raise ValueError(f"--{option.name} applies to --task {names}, not {task}")


def options_of(command: str) -> dict[str, tuple[type, ...]]:
    """The registered tasks that `command` runs, each with the dataclasses of the options it applies."""
    return {name: task.options[command] for name, task in TASKS.items() if command in task.options}


def option_values(*options: object) -> dict:
    """The fields of dataclass instances (None: none) by name, for `check_options`."""
    return {option.name: getattr(each, option.name) for each in options if each is not None
            for option in dataclasses.fields(each)}
