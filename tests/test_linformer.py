"""What is unique to the Linformer family: the projection against an explicit reference, the sharing
modes (the layerwise projection stored once), the per-sequence dense fallback, its config checks."""

import copy

import pytest
import torch
from huggingface_hub.errors import StrictDataclassFieldValidationError
from safetensors.torch import load_file
from transformers import AutoModel

from hf_efficient import HfeLinformerConfig, HfeLinformerModel
from hf_efficient.models.attention_linformer import segment_means
from tests.families import TINY, identity_projections

SHARINGS = ["none", "headwise", "key_value", "layerwise"]
K = 8


def build(sharing: str = "layerwise", **overrides) -> HfeLinformerModel:
    torch.manual_seed(0)
    config = HfeLinformerConfig(**{**TINY, "projected_length": K, "projection_sharing": sharing, **overrides})
    return HfeLinformerModel(config).eval()


def mechanisms(model: HfeLinformerModel) -> list:
    return [layer.attention.self for layer in model.encoder.layer]


def reference(mechanism, hidden: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """The semantics written out in fp32: per head softmax(Q (E[:, :L] K0)^T / sqrt(d)) (F[:, :L] V0), where
    K0 and V0 have zero rows at padded positions; a sequence whose real tokens all lie in the first k
    positions gets dense attention over its real tokens instead."""
    batch, length, hidden_size = hidden.shape
    heads, k = mechanism.num_heads, mechanism.projected_length
    stacked = mechanism.projection.weight[:, :, :length]
    if len(stacked) == 2 * heads:  # "none": E per head, then F per head
        e, f = stacked[:heads], stacked[heads:]
    elif len(stacked) == 2:  # "headwise": E, F for all heads
        e, f = stacked[0].expand(heads, k, length), stacked[1].expand(heads, k, length)
    else:  # one matrix as E and F
        e = f = stacked[0].expand(heads, k, length)
    q, key, value = (mechanism.split_heads(linear(hidden)) for linear in (mechanism.query, mechanism.key, mechanism.value))
    real = mask[:, None, :, None].float()
    projected_key = torch.einsum("hkl,bhld->bhkd", e, key * real)
    projected_value = torch.einsum("hkl,bhld->bhkd", f, value * real)
    projected = torch.softmax(q @ projected_key.transpose(-1, -2) * mechanism.scaling, dim=-1) @ projected_value
    pairs = mask[:, None, None, :].expand(batch, heads, length, length)
    scores = (q @ key.transpose(-1, -2) * mechanism.scaling).masked_fill(~pairs, float("-inf"))
    dense = torch.softmax(scores, dim=-1).nan_to_num() @ value
    short = (mask * torch.arange(1, length + 1)).amax(-1) <= k
    output = torch.where(short[:, None, None, None], dense, projected)
    return output.transpose(1, 2).reshape(batch, length, hidden_size)


@pytest.mark.parametrize("sharing", SHARINGS)
@pytest.mark.parametrize("length", [9, 20, 37, 64])
def test_matches_the_reference_semantics(sharing, length):
    """Rows: unpadded; right-padded but longer than k; padded to at most k real tokens (dense); all padding."""
    model = build(sharing)
    generator = torch.Generator().manual_seed(length)
    hidden = torch.randn(4, length, TINY["hidden_size"], generator=generator)
    real_lengths = torch.tensor([length, max(K + 1, length - 7), min(5, length), 0])
    mask = torch.arange(length) < real_lengths[:, None]
    for mechanism in mechanisms(model):
        with torch.no_grad():
            context, _ = mechanism(hidden, mask)
            expected = reference(mechanism, hidden, mask)
        assert torch.isfinite(context).all()
        assert (context - expected)[mask].abs().max() <= 1e-5


@pytest.mark.parametrize("sharing", SHARINGS)
def test_right_padding_leaves_each_sequence_as_computed_alone(sharing):
    model = build(sharing)
    ids = torch.randint(3, TINY["vocab_size"], (3, 100), generator=torch.Generator().manual_seed(0))
    lengths = [100, 61, 6]  # projected, projected at its own length, dense (<= k tokens)
    mask = (torch.arange(100) < torch.tensor(lengths)[:, None]).long()
    ids[mask == 0] = model.config.pad_token_id
    with torch.no_grad():
        batched = model(ids, attention_mask=mask).last_hidden_state
        for row, length in enumerate(lengths):
            alone = model(ids[row:row + 1, :length]).last_hidden_state
            assert (batched[row, :length] - alone[0]).abs().max() <= 1e-5, length


@pytest.mark.parametrize("sharing", SHARINGS)
def test_identity_projections_with_k_equal_to_length_compute_dense_attention(sharing):
    """The projected path itself (not the fallback) with E = F = I and k = L is exact attention."""
    length = 24
    model = build(sharing, projected_length=length)
    identity_projections(model)
    hidden = torch.randn(2, length, TINY["hidden_size"])
    mask = torch.ones(2, length, dtype=torch.bool)
    mask[1, 17:] = False
    for mechanism in mechanisms(model):
        with torch.no_grad():
            projected, _ = mechanism.projected_attention(hidden, mask, False, False)
            dense, _ = mechanism.attend(*mechanism.project_qkv(hidden), mask)
        assert (projected[0] - dense[0]).abs().max() <= 1e-5
        # A padded row differs only through its padded keys: they are zero rows, not excluded keys.
        assert torch.isfinite(projected).all()


def test_layerwise_projection_is_one_parameter_that_survives_save_load_and_copies(tmp_path):
    model = build("layerwise", num_hidden_layers=3, layer_attention_types=["full", "linformer", "linformer"])
    names = [name for name in model.state_dict() if "length_projection" in name]
    assert names == ["encoder.layer.1.attention.self.length_projection.weight"]  # the first Linformer layer owns it
    owner = model.encoder.layer[1].attention.self
    assert model.encoder.layer[2].attention.self.projection is owner.length_projection
    assert model.encoder.layer[2].attention.self.borrowed_parameters() == [owner.length_projection.weight]

    ids = torch.randint(3, TINY["vocab_size"], (2, 50))
    with torch.no_grad():
        expected = model(ids).last_hidden_state
    model.save_pretrained(tmp_path)
    # Saved under the key it had as a parameter of the attention, so older checkpoints load too.
    assert [name for name in load_file(tmp_path / "model.safetensors") if "length_projection" in name] == [
        "encoder.layer.1.attention.self.length_projection"]
    loaded = AutoModel.from_pretrained(tmp_path).eval()
    resumed = build("layerwise", num_hidden_layers=3, layer_attention_types=["full", "linformer", "linformer"])
    resumed.load_state_dict(load_file(tmp_path / "model.safetensors"))  # as the Trainer resumes: the old key too
    with torch.no_grad():
        assert torch.equal(resumed(ids).last_hidden_state, expected)
    loaded_owner = loaded.encoder.layer[1].attention.self
    assert loaded.encoder.layer[2].attention.self.projection is loaded_owner.length_projection
    with torch.no_grad():
        assert torch.equal(loaded(ids).last_hidden_state, expected)
        # Both layers read the one loaded parameter: changing it changes the output of the last layer.
        copied = copy.deepcopy(loaded)
        assert copied.encoder.layer[2].attention.self.projection is copied.encoder.layer[1].attention.self.length_projection
        copied.encoder.layer[1].attention.self.length_projection.weight.mul_(2)
        assert not torch.equal(copied(ids).last_hidden_state, expected)
        assert torch.equal(loaded(ids).last_hidden_state, expected)


@pytest.mark.parametrize("reversible", [False, True])
def test_shared_projection_gets_the_gradient_of_every_layer(reversible):
    """The layerwise gradient equals the sum of per-layer gradients of unshared copies of the projection."""
    shared = build("layerwise", reversible=reversible).train()
    separate = build("key_value", reversible=reversible).train()
    separate.load_state_dict(shared.state_dict(), strict=False)
    with torch.no_grad():
        for mechanism in mechanisms(separate):
            mechanism.length_projection.weight.copy_(mechanisms(shared)[0].length_projection.weight)
    ids = torch.randint(3, TINY["vocab_size"], (2, 40), generator=torch.Generator().manual_seed(0))
    target = torch.randn(2, 40, TINY["hidden_size"], generator=torch.Generator().manual_seed(1))
    for model in (shared, separate):
        (model(ids).last_hidden_state * target).sum().backward()  # not a plain norm: LayerNorm fixes that
    per_layer = [mechanism.length_projection.weight.grad for mechanism in mechanisms(separate)]
    assert all(grad.abs().max() > 1e-4 for grad in per_layer)
    torch.testing.assert_close(mechanisms(shared)[0].length_projection.weight.grad, sum(per_layer), atol=1e-6, rtol=1e-4)


def test_attention_weights_layout():
    model = build("headwise")
    with torch.no_grad():
        projected = model(torch.randint(3, 99, (1, 30)), output_attentions=True).attentions[0]
        dense = model(torch.randint(3, 99, (1, 6)), output_attentions=True).attentions[0]
    assert projected.shape == (1, TINY["num_attention_heads"], 30, K)
    assert dense.shape == (1, TINY["num_attention_heads"], 6, 6)
    torch.testing.assert_close(projected.sum(-1), torch.ones(1, TINY["num_attention_heads"], 30))


def test_init_from_dense_averages_contiguous_segments():
    rows = segment_means(4, 10)
    torch.testing.assert_close(rows.sum(-1), torch.ones(4))
    assert ((rows > 0).sum(0) == 1).all()  # every position in exactly one segment
    assert rows[0, :2].tolist() == [0.5, 0.5] and rows[3, 7:].tolist() == pytest.approx([1 / 3] * 3)
    model = build("headwise")
    for mechanism in mechanisms(model):
        mechanism.init_from_dense()
    expected = segment_means(K, model.config.max_sequence_length)
    assert torch.equal(mechanisms(model)[1].length_projection.weight[1], expected)


def test_random_init_keeps_projected_rows_at_the_scale_of_one_key():
    model = build("key_value", projected_length=64)
    std = mechanisms(model)[0].length_projection.weight.std().item()
    assert std == pytest.approx(model.config.max_sequence_length**-0.5, rel=0.1)


def test_too_long_input_and_causal_use_are_errors():
    mechanism = mechanisms(build())[0]
    with pytest.raises(ValueError, match="max_sequence_length"):
        mechanism(torch.randn(1, mechanism.max_length + 1, TINY["hidden_size"]))
    with pytest.raises(ValueError, match="is_causal"):
        mechanism(torch.randn(1, 20, TINY["hidden_size"]), is_causal=True)


@pytest.mark.parametrize(
    ("overrides", "field", "error"),
    [
        ({"projected_length": 0}, "projected_length", ValueError),
        ({"is_decoder": True}, "is_decoder", ValueError),
        ({"projection_sharing": "per_layer"}, "projection_sharing", StrictDataclassFieldValidationError),
    ],
)
def test_invalid_linformer_configs_name_the_field(overrides, field, error):
    with pytest.raises(error, match=field):
        HfeLinformerConfig(**{**TINY, **overrides})
