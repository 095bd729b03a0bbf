#!/usr/bin/env bash
# Create (or reuse) .venv and install hf_efficient with its dev tools.
# torch is pinned to the CPU build here only; the library itself accepts a range of versions.
# pip runs only when needed: on a new .venv, when the package's metadata or this script changed since the last
# install (a hash of them is kept in .venv), or when the pinned torch or hf_efficient is missing.
set -euo pipefail
cd "$(dirname "$0")/.."
TORCH_VERSION=2.13.0
STAMP=.venv/hf_efficient-setup.sha256
if [ ! -x .venv/bin/python ]; then
    python3 -m venv .venv
fi
wanted=$(cat setup.cfg setup.py pyproject.toml scripts/setup_env.sh | sha256sum | cut -d " " -f 1)
installed() {
    [ "$(cat "$STAMP" 2>/dev/null)" = "$wanted" ] && .venv/bin/python -c 'import sys
from importlib.metadata import version
sys.exit(version("torch").split("+")[0] != sys.argv[1] or not version("hf_efficient"))' "$TORCH_VERSION" 2>/dev/null
}
if ! installed; then
    .venv/bin/python -m pip install --quiet --upgrade pip
    .venv/bin/python -m pip install --quiet "torch==$TORCH_VERSION"
    .venv/bin/python -m pip install --quiet -e ".[dev]"
    echo "$wanted" > "$STAMP"
fi
