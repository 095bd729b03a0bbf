"""`hf-efficient workflow`: the arguments of the three stages in one run (`training.all_stages`)."""

from __future__ import annotations

import argparse

from ..training.all_stages import WorkflowArguments, run_workflow
from . import arguments


def add_arguments(parser: argparse.ArgumentParser) -> None:
    arguments.add_arguments(parser, WorkflowArguments)
    parser.epilog += " Given here, they apply to every stage; --output_dir is the run's folder."
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> None:
    run_workflow(*arguments.parse_namespace(args, WorkflowArguments))
