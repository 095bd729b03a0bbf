#!/usr/bin/env bash
# Create (or reuse) .venv and install hf_efficient with its dev tools.
# torch is pinned to the CPU build here only; the library itself accepts a range of versions.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -x .venv/bin/python ]; then
    python3 -m venv .venv
fi
.venv/bin/python -m pip install --quiet --upgrade pip
.venv/bin/python -m pip install --quiet "torch==2.13.0"
.venv/bin/python -m pip install --quiet -e ".[dev]"
