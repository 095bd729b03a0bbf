"""`python -m hf_efficient.cli` (as torchrun and `accelerate launch -m` start it) and `from hf_efficient.cli import
main`: the `hf-efficient` command, which lives in the top-level module `hf_efficient_cli` so that its `--help` and
argument errors need not import this package."""

import sys

from hf_efficient_cli import build_parser, main

__all__ = ["build_parser", "main"]

if __name__ == "__main__":
    sys.exit(main())
