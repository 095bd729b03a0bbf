"""The interface every fine-tuning task implements, what the tasks share, and the one stage runner.

A task is one module (classify.py, token_classification.py, question_answering.py, multiple_choice.py) that
registers one `Task`: its options (dataclasses), its data (read by `training_data.load_splits`, every row checked
before a model is built, a bad row one line naming the file, the row and the field), its features, its head and
the outputs and labels `distill` compares, its metrics, its model-free baseline and its report fields. `finetune`,
`distill` and `bench-quality` reach the tasks through this interface only. An option that the chosen task does not
apply stops the run, naming the tasks that apply it (`check_options`).
"""

from __future__ import annotations

import copy
import dataclasses
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import datasets
import torch
from transformers import (
    DataCollatorWithPadding,
    EarlyStoppingCallback,
    PreTrainedConfig,
    PreTrainedModel,
    PreTrainedTokenizerBase,
    Trainer,
    TrainerCallback,
    TrainingArguments,
    set_seed,
)

from ..hub import load_tokenizer
from . import peft_recipe, stage

FINETUNE_DEFAULTS = {
    "weight_decay": 0.01, "warmup_steps": 0.1, "lr_scheduler_type": "linear", "max_grad_norm": 1.0,
    "per_device_train_batch_size": 8, "per_device_eval_batch_size": 8, "num_train_epochs": 3, "logging_steps": 10,
    "eval_strategy": "epoch", "save_strategy": "epoch", "save_total_limit": 2, "load_best_model_at_end": True,
    "metric_for_best_model": "macro_f1", "greater_is_better": True, "report_to": "none",
    "dataloader_pin_memory": torch.cuda.is_available(),
}
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

    @property
    def defaults(self) -> dict:
        """TrainingArguments defaults of its runs: the best checkpoint and early stopping by its `metric`."""
        return {**FINETUNE_DEFAULTS, "metric_for_best_model": self.metric}

    def finetune(self, *arguments, **options) -> dict:
        """Its Python function, which `finetune` and `bench-quality` call: (FinetuneArguments, an instance of each of
        its `arguments`, TrainingArguments, callbacks=())."""
        raise NotImplementedError

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
                   training_args: TrainingArguments) -> tuple[Callable[..., PreTrainedModel], dict]:
        """(what builds its model, again for a search's trials and to restore the start; what the results report of
        it under `settings`): the checkpoint with the head `settings`, under `--peft`. `collator(model)` batches."""

        def init(trial=None) -> PreTrainedModel:
            model = stage.model_class(config, self.head).from_pretrained(args.model_name_or_path, **settings)
            return peft_recipe.wrap(model, args, self.head)

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

    def report(self, data: TaskData, test: dict, baseline: dict, command: str) -> tuple[dict, str]:
        """(its fields of `command`'s results from `test` (`evaluate`'s) and the baseline, their one-line summary)."""
        raise NotImplementedError

    def warnings(self, trainer: Trainer, data: TaskData, test: dict, results: dict) -> list[str]:
        """Why the fine-tuned model looks broken, recorded under `warnings` and printed as `warning` says."""
        return []

    def bench_metric(self, results: dict) -> float:
        """`bench-quality`'s number for a finetune run's results: its main test score in percent."""
        raise NotImplementedError

    def bench_arguments(self, truncated: bool) -> list:
        """Its `arguments` of a bench-quality run (`truncated`: of the baseline reading each input's first window)."""
        return [kind() for kind in self.arguments]

    def model_free(self, train: datasets.Dataset, test: datasets.Dataset, **columns: str) -> float:
        """`bench-quality`'s TF-IDF row: the model-free baseline fitted on `train`, its test score in percent
        (`columns`: the column options its `finetune` run reads, e.g. classification's --text_pair_column)."""
        raise NotImplementedError


def label_fields(names: list[str]) -> dict:
    """The config fields of a head that classifies into `names`, in id order."""
    return {"num_labels": len(names), "id2label": dict(enumerate(names)), "label2id": {n: i for i, n in enumerate(names)}}


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


# ----------------------------------------------------------------------------------------- the stage
def start(args, task: Task) -> tuple[PreTrainedConfig, PreTrainedTokenizerBase, int]:
    """The checks every task runs before reading data: (config, tokenizer, max_length)."""
    config = stage.checkpoint_config(args.model_name_or_path, ("ForMaskedLM", "Model", task.head),
                                     f"finetune --task {task.name}")
    tokenizer = load_tokenizer(args.tokenizer_name or args.model_name_or_path)
    check_fast(task, tokenizer)
    max_length = args.max_length or config.max_sequence_length
    stage.check_max_length(max_length, config)
    stage.check_tokenizer(tokenizer, config)
    return config, tokenizer, max_length


def check_fast(task: Task, tokenizer: PreTrainedTokenizerBase) -> None:
    if task.per_token and not tokenizer.is_fast:
        raise ValueError(f"--task {task.name} needs a fast tokenizer (it maps tokens to characters); this one is slow")


def has_head(config: PreTrainedConfig, head: str) -> bool:
    return any(stage.head_of(name) == head for name in config.architectures or [])


def check_head_size(args, config: PreTrainedConfig, head: str, num_labels: int, what: str) -> None:
    """A checkpoint that already has this task's head must have `num_labels` outputs."""
    if has_head(config, head) and config.num_labels != num_labels:
        raise ValueError(f"{args.model_name_or_path}'s {head} head classifies into {config.num_labels} labels, the "
                         f"data has {num_labels} ({what}); start from the MLM checkpoint instead")


def length_of_training(args, training_args: TrainingArguments, train_examples: int) -> list[TrainerCallback]:
    """The length-of-training options of every task: `--min_train_steps` raises `training_args.num_train_epochs` (in
    place) for `train_examples` per epoch, counted in examples (question answering: questions, not the windows the
    Trainer iterates, so that a model reading windows and one reading whole contexts see the same questions);
    `--early_stopping_patience` gives the returned callbacks (none without `load_best_model_at_end`, whose best
    metric the callback compares with)."""
    if training_args.max_steps <= 0 and args.min_train_steps > 0:
        batch = training_args.train_batch_size * training_args.gradient_accumulation_steps * training_args.world_size
        steps_per_epoch = max(1, math.ceil(train_examples / batch))
        training_args.num_train_epochs = max(training_args.num_train_epochs,
                                             math.ceil(args.min_train_steps / steps_per_epoch))
    stopping = args.early_stopping_patience > 0 and training_args.load_best_model_at_end
    return [EarlyStoppingCallback(args.early_stopping_patience)] if stopping else []


def keep_start(trainer: Trainer, start: dict | None, init: Callable[..., PreTrainedModel]) -> str:
    """"start" when the start's validation scores beat the best checkpoint's, its weights then restored by `init`, else
    "fine-tuned": the Trainer never saves step 0, so its best checkpoint leaves out a start that is a model of the task
    already (a head initialised as the probe), and fine-tuning that never beats it would give back a worse model."""
    args, best = trainer.args, trainer.state.best_metric
    metric = (args.metric_for_best_model or "loss").removeprefix("eval_")
    value = None if start is None or not args.load_best_model_at_end or best is None else start.get(metric)
    if value is None or not (value > best if args.greater_is_better else value < best):
        return "fine-tuned"
    sharded = trainer.is_deepspeed_enabled or trainer.is_fsdp_enabled
    if not sharded:
        trainer.model.load_state_dict(init().state_dict())
    if trainer.is_world_process_zero():
        print(f"finetune: fine-tuning never beat its start on validation: {metric} {value:.3f} against the best "
              f"checkpoint's {best:.3f}; " + ("a sharded run keeps the fine-tuned model (its full state dict does not "
                                              "load into shards)" if sharded else "the saved model is the start"),
              flush=True)
    return "fine-tuned" if sharded else "start"


def run(task: Task, args, task_args, training_args: TrainingArguments, callbacks: Sequence = ()) -> dict:
    """Fine-tune `task`: check -> load and check the data -> features -> model (a search) -> Trainer -> the start as
    a candidate -> evaluate -> report, warnings."""
    check_options(task.name, options_of("finetune"), option_values(args, task_args))
    stage.quiet_progress(training_args)
    config, tokenizer, max_length = start(args, task)
    task.check(args, config)
    data = task.data(args, task_args, tokenizer, max_length, "finetune", training_args.process_index == 0)
    settings, what = task.head_settings(data, args, config)
    check_head_size(args, config, task.head, settings.get("num_labels", config.num_labels), what)  # none: any
    checkpoint = stage.resume_checkpoint(training_args.output_dir, args)  # after the checks: it may clean up

    def collator(model: PreTrainedModel):
        return task.collator(tokenizer, stage.pad_multiple(model, max_length))

    set_seed(training_args.seed)
    init, model_settings = task.model_init(args, config, settings, data, collator, training_args)
    model = init()
    stopping = length_of_training(args, training_args, len(data.examples["train"]))  # a search's epochs replace these

    def trainer_for(run_args: TrainingArguments, **model_or_init) -> Trainer:
        return task.trainer_class(  # a copy of the callbacks per Trainer: early stopping counts evaluations
            args=run_args, data_collator=collator(model), train_dataset=data.features["train"],
            eval_dataset=data.features["validation"], processing_class=tokenizer,
            callbacks=[*callbacks, *map(copy.copy, stopping)], **model_or_init,
            **task.trainer_options(data, args, task_args))

    searched = task.search(lambda run_args: trainer_for(run_args, model_init=init), args, training_args)
    if searched:
        training_args = dataclasses.replace(training_args, **searched["best"])
    trainer = trainer_for(training_args, model=model)
    stage.train(trainer, checkpoint, args.auto_fit_batch)
    kept = keep_start(trainer, task.start_scores(data), init)
    test = task.evaluate(trainer, data)
    fields, summary = task.report(data, test, task.baseline(data), "finetune")
    state, run_args = trainer.state, trainer.args
    results = {"stage": "finetune", "task": task.name, "model_type": config.model_type, "max_length": max_length,
               "source": args.model_name_or_path, "examples": {name: len(split) for name, split in data.examples.items()},
               **fields,
               "settings": {"seed": run_args.seed, "learning_rate": run_args.learning_rate, "batch_size":
                            run_args.per_device_train_batch_size, "num_train_epochs": run_args.num_train_epochs,
                            "best_checkpoint": state.best_model_checkpoint, "kept": kept, **model_settings},
               **({"hp_search": searched} if searched else {})}
    results["warnings"] = task.warnings(trainer, data, test, results)
    if trainer.is_world_process_zero():
        print(f"finetune: {summary}", flush=True)
        for warning in results["warnings"]:
            print(f"finetune: WARNING: {task.warning.format(warning)}", flush=True)
    return stage.finish(trainer, results, args.merge)
