"""The `hf-efficient` command. Each subcommand is a thin argument parser over workflow/, convert.py or bench/."""

import argparse
import sys
from collections.abc import Sequence

from . import __version__


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="hf-efficient",
        description="Efficient-attention RoBERTa-style encoders for Hugging Face Transformers.",
    )
    parser.add_argument("--version", action="version", version=f"hf_efficient {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    from .bench import compare, grid, memory

    compare.add_arguments(commands.add_parser("compare", help=compare.__doc__.splitlines()[0]))
    from . import convert

    convert.add_arguments(commands.add_parser("convert", help=convert.__doc__.splitlines()[0]))
    from .workflow import commands as workflow_commands

    workflow_commands.add_commands(commands)
    grid.add_arguments(commands.add_parser("bench", help=grid.__doc__.splitlines()[0]))
    memory.add_arguments(commands.add_parser("bench-memory", help=memory.__doc__.splitlines()[0]))
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 0
    return args.run(args) or 0


if __name__ == "__main__":
    sys.exit(main())
