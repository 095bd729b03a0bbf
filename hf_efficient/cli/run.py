"""`run_cli`: how every command runs its work, bad input answered with one line instead of a traceback."""

from __future__ import annotations

import argparse
import sys

import torch
from huggingface_hub.errors import StrictDataclassError

from hf_efficient_cli import PROG, error_line

from ..training import stage


def run_cli(args: argparse.Namespace, function) -> int:
    """Run the work of the command `args` was parsed for; print input errors and interrupts as one line naming the
    command, in the form of its argument errors (exit 2 / 130), instead of a traceback."""
    prog = f"{PROG} {args.command}"
    try:
        function()
    except stage.Interrupted as error:
        print(f"{prog}: {error}", file=sys.stderr)
        return 130
    except (ValueError, OSError, StrictDataclassError) as error:  # the last: a config field of the wrong type
        print(error_line(prog, str(error)), end="", file=sys.stderr)
        return 2
    finally:
        for folder in list(stage.HELD_FOLDERS):
            stage.release_output_dir(folder)
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            # a process group left to the interpreter's exit can abort it ("terminate called without an active
            # exception" from gloo's threads under torchrun)
            torch.distributed.destroy_process_group()
    return 0
