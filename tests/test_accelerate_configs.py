"""The shipped accelerate / DeepSpeed configs (examples/accelerate/) load, and name classes the models have; the GPU script's parts."""

import json
import os
import subprocess
from pathlib import Path

import pytest
from accelerate.commands.config.config_args import load_config_from_file

from hf_efficient.models import backbone

FOLDER = Path(__file__).resolve().parents[1] / "examples" / "accelerate"
EXPECTED = {"ddp_cpu.yaml": "MULTI_GPU", "ddp.yaml": "MULTI_GPU", "fsdp.yaml": "FSDP", "fsdp_encoder.yaml": "FSDP",
            "deepspeed_zero2.yaml": "DEEPSPEED", "deepspeed_zero3.yaml": "DEEPSPEED"}


def test_every_shipped_config_is_checked():
    assert {path.name for path in FOLDER.glob("*.yaml")} == set(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_accelerate_config_loads(name):
    config = load_config_from_file(str(FOLDER / name))
    assert config.distributed_type == EXPECTED[name]
    if config.distributed_type == "FSDP":
        assert config.fsdp_config["fsdp_version"] == 2
        assert hasattr(backbone, config.fsdp_config["fsdp_transformer_layer_cls_to_wrap"])
    if config.distributed_type == "DEEPSPEED":
        path = Path(__file__).resolve().parents[1] / config.deepspeed_config["deepspeed_config_file"]
        stage = json.loads(path.read_text())["zero_optimization"]["stage"]
        assert name == f"deepspeed_zero{stage}.yaml"
        assert config.deepspeed_config["zero3_init_flag"] == (stage == 3)


def test_gpu_check_names_its_parts_before_setting_anything_up(tmp_path):
    """scripts/gpu_check.sh runs in parts that each fit one device call; a wrong part stops at once, in one line."""
    script = FOLDER.parents[1] / "scripts" / "gpu_check.sh"
    done = subprocess.run(["bash", str(script), "checks", "nope"], capture_output=True, text=True,
                          env={**os.environ, "OUT": str(tmp_path)}, timeout=30)
    assert done.returncode == 2 and done.stdout.strip() == "unknown part 'nope'; choose from: checks bench compile quality kernels"
    assert not any(tmp_path.iterdir())  # nothing set up, nothing written
