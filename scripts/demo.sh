#!/usr/bin/env bash
# The main job: set up .venv, then run the demo on the embedded data: all-MiniLM-L6-v2 made long and fine-tuned on
# long-document QA beside 512-token baselines (extra arguments are passed on; --from_scratch: the three-stage workflow).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup_env.sh
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
exec .venv/bin/hf-efficient demo "$@"
