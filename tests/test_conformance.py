"""The contract every family meets, run for every family in tests/families.py."""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from transformers import AutoConfig, AutoModel, AutoModelForMaskedLM

import hf_efficient
from hf_efficient.models import backbone
from tests.families import FAMILY_CASES, TINY, tiny_config

FAMILIES = sorted(FAMILY_CASES)


def model_class(model_type: str, head: str = "ForMaskedLM"):
    return hf_efficient.FAMILIES[model_type].models[head]


def build(model_type: str, head: str = "ForMaskedLM", pattern: str = "sparse", seed: int = 0, **overrides):
    torch.manual_seed(seed)
    return model_class(model_type, head)(tiny_config(model_type, pattern, **overrides)).eval()


def random_ids(batch: int, length: int, seed: int = 1) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(3, TINY["vocab_size"], (batch, length), generator=generator)


def attention_inputs(model, batch: int, length: int) -> dict:
    """Every extra input the family's attention takes, with the first token marked (e.g. one global token)."""
    base = model.roberta if hasattr(model, "roberta") else model
    marked = torch.zeros(batch, length, dtype=torch.bool)
    marked[:, 0] = True
    return {name: marked for name in base.attention_inputs()}


def grads(model) -> dict[str, torch.Tensor]:
    return {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}


def assert_close_dicts(a: dict, b: dict, atol: float) -> None:
    assert a.keys() == b.keys()
    for name in a:
        torch.testing.assert_close(a[name], b[name], atol=atol, rtol=0, msg=lambda m, name=name: f"{name}: {m}")


def test_every_registered_family_has_a_test_case():
    assert set(FAMILY_CASES) == set(hf_efficient.FAMILIES)


def test_registration_is_idempotent():
    hf_efficient.register_families()
    hf_efficient.register_families()
    for model_type, family in hf_efficient.FAMILIES.items():
        assert type(AutoConfig.for_model(model_type)) is family.config_class


@pytest.mark.parametrize("model_type", FAMILIES)
def test_auto_round_trip(model_type, tmp_path):
    config = tiny_config(model_type)
    model = AutoModelForMaskedLM.from_config(config).eval()
    assert type(model) is model_class(model_type)
    model.save_pretrained(tmp_path)
    assert (tmp_path / "model.safetensors").exists()
    saved = json.loads((tmp_path / "config.json").read_text())
    assert saved["model_type"] == model_type and "AutoModelForMaskedLM" in saved["auto_map"]
    loaded = AutoModelForMaskedLM.from_pretrained(tmp_path).eval()
    assert type(loaded) is type(model)
    ids = random_ids(2, 40)
    with torch.no_grad():
        diff = (model(ids).logits - loaded(ids).logits).abs().max()
    assert diff <= 1e-5
    base = AutoModel.from_pretrained(tmp_path)
    assert type(base) is model_class(model_type, "Model")


@pytest.mark.parametrize("model_type", FAMILIES)
def test_heads_shapes_and_losses(model_type):
    batch, length, labels = 2, 24, 3
    ids = random_ids(batch, length)
    mask = torch.ones(batch, length, dtype=torch.long)
    mask[1, 17:] = 0
    cases = {
        "Model": ({}, lambda out: out.last_hidden_state.shape == (batch, length, TINY["hidden_size"])
                  and out.pooler_output.shape == (batch, TINY["hidden_size"])),
        "ForMaskedLM": ({"labels": ids}, lambda out: out.logits.shape == (batch, length, TINY["vocab_size"])),
        "ForSequenceClassification": ({"labels": torch.tensor([0, 2])}, lambda out: out.logits.shape == (batch, labels)),
        "ForTokenClassification": ({"labels": ids % labels}, lambda out: out.logits.shape == (batch, length, labels)),
        "ForQuestionAnswering": ({"start_positions": torch.tensor([1, 3]), "end_positions": torch.tensor([4, 5])},
                                 lambda out: out.start_logits.shape == (batch, length) == out.end_logits.shape),
    }
    for head, (targets, shape_ok) in cases.items():
        model = build(model_type, head, num_labels=2 if head == "ForQuestionAnswering" else labels)
        out = model(ids, attention_mask=mask, **targets)
        assert shape_ok(out), head
        if targets:
            assert torch.isfinite(out.loss), head
            as_tuple = model(ids, attention_mask=mask, return_dict=False, **targets)
            assert isinstance(as_tuple, tuple) and torch.equal(as_tuple[0], out.loss)
    model = build(model_type, "ForMultipleChoice")
    choices = random_ids(batch * 3, length).view(batch, 3, length)
    out = model(choices, attention_mask=torch.ones_like(choices), labels=torch.tensor([0, 2]))
    assert out.logits.shape == (batch, 3) and torch.isfinite(out.loss)


@pytest.mark.parametrize("model_type", FAMILIES)
def test_regression_and_multi_label_losses(model_type):
    ids = random_ids(2, 16)
    model = build(model_type, "ForSequenceClassification", num_labels=1)
    assert model(ids, labels=torch.tensor([0.5, -1.0])).loss.ndim == 0
    model = build(model_type, "ForSequenceClassification", num_labels=3, problem_type="multi_label_classification")
    assert torch.isfinite(model(ids, labels=torch.tensor([[1.0, 0, 1], [0, 0, 1]])).loss)


@pytest.mark.parametrize("model_type", FAMILIES)
def test_hidden_states_and_attentions(model_type):
    model = build(model_type, "Model")
    length = FAMILY_CASES[model_type].lengths[-1]
    ids = random_ids(2, length)
    out = model(ids, output_hidden_states=True)
    assert len(out.hidden_states) == TINY["num_hidden_layers"] + 1
    assert all(h.shape == (2, length, TINY["hidden_size"]) for h in out.hidden_states)
    if any(layer.attention.self.supports_attention_weights for layer in model.encoder.layer):
        out = model(ids, output_attentions=True)
        assert len(out.attentions) == TINY["num_hidden_layers"]
        assert all(a.shape[:3] == (2, TINY["num_attention_heads"], length) for a in out.attentions)
    else:
        with pytest.raises(ValueError, match="output_attentions"):
            model(ids, output_attentions=True)


@pytest.mark.parametrize("model_type", FAMILIES)
def test_padding_invariance(model_type):
    """Right-padding a sequence into a longer batch leaves its real positions' outputs unchanged."""
    case = FAMILY_CASES[model_type]
    model = build(model_type, "Model", pattern="sparse" if case.padding_invariant else "full_coverage")
    long, short = case.lengths[-1], case.lengths[0]
    ids = random_ids(2, long)
    ids[1, short:] = model.config.pad_token_id
    mask = torch.ones_like(ids)
    mask[1, short:] = 0
    with torch.no_grad():
        batched = model(ids, attention_mask=mask, **attention_inputs(model, 2, long)).last_hidden_state
        alone = model(ids[1:, :short], **attention_inputs(model, 1, short)).last_hidden_state
        first = model(ids[:1], **attention_inputs(model, 1, long)).last_hidden_state
    assert torch.isfinite(batched).all()
    assert (batched[1, :short] - alone[0]).abs().max() <= 1e-5
    assert (batched[0] - first[0]).abs().max() <= 1e-5


@pytest.mark.parametrize("model_type", FAMILIES)
def test_mean_pooling_classifier_reads_the_real_tokens_and_round_trips(model_type, tmp_path):
    """`classifier_pooling="mean"`: logits are the head applied to the mean of the unpadded tokens, unchanged by padding."""
    case = FAMILY_CASES[model_type]
    pattern = "sparse" if case.padding_invariant else "full_coverage"
    model = build(model_type, "ForSequenceClassification", pattern=pattern, num_labels=3, classifier_pooling="mean")
    long, short = case.lengths[-1], case.lengths[0]
    ids = random_ids(2, long)
    ids[1, short:] = model.config.pad_token_id
    mask = torch.ones_like(ids)
    mask[1, short:] = 0
    inputs = attention_inputs(model, 2, long)
    with torch.no_grad():
        out = model(ids, attention_mask=mask, **inputs)
        alone = model(ids[1:, :short], **attention_inputs(model, 1, short)).logits
        hidden = model.roberta(ids, attention_mask=mask, **inputs).last_hidden_state
        head = model.classifier
        expected = head.out_proj(torch.tanh(head.dense(hidden[1, :short].mean(0))))
    assert (out.logits[1] - alone[0]).abs().max() <= 1e-5
    assert (out.logits[1] - expected).abs().max() <= 1e-5
    cls_model = build(model_type, "ForSequenceClassification", pattern=pattern, num_labels=3)
    with torch.no_grad():
        assert (cls_model(ids, attention_mask=mask, **inputs).logits - out.logits).abs().max() > 1e-4
    model.save_pretrained(tmp_path)
    loaded = model_class(model_type, "ForSequenceClassification").from_pretrained(tmp_path).eval()
    assert loaded.config.classifier_pooling == "mean"
    with torch.no_grad():
        assert torch.allclose(loaded(ids, attention_mask=mask, **inputs).logits, out.logits, atol=1e-6)


@pytest.mark.parametrize("model_type", FAMILIES)
def test_eval_is_deterministic(model_type):
    model = build(model_type, "Model")
    ids = random_ids(2, FAMILY_CASES[model_type].lengths[-1])
    with torch.no_grad():
        first = model(ids).last_hidden_state
        torch.manual_seed(123)
        second = model(ids).last_hidden_state
    assert torch.equal(first, second)


@pytest.mark.parametrize("model_type", FAMILIES)
def test_every_parameter_gets_a_gradient(model_type):
    model = build(model_type, "ForMaskedLM").train()
    length = FAMILY_CASES[model_type].lengths[-1]
    ids = random_ids(2, length)
    model(ids, labels=ids, **attention_inputs(model, 2, length)).loss.backward()
    missing = [name for name, p in model.named_parameters() if p.requires_grad and (p.grad is None or not p.grad.any())]
    assert not missing


def train_step(model, ids, seed: int = 0, **inputs) -> tuple[torch.Tensor, dict]:
    model.zero_grad(set_to_none=True)
    torch.manual_seed(seed)
    out = model(ids, labels=ids, **inputs)
    out.loss.backward()
    return out.loss.detach(), grads(model)


@pytest.mark.parametrize("model_type", FAMILIES)
@pytest.mark.parametrize("option", ["activation_checkpointing", "chunk_size_feed_forward", "mlm_loss_chunk_size"])
def test_memory_options_leave_outputs_and_gradients_unchanged(model_type, option):
    length = FAMILY_CASES[model_type].lengths[-1]
    ids = random_ids(2, length)
    reference = build(model_type, "ForMaskedLM", chunk_size_feed_forward=0, mlm_loss_chunk_size=0).train()
    inputs = attention_inputs(reference, 2, length)
    expected_loss, expected_grads = train_step(reference, ids, **inputs)
    if option == "activation_checkpointing":
        model = build(model_type, "ForMaskedLM", chunk_size_feed_forward=0, mlm_loss_chunk_size=0).train()
        model.activation_checkpointing_enable()
        assert model.is_activation_checkpointing
    else:
        model = build(model_type, "ForMaskedLM", **{"chunk_size_feed_forward": 0, "mlm_loss_chunk_size": 0, option: 7})
        model.train()
    loss, gradients = train_step(model, ids, **inputs)
    assert (loss - expected_loss).abs() <= 1e-5
    assert_close_dicts(gradients, expected_grads, atol=1e-5)


def test_chunked_mlm_loss_skips_logits_only_when_training():
    model = build("hfe_roberta", "ForMaskedLM", mlm_loss_chunk_size=5)
    ids = random_ids(2, 20)
    labels = torch.full_like(ids, -100)
    labels[:, ::3] = ids[:, ::3]
    model.train()
    assert model(ids, labels=labels).logits is None
    model.eval()
    assert model(ids, labels=labels).logits.shape == (2, 20, TINY["vocab_size"])


def test_mlm_loss_averages_over_num_items_in_batch():
    """Gradient accumulation: the Trainer passes the token count of all accumulated batches."""
    model = build("hfe_roberta", "ForMaskedLM")
    ids = random_ids(2, 20)
    loss = model(ids, labels=ids).loss
    assert torch.allclose(model(ids, labels=ids, num_items_in_batch=80).loss, loss * 40 / 80)


@pytest.mark.parametrize("model_type", FAMILIES)
def test_reversible_backward_matches_plain_autograd(model_type):
    """The memory-saving backward recomputes activations; with dropout on, gradients must still be exact."""
    length = FAMILY_CASES[model_type].lengths[-1]
    ids = random_ids(2, length)
    mask = torch.ones_like(ids)
    mask[1, length - 5:] = 0
    dropout = {"reversible": True, "hidden_dropout_prob": 0.1, "attention_probs_dropout_prob": 0.1}
    model = build(model_type, "ForMaskedLM", **dropout).train()
    inputs = {"attention_mask": mask, **attention_inputs(model, 2, length)}
    model.roberta.encoder.memory_saving_backward = False
    expected_loss, expected_grads = train_step(model, ids, **inputs)
    model.roberta.encoder.memory_saving_backward = True
    loss, gradients = train_step(model, ids, **inputs)
    assert torch.equal(loss, expected_loss)
    assert_close_dicts(gradients, expected_grads, atol=1e-5)
    # Dropout is really on: another seed changes the loss.
    assert not torch.equal(train_step(model, ids, seed=1, **inputs)[0], expected_loss)


def test_reversible_layers_recompute_only_from_the_configured_length():
    """Below `reversible_recompute_min_length` the stack keeps activations (plain autograd), same gradients."""

    def recomputes(output: torch.Tensor) -> bool:
        nodes, seen = [output.grad_fn], set()
        while nodes:
            node = nodes.pop()
            if node is None or node in seen:
                continue
            seen.add(node)
            if "ReversibleStack" in type(node).__name__:
                return True
            nodes.extend(next_node for next_node, _ in node.next_functions)
        return False

    model = build("hfe_roberta", "ForMaskedLM", reversible=True, reversible_recompute_min_length=24).train()
    always = build("hfe_roberta", "ForMaskedLM", reversible=True).train()
    for length, expected in ((16, False), (24, True)):
        ids = random_ids(2, length)
        assert recomputes(model(ids).logits) == expected
        assert recomputes(always(ids).logits)
        loss, gradients = train_step(model, ids)
        expected_loss, expected_gradients = train_step(always, ids)
        assert torch.equal(loss, expected_loss)
        assert_close_dicts(gradients, expected_gradients, atol=1e-6)


def test_reversible_with_gradient_checkpointing_is_exact():
    """Reversible layers already recompute; gradient checkpointing on top must not change the gradients."""
    ids = random_ids(2, 30)
    model = build("hfe_roberta", "ForMaskedLM", reversible=True).train()
    expected = train_step(model, ids)
    model.activation_checkpointing_enable()
    loss, gradients = train_step(model, ids)
    assert torch.equal(loss, expected[0])
    assert_close_dicts(gradients, expected[1], atol=1e-6)


def test_reversible_training_memory_does_not_store_every_layer():
    """Autograd keeps only the last reversible layer's outputs: the saved-tensor count is flat in depth."""

    def saved_tensor_count(layers: int) -> int:
        model = build("hfe_roberta", "ForMaskedLM", reversible=True, num_hidden_layers=layers).train()
        count = 0

        def pack(tensor):
            nonlocal count
            count += 1
            return tensor

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
            model(random_ids(1, 16)).logits.sum()
        return count

    assert saved_tensor_count(2) == saved_tensor_count(6)


@pytest.mark.parametrize("model_type", FAMILIES)
def test_bf16_forward(model_type):
    model = build(model_type, "ForMaskedLM").to(torch.bfloat16)
    length = FAMILY_CASES[model_type].lengths[-1]
    ids = random_ids(2, length)
    mask = torch.ones_like(ids)
    mask[1, 10:] = 0
    logits = model(ids, attention_mask=mask, **attention_inputs(model, 2, length)).logits
    assert logits.dtype == torch.bfloat16 and torch.isfinite(logits).all()


@pytest.mark.parametrize("model_type", FAMILIES)
def test_sparse_pattern_widened_to_the_whole_input_equals_dense(model_type):
    case = FAMILY_CASES[model_type]
    dense = build("hfe_roberta", "Model")
    family = build(model_type, "Model", pattern="full_coverage")
    family.load_state_dict(dense.state_dict(), strict=False)
    if case.make_dense_equivalent is not None:
        case.make_dense_equivalent(family)
    for length in case.lengths:
        ids = random_ids(2, length)
        mask = torch.ones_like(ids)
        mask[1, length // 2:] = 0
        with torch.no_grad():
            expected = dense(ids, attention_mask=mask).last_hidden_state
            actual = family(ids, attention_mask=mask).last_hidden_state
        assert (actual - expected).abs().max() <= 1e-5, length


@pytest.mark.parametrize("implementation", ["eager", "sdpa"])
def test_dense_family_equals_transformers_roberta(implementation):
    from transformers import RobertaConfig, RobertaForMaskedLM

    torch.manual_seed(0)
    roberta = RobertaForMaskedLM(RobertaConfig(**TINY, type_vocab_size=1, layer_norm_eps=1e-5,
                                               attn_implementation=implementation)).eval()
    ours = build("hfe_roberta", "ForMaskedLM", attn_implementation=implementation)
    assert ours.load_state_dict(roberta.state_dict(), strict=True)
    ids = random_ids(2, 50)
    ids[1, 30:] = 1
    mask = (ids != 1).long()
    with torch.no_grad():
        expected = roberta(ids, attention_mask=mask, output_hidden_states=True)
        actual = ours(ids, attention_mask=mask, output_hidden_states=True)
    assert (actual.logits - expected.logits).abs().max() <= 1e-5
    for ours_h, theirs_h in zip(actual.hidden_states, expected.hidden_states, strict=True):
        assert (ours_h - theirs_h).abs().max() <= 1e-5


def test_tied_decoder_and_resize_token_embeddings():
    model = build("hfe_roberta", "ForMaskedLM")
    assert model.lm_head.decoder.weight is model.roberta.embeddings.word_embeddings.weight
    model.resize_token_embeddings(120)
    assert model.config.vocab_size == 120
    assert model.lm_head.decoder.weight is model.roberta.embeddings.word_embeddings.weight
    assert model(random_ids(1, 10)).logits.shape[-1] == 120


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"hidden_size": 30}, "hidden_size"),
        ({"num_hidden_layers": -1}, "num_hidden_layers"),
        ({"attention_type": "no_such_attention"}, "attention_type"),
        ({"layer_attention_types": ["full"]}, "layer_attention_types"),
        ({"hidden_dropout_prob": 1.5}, "hidden_dropout_prob"),
        ({"mlm_loss_chunk_size": -4}, "mlm_loss_chunk_size"),
        ({"reversible_recompute_min_length": -1}, "reversible_recompute_min_length"),
        ({"classifier_pooling": "max"}, "classifier_pooling"),
        ({"max_position_embeddings": 2}, "max_position_embeddings"),
    ],
)
@pytest.mark.parametrize("model_type", FAMILIES)
def test_invalid_configs_raise_value_error_naming_the_field(model_type, overrides, field):
    with pytest.raises(ValueError, match=field):
        tiny_config(model_type, **overrides)


@pytest.mark.parametrize(("fields", "offset"), [({}, 2), ({"pad_token_id": 0}, 1), ({"pad_token_id": None}, 1),
                                                ({"position_numbering": "absolute"}, 0)])
@pytest.mark.parametrize("model_type", FAMILIES)
def test_position_offset_is_known_before_the_config_is_built(model_type, fields, offset):
    """What sizes a position table for N tokens (`N + position_offset_for(**fields)`) before the config exists."""
    assert hf_efficient.FAMILIES[model_type].config_class.position_offset_for(**fields) == offset
    config = tiny_config(model_type, **fields, max_position_embeddings=100 + offset)
    assert (config.position_offset, config.max_sequence_length) == (offset, 100)


@pytest.mark.parametrize("model_type", FAMILIES)
def test_too_long_input_says_the_limit_and_the_fix(model_type):
    model = build(model_type, "Model")
    limit = model.config.max_sequence_length
    with pytest.raises(ValueError, match=rf"longer than this model supports \({limit}.*convert"):
        model(random_ids(1, limit + 1))


def test_unknown_forward_inputs_are_rejected():
    model = build("hfe_roberta", "Model")
    with pytest.raises(TypeError, match="global_attention_mask"):
        model(random_ids(1, 10), global_attention_mask=torch.ones(1, 10))


CLEAN_LOAD = textwrap.dedent(
    """
    import sys, torch
    sys.modules["hf_efficient"] = None  # as if the package were not installed: importing it fails
    from transformers import AutoModelForMaskedLM
    model = AutoModelForMaskedLM.from_pretrained({folder!r}, trust_remote_code=True).eval()
    assert not type(model).__module__.startswith("hf_efficient"), type(model).__module__
    ids = torch.load({folder!r} + "/ids.pt")
    with torch.no_grad():
        torch.save(model(ids).logits, {folder!r} + "/remote_logits.pt")
    """
)


def remote_logits(folder: Path, ids: torch.Tensor) -> torch.Tensor:
    """The MLM logits of `ids` from the saved `folder` loaded with `trust_remote_code=True` in a subprocess
    where `hf_efficient` is not importable."""
    torch.save(ids, folder / "ids.pt")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_MODULES_CACHE": str(folder / "modules")}
    result = subprocess.run([sys.executable, "-c", CLEAN_LOAD.format(folder=str(folder))],
                            cwd=folder, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    return torch.load(folder / "remote_logits.pt")


@pytest.mark.parametrize("model_type", FAMILIES)
def test_trust_remote_code_load_without_the_package(model_type, tmp_path):
    model = build(model_type, "ForMaskedLM")
    model.save_pretrained(tmp_path)
    ids = random_ids(2, FAMILY_CASES[model_type].lengths[-1])
    with torch.no_grad():
        expected = model(ids).logits
    assert (remote_logits(tmp_path, ids) - expected).abs().max() <= 1e-5


@pytest.mark.parametrize("model_type", FAMILIES)
def test_inference_in_pieces_of_rows_equals_the_whole_batch(model_type, monkeypatch):
    """On CPU without gradients a batch runs through the encoder in pieces of rows (`HfeModel.rows_at_once`) and the
    feed-forward over chunks of positions (`piece_tokens`): every output field is what the whole batch gives, padding
    and attention inputs included; with gradients, one piece."""
    case = FAMILY_CASES[model_type]
    model = build(model_type, "Model", pattern="sparse" if case.padding_invariant else "full_coverage")
    length = case.lengths[-1]
    ids = random_ids(3, length)
    ids[1, case.lengths[0]:] = model.config.pad_token_id
    mask = (ids != model.config.pad_token_id).long()
    inputs = {"attention_mask": mask, "output_hidden_states": True, "return_dict": False,
              **attention_inputs(model, 3, length)}
    calls, chunks = [], []
    encode, chunked = model.encode, backbone.chunked_over_length
    monkeypatch.setattr(model, "encode", lambda *args, **kwargs: calls.append(kwargs["attention_mask"].shape[0])
                        or encode(*args, **kwargs))
    monkeypatch.setattr(backbone, "chunked_over_length", lambda function, size, x: chunks.append(size)
                        or chunked(function, size, x))
    monkeypatch.setattr(backbone, "INFERENCE_PIECE_BYTES", 2**40)
    with torch.no_grad():
        whole = model(ids, **inputs)
    piece = 40 * model.config.intermediate_size * 4  # 40 tokens: a row at a time, the feed-forward over 40 positions
    monkeypatch.setattr(backbone, "INFERENCE_PIECE_BYTES", piece)
    with torch.no_grad():
        pieces = model(ids, **inputs)
    layers = TINY["num_hidden_layers"]
    assert chunks == [2**40 // (piece // 40)] * layers + [40] * 3 * layers
    with torch.enable_grad():
        model(ids, **inputs)
    assert calls == [3, 1, 1, 1, 3]
    flat = [torch.stack(field) if isinstance(field, tuple) else field for field in whole]
    for expected, got in zip(flat, [torch.stack(f) if isinstance(f, tuple) else f for f in pieces], strict=True):
        torch.testing.assert_close(got, expected, atol=1e-5, rtol=0)
