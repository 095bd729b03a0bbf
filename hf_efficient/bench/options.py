"""Command-line option helpers shared by the bench subcommands: one-line errors (exit code 2) instead of
tracebacks for bad values, and transformers' underscore spelling with the dashed one kept as a hidden alias."""

import argparse

from ..models.families import check_family


def positive_int(text: str) -> int:
    value = int(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {value}")
    return value


def non_negative_int(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {value}")
    return value


def family(text: str) -> str:
    """A registered model type; checked while parsing so that a typo is a usage error, not a traceback."""
    try:
        check_family(text, "family")
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from error
    return text


def add_option(parser: argparse.ArgumentParser, name: str, **kwargs) -> None:
    """`--name_with_underscores` (transformers' spelling), also accepted as `--name-with-dashes` (not shown in help)."""
    parser.add_argument(f"--{name}", **kwargs)
    if "_" in name:
        parser.add_argument(f"--{name.replace('_', '-')}", **{**kwargs, "dest": name, "help": argparse.SUPPRESS})
