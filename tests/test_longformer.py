"""Longformer-style family: the pattern against an explicit reference mask, config checks, head defaults."""

import pytest
import torch
import torch.nn.functional as F

from hf_efficient import HfeLongformerConfig
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
def test_pattern_matches_reference_mask(length, dilations, globals_at):
    torch.manual_seed(0)
    mechanism = SlidingAttention(config(attention_dilation=dilations), 0).eval()
    hidden, valid, is_global = inputs(length, globals_at)
    expected, _ = reference(mechanism, hidden, valid, is_global)
    with torch.no_grad():
        context, _ = run_padded(mechanism, hidden, valid, is_global if globals_at else None)
    assert torch.isfinite(context).all()
    assert (context - expected)[valid].abs().max() <= 1e-5
