"""The disk filling during a checkpoint save: one clear line, the partial save removed, the previous checkpoint whole."""

import errno
import json
import shutil

import transformers

from hf_efficient.cli import main
from hf_efficient.training import stage

PRETRAIN = ["pretrain", "--model_type", "hfe_roberta", "--size", "tiny", "--vocab_size", "400", "--max_train_documents",
            "100", "--max_steps", "3", "--save_steps", "1", "--per_device_train_batch_size", "4", "--held_out_fraction",
            "0.1", "--max_held_out_sequences", "4", "--disable_tqdm", "true", "--max_length", "64", "--report_to", "none"]


def test_a_full_disk_during_a_save_keeps_the_previous_checkpoint(tmp_path, monkeypatch, capsys):
    out = tmp_path / "run"
    save_rng_state = transformers.Trainer._save_rng_state

    def disk_fills_at_step_2(self, output_dir):
        if self.state.global_step == 2:  # the weights and optimizer of checkpoint-2 are written by now
            raise OSError(errno.ENOSPC, "No space left on device")
        save_rng_state(self, output_dir)

    monkeypatch.setattr(transformers.Trainer, "_save_rng_state", disk_fills_at_step_2)
    assert main([*PRETRAIN, "--output_dir", str(out)]) == 2
    assert capsys.readouterr().err.splitlines()[-1] == (
        f"hf-efficient pretrain: error: saving {out / 'checkpoint-2'} failed: No space left on device; the partial save was "
        "removed and the last whole checkpoint, checkpoint-1, is intact: free space, then run the same command with "
        "--resume")
    assert not (out / "checkpoint-2").exists()
    assert json.loads((out / "checkpoint-1" / "trainer_state.json").read_text())["global_step"] == 1
    transformers.AutoModelForMaskedLM.from_pretrained(out / "checkpoint-1")
    assert stage.last_complete_checkpoint(str(out)) == str(out / "checkpoint-1")
    monkeypatch.undo()  # space freed: the run continues from checkpoint-1 and reports its peak memory and CPU time
    assert main([*PRETRAIN, "--output_dir", str(out), "--resume"]) == 0
    results = json.loads((out / "hfe_stage.json").read_text())
    assert results["global_step"] == 3 and results["peak_rss_mib"] > 0 and results["process_cpu_seconds"] > 0
    assert json.loads((out / "report" / "metrics.json").read_text())["peak_rss_mib"] == results["peak_rss_mib"]


def test_resume_passes_over_a_checkpoint_whose_save_did_not_finish(tmp_path):
    whole = tmp_path / "checkpoint-4"
    whole.mkdir()
    (whole / "trainer_state.json").write_text('{"global_step": 4}')
    for step, state in [(6, None), (8, '{"global_step": ')]:  # killed before, and while, writing the state
        shutil.copytree(whole, tmp_path / f"checkpoint-{step}")
        path = tmp_path / f"checkpoint-{step}" / "trainer_state.json"
        path.unlink() if state is None else path.write_text(state)
    assert stage.last_complete_checkpoint(str(tmp_path)) == str(whole)
    args = stage.OutputArguments(resume=True)
    try:
        assert stage.resume_checkpoint(str(tmp_path), args) == str(whole)
    finally:
        stage.release_output_dir(tmp_path)
