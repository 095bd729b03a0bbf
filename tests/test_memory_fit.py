"""Fitting the training batch to memory (`--auto_fit_batch`): with little free memory a stage trains with a smaller
per-device batch and more accumulation (the same effective batch) and says so in one line; with too little for one
sequence it stops before training with one line; switched off it trains as asked. The estimate is checked against
the live tensor bytes of real training steps. (`finetune --task question_answering`, the issue's run, is fitted in
test_question_answering.py.)"""

from __future__ import annotations

import datasets
import torch
from transformers import Trainer, TrainingArguments

import hf_efficient
from hf_efficient.cli import main
from hf_efficient.tensor_memory import PeakAllocated
from hf_efficient.training import memory_fit, mlm, stage
from tests.families import TINY
from tests.tiny_checkpoints import family_options

LENGTH = 128
PRETRAIN = ["--size", "tiny", "--vocab_size", "300", "--max_train_documents", "60", "--max_length", str(LENGTH),
            "--max_steps", "2", "--held_out_fraction", "0.1", "--max_held_out_sequences", "2", "--save_strategy", "no",
            "--disable_tqdm", "true", "--report_to", "none"]


def test_a_batch_that_does_not_fit_trains_smaller_with_more_accumulation(free_for, tmp_path, capsys):
    free_for(2)
    args = mlm.PretrainArguments(size="tiny", vocab_size=300, max_train_documents=60, max_length=LENGTH,
                                 held_out_fraction=0.1, max_held_out_sequences=2)
    training = stage.training_arguments(mlm.MLM_DEFAULTS, {
        "output_dir": str(tmp_path), "max_steps": 2, "per_device_train_batch_size": 4, "save_strategy": "no",
        "disable_tqdm": True})
    results = mlm.pretrain(args, training)
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("memory:")]
    assert len(lines) == 1 and lines[0].startswith(f"memory: 4 sequences of {LENGTH} tokens need ~")
    assert lines[0].endswith("training with per_device_train_batch_size 2 x gradient_accumulation_steps 2 "
                             "(the same effective batch; --auto_fit_batch false keeps the batch)")
    assert (results["per_device_train_batch_size"], results["gradient_accumulation_steps"]) == (2, 2)
    assert results["global_step"] == 2


def test_too_little_memory_for_one_sequence_stops_before_training_with_one_line(free_for, tmp_path, capsys):
    free_for(0)
    assert main(["pretrain", "--output_dir", str(tmp_path / "run"), *PRETRAIN]) == 2
    error = capsys.readouterr().err
    assert error.startswith(f"hf-efficient pretrain: error: 1 sequence of {LENGTH} tokens needs ~")
    assert error.count("\n") == 1 and "Traceback" not in error
    assert error.endswith(": pass --activation_checkpointing or start from a smaller model (--auto_fit_batch false "
                          "trains anyway)\n")
    assert not list((tmp_path / "run").glob("checkpoint-*")) and not (tmp_path / "run" / stage.STAGE_FILE).exists()


def test_switched_off_the_batch_is_left_as_asked(free_for, tmp_path, capsys):
    free_for(0)
    assert main(["pretrain", "--output_dir", str(tmp_path / "run"), *PRETRAIN, "--auto_fit_batch", "false"]) == 0
    assert "memory:" not in capsys.readouterr().out
    results = stage.finished_stage(str(tmp_path / "run"))
    assert (results["per_device_train_batch_size"], results["gradient_accumulation_steps"]) == (8, 1)  # MLM's defaults


def test_the_largest_batch_divides_the_effective_batch_and_the_longest_row_counts_every_choice():
    estimate = memory_fit.Estimate(per_sequence=10, fixed=5, tokens=8)
    assert [memory_fit.largest_batch(estimate, budget, 4, 8) for budget in (45, 44, 25, 15, 14)] == [4, 2, 2, 1, 0]
    rows = datasets.Dataset.from_dict({"input_ids": [[[1, 2], [3]], [[1, 2, 3, 4]], [[1, 2, 3], [1, 2, 3]]]})
    assert memory_fit.longest_row(rows) == 2 and memory_fit.longest_row(rows.select([2, 0, 1])) == 0


def test_the_estimate_is_within_half_again_of_the_live_bytes_of_real_steps(tmp_path):
    """At batch 4 of 256 tokens (Longformer-style, window 8): the estimate against the peak live tensor bytes over
    two Trainer steps (the second with AdamW's states); measuring leaves the random stream as it was."""
    config = hf_efficient.FAMILIES["hfe_longformer"].config_class(
        **{**TINY, "max_position_embeddings": 260}, **family_options("hfe_longformer", "sparse"))
    torch.manual_seed(0)
    model = hf_efficient.FAMILIES["hfe_longformer"].models["ForMaskedLM"](config)
    ids = torch.randint(5, TINY["vocab_size"], (8, 256)).tolist()
    trainer = Trainer(model=model, train_dataset=datasets.Dataset.from_dict({"input_ids": ids, "labels": ids}),
                      args=TrainingArguments(output_dir=str(tmp_path), per_device_train_batch_size=4, max_steps=2,
                                             save_strategy="no", report_to="none", disable_tqdm=True, use_cpu=True))
    state = torch.get_rng_state()
    estimate = memory_fit.measure(trainer)
    assert torch.equal(torch.get_rng_state(), state) and all(p.grad is None for p in model.parameters())
    with PeakAllocated("cpu") as memory:
        trainer.train()
    assert 1 / 1.5 <= estimate.needed(4) / memory.peak <= 1.5, (estimate, memory.peak)
