"""What the fine-tuning tasks beyond classification share, and the `--task` choice of `hf-efficient finetune`.

Token classification reads local files only, question answering local files or the embedded `long_qa`;
both check every row before a model is built, and report a bad row as one line naming the file, the row
(counted from 1, in file order) and the field.
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field

import datasets
from transformers import HfArgumentParser, PreTrainedConfig, PreTrainedTokenizerBase, Trainer, TrainingArguments

from ..hub import load_tokenizer
from . import classify, stage, training_data
from .classify import FINETUNE_DEFAULTS, FinetuneArguments

ROW = "source_row"  # each example's row in its file, kept through cuts and subsets for messages
TASKS = ("classification", "token_classification", "question_answering")
# the best checkpoint (finetune and distill) and early stopping (finetune) by the entity / answer F1 both tasks report
TASK_DEFAULTS = {**FINETUNE_DEFAULTS, "metric_for_best_model": "f1"}
# the options of `finetune` and `distill` that not every --task applies, and the tasks that do: a value given for
# another task stops the run (`check_task_options`), as silently ignored it would mislead
TASK_OPTIONS = {
    **dict.fromkeys(("classifier_pooling", "classifier_init", "class_weights", "hp_search", "cache_teacher_outputs"),
                    ("classification",)),
    "classifier_learning_rate": ("classification", "token_classification"),
    "label_column": ("classification", "token_classification"),
    "text_column": ("mlm", "classification", "token_classification"),
    "label_list": ("token_classification",),
    **dict.fromkeys(("doc_stride", "n_best_size", "max_answer_length"), ("question_answering",)),
    **dict.fromkeys(("train_file", "validation_file", "test_file", "unlabeled_file", "max_unlabeled_documents"), TASKS),
    **dict.fromkeys(("train_files", "alpha_cos", "alpha_hidden", "layer_map"), ("mlm",)),
}


@dataclass
class TaskArguments:
    task: str | None = field(default=None, metadata={
        "help": "what to fine-tune (default: what the embedded --dataset is for, classification for kernel_docs)",
        "choices": TASKS})


@dataclass
class Split:
    """One split's rows and where they came from, for error messages."""

    dataset: datasets.Dataset
    path: str

    def where(self, row: int, column: str) -> str:
        return f"{self.path}, row {row + 1}, field {column!r}"


def load_splits(args: FinetuneArguments, task: str, load=lambda path: training_data.load_files([path]),
                check=lambda split: None) -> dict[str, Split]:
    """train, validation and test `Split`s from the files, or the embedded `args.dataset` without --train_file.

    `load(path)` reads one file; `check(split)` stops on a bad row of it, before a split too small to cut is
    reported (the bad row is the problem to fix first). A missing validation or test split is cut from train; the
    cut splits keep the train file's name and row numbers (their rows come from it).
    """
    if not args.train_file:
        if not any(kind == task for kind, _ in training_data.EMBEDDED_TASKS.values()):
            raise ValueError(f"--task {task} needs local data: give --train_file (and --validation_file, --test_file)")
        splits = {name: Split(dataset.add_column(ROW, list(range(len(dataset)))), f"the embedded {args.dataset} {name} split")
                  for name, dataset in training_data.load_embedded_task(args.dataset, task).items()}
        for split in splits.values():
            check(split)
        return splits
    given = {"train": args.train_file, "validation": args.validation_file, "test": args.test_file}
    splits = {}
    for name, path in given.items():
        if path:
            dataset = load(path)
            splits[name] = Split(dataset.add_column(ROW, list(range(len(dataset)))), path)
            check(splits[name])
    missing = [name for name in ("validation", "test") if name not in splits]
    if missing:
        train = splits["train"]
        if len(train.dataset) < 1 + 2 * len(missing):
            raise ValueError(f"{train.path} has {len(train.dataset)} rows, too few to cut {' and '.join(missing)} from; "
                             f"give {' and '.join(f'--{name}_file' for name in missing)}")
        parts = train.dataset.train_test_split(test_size=0.1 * len(missing), seed=1234)
        splits["train"] = Split(parts["train"], train.path)
        if len(missing) == 2:
            halves = parts["test"].train_test_split(test_size=0.5, seed=1234)
            parts = {"validation": halves["train"], "test": halves["test"]}
        else:
            parts = {missing[0]: parts["test"]}
        splits.update({name: Split(dataset, train.path) for name, dataset in parts.items()})
    return splits


def require_columns(split: Split, columns: dict[str, str]) -> None:
    """A ValueError naming the file and the first missing column; `columns` maps each to what it should hold."""
    for column, what in columns.items():
        if column not in split.dataset.column_names:
            raise ValueError(f"{split.path}: column {column!r} ({what}) not found; its columns are "
                             f"{[name for name in split.dataset.column_names if name != ROW]}")


def limit(splits: dict[str, Split], args: FinetuneArguments) -> None:
    splits["train"].dataset = training_data.sample(splits["train"].dataset, args.max_train_samples)
    for name in ("validation", "test"):
        splits[name].dataset = training_data.sample(splits[name].dataset, args.max_eval_samples)


def check_task_options(task: str, offered: Sequence[str], *options: object) -> None:
    """ValueError naming the first field of the `options` dataclasses that differs from its default although `task`
    does not apply it (TASK_OPTIONS), and those of the command's `offered` tasks that do."""
    for args in options:
        for option in dataclasses.fields(args):
            applying = TASK_OPTIONS.get(option.name, (task,))
            default = option.default_factory() if option.default is dataclasses.MISSING else option.default
            if task not in applying and getattr(args, option.name) != default:
                listed = [each for each in applying if each in offered]
                names = f"{', '.join(listed[:-1])} and {listed[-1]}" if len(listed) > 1 else listed[0]
                raise ValueError(f"--{option.name} applies to --task {names}, not {task}")


def start(args: FinetuneArguments, training_args: TrainingArguments, head: str, task: str,
          task_args: object) -> tuple[str | None, PreTrainedConfig, PreTrainedTokenizerBase, int]:
    """The checks every task runs before reading data, `task_args` being the task's own options: (checkpoint to
    resume, config, tokenizer, max_length)."""
    check_task_options(task, TASKS, args, task_args)
    config = stage.checkpoint_config(args.model_name_or_path, ("ForMaskedLM", "Model", head), f"finetune --task {task}")
    tokenizer = load_tokenizer(args.tokenizer_name or args.model_name_or_path)
    if not tokenizer.is_fast:
        raise ValueError(f"--task {task} needs a fast tokenizer (it maps tokens to characters); this one is slow")
    max_length = args.max_length or config.max_sequence_length
    stage.check_max_length(max_length, config)
    stage.check_tokenizer(tokenizer, config)
    checkpoint = stage.resume_checkpoint(training_args.output_dir, args)  # after the checks: it may clean up
    return checkpoint, config, tokenizer, max_length


def check_head_size(args: FinetuneArguments, config: PreTrainedConfig, head: str, num_labels: int, what: str) -> None:
    """A checkpoint that already has this task's head must have `num_labels` outputs."""
    if any(stage.head_of(name) == head for name in config.architectures or []) and config.num_labels != num_labels:
        raise ValueError(f"{args.model_name_or_path} has a {head} head of {config.num_labels} outputs, the data needs "
                         f"{num_labels} ({what}); start from the MLM checkpoint instead")


def base_results(task: str, args: FinetuneArguments, config: PreTrainedConfig, trainer: Trainer, max_length: int,
                 examples: dict[str, int]) -> dict:
    """The fields every task's results start with (as the classifier's)."""
    return {"stage": "finetune", "task": task, "model_type": config.model_type, "source": args.model_name_or_path,
            "max_length": max_length, "global_step": trainer.state.global_step, "world_size": trainer.args.world_size,
            "examples": examples}


# ----------------------------------------------------------------------------------------- command line
def add_finetune_arguments(parser: argparse.ArgumentParser) -> None:
    """The classifier's arguments plus `--task` and the other tasks' own; the task picks the run."""
    from . import question_answering, token_classification  # they import this module

    classify.add_arguments(parser)
    parser._add_container_actions(HfArgumentParser(
        [TaskArguments, token_classification.TokenClassificationArguments,
         question_answering.QuestionAnsweringArguments], add_help=False))
    runs = {"classification": parser.get_default("run"), "token_classification": token_classification.run,
            "question_answering": question_answering.run}

    every_task = (FinetuneArguments, token_classification.TokenClassificationArguments,
                  question_answering.QuestionAnsweringArguments)

    def run(args: argparse.Namespace) -> int:
        # the command line holds every task's options; each task's function sees (and checks) only its own
        task = chosen_task(args)
        options = stage.parse_namespace(args, *every_task)[:-1]
        return stage.run_cli(args, lambda: check_task_options(task, TASKS, *options)) or runs[task](args)

    parser.set_defaults(run=run)


def chosen_task(args: argparse.Namespace) -> str:
    """--task, or else the task of the embedded --dataset (an unknown name fails later, listing the choices)."""
    return args.task or training_data.EMBEDDED_TASKS.get(args.dataset, ("classification",))[0]


def run_task(args: argparse.Namespace, function, *dataclass_types: type) -> int:
    """Parse `FinetuneArguments`, `dataclass_types` and TrainingArguments from `args` and run `function` on them."""
    *parsed, given = stage.parse_namespace(args, FinetuneArguments, *dataclass_types)
    return stage.run_cli(args, lambda: function(*parsed, classify.training_arguments(parsed[0], given, TASK_DEFAULTS)))
