"""A truncated or corrupted checkpoint or tokenizer file: every command stops with one line naming the file."""

import os
import shutil
from pathlib import Path

import pytest

import hf_efficient
from hf_efficient.cli import main
from hf_efficient.hub import load_tokenizer, save_checkpoint
from hf_efficient.models.families import HEADS
from hf_efficient.training import stage
from tests import tiny_checkpoints
from tests.families import tiny_config

tokenizer_dir, roberta_folder = tiny_checkpoints.tokenizer_dir, tiny_checkpoints.roberta_folder  # fixtures

FAULTS = {
    "truncated": lambda path: os.truncate(path, path.stat().st_size // 2),
    "empty": lambda path: os.truncate(path, 0),
    "binary": lambda path: path.write_bytes(bytes(range(256)) * 4),
}
CHECKPOINT_FILES = ("model.safetensors", "config.json", "tokenizer.json", "tokenizer_config.json")


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory, tokenizer_dir) -> Path:
    """A tiny hf_efficient checkpoint with its tokenizer, as `convert` and every stage write one."""
    tokenizer = load_tokenizer(tokenizer_dir)
    model = hf_efficient.HfeRobertaForMaskedLM(tiny_config("hfe_roberta", vocab_size=len(tokenizer)))
    return save_checkpoint(model, tmp_path_factory.mktemp("checkpoint"), tokenizer)


def damaged(folder: Path, name: str, fault: str, tmp_path: Path) -> Path:
    """A copy of `folder` whose file `name` has `fault`."""
    copy = shutil.copytree(folder, tmp_path / "damaged")
    FAULTS[fault](copy / name)
    return copy / name


@pytest.mark.parametrize("fault", FAULTS)
@pytest.mark.parametrize("name", CHECKPOINT_FILES)
def test_the_shared_checkpoint_check_names_the_faulty_file(checkpoint, name, fault, tmp_path):
    path = damaged(checkpoint, name, fault, tmp_path)
    with pytest.raises(ValueError, match=f"^{path} is not .*: the file is (truncated or )?corrupted$"):
        stage.checkpoint_config(str(path.parent), tuple(HEADS), "finetune")


@pytest.mark.parametrize("fault", FAULTS)
def test_a_faulty_tokenizer_file_in_a_tokenizer_folder_is_named(tokenizer_dir, fault, tmp_path):
    path = damaged(tokenizer_dir, "tokenizer.json", fault, tmp_path)
    with pytest.raises(ValueError, match=f"^{path} is not "):
        load_tokenizer(path.parent)


def test_a_config_that_is_not_a_json_object_is_named(checkpoint, tmp_path):
    path = damaged(checkpoint, "config.json", "empty", tmp_path)
    path.write_text("[1, 2]")
    with pytest.raises(ValueError, match=f"^{path} holds a JSON list, not an object"):
        stage.checkpoint_config(str(path.parent), tuple(HEADS), "finetune")


@pytest.mark.parametrize("command", ["finetune", "adapt"])
def test_a_stage_given_a_truncated_weights_file_exits_2_with_one_line(command, checkpoint, tmp_path, capsys):
    path = damaged(checkpoint, "model.safetensors", "truncated", tmp_path)
    argv = [command, "--model_name_or_path", str(path.parent), "--output_dir", str(tmp_path / "out"),
            "--max_steps", "1", "--max_length", "64", "--disable_tqdm", "true", "--report_to", "none"]
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err
    assert captured.err.strip().splitlines()[-1] == (
        f"hf-efficient {command}: error: {path} is not a readable safetensors file (Error while deserializing header: "
        "incomplete metadata, file not fully covered): the file is truncated or corrupted")


@pytest.mark.parametrize("name", ["model.safetensors", "config.json", "tokenizer.json"])
def test_convert_given_a_faulty_source_file_exits_2_with_one_line(name, roberta_folder, tmp_path, capsys):
    path = damaged(roberta_folder, name, "truncated", tmp_path)
    assert main(["convert", str(path.parent), str(tmp_path / "out"), "--family", "hfe_longformer"]) == 2
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err
    [line] = captured.err.strip().splitlines()
    assert line.startswith(f"hf-efficient convert: error: {path} is not ") and line.endswith("truncated or corrupted")
    assert not (tmp_path / "out").exists()
