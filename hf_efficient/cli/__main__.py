"""`python -m hf_efficient.cli` (as torchrun and `accelerate launch -m` start it): the `hf-efficient` command."""

import sys

from hf_efficient_cli import main

sys.exit(main())
