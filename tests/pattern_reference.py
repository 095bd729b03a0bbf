"""The reference every block-sparse family is checked against: dense softmax attention under an explicit mask."""

import torch


def reference_attention(attention, hidden: torch.Tensor, allowed: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """fp32 masked softmax attention with `attention`'s projections; a query with no allowed key gets zeros."""
    query, key, value = attention.project_qkv(hidden)
    scores = (query @ key.transpose(-1, -2)).float() * attention.scaling
    weights = scores.masked_fill(~allowed, float("-inf")).softmax(-1).nan_to_num(0.0)
    return attention.merge_heads(weights @ value.float()), weights


def assert_matches_reference(
    attention, hidden: torch.Tensor, attention_mask: torch.Tensor | None, real: torch.Tensor, allowed: torch.Tensor
) -> None:
    """The fast path and the weights path both equal the reference on the real queries (<= 1e-5)."""
    expected, expected_weights = reference_attention(attention, hidden, allowed)
    with torch.no_grad():
        context, _ = attention(hidden, attention_mask)
        dense_context, weights = attention(hidden, attention_mask, output_attentions=True)
    assert torch.isfinite(context).all()
    assert (context - expected).mul(real[..., None]).abs().max() <= 1e-5
    assert (dense_context - expected).mul(real[..., None]).abs().max() <= 1e-5
    assert (weights - expected_weights).mul(real[:, None, :, None]).abs().max() <= 1e-5


def assert_gradients_match_reference(attention, hidden: torch.Tensor, mask: torch.Tensor, allowed: torch.Tensor) -> None:
    """Gradients through the fast path (training mode) equal those through the reference (<= 1e-4)."""
    attention.train()
    hidden = hidden.detach().requires_grad_(True)
    context, _ = attention(hidden, mask)
    fast = torch.autograd.grad((context * mask[..., None]).pow(2).sum(), [hidden, attention.query.weight])
    expected, _ = reference_attention(attention, hidden, allowed)
    slow = torch.autograd.grad((expected * mask[..., None]).pow(2).sum(), [hidden, attention.query.weight])
    for a, b in zip(fast, slow, strict=True):
        assert (a - b).abs().max() <= 1e-4


def assert_padding_anywhere_is_ignored(attention, hidden: torch.Tensor, attention_mask: torch.Tensor) -> None:
    """`hidden` [1, l, hidden] spread over the True positions of `attention_mask` [1, length] gives the same outputs."""
    scattered = torch.zeros(1, attention_mask.shape[1], hidden.shape[-1])
    scattered[attention_mask] = hidden[0]
    with torch.no_grad():
        alone, _ = attention(hidden, None)
        spread, _ = attention(scattered, attention_mask)
    assert (spread[attention_mask] - alone[0]).abs().max() <= 1e-5
