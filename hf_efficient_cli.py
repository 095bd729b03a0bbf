"""The `hf-efficient` command. Each subcommand is a thin argument parser over hf_efficient's workflow/, convert.py
or bench/.

This module sits beside the package, not in it: `import hf_efficient` registers every family (torch and
transformers' model machinery, seconds), which `hf-efficient --help` or a mistyped command does not need. The
commands are a table; only the one on the command line is imported, to add its arguments and run.

A command's own arguments (TrainingArguments' among them) take that import too, so a description of them is cached
the first time its real parser is built (`write_cached_arguments`, scripts/setup_env.sh does it for every command):
`hf-efficient finetune --help` and a misspelt option are then answered from it, without torch. A command line that
passes it is parsed again by the real parser, which converts and checks the values, and runs.
"""

import argparse
import contextlib
import copy
import difflib
import hashlib
import importlib
import importlib.util
import json
import os
import sys
from collections.abc import Sequence
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

PROG = "hf-efficient"

# name -> (the function that adds the command's arguments to its parser and sets its `run`, its one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "pretrain": ("hf_efficient.cli.mlm:add_pretrain_arguments",
                 "MLM pretraining from scratch; trains a byte-level BPE tokenizer unless one is given."),
    "adapt": ("hf_efficient.cli.mlm:add_adapt_arguments",
              "Domain-adaptive MLM: continue a checkpoint on domain text."),
    "finetune": ("hf_efficient.cli.finetune:add_finetune_arguments",
                 "Fine-tune a checkpoint: --task classification (accuracy, macro-F1), token_classification "
                 "(entity F1) or question_answering (exact match, F1)."),
    "distill": ("hf_efficient.cli.distill:add_arguments",
                "Distil a teacher checkpoint into a smaller or efficient student (--task mlm, classification, "
                "token_classification or question_answering)."),
    "workflow": ("hf_efficient.cli.workflow:add_arguments",
                 "Pretrain -> adapt -> finetune in one run (default: the embedded data); `demo --from_scratch` "
                 "runs it too."),
    "demo": ("hf_efficient.cli.demo:add_arguments",
             "The main job that scripts/demo.sh runs: all-MiniLM-L6-v2 made long (Longformer-style, 2048 tokens) and "
             "fine-tuned on long-document QA beside 512-token windows, truncation and TF-IDF (`bench-quality` at a "
             "small budget); --from_scratch runs the three-stage `workflow` instead."),
    "convert": ("hf_efficient.cli.convert:add_arguments",
                "Convert a RoBERTa or BERT checkpoint into any registered family, with a longer position table."),
    "long-context": ("hf_efficient.cli.long_context:add_arguments",
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
    "bench-pipelines": ("hf_efficient.bench.pipelines:add_arguments",
                        "Pipelines on long documents: seconds per document, each family reading the whole document "
                        "against a dense 512-token model striding (QA) or truncating (classification)."),
    "recommend": ("hf_efficient.bench.recommend:add_arguments",
                  "Which family for your documents on this machine: their token lengths, a short side-by-side "
                  "measurement within --time_budget, a ranked choice with its settings and the next commands."),
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


def build_parser(*loaded: str, use_cache: bool = False) -> CommandParser:
    """The parser of every command, with the arguments of the `loaded` ones only: the others are listed, their
    modules not imported.

    `use_cache`: a loaded command's arguments come from its cached description when there is a current one (they
    then check the command line only: its parser sets no `run`); otherwise its real parser is built and described.
    """
    parser = CommandParser(
        prog=PROG,
        description="Efficient-attention RoBERTa-style encoders for Hugging Face Transformers.",
    )
    parser.add_argument("--version", action="version", version=f"hf_efficient {package_version()}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (target, summary) in COMMANDS.items():
        subparser = commands.add_parser(name, help=summary, description=summary)
        if name in loaded and not (use_cache and add_cached_arguments(subparser, name)):
            module, function = target.split(":")
            getattr(importlib.import_module(module), function)(subparser)
            if use_cache:
                write_cached_arguments(subparser, name)
    return parser


# ----------------------------------------------------------------------------------------- cached arguments
def cache_folder() -> Path:
    """$HF_EFFICIENT_CACHE/cli, by default ~/.cache/hf_efficient/cli (under $XDG_CACHE_HOME when it is set)."""
    root = os.environ.get("HF_EFFICIENT_CACHE") or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache",
                                                        "hf_efficient")
    return Path(root, "cli")


def cache_key() -> str:
    """What a command's arguments depend on: the versions of hf_efficient, transformers (TrainingArguments) and Python
    (argparse), and the source of this module and of the package, any file of which may add an option or a choice."""
    digest = hashlib.sha256(f"{package_version()} {version('transformers')} {sys.version}".encode())
    digest.update(Path(__file__).read_bytes())
    package = Path(importlib.util.find_spec("hf_efficient").origin).parent
    for path in sorted(package.rglob("*.py")):
        digest.update(f"\0{path.relative_to(package)} {path.stat().st_size}\0".encode() + path.read_bytes())
    return digest.hexdigest()


def describe(parser: argparse.ArgumentParser) -> dict:
    """What `--help` and the parsing of option names and value counts need of `parser`'s arguments (with the group
    each is listed under), as JSON.

    Help is stored expanded (`%(default)s`...), choices as argparse shows them: the values are left to the real
    parser, which converts them before it checks the choices.
    """
    formatter = parser._get_formatter()
    group_of = {id(action): group.title for group in parser._action_groups for action in group._group_actions}
    arguments = []
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction):  # every parser has its own
            continue
        hidden = action.help == argparse.SUPPRESS
        metavar = action.metavar
        if metavar is None and action.choices is not None:
            metavar = "{" + ",".join(map(str, action.choices)) + "}"
        arguments.append({
            "flags": action.option_strings, "dest": action.dest, "nargs": action.nargs, "metavar": metavar,
            "required": action.required, "hidden": hidden, "group": group_of[id(action)],
            "help": None if hidden or action.help is None else formatter._expand_help(action).replace("%", "%%"),
        })
    groups = [{"title": group.title, "description": group.description} for group in parser._action_groups]
    return {"description": parser.description, "epilog": parser.epilog, "usage": parser.usage, "groups": groups,
            "arguments": arguments}


def add_cached_arguments(parser: argparse.ArgumentParser, name: str) -> bool:
    """Add the cached description of command `name`'s arguments to its `parser`; False (and nothing added) when
    there is none for this install, or it cannot be read."""
    try:
        cached = json.loads((cache_folder() / f"{name}.json").read_text())
        if cached["key"] != cache_key():
            return False
        texts = cached["description"], cached["epilog"], cached["usage"]
        described = CommandParser(add_help=False)  # whole, or not at all: a broken file fails before `parser` changes
        groups = {group.title: group for group in described._action_groups}
        for group in cached["groups"]:
            if group["title"] not in groups:
                groups[group["title"]] = described.add_argument_group(group["title"], group["description"])
        for argument in cached["arguments"]:
            options = {"default": argparse.SUPPRESS,
                       "help": argparse.SUPPRESS if argument["hidden"] else argument["help"]}
            if argument["nargs"] == 0:  # a flag: store_true, store_const, count...
                options.update(action="store_const", const=None)
            else:
                metavar = argument["metavar"]
                options.update(nargs=argument["nargs"], metavar=tuple(metavar) if isinstance(metavar, list) else metavar)
            group = groups[argument["group"]]
            if argument["flags"]:
                group.add_argument(*argument["flags"], dest=argument["dest"], required=argument["required"], **options)
            else:
                group.add_argument(argument["dest"], **options)
    except Exception:  # missing, corrupt or of another format: the real parser is built, and described again
        return False
    parser._add_container_actions(described)
    parser.description, parser.epilog, parser.usage = texts
    return True


def write_cached_arguments(parser: argparse.ArgumentParser, name: str) -> None:
    """Cache the description of command `name`'s arguments from its real `parser`; skipped when the cache folder
    cannot be written."""
    folder = cache_folder()
    partial = folder / f"{name}.json.{os.getpid()}"
    try:
        folder.mkdir(parents=True, exist_ok=True)
        partial.write_text(json.dumps({"key": cache_key(), **describe(parser)}))
        partial.replace(folder / f"{name}.json")  # whole files only, also when processes start side by side (torchrun)
    except OSError:
        with contextlib.suppress(OSError):
            partial.unlink(missing_ok=True)


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


def parse(parser: CommandParser, argv: Sequence[str]) -> argparse.Namespace:
    """`argv` parsed by `parser`; unknown arguments are an error naming the closest options."""
    args, extra = parser.parse_known_args(argv)
    if extra:
        named = parser.commands.choices.get(args.command, parser)
        named.error(unknown_arguments(named, extra))
    return args


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    command = chosen_command(argv)
    try:
        parser = build_parser(command, use_cache=True) if command else build_parser()
        args = parse(parser, argv)
        if args.command and "run" not in args:  # it passed the cached description: now the real parser
            args = parse(build_parser(command), argv)
    except SystemExit as done:  # --help, --version and argument errors (already printed)
        return done.code if isinstance(done.code, int) else 2
    except ImportError as error:  # a missing or too old package (the real parser imports the package)
        print(f"hf-efficient: error: {error}", file=sys.stderr)
        return 1
    if args.command is None:
        parser.print_help()
        return 0
    from hf_efficient.cli.run import run_cli  # the package, which the command's real parser has imported already

    return run_cli(args, lambda: args.run(args))


if __name__ == "__main__":
    sys.exit(main())
