"""`kill -9` at a random point of training (mid-step or mid-checkpoint save), then `--resume`: the run ends as an
uninterrupted one does, a checkpoint the kill left half-written passed over."""

import json
import os
import random
import signal
import subprocess
import sys
import time

import pytest

from hf_efficient.cli import main

PRETRAIN = ["pretrain", "--model_type", "hfe_roberta", "--size", "tiny", "--vocab_size", "400", "--max_train_documents",
            "100", "--max_steps", "8", "--save_steps", "1", "--logging_steps", "1", "--per_device_train_batch_size", "4",
            "--held_out_fraction", "0.1", "--max_held_out_sequences", "4", "--disable_tqdm", "true", "--max_length", "64",
            "--seed", "3", "--report_to", "none"]


def losses(folder) -> dict[int, float]:
    history = json.loads((folder / "hfe_stage.json").read_text())["log_history"]
    return {entry["step"]: entry["loss"] for entry in history if "loss" in entry}


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 1])
def test_kill_9_then_resume_equals_an_uninterrupted_run(seed, tmp_path):
    straight, killed = tmp_path / "straight", tmp_path / "killed"
    assert main([*PRETRAIN, "--output_dir", str(straight)]) == 0
    step = random.Random(seed).randint(2, 6)  # killed as soon as checkpoint-<step> appears: usually mid-save
    run = subprocess.Popen([sys.executable, "-m", "hf_efficient.cli", *PRETRAIN, "--output_dir", str(killed)],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                           env={**os.environ, "PYTHONPATH": os.getcwd()})
    try:
        deadline = time.monotonic() + 600
        while not (killed / f"checkpoint-{step}").exists() and run.poll() is None and time.monotonic() < deadline:
            time.sleep(0.01)
        os.kill(run.pid, signal.SIGKILL)
    finally:
        run.wait()
    assert run.returncode == -signal.SIGKILL and not (killed / "hfe_stage.json").exists()
    assert main([*PRETRAIN, "--output_dir", str(killed), "--resume"]) == 0
    assert losses(killed) == pytest.approx(losses(straight), rel=1e-4)
