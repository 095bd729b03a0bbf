"""`hf-efficient finetune`: one command line for every registered task (`task.Task`), `--task` picking the run.

The command line holds every task's options; the chosen task is given its own (`Task.arguments`) and the
common ones, and a value given to an option of another task stops the run (`task.check_options`). The tasks
have registered by now: importing `tasks` imports every task module.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import dataclass, field

from ..tasks.task import TASKS, check_options, options_of
from ..tasks.task_data import EMBEDDED_TASKS
from ..training.finetuning import FinetuneArguments, finetune_task, task_defaults, training_arguments
from .arguments import add_arguments, parse_namespace


@dataclass
class TaskArguments:
    task: str | None = field(default=None, metadata={
        "help": "what to fine-tune (default: what the embedded --dataset is for, classification for kernel_docs)",
        "choices": tuple(TASKS)})


def add_finetune_arguments(parser: argparse.ArgumentParser) -> None:
    """`FinetuneArguments`, `--task` and every task's own arguments."""
    add_arguments(parser, FinetuneArguments, TaskArguments,
                        *dict.fromkeys(kind for each in TASKS.values() for kind in each.arguments))
    parser.set_defaults(run=run)


def chosen_task(args: argparse.Namespace) -> str:
    """--task, or else the task of the embedded --dataset (an unknown name fails later, listing the choices)."""
    return args.task or EMBEDDED_TASKS.get(args.dataset, ("classification",))[0]


def run(args: argparse.Namespace, callbacks: Sequence = ()) -> None:
    """Run the `finetune` command line `args` (`callbacks`: more `TrainerCallback`s, for a measuring script)."""
    task = TASKS[chosen_task(args)]
    args_of_all, *task_args, given = parse_namespace(args, FinetuneArguments, *task.arguments)
    check_options(task.name, options_of("finetune"), vars(args))
    finetune_task(task, args_of_all, task_args, training_arguments(args_of_all, given, task_defaults(task)), callbacks)
