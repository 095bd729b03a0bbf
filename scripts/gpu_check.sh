#!/usr/bin/env bash
# The GPU checks, in parts that each fit one 10-minute call (every step runs under its own time limit):
#   checks   every family's fp16/bf16 training step, bf16 forward and inductor compile on CUDA (tests marked
#            `gpu`), 2-GPU DDP/FSDP where there are 2 GPUs, the bf16-vs-fp32 50-step MLM benchmark, DeepSpeed
#            ZeRO-2 if installed (limits: 8 minutes)
#   bench    `hf-efficient bench --device cuda` at 1K-16K tokens in fp32 and in bf16 (where dense sdpa can use
#            flash), and inference at batch 1 and 8 at 4K-8K tokens (limits: 6.5 minutes)
#   compile  every family eager against torch.compile (inductor) at 8192 tokens (limit: 9 minutes)
#   kernels  the fused FlexAttention paths (issue 50): every family's fused forward and gradients against its
#            reference path, then bf16 training step and inference at batch 1 and 8, 4K-32K tokens, at RoBERTa-base's
#            and all-MiniLM-L6-v2's sizes, against dense flash sdpa, dense over 512-token windows, transformers'
#            Longformer and BigBird and ModernBERT (scripts/gpu_kernels.py; limits: 9 minutes; rows not reached in a
#            step's budget say so)
#   quality  `hf-efficient bench-quality` on long_qa and long_match from all-MiniLM-L6-v2: Longformer-style at
#            2048 tokens against dense truncated to 512 and dense over 512-token windows, 3 seeds, at a budget
#            the CPU cannot afford (limit: 9 minutes; kept results are reused, so running the part again
#            continues an interrupted matrix)
# Writes logs and summary.md to $OUT (else ./gpu-check-out). Run from anywhere:
#     bash scripts/gpu_check.sh                 # every part, in order
#     bash scripts/gpu_check.sh bench quality   # the parts named
#     bash scripts/gpu_check.sh kernels         # issue 50's part alone (one 10-minute call)
# Python: a python3 whose torch sees a GPU is used as it is (the project goes on PYTHONPATH, installed
# without dependencies; nothing is downloaded; wheels in .whl/ are installed too: an image without datasets and
# evaluate, or with a transformers older than 5.23, needs them there); otherwise a venv gets the CUDA build of
# torch from PyPI (`pip install torch`: scripts/setup_env.sh installs the CPU build) and `pip install -e .[dev]`.
set -uo pipefail
cd "$(dirname "$0")/.."
PARTS="${*:-checks bench compile quality kernels}"
for part in $PARTS; do
    case $part in checks|bench|compile|quality|kernels) ;; *) echo "unknown part '$part'; choose from: checks bench compile quality kernels"; exit 2;; esac
done
wants() { [[ " $PARTS " == *" $1 "* ]]; }

OUT="${OUT:-$PWD/gpu-check-out}"
mkdir -p "$OUT"
SUMMARY="$OUT/summary.md"
export PYTHONPATH="$PWD" PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1

cuda_python() { "$1" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; }
PY=python3
if ! cuda_python "$PY"; then
    python3 -m venv /tmp/hfe-gpu-venv && PY=/tmp/hfe-gpu-venv/bin/python
    "$PY" -m pip install --quiet --upgrade pip && "$PY" -m pip install --quiet torch && "$PY" -m pip install --quiet -e ".[dev]"
    cuda_python "$PY" || { echo "no GPU visible to torch" | tee "$SUMMARY"; exit 1; }
else
    "$PY" -m pip install --quiet --no-deps --no-build-isolation -e . >"$OUT/install.log" 2>&1 || true
    [ -d .whl ] && "$PY" -m pip install --quiet --no-index --no-deps .whl/*.whl >>"$OUT/install.log" 2>&1  # carried wheels
fi
# An image's own packages may be older than the package needs (transformers): one line, and wheels to carry in .whl/.
"$PY" -c "import hf_efficient" 2>"$OUT/import.log" || {
    echo "cannot import the package with $PY: $(tail -n 1 "$OUT/import.log") (put wheels of what is missing in .whl/)" \
        | tee "$SUMMARY"; exit 1; }

step() {  # step NAME SECONDS COMMAND...: run with a time limit, log to $OUT/NAME.log, one summary line
    local name=$1 limit=$2; shift 2
    local start=$SECONDS
    timeout "$limit" "$@" >"$OUT/$name.log" 2>&1
    local status=$?
    echo "| $name | $([ $status = 0 ] && echo ok || echo "FAILED ($status)") | $((SECONDS - start)) s | \`$*\` |" >>"$SUMMARY"
    return 0
}

bench() {  # bench NAME SECONDS OPTIONS...: `hf-efficient bench` on the GPU in one process (starting CUDA in a fresh
           # process per row costs more than measuring), its tables in $OUT/NAME.md
    local name=$1 limit=$2; shift 2
    step "$name" "$limit" "$PY" -m hf_efficient.cli bench --device cuda --same_process "$@" \
        --output "$OUT/$name.json" --markdown "$OUT/$name.md"
}

{
    echo "# GPU check, $(date -u +%FT%TZ), commit $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
    echo
    echo '```'
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv 2>&1
    "$PY" -c 'import torch, transformers, accelerate; print("torch", torch.__version__, "cuda", torch.version.cuda, "transformers", transformers.__version__, "accelerate", accelerate.__version__, "GPUs", torch.cuda.device_count())' 2>&1
    for module in datasets evaluate peft deepspeed; do "$PY" -c "import $module" 2>/dev/null && echo "$module: yes" || echo "$module: missing"; done
    echo '```'
    echo
    echo "| step | result | time | command |"
    echo "|---|---|---|---|"
} >"$SUMMARY"

if wants checks; then
    # 1. Tests marked gpu (every family: autocast fp16/bf16 step, bf16 forward, inductor; 2-GPU Trainer DDP/FSDP).
    #    Spread over 8 processes where pytest-xdist is installed: inductor compiles each family's graphs on the CPUs.
    XDIST=$("$PY" -c "import xdist" 2>/dev/null && echo "-n 8")
    step gpu-tests 270 "$PY" -m pytest tests/test_gpu.py -m gpu -q -rsxf -p no:cacheprovider --durations=10 $XDIST
    # 2. bf16 vs fp32, 50 MLM steps per family through the workflow (needs `datasets`).
    if "$PY" -c "import datasets, evaluate" 2>/dev/null; then
        step precision 120 "$PY" scripts/precision_check.py --steps 50 --device cuda
        # 3. DeepSpeed ZeRO-2, one GPU, one workflow stage (only where deepspeed is installed).
        if "$PY" -c "import deepspeed" 2>/dev/null; then
            step deepspeed-zero2 90 "$PY" -m torch.distributed.run --nproc_per_node 1 -m hf_efficient.cli pretrain \
                --output_dir "$OUT/ds" --size tiny --vocab_size 400 --max_length 256 --max_train_documents 300 \
                --max_steps 5 --bf16 --deepspeed examples/accelerate/ds_zero2.json --disable_tqdm true
            rm -rf "$OUT/ds"
        fi
    fi
fi
if wants bench; then
    # 4. Speed and memory per family at 1K-16K tokens: fp32, then bf16 autocast (flash sdpa needs 16-bit inputs).
    bench bench 130 --lengths 1024 4096 16384 --repeats 3
    bench bench-bf16 150 --dtype bfloat16 --lengths 1024 4096 16384 --repeats 3
    # 5. Inference (eval-mode forwards, batch 1 and 8, bf16 autocast) at 4K and 8K tokens against dense over
    #    512-token windows (eager and compiled) and transformers' long models.
    bench bench-inference 100 --inference --dtype bfloat16 --batch_sizes 1 8 --lengths 4096 8192 --repeats 3
fi
if wants compile; then
    # 6. Each family eager against torch.compile (inductor, Triton) at 8192 tokens, bf16 autocast (inductor took
    #    1-2.5 minutes a family for the forward alone at four lengths in step 1 on an H200).
    bench bench-compile 540 --compile --dtype bfloat16 --lengths 8192 --no_references --global_tokens
fi
if wants quality; then
    # 7. Does reading the whole document pay (issue 11): every training and test example, enough steps to learn
    #    (on 2 CPU cores 200 steps of 4 windows left dense QA at 2.6 F1; docs/quality.md).
    step quality 540 "$PY" -m hf_efficient.cli bench-quality --start minilm --families hfe_longformer --lengths 2048 \
        --tasks long_qa long_match --seeds 0 1 2 --adapt_steps 200 --max_steps 600 --batch_size 8 \
        --learning_rate 1e-4 --max_train_samples 776 --max_eval_samples 184 --output_dir "$OUT/quality"
fi
if wants kernels; then
    # 8. The fused paths: correctness first (fp32 and bf16, forward and gradients, against the blocked kernels), then
    #    speed and memory, RoBERTa-base's size first (the issue's targets), each length's three modes before the next
    #    length; compilation (Triton, a few shapes per family) is paid inside each step's budget.
    step kernels-check 150 "$PY" scripts/gpu_kernels.py check --out "$OUT"
    step kernels-roberta-base 270 "$PY" scripts/gpu_kernels.py speed --size roberta-base --budget 230 --out "$OUT"
    step kernels-minilm 120 "$PY" scripts/gpu_kernels.py speed --size minilm --budget 90 --out "$OUT"
fi
{
    echo
    for table in gpu_kernels_check gpu_kernels_roberta-base gpu_kernels_minilm; do
        [ -f "$OUT/$table.md" ] && { echo "## $table"; cat "$OUT/$table.md"; echo; }
    done
    for name in gpu-tests bench bench-bf16 bench-inference bench-compile kernels-check; do
        [ -f "$OUT/$name.log" ] || continue
        echo "## $name"
        echo '```'
        grep -v 'Warning\|warn' "$OUT/$name.log" | tail -n 40
        echo '```'
    done
    [ -f "$OUT/precision.log" ] && { echo "## bf16 vs fp32"; grep '^|\|^[0-9]* MLM' "$OUT/precision.log"; }
    [ -f "$OUT/quality/quality.md" ] && { echo "## quality"; cat "$OUT/quality/quality.md"; }
} >>"$SUMMARY"
cat "$SUMMARY"
