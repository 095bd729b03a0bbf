"""`hf-efficient distill`: its arguments (`training.distill`), the Trainer defaults of the task it distils."""

from __future__ import annotations

import argparse

from ..tasks.task import TASKS
from ..training import stage
from ..training.distill import DistillArguments, distill
from ..training.finetuning import task_defaults
from ..training.mlm import MLM_DEFAULTS
from .arguments import add_arguments as add_stage_arguments
from .arguments import parse_namespace


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_stage_arguments(parser, DistillArguments)
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> None:
    distill_args, given = parse_namespace(args, DistillArguments)
    defaults = task_defaults(TASKS[distill_args.task]) if distill_args.task in TASKS else MLM_DEFAULTS
    distill(distill_args, stage.training_arguments(defaults, given))
