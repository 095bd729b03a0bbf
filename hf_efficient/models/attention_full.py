"""Dense softmax attention, dispatched through transformers' attention interface (eager / sdpa)."""

import torch
from torch import nn
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

from .attention import AttentionMechanism, register_attention


def eager_attention(
    module: nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float,
    dropout: float = 0.0,
    **kwargs,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Softmax attention in plain torch; the softmax runs in fp32 so fp16/bf16 stay finite."""
    scores = torch.matmul(query, key.transpose(-1, -2)) * scaling
    if attention_mask is not None:
        scores = scores + attention_mask
    weights = nn.functional.softmax(scores, dim=-1, dtype=torch.float32).to(query.dtype)
    weights = nn.functional.dropout(weights, p=dropout, training=module.training)
    return torch.matmul(weights, value).transpose(1, 2).contiguous(), weights


def dense_attention_mask(attention_mask: torch.Tensor | None, dtype: torch.dtype, implementation: str) -> torch.Tensor | None:
    """bool [batch, length] -> the [batch, 1, 1, length] mask the attention interface expects.

    An additive float mask [batch | 1, 1, length, length] (pairwise patterns) is passed through as is.
    """
    if attention_mask is None or attention_mask.dim() == 4:
        return attention_mask
    mask = attention_mask[:, None, None, :]
    if implementation == "eager":
        return torch.zeros(mask.shape, dtype=dtype, device=mask.device).masked_fill(~mask, torch.finfo(dtype).min)
    return mask


@register_attention("full")
class FullAttention(AttentionMechanism):
    """RoBERTa's attention: weights [batch, heads, length, length]."""

    def forward(self, hidden_states, attention_mask=None, output_attentions=False, **kwargs):
        return self.attend(*self.project_qkv(hidden_states), attention_mask, output_attentions)

    def attend(
        self,
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        attention_mask: torch.Tensor | None,
        output_attentions: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Exact dense attention on [batch, heads, length, head_dim] tensors; also the sparse families' fallback."""
        implementation = "eager" if output_attentions else (self.config._attn_implementation or "sdpa")
        interface = ALL_ATTENTION_FUNCTIONS.get_interface(implementation, eager_attention)
        context, weights = interface(
            self,
            query,
            key,
            value,
            dense_attention_mask(attention_mask, query.dtype, implementation),
            dropout=self.attention_dropout,
            scaling=self.scaling,
            is_causal=False,
        )
        batch, length = context.shape[:2]
        return context.reshape(batch, length, -1), weights if output_attentions else None
