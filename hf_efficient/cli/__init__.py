"""The `hf-efficient` command: `from hf_efficient.cli import main`. The command table, its parser and the error
line live in the top-level module `hf_efficient_cli`, so that `--help` and argument errors need not import this
package; each command's arguments and the glue that runs it are one module of this folder (`COMMANDS` names it).
"""

from hf_efficient_cli import build_parser, main

__all__ = ["build_parser", "main"]
