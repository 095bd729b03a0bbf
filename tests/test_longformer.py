"""Longformer-style family: the pattern against an explicit reference mask, config checks, head defaults."""

import pytest
import torch
import torch.nn.functional as F

from hf_efficient import (
    HfeLongformerConfig,
    HfeLongformerForMultipleChoice,
    HfeLongformerForQuestionAnswering,
    HfeLongformerForSequenceClassification,
    HfeLongformerModel,
)
from hf_efficient.models.attention_sliding import SlidingAttention

from .families import TINY


def config(**overrides) -> HfeLongformerConfig:
    return HfeLongformerConfig(**{**TINY, "attention_window": 8, **overrides})


def reference(mechanism: SlidingAttention, hidden, valid, is_global) -> tuple[torch.Tensor, torch.Tensor]:
    """Masked dense softmax attention (fp32) over the explicit L x L pattern the docs define: context and weights."""
    position = torch.arange(hidden.shape[1])
    offset = position[:, None] - position[None, :]
    dilation = torch.tensor(mechanism.dilations)[:, None, None]
    window = (offset.abs() <= dilation * mechanism.reach) & (offset % dilation == 0)  # [heads, L, L]
    local = (window | is_global[:, None, None, :]) & valid[:, None, None, :]
    global_row = is_global[:, None, :, None]
    allowed = torch.where(global_row, valid[:, None, None, :], local)

    def attention(suffix: str) -> tuple[torch.Tensor, torch.Tensor]:
        q, k, v = (mechanism.split_heads(getattr(mechanism, name + suffix)(hidden)) for name in ("query", "key", "value"))
        weights = (q @ k.transpose(-1, -2) * mechanism.scaling).masked_fill(~allowed, float("-inf")).softmax(-1)
        return weights.nan_to_num() @ v, weights

    (local_context, local_weights), (global_context, global_weights) = attention(""), attention("_global")
    context = torch.where(global_row, global_context, local_context)
    return mechanism.merge_heads(context), torch.where(global_row, global_weights, local_weights)


def run_padded(mechanism: SlidingAttention, hidden, valid, is_global, output_attentions=False):
    """Call the mechanism as the backbone does: padded to its multiple, padding stripped from the rows."""
    length = hidden.shape[1]
    padding = -length % mechanism.pad_multiple(length)
    context, weights = mechanism(
        F.pad(hidden, (0, 0, 0, padding)), F.pad(valid, (0, padding)), output_attentions,
        global_attention_mask=None if is_global is None else F.pad(is_global, (0, padding)),
    )
    return context[:, :length], None if weights is None else weights[:, :, :length, :length]


def inputs(length: int, globals_at: tuple[int, ...], seed: int = 0):
    generator = torch.Generator().manual_seed(seed)
    hidden = torch.randn(2, length, TINY["hidden_size"], generator=generator)
    valid = torch.ones(2, length, dtype=torch.bool)
    valid[1, length - length // 3:] = False  # second sequence padded
    is_global = torch.zeros(2, length, dtype=torch.bool)
    is_global[0, list(globals_at)] = True
    is_global[1, [g for g in globals_at if g < length - length // 3][:1]] = True
    return hidden, valid, is_global


@pytest.mark.parametrize("length", [13, 20, 36, 64, 101])
@pytest.mark.parametrize("dilations", [[1, 1, 1, 1], [1, 2, 1, 3]])
@pytest.mark.parametrize("globals_at", [(), (0,), (0, 5, 11)])
@pytest.mark.parametrize("min_inference_block", [SlidingAttention.min_inference_block, 2, 1],
                         ids=["blocks of half the window", "quarter", "eighth"])
def test_pattern_matches_reference_mask(length, dilations, globals_at, min_inference_block):
    """Without gradients (sequence by sequence), with the blocked path's query blocks of half the window (the tiny
    window's 4 tokens are under the default smallest inference block), a quarter and an eighth of it."""
    torch.manual_seed(0)
    mechanism = SlidingAttention(config(attention_dilation=dilations), 0).eval()
    mechanism.min_inference_block = min_inference_block
    hidden, valid, is_global = inputs(length, globals_at)
    expected, _ = reference(mechanism, hidden, valid, is_global)
    with torch.no_grad():
        context, _ = run_padded(mechanism, hidden, valid, is_global if globals_at else None)
        # One sequence alone takes the blocked path's in-place neighbour blocks (a batch gathers them).
        alone, _ = run_padded(mechanism, hidden[:1], valid[:1], is_global[:1] if globals_at else None)
    assert torch.isfinite(context).all()
    assert (context - expected)[valid].abs().max() <= 1e-5
    assert (alone - expected[:1]).abs().max() <= 1e-5


@pytest.mark.parametrize(("grad", "globals_at", "keys"), [(False, (), 9), (False, (0,), 13), (True, (), 12)],
                         ids=["inference", "inference, global tokens", "training"])
def test_blocked_path_block_sizes(monkeypatch, grad, globals_at, keys):
    """Inference without global tokens reads nine blocks of an eighth of the window per query block (9 keys for the
    window of 8), with global tokens (and in training) three blocks of half the window (12 keys), plus the global
    keys; a batch of 2 runs sequence by sequence without gradients."""
    mechanism = SlidingAttention(config(), 0).eval()
    mechanism.min_inference_block = 1
    calls = []
    sdpa = F.scaled_dot_product_attention
    monkeypatch.setattr(F, "scaled_dot_product_attention", lambda q, k, *args, **kwargs: calls.append(k.shape) or sdpa(q, k, *args, **kwargs))
    hidden, valid, is_global = inputs(64, globals_at)
    with torch.set_grad_enabled(grad):
        run_padded(mechanism, hidden, valid, is_global if globals_at else None)
    local = [shape[-2] for shape in calls if shape[-2] != 64]  # global tokens' rows: one call over all 64 keys
    assert local == [keys] * (1 if grad else 2)


@pytest.mark.parametrize("recompute_min_length", [0, 8192])
@pytest.mark.parametrize("dilations", [[1, 1, 1, 1], [1, 2, 1, 3]])
@pytest.mark.parametrize(("one_sequence", "globals_at"), [(False, (0, 5)), (False, tuple(range(0, 64, 7))), (True, ())],
                         ids=["a batch with global tokens", "more global tokens than the width's heads", "one sequence"])
def test_blocked_gradients_match_the_reference(recompute_min_length, dilations, one_sequence, globals_at):
    """Training through the blocked path, recomputed in backward (from `blocked_recompute_min_length` up) or not; one
    sequence without global tokens reads its neighbour blocks in place, a batch gathers them. Two global tokens attend
    to the hidden states themselves; 10 (x 4 heads, over the width of 32) to every token's global key and value."""
    mechanism = HfeLongformerModel(config(attention_dilation=dilations, blocked_recompute_min_length=recompute_min_length))
    mechanism = mechanism.encoder.layer[1].attention.self.train()
    mechanism.dropout_prob = 0.0
    hidden, valid, is_global = inputs(64, globals_at)
    if one_sequence:
        hidden, valid, is_global = hidden[:1], valid[:1], torch.zeros_like(is_global[:1])
    assert mechanism.plan(64).path == "blocked"
    assert mechanism.reads_hidden_states(len(globals_at)) == (len(globals_at) < 10)
    hidden.requires_grad_(True)
    weights = [mechanism.query.weight, mechanism.query_global.weight, mechanism.key_global.weight,
               mechanism.key_global.bias, mechanism.value_global.weight, mechanism.value_global.bias]
    context, _ = run_padded(mechanism, hidden, valid, None if one_sequence else is_global)
    fast = torch.autograd.grad((context * valid[..., None]).pow(2).sum(), [hidden, *weights])
    expected, _ = reference(mechanism, hidden, valid, is_global)
    slow = torch.autograd.grad((expected * valid[..., None]).pow(2).sum(), [hidden, *weights])
    for a, b in zip(fast, slow, strict=True):
        assert (a - b).abs().max() <= 1e-4


def test_global_rows_read_the_hidden_states_only_with_plain_projections_at_hand():
    """The global queries attend to the hidden states themselves while global tokens x heads stay under the width,
    with plain linear global projections whose weights are at hand; with a DeepSpeed ZeRO-3 parameter (partitioned
    outside its own module's call) or a wrapped projection they read every token's global key and value. Either way
    the context is the reference's."""
    torch.manual_seed(0)
    mechanism = SlidingAttention(config(), 0).eval()
    hidden, valid, is_global = inputs(64, (0, 5))
    expected, _ = reference(mechanism, hidden, valid, is_global)
    assert mechanism.reads_hidden_states(7) and not mechanism.reads_hidden_states(8)  # 4 heads x 8 = the width
    mechanism.value_global.weight.ds_id = 0
    assert not mechanism.reads_hidden_states(2)
    del mechanism.value_global.weight.ds_id
    mechanism.key_global = torch.nn.Sequential(mechanism.key_global)
    assert not mechanism.reads_hidden_states(2)
    with torch.no_grad():
        context, _ = run_padded(mechanism, hidden, valid, is_global)
    assert (context - expected)[valid].abs().max() <= 1e-5


def test_global_rows_read_every_tokens_projections_under_fsdp2(tmp_path):
    """FSDP2's `fully_shard` on a global projection alone leaves its weight sharded outside its own call: the global
    queries then read every token's global key and value (the class it gives the module is not `nn.Linear`)."""
    from torch.distributed.fsdp import fully_shard

    store = torch.distributed.FileStore(str(tmp_path / "store"), 1)
    torch.distributed.init_process_group("gloo", store=store, rank=0, world_size=1)
    try:
        mechanism = SlidingAttention(config(), 0)
        fully_shard(mechanism.key_global)
        assert not mechanism.reads_hidden_states(2)
    finally:
        torch.distributed.destroy_process_group()


@pytest.mark.parametrize("length", [13, 64])
def test_attention_weights_are_the_full_pattern_matrix(length):
    torch.manual_seed(0)
    mechanism = SlidingAttention(config(attention_dilation=[1, 2, 1, 1]), 0).eval()
    hidden, valid, is_global = inputs(length, (0, 5))
    _, expected = reference(mechanism, hidden, valid, is_global)
    with torch.no_grad():
        _, weights = run_padded(mechanism, hidden, valid, is_global, output_attentions=True)
    rows = valid[:, None, :, None].expand_as(weights)
    assert (weights - expected.nan_to_num())[rows].abs().max() <= 1e-5


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"attention_window": 7}, "attention_window"),
        ({"attention_window": 0}, "attention_window"),
        ({"attention_window": [8, 8, 8]}, "attention_window"),
        ({"attention_dilation": 0}, "attention_dilation"),
        ({"attention_dilation": [1, 2]}, "attention_dilation"),
        ({"attention_dilation": 40}, "attention_dilation"),  # 40 * 4 >= the 127 tokens the positions allow
        ({"blocked_recompute_min_length": -1}, "blocked_recompute_min_length"),
        ({"max_compiled_global_tokens": 0}, "max_compiled_global_tokens"),
    ],
)
def test_invalid_configs_name_the_field(overrides, field):
    with pytest.raises(ValueError, match=field):
        config(**overrides)


def test_global_projections_start_as_the_local_ones():
    model = HfeLongformerModel(config())
    mechanism = model.encoder.layer[1].attention.self
    for name in ("query", "key", "value"):
        assert torch.equal(getattr(mechanism, f"{name}_global").weight, getattr(mechanism, name).weight)
    with torch.no_grad():
        mechanism.query.weight.add_(1.0)
    assert "query_global.weight" in mechanism.init_from_dense()
    assert torch.equal(mechanism.query_global.weight, mechanism.query.weight)


def test_short_inputs_take_the_dense_path_without_changing_the_module():
    torch.manual_seed(0)
    model = HfeLongformerModel(config()).eval()
    long_ids, short_ids = torch.randint(3, 99, (1, 100)), torch.randint(3, 99, (1, 5))
    mechanism = model.encoder.layer[0].attention.self
    assert mechanism.pad_multiple(5) == 1 and mechanism.pad_multiple(100) == 4
    with torch.no_grad():
        before = model(long_ids).last_hidden_state
        model(short_ids)
        after = model(long_ids).last_hidden_state
    assert torch.equal(before, after)


def with_separators(batch: int, length: int) -> torch.Tensor:
    """<s> question(4) </s></s> context </s> padding."""
    ids = torch.randint(3, 99, (batch, length))
    ids[:, 0] = 0
    ids[:, 5:7] = 2
    ids[:, length - 4] = 2
    ids[:, length - 3:] = 1
    return ids


@pytest.mark.parametrize(
    ("head", "expected"),
    [
        (HfeLongformerForSequenceClassification, lambda ids: torch.arange(ids.shape[-1]) == 0),
        (HfeLongformerForQuestionAnswering, lambda ids: torch.arange(ids.shape[-1]) < 5),
        (HfeLongformerForMultipleChoice, lambda ids: (torch.arange(ids.shape[-1]) > 6) & (ids != 1)),
    ],
)
def test_heads_default_global_attention_and_caller_override(head, expected):
    torch.manual_seed(0)
    model = head(config()).eval()
    ids = with_separators(3, 40)
    if head is HfeLongformerForMultipleChoice:
        ids = ids.view(1, 3, 40)
    default = expected(ids).expand(ids.shape)
    with torch.no_grad():
        implicit = model(ids)[0]
        explicit = model(ids, global_attention_mask=default)[0]
        none = model(ids, global_attention_mask=torch.zeros_like(default))[0]
    assert torch.equal(implicit, explicit)
    assert not torch.allclose(implicit, none)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_precision_with_fully_padded_blocks_is_finite(dtype):
    torch.manual_seed(0)
    model = HfeLongformerModel(config()).to(dtype).eval()
    ids = torch.randint(3, 99, (2, 64))
    mask = torch.ones_like(ids)
    mask[1, 8:] = 0  # padded queries whose whole window is padding
    with torch.no_grad():
        out = model(ids, attention_mask=mask, global_attention_mask=(torch.arange(64) == 3).expand(2, 64))
    assert torch.isfinite(out.last_hidden_state).all()
