#!/usr/bin/env bash
# The main job: set up .venv, then run the three-stage demo on the embedded data (extra arguments are passed on).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup_env.sh
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
exec .venv/bin/hf-efficient demo "$@"
