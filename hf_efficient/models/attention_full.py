"""Dense softmax attention, dispatched through transformers' attention interface (eager / sdpa / flex_attention)."""

import torch
from torch import nn
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

from .attention import AttentionMechanism, register_attention
from .attention_flex import block_mask_from_tiles, fused_attention, per_tile, shared_block_mask, uses_fused_path


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
    """Softmax attention in plain torch; the softmax runs in at least fp32, so fp16/bf16 stay finite and fp64 stays fp64."""
    scores = torch.matmul(query, key.transpose(-1, -2)) * scaling
    if attention_mask is not None:
        scores = scores + attention_mask
    weights = nn.functional.softmax(scores, dim=-1, dtype=torch.promote_types(scores.dtype, torch.float32)).to(query.dtype)
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

    def attention(self, hidden_states, attention_mask, output_attentions, plan, **kwargs):
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
        if implementation == "flex_attention" and (attention_mask is None or attention_mask.dim() == 2):
            return fused_attention(self, query, key, value, self.padding_block_mask(attention_mask)), None
        if implementation == "flex_attention":  # a pattern as a dense mask (no fused path asked for it): sdpa
            implementation = "sdpa"
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

    def takes_fused_path(self) -> bool:
        """Whether this call takes the fused FlexAttention path (`uses_fused_path`), on the device of the weights."""
        return uses_fused_path(self.config._attn_implementation, self.query.weight.device.type, self.attention_dropout)

    @staticmethod
    def padding_block_mask(attention_mask: torch.Tensor | None):
        """The block mask of dense attention over the real keys (None without padding): tiles of padding only are skipped."""
        if attention_mask is None:
            return None
        batch, length = attention_mask.shape

        def build():
            valid, whole = per_tile(attention_mask)

            def mask_mod(b, h, q_idx, kv_idx):
                return attention_mask[b, kv_idx]

            return block_mask_from_tiles((valid[:, None, :] & valid[:, :, None])[:, None], whole[:, None, None, :], mask_mod,
                                         length)

        return shared_block_mask(("padding", batch, length, attention_mask.device), (attention_mask,), build)

    def dense_attention(
        self, hidden_states: torch.Tensor, attention_mask: torch.Tensor | None, output_attentions: bool
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The exact dense function this mechanism falls back to (plain dense attention here)."""
        return self.attend(*self.project_qkv(hidden_states), attention_mask, output_attentions)

    def dense_for_short_sequences(
        self,
        hidden_states: torch.Tensor,
        attention_mask: torch.Tensor | None,
        output_attentions: bool,
        max_length: int,
        context: torch.Tensor,
        weights: torch.Tensor | None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """`context` (and `weights`) with the rows of every sequence whose real tokens all lie in the first
        `max_length` positions replaced by `dense_attention` over those positions.

        Decided per sequence from the mask, never from the batch's padded length, so a sequence gets the same
        result alone and padded into a longer batch.
        """
        length = hidden_states.shape[1]
        if attention_mask is None or max_length <= 0 or length <= max_length:
            return context, weights
        extent = (attention_mask * torch.arange(1, length + 1, device=attention_mask.device)).amax(-1)
        short = (extent <= max_length).nonzero().squeeze(1)
        if short.numel() == 0:
            return context, weights
        dense_context, dense_weights = self.dense_attention(
            hidden_states[short, :max_length], attention_mask[short, :max_length], output_attentions
        )
        context = context.index_copy(0, short, nn.functional.pad(dense_context, (0, 0, 0, length - max_length)))
        if weights is not None:
            padding = (0, weights.shape[-1] - dense_weights.shape[-1], 0, length - max_length)
            weights = weights.index_copy(0, short, nn.functional.pad(dense_weights, padding))
        return context, weights
