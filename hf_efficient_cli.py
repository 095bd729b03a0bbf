"""The `hf-efficient` command. Each subcommand is a thin argument parser over hf_efficient's workflow/, convert.py
or bench/.

This module sits beside the package, not in it: `import hf_efficient` registers every family (torch and
transformers' model machinery, seconds), which `hf-efficient --help` or a mistyped command does not need. The
commands are a table; only the one on the command line is imported, to add its arguments and run.
"""

import argparse
import copy
import difflib
import importlib
import sys
from collections.abc import Sequence
from importlib.metadata import PackageNotFoundError, version

PROG = "hf-efficient"

# name -> (the function that adds the command's arguments to its parser and sets its `run`, its one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "pretrain": ("hf_efficient.workflow.mlm:add_pretrain_arguments",
                 "MLM pretraining from scratch; trains a byte-level BPE tokenizer unless one is given."),
    "adapt": ("hf_efficient.workflow.mlm:add_adapt_arguments",
              "Domain-adaptive MLM: continue a checkpoint on domain text."),
    "finetune": ("hf_efficient.workflow.tasks:add_finetune_arguments",
                 "Fine-tune a checkpoint: --task classification (accuracy, macro-F1), token_classification "
                 "(entity F1) or question_answering (exact match, F1)."),
    "distill": ("hf_efficient.workflow.distill:add_arguments",
                "Distil a teacher checkpoint into a smaller or efficient student (--task mlm, classification, "
                "token_classification or question_answering)."),
    "workflow": ("hf_efficient.workflow.all_stages:add_arguments",
                 "Pretrain -> adapt -> finetune in one run (default: the embedded data); `demo` is another name "
                 "for it."),
    "demo": ("hf_efficient.workflow.all_stages:add_arguments",
             "Another name for `workflow`, the main job that scripts/demo.sh runs."),
    "convert": ("hf_efficient.convert:add_arguments",
                "Convert a RoBERTa or BERT checkpoint into any registered family, with a longer position table."),
    "long-context": ("hf_efficient.workflow.long_context:add_arguments",
                     "The pretrained-start recipe: convert a RoBERTa/BERT checkpoint to a long family, then a short "
                     "domain MLM (adapt)."),
    "bench": ("hf_efficient.bench.grid:add_arguments",
              "The benchmark grid: every family and the long-input baselines at each length, time and peak memory "
              "as ratios to dense attention."),
    "bench-memory": ("hf_efficient.bench.memory:add_arguments",
                     "Training memory against depth (reversible layers), and one masked-LM training step on a very "
                     "long input."),
    "bench-quality": ("hf_efficient.bench.quality:add_arguments",
                      "Quality against cost: family x length x long-document task over seeds, beside dense "
                      "512-token baselines."),
    "compare": ("hf_efficient.bench.compare:add_arguments",
                "Compare every registered family on one long input: forward+backward time and peak memory, as "
                "ratios to dense."),
}


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
        self.exit(2, error_line(self.prog, f"{message} (see `{self.prog} --help`)"))


def error_line(prog: str, message: str) -> str:
    """`hf-efficient <command>: error: <message>`, every error's one form: on one line, no final full stop."""
    return f"{prog}: error: {' '.join(message.split()).removesuffix('.')}\n"


def package_version() -> str:
    try:
        return version("hf_efficient")
    except PackageNotFoundError:  # running from a source tree that was not installed
        return "0.0.0"


def build_parser(*loaded: str) -> CommandParser:
    """The parser of every command, with the arguments of the `loaded` ones only: the others are listed, their
    modules not imported."""
    parser = CommandParser(
        prog=PROG,
        description="Efficient-attention RoBERTa-style encoders for Hugging Face Transformers.",
    )
    parser.add_argument("--version", action="version", version=f"hf_efficient {package_version()}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (target, summary) in COMMANDS.items():
        subparser = commands.add_parser(name, help=summary, description=summary)
        if name in loaded:
            module, function = target.split(":")
            getattr(importlib.import_module(module), function)(subparser)
    return parser


def chosen_command(argv: Sequence[str]) -> str | None:
    """The command named on the command line: its first word that is not an option (top-level options take no value)."""
    return next((word for word in argv if not word.startswith("-")), None)


def unknown_arguments(command: argparse.ArgumentParser, extra: list[str]) -> str:
    """'unrecognized arguments: ...', with the closest listed option of `command` for each misspelt one."""
    options = [name for action in command._actions if action.help is not argparse.SUPPRESS
               for name in action.option_strings if "-" not in name.lstrip("-")]
    spelt = ["--" + name.split("=")[0].lstrip("-").replace("-", "_") for name in extra if name.startswith("--")]
    hints = [close[0] for key in spelt for close in [difflib.get_close_matches(key, options, n=1, cutoff=0.8)] if close]
    return f"unrecognized arguments: {' '.join(extra)}" + (f"; did you mean {', '.join(hints)}?" if hints else "")


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    command = chosen_command(argv)
    parser = build_parser(command) if command else build_parser()
    try:
        args, extra = parser.parse_known_args(argv)
        if extra:
            named = parser.commands.choices.get(args.command, parser)
            named.error(unknown_arguments(named, extra))
    except SystemExit as done:  # --help, --version and argument errors (already printed)
        return done.code if isinstance(done.code, int) else 2
    if args.command is None:
        parser.print_help()
        return 0
    return args.run(args) or 0


if __name__ == "__main__":
    sys.exit(main())
