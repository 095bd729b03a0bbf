#!/usr/bin/env python3
"""Resident memory over a long CPU fine-tuning run with batches of varying length (issue 24): does it grow?

Runs the `hf-efficient finetune` command line given after `--` in this process, through the task's own Python
function (its Trainer and its collator), reads this process's resident set (VmRSS) every `--every` training steps
and prints it, then its growth: the highest sample of the last `--window` steps against the highest of the first
`--window` steps from step `--start` (the highest: one sample can fall between the larger batches' peaks). `--small_model FOLDER` first writes a small
randomly initialised dense encoder there (all-MiniLM-L6-v2's tokenizer) and fine-tunes it: dense attention pads no
batch to a multiple of its own, so every batch has the length of its longest row. `--varied_data FILE` first writes
the embedded kernel_docs training texts there, each cut to a random number of words (the embedded texts are longer
than a short --max_length, which would make every batch the same length), and trains on it.

    taskset -c 1 env OMP_NUM_THREADS=1 python scripts/rss_growth.py --small_model /tmp/small \\
        --varied_data /tmp/varied.jsonl -- --output_dir /tmp/run --max_length 256 --max_steps 300 \\
        --eval_strategy no --save_strategy no --disable_tqdm true
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path

from transformers import AutoTokenizer, TrainerCallback

import hf_efficient
from hf_efficient.cli import finetune as finetune_command
from hf_efficient.cli.run import run_cli
from hf_efficient.data import load_kernel_docs
from hf_efficient.training.long_context import minilm_folder
from hf_efficient_cli import build_parser

SMALL = {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 256}
WORDS = (8, 200)  # the range of a --varied_data text's words


def resident_mib() -> float:
    """This process's resident set now (not its peak), in MiB."""
    line = next(line for line in Path("/proc/self/status").read_text().splitlines() if line.startswith("VmRSS:"))
    return int(line.split()[1]) / 1024


class ResidentSampler(TrainerCallback):
    """Records (global step, resident MiB, process CPU seconds) after every `every`-th training step."""

    def __init__(self, every: int):
        self.every, self.samples = every, []

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step % self.every == 0:
            self.samples.append((state.global_step, resident_mib(), time.process_time()))


def write_small_model(folder: Path, max_length: int) -> None:
    """A randomly initialised `hfe_roberta` masked LM of `SMALL` size with all-MiniLM-L6-v2's tokenizer."""
    tokenizer = AutoTokenizer.from_pretrained(minilm_folder())
    family = hf_efficient.FAMILIES["hfe_roberta"]
    config = family.config_class(vocab_size=len(tokenizer), max_position_embeddings=max_length + 2,
                                 pad_token_id=tokenizer.pad_token_id, **SMALL)
    family.models["ForMaskedLM"](config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)


def write_varied_data(path: Path, seed: int = 0) -> None:
    """kernel_docs' training texts, each cut to a random number of words in `WORDS`, with their labels, as jsonl."""
    generator = random.Random(seed)
    rows = load_kernel_docs()["train"]
    names = rows.features["label"].names
    with path.open("w") as out:
        for text, label in zip(rows["text"], rows["label"], strict=True):
            words = text.split()[: generator.randint(*WORDS)]
            out.write(json.dumps({"text": " ".join(words), "label": names[label]}) + "\n")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--every", type=int, default=10, help="sample every this many steps")
    parser.add_argument("--start", type=int, default=20, help="growth is counted from this step")
    parser.add_argument("--window", type=int, default=50, help="growth compares the highest samples of two windows")
    parser.add_argument("--small_model", type=Path, help="write a small dense encoder here and fine-tune it")
    parser.add_argument("--varied_data", type=Path, help="write texts of varied length here and train on them")
    parser.add_argument("finetune", nargs=argparse.REMAINDER, help="-- then `hf-efficient finetune` options")
    args = parser.parse_args()
    options = [option for option in args.finetune if option != "--"]
    if args.small_model:
        finetune = build_parser("finetune").parse_args(["finetune", *options])
        write_small_model(args.small_model, finetune.max_length or 512)
        options += ["--model_name_or_path", str(args.small_model)]
    if args.varied_data:
        write_varied_data(args.varied_data)
        options += ["--train_file", str(args.varied_data)]
    sampler = ResidentSampler(args.every)
    args = build_parser("finetune").parse_args(["finetune", *options])
    code = run_cli(args, lambda: finetune_command.run(args, [sampler]))
    for step, mib, _ in sampler.samples:
        print(f"step {step:5d}  resident {mib:8.1f} MiB")
    samples = [sample for sample in sampler.samples if sample[0] >= args.start]
    if samples and samples[-1][0] - samples[0][0] >= 2 * args.window:
        (first, _, began), (last, _, ended) = samples[0], samples[-1]
        before = max(mib for step, mib, _ in samples if step < first + args.window)
        after = max(mib for step, mib, _ in samples if step > last - args.window)
        print(f"highest resident memory of steps {first}-{first + args.window} and of steps {last - args.window}-{last}: "
              f"{before:.1f} -> {after:.1f} MiB ({after - before:+.1f} MiB; "
              f"{(ended - began) / (last - first):.3f} CPU s per step)")
    return code


if __name__ == "__main__":
    sys.exit(main())
