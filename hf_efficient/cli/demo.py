"""`hf-efficient demo`: the long-document demo's budget (bench-quality's options) and, with `--from_scratch`, the
three-stage workflow's options (`demo.py`)."""

from __future__ import annotations

import argparse

from ..bench import quality
from ..demo import OUTPUT_DIR, PRESET, RUN_OPTIONS, bench_command, check_options, demo, workflow_options
from ..training import all_stages
from . import workflow as workflow_command
from .arguments import parse_namespace


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """`--from_scratch`, bench-quality's budget options that the workflow lacks, then the workflow's options; all but
    `--from_scratch` default to "not given", so that each demo can tell what was given and apply its own defaults."""
    parser.add_argument("--from_scratch", action="store_true",
                        help="run the three-stage workflow instead: pretrain -> adapt -> finetune a small model from "
                             "scratch (default --output_dir hfe-workflow-demo)")
    bench, workflow = argparse.ArgumentParser(add_help=False), argparse.ArgumentParser(add_help=False)
    quality.add_arguments(bench)
    workflow_command.add_arguments(workflow)
    budget = parser.add_argument_group("the long-document demo's budget: bench-quality's options, the demo's values "
                                       "in brackets (--learning_rate, --num_train_epochs, --max_steps too)")
    for action in bench._actions:
        if action.dest in PRESET and action.dest not in workflow_options():
            action.help = f"{action.help} [{' '.join(bench_command({action.dest: PRESET[action.dest]})[1:])}]"
            budget._add_action(action)
    scratch = parser.add_argument_group("--from_scratch: the options of `hf-efficient workflow`")
    for action in workflow._actions:  # the ones both demos take, and the hidden TrainingArguments fields, stay above
        (parser if action.dest in RUN_OPTIONS or action.help == argparse.SUPPRESS else scratch)._add_action(action)
    for action in parser._actions:
        if action.dest != "from_scratch":
            action.default = argparse.SUPPRESS
    parser.epilog = (f"Without --from_scratch: `hf-efficient bench-quality {' '.join(bench_command(PRESET))} "
                     f"--output_dir {OUTPUT_DIR}`. With --from_scratch, {workflow.epilog[0].lower()}{workflow.epilog[1:]}")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> None:
    given = {name: value for name, value in vars(args).items() if name not in ("command", "run", "from_scratch")}
    check_options(set(given), args.from_scratch)
    if args.from_scratch:
        all_stages.run_workflow(*parse_namespace(args, all_stages.WorkflowArguments))
    else:
        run_options = {name: given.pop(name) for name in RUN_OPTIONS if name in given}
        demo(given, **run_options)
