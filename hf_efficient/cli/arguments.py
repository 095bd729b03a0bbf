"""The command line of a Trainer stage: its dataclasses' fields and every `TrainingArguments` field as options,
and back from the parsed options to the dataclasses and the TrainingArguments fields given."""

from __future__ import annotations

import argparse
import dataclasses

from transformers import HfArgumentParser, TrainingArguments


def add_arguments(parser: argparse.ArgumentParser, *dataclass_types: type) -> None:
    """Add the fields of `dataclass_types` and of `TrainingArguments` to `parser` (a subcommand's).

    TrainingArguments options default to "not given" (`argparse.SUPPRESS`), so that a stage's own
    defaults apply unless the user sets a field; their help is folded into one line to keep `--help` short.
    """
    parser._add_container_actions(HfArgumentParser(list(dataclass_types), add_help=False))
    training = HfArgumentParser([TrainingArguments], add_help=False)
    for action in training._actions:
        action.default = argparse.SUPPRESS
        action.help = argparse.SUPPRESS
    parser._add_container_actions(training)
    parser.epilog = ("Any transformers.TrainingArguments field is accepted as --<field> VALUE "
                     "(e.g. --bf16, --gradient_accumulation_steps 4, --report_to tensorboard, --max_steps 1000).")


def parse_namespace(args: argparse.Namespace, *dataclass_types: type) -> tuple:
    """(one instance per dataclass type..., the TrainingArguments fields the user gave, as a dict)."""
    values = vars(args)
    instances = [kind(**{f.name: values[f.name] for f in dataclasses.fields(kind) if f.init and f.name in values})
                 for kind in dataclass_types]
    names = {f.name for f in dataclasses.fields(TrainingArguments) if f.init}
    return (*instances, {name: value for name, value in values.items() if name in names})
