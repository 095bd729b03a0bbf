"""Hub-ready checkpoints: the saved folder, its model card, loading with and without the package, push_to_hub."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import types
from pathlib import Path

import pytest
import torch
import transformers
from huggingface_hub import HfApi, ModelCard

import hf_efficient
from hf_efficient.convert import convert
from hf_efficient.hub import push_checkpoint, save_checkpoint
from tests import tiny_checkpoints
from tests.tiny_checkpoints import FAMILIES, family_options

tokenizer_dir, roberta_folder = tiny_checkpoints.tokenizer_dir, tiny_checkpoints.roberta_folder  # fixtures
REPO_ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def checkpoints(roberta_folder, tmp_path_factory) -> dict[str, Path]:
    """Every family converted from the tiny RoBERTa folder (sparse settings, 256 tokens) and saved."""
    root = tmp_path_factory.mktemp("hub")
    for model_type in FAMILIES:
        convert(roberta_folder, model_type, max_length=256, family_options=family_options(model_type, "sparse"),
                output_dir=root / model_type, base_model="FacebookAI/roberta-base", license="mit")
    return {model_type: root / model_type for model_type in FAMILIES}


def sample_ids(folder: Path) -> torch.Tensor:
    tokenizer = transformers.AutoTokenizer.from_pretrained(folder)
    return tokenizer([tiny_checkpoints.TEXT * 3], return_tensors="pt")["input_ids"][:, :200]


@pytest.mark.parametrize("model_type", FAMILIES)
def test_saved_folder_is_hub_ready(checkpoints, model_type):
    folder = checkpoints[model_type]
    files = set(os.listdir(folder))
    assert {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json", "README.md"} <= files
    config = json.loads((folder / "config.json").read_text())
    module = hf_efficient.FAMILIES[model_type].models["ForMaskedLM"].__module__.rsplit(".", 1)[1]
    assert config["auto_map"]["AutoModelForMaskedLM"].startswith(f"{module}.")
    assert config["auto_map"]["AutoConfig"].split(".")[0] + ".py" in files
    assert f"{module}.py" in files and "backbone.py" in files
    card = ModelCard.load(folder / "README.md")
    assert card.data.license == "mit" and card.data.library_name == "transformers"
    assert card.data.base_model == "FacebookAI/roberta-base" and card.data.pipeline_tag == "fill-mask"
    assert {"hf_efficient", model_type} <= set(card.data.tags)
    assert "256 tokens" in card.text and "trust_remote_code=True" in card.text and "import hf_efficient" in card.text
    for field in hf_efficient.hub.attention_settings(transformers.AutoConfig.from_pretrained(folder)):
        assert f"`{field}`" in card.text


@pytest.mark.parametrize("model_type", FAMILIES)
def test_loads_with_the_package_without_remote_code(checkpoints, model_type):
    folder = checkpoints[model_type]
    model = transformers.AutoModelForMaskedLM.from_pretrained(folder).eval()
    assert type(model) is hf_efficient.FAMILIES[model_type].models["ForMaskedLM"]
    with torch.no_grad():
        assert torch.isfinite(model(sample_ids(folder)).logits).all()


def test_loads_without_the_package_in_a_clean_subprocess(checkpoints, tmp_path):
    """trust_remote_code=True from the saved folders, in a Python where `import hf_efficient` fails."""
    expected = {}
    for model_type, folder in checkpoints.items():
        model = transformers.AutoModelForMaskedLM.from_pretrained(folder).eval()
        with torch.no_grad():
            expected[model_type] = model(sample_ids(folder)).logits
    torch.save({"expected": expected, "folders": {k: str(v) for k, v in checkpoints.items()}}, tmp_path / "cases.pt")
    code = textwrap.dedent(f"""
        import sys
        sys.modules["hf_efficient"] = None  # the package is not importable in this process
        try:
            import hf_efficient
        except ImportError:
            pass
        else:
            raise SystemExit("hf_efficient is importable")
        import torch, transformers
        cases = torch.load({str(tmp_path / "cases.pt")!r})
        for model_type, folder in cases["folders"].items():
            model = transformers.AutoModelForMaskedLM.from_pretrained(folder, trust_remote_code=True).eval()
            assert type(model).__module__.startswith("transformers_modules."), type(model).__module__
            tokenizer = transformers.AutoTokenizer.from_pretrained(folder)
            ids = tokenizer([{tiny_checkpoints.TEXT * 3!r}], return_tensors="pt")["input_ids"][:, :200]
            with torch.no_grad():
                logits = model(ids).logits
            diff = (logits - cases["expected"][model_type]).abs().max().item()
            assert diff < 1e-5, (model_type, diff)
            print(model_type, type(model).__name__, "ok")
    """)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_MODULES_CACHE": str(tmp_path / "modules"),
           "PYTHONPATH": ""}
    result = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.count(" ok") == len(checkpoints)


@pytest.fixture
def hub_stand_in(monkeypatch):
    """HfApi's upload calls captured locally: repo id -> {path in repo: bytes} of what would be uploaded; nothing sent.

    `create_commit` is what transformers' `push_to_hub` calls, `upload_folder` what `push_checkpoint` calls.
    """
    uploads = {}

    def create_repo(self, repo_id, **kwargs):
        return types.SimpleNamespace(repo_id=repo_id)

    def create_commit(self, repo_id, operations, commit_message=None, **kwargs):
        uploads[repo_id] = {op.path_in_repo: Path(op.path_or_fileobj).read_bytes() for op in operations}
        return types.SimpleNamespace(commit_url=f"local://{repo_id}", commit_message=commit_message)

    def upload_folder(self, repo_id, folder_path, commit_message=None, **kwargs):
        folder = Path(folder_path)
        uploads[repo_id] = {p.relative_to(folder).as_posix(): p.read_bytes() for p in folder.rglob("*") if p.is_file()}
        return types.SimpleNamespace(commit_url=f"local://{repo_id}", commit_message=commit_message)

    monkeypatch.setattr(HfApi, "create_repo", create_repo)
    monkeypatch.setattr(HfApi, "create_commit", create_commit)
    monkeypatch.setattr(HfApi, "upload_folder", upload_folder)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return uploads


def test_push_checkpoint_uploads_exactly_the_saved_files(checkpoints, hub_stand_in, tmp_path):
    folder = checkpoints["hfe_roberta"]
    model = transformers.AutoModelForMaskedLM.from_pretrained(folder)
    tokenizer = transformers.AutoTokenizer.from_pretrained(folder)
    commit = push_checkpoint(model, "someone/tiny-long", tokenizer, base_model="FacebookAI/roberta-base",
                             license="mit", commit_message="first version")
    assert commit.commit_message == "first version"
    uploaded = hub_stand_in["someone/tiny-long"]
    local = save_checkpoint(model, tmp_path / "local", tokenizer, repo_id="someone/tiny-long",
                            base_model="FacebookAI/roberta-base", license="mit")
    assert set(uploaded) == {p.relative_to(local).as_posix() for p in local.rglob("*") if p.is_file()}
    assert {"config.json", "model.safetensors", "README.md", "tokenizer.json", "tokenizer_config.json",
            "modeling_roberta.py", "configuration_roberta.py", "backbone.py"} <= set(uploaded)
    assert 'from_pretrained("someone/tiny-long", trust_remote_code=True)' in uploaded["README.md"].decode()


def test_plain_push_to_hub_carries_the_custom_code(checkpoints, hub_stand_in, monkeypatch, tmp_path):
    """transformers' own `model.push_to_hub`: weights, config and modeling code (its own generic card)."""
    monkeypatch.setattr(transformers.utils.hub, "create_and_tag_model_card",
                        lambda repo_id, tags=None, token=None: ModelCard("---\nlibrary_name: transformers\n---\n"))
    model = transformers.AutoModelForMaskedLM.from_pretrained(checkpoints["hfe_roberta"])
    model.push_to_hub("someone/plain")
    model.save_pretrained(tmp_path)
    assert set(hub_stand_in["someone/plain"]) == set(os.listdir(tmp_path)) | {"README.md"}
    assert "modeling_roberta.py" in hub_stand_in["someone/plain"]


def test_load_tokenizer_refuses_a_folder_without_vocabulary(checkpoints, tmp_path):
    """A `tokenizer_config.json` alone makes transformers 5 build a 5-token tokenizer: the one loader refuses it."""
    from hf_efficient.hub import load_tokenizer

    assert len(load_tokenizer(checkpoints["hfe_roberta"])) > 5
    (tmp_path / "tokenizer_config.json").write_bytes((checkpoints["hfe_roberta"] / "tokenizer_config.json").read_bytes())
    with pytest.raises(FileNotFoundError, match="no tokenizer files"):
        load_tokenizer(tmp_path)
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_tokenizer(tmp_path / "missing")
