"""Helpers shared by the block-sparse mechanisms (BlockBERT's permuted blocks, BigBird's blocked window).

Both patterns are defined on each sequence's REAL tokens, numbered 0, 1, 2, ... in order (their
rank), so padding anywhere in a batch never moves a block boundary: a sequence gets the same
outputs alone or right-padded into a longer batch. The fast paths gather tokens into a blocked
layout; `pattern_attention` computes the same pattern densely from an explicit mask, for the
attention weights (and for short inputs, where a dense kernel is faster than blocking).
"""

import torch
from torch import nn


def token_ranks(attention_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """bool [batch, length] -> (rank of each token among its sequence's real tokens, -1 for padding; real counts [batch])."""
    counts = attention_mask.sum(dim=1)
    ranks = torch.where(attention_mask, attention_mask.long().cumsum(dim=1) - 1, -1)
    return ranks, counts


def flagged_first(flags: torch.Tensor, exporting: bool = False) -> torch.Tensor:
    """Positions [batch, length] with the True entries of bool `flags` [batch, length] first, then the others, each in order."""
    if exporting:  # unique keys instead of a stable sort, which torch.onnx cannot convert
        position = torch.arange(flags.shape[-1], device=flags.device)
        return torch.argsort(torch.where(flags, position, position + flags.shape[-1]), dim=-1)
    return torch.argsort((~flags).to(torch.uint8), dim=-1, stable=True)


def real_tokens_first(attention_mask: torch.Tensor, exporting: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """bool [batch, length] -> (positions with the real tokens first, in order [batch, length]; its inverse).

    `x.gather(1, order)` packs each sequence's real tokens at the front; gathering the result with
    the inverse puts every token back where it was.
    """
    order = flagged_first(attention_mask, exporting)
    inverse = torch.empty_like(order).scatter_(1, order, torch.arange(order.shape[1], device=order.device).expand_as(order))
    return order, inverse


def gather_tokens(x: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """x [batch, length, *rest] at `index` [batch, n, *lead] along the length axis -> [batch, n, *rest].

    `index` may also index the leading dims of `rest` (e.g. a different token per head).
    """
    trailing = x.dim() - index.dim()
    return x.gather(1, index.view(*index.shape, *[1] * trailing).expand(*index.shape, *x.shape[index.dim():]))


def pattern_attention(
    module: nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    allowed: torch.Tensor,
    output_attentions: bool,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Softmax attention restricted to a pattern, broadcastable to [batch, heads, length, length].

    Exact, but O(length^2): used for the attention weights and for inputs short enough that one dense
    kernel beats the blocked path. `allowed` is bool (True: may attend); without weights it may also be
    an additive float mask, which sdpa uses without converting. Under a bool pattern a query with no
    allowed key gets a zero context (and zero weights); under an additive one, the mean of the values.
    Returns the context [batch, length, hidden] and, if asked, the weights [batch, heads, length, length].
    """
    if not output_attentions:
        context = nn.functional.scaled_dot_product_attention(
            query, key, value, attn_mask=allowed, dropout_p=module.attention_dropout, scale=module.scaling
        )
        return module.merge_heads(context), None
    scores = torch.matmul(query, key.transpose(-1, -2)) * module.scaling
    scores = scores.masked_fill(~allowed, torch.finfo(scores.dtype).min)
    # Softmax in at least fp32; rows with no allowed key would be uniform over masked keys, so zero them.
    weights = (nn.functional.softmax(scores, dim=-1, dtype=torch.promote_types(scores.dtype, torch.float32)) * allowed)
    weights = weights.to(query.dtype)
    dropped = nn.functional.dropout(weights, p=module.attention_dropout, training=module.training)
    return module.merge_heads(torch.matmul(dropped, value)), weights
