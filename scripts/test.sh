#!/usr/bin/env bash
# The test command: set up .venv, lint, run the test suite (`--slow` adds the slow tests; other arguments go to
# pytest, e.g. `--durations=20` lists the slowest tests).
# The suite includes tests/test_docs.py: the site built with `mkdocs build --strict`, every notebook executed.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup_env.sh
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
.venv/bin/ruff check .
if [ "${1:-}" = "--slow" ]; then
    shift
    exec .venv/bin/python -m pytest -m "" -q "$@"
fi
exec .venv/bin/python -m pytest -q "$@"
