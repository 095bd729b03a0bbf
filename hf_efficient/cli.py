"""The `hf-efficient` command. Each subcommand is a thin argument parser over workflow/, convert.py or bench/."""

import argparse
import copy
import difflib
import sys
from collections.abc import Sequence

from . import __version__


class UnderscoreHelpFormatter(argparse.HelpFormatter):
    """Lists each option under transformers' underscore spelling only.

    `HfArgumentParser` adds a dashed alias of every field (`--max-length`); it still parses, but the
    help shows one spelling.
    """

    def _format_action_invocation(self, action: argparse.Action) -> str:
        shown = [name for name in action.option_strings if "-" not in name.lstrip("-")]
        if not shown or len(shown) == len(action.option_strings):
            return super()._format_action_invocation(action)
        visible = copy.copy(action)
        visible.option_strings = shown
        return super()._format_action_invocation(visible)


class CommandParser(argparse.ArgumentParser):
    """An argument parser whose errors are one line naming the problem and the command, not the usage.

    Abbreviated options are refused: with both spellings of every field, `--vocab` would be "ambiguous".
    """

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("formatter_class", UnderscoreHelpFormatter)
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def add_subparsers(self, **kwargs) -> argparse._SubParsersAction:
        self.commands = super().add_subparsers(**kwargs)
        return self.commands

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (see `{self.prog} --help`)\n")


def build_parser() -> CommandParser:
    parser = CommandParser(
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
    from .bench import quality
    from .workflow import long_context

    quality.add_arguments(commands.add_parser("bench-quality", help=quality.__doc__.splitlines()[0]))
    long_context.add_arguments(commands.add_parser("long-context", help=long_context.__doc__.splitlines()[0]))
    return parser


def unknown_arguments(command: argparse.ArgumentParser, extra: list[str]) -> str:
    """'unrecognized arguments: ...', with the closest listed option of `command` for each misspelt one."""
    options = [name for action in command._actions if action.help is not argparse.SUPPRESS
               for name in action.option_strings if "-" not in name.lstrip("-")]
    spelt = {name: "--" + name.split("=")[0].lstrip("-").replace("-", "_") for name in extra if name.startswith("--")}
    hints = [f"{name} -> {close[0]}?" for name, key in spelt.items()
             for close in [difflib.get_close_matches(key, options, n=1, cutoff=0.8)] if close]
    return f"unrecognized arguments: {' '.join(extra)}" + (f"; did you mean {', '.join(hints)}" if hints else "")


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    try:
        args, extra = parser.parse_known_args(argv)
        if extra:
            command = parser.commands.choices.get(args.command, parser)
            command.error(unknown_arguments(command, extra))
    except SystemExit as done:  # --help, --version and argument errors (already printed)
        return done.code if isinstance(done.code, int) else 2
    if args.command is None:
        parser.print_help()
        return 0
    return args.run(args) or 0


if __name__ == "__main__":
    sys.exit(main())
