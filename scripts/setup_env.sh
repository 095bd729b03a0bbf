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
    # cache every command's arguments (hf_efficient_cli.py), so that even the first `hf-efficient <command> --help`
    # or misspelt option is answered without importing torch; should this fail, each command caches its own when run
    .venv/bin/python -c 'import hf_efficient_cli as cli; cli.build_parser(*cli.COMMANDS, use_cache=True)' \
        || echo "setup_env.sh: the hf-efficient commands' arguments were not cached; each command caches its own" >&2
    echo "$wanted" > "$STAMP"
fi

# transformers' own model tests ship in its source distribution only: unpack the installed version's tests/ once
# (tests/test_transformers_suite.py runs them on every family)
tf_version=$(.venv/bin/python -c 'from importlib.metadata import version; print(version("transformers"))') || tf_version=""
tf_tests=.cache/transformers-tests
if [ -n "$tf_version" ] && [ ! -f "$tf_tests/transformers-$tf_version/tests/test_modeling_common.py" ]; then
    .venv/bin/python -m pip download --quiet --no-deps --no-binary :all: "transformers==$tf_version" -d "$tf_tests"
    tar -xzf "$tf_tests/transformers-$tf_version.tar.gz" -C "$tf_tests" "transformers-$tf_version/tests"
    rm "$tf_tests/transformers-$tf_version.tar.gz"
fi
