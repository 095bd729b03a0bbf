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

# transformers' own model tests ship in its source distribution only: unpack the installed version's tests/ once
# (tests/test_transformers_suite.py runs them on every family)
tf_version=$(.venv/bin/python -c "import transformers; print(transformers.__version__)")
tf_tests=.cache/transformers-tests
if [ ! -f "$tf_tests/transformers-$tf_version/tests/test_modeling_common.py" ]; then
    .venv/bin/python -m pip download --quiet --no-deps --no-binary :all: "transformers==$tf_version" -d "$tf_tests"
    tar -xzf "$tf_tests/transformers-$tf_version.tar.gz" -C "$tf_tests" "transformers-$tf_version/tests"
    rm "$tf_tests/transformers-$tf_version.tar.gz"
fi
