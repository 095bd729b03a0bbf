"""`hf-efficient pretrain` and `hf-efficient adapt`: the arguments of the MLM stages (`training.mlm`)."""

from __future__ import annotations

import argparse

from ..training import stage
from ..training.mlm import MLM_DEFAULTS, AdaptArguments, PretrainArguments, adapt, pretrain
from .arguments import add_arguments, parse_namespace


def add_pretrain_arguments(parser: argparse.ArgumentParser) -> None:
    add_arguments(parser, PretrainArguments)
    parser.set_defaults(run=lambda args: run_command(args, PretrainArguments, pretrain))


def add_adapt_arguments(parser: argparse.ArgumentParser) -> None:
    add_arguments(parser, AdaptArguments)
    parser.set_defaults(run=lambda args: run_command(args, AdaptArguments, adapt))


def run_command(args: argparse.Namespace, kind: type, function) -> None:
    stage_args, given = parse_namespace(args, kind)
    function(stage_args, stage.training_arguments(MLM_DEFAULTS, given))
