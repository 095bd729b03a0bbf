#!/usr/bin/env bash
# The test command: set up .venv, lint, run the test suite (`--slow` adds the slow tests; other arguments go to
# pytest, e.g. `--durations=20` lists the slowest tests).
# The tests run in one pytest-xdist worker per core (at most 4, as each holds its own torch and models), a test file
# per worker so that a file's module-scoped fixtures are built once, and one torch thread per worker: the workers,
# not torch's threads, fill the cores.
# The suite includes tests/test_docs.py: the site built with `mkdocs build --strict`, the notebooks executed (two of
# them with --slow).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup_env.sh
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TOKENIZERS_PARALLELISM=false OMP_NUM_THREADS=1
.venv/bin/ruff check .
workers=(-n auto --maxprocesses 4 --dist loadfile)
if [ "${1:-}" = "--slow" ]; then
    shift
    exec .venv/bin/python -m pytest -m "" -q "${workers[@]}" "$@"
fi
exec .venv/bin/python -m pytest -q "${workers[@]}" "$@"
