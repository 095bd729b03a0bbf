"""Reformer's chunked local attention: the sequence cut into chunks by position, each chunk attending to itself
and its neighbouring chunks (unlike Longformer's sliding window, attention_sliding.py, where each token has its
own window).

`chunked_attention` is also the kernel of LSH attention (attention_lsh.py), which runs it on each
hashing round's bucket-sorted sequence. Attention weights come back in the dense layout
[batch, heads, length, length] (zero outside the pattern), like the dense fallback's.
"""

import torch
import torch.nn.functional as F

from .attention import defaults_of, register_attention
from .attention_full import FullAttention
from .configuration_reformer import HfeReformerConfig

# Scores run in fp32. Masked keys get the lowest value; a token's own key (when attention to self
# is excluded) a value above it, so that a token with no other target attends to itself.
MASKED_SCORE = torch.finfo(torch.float32).min
SELF_SCORE = MASKED_SCORE / 2


def look_around(x: torch.Tensor, dim: int, chunk_length: int, before: int, after: int, fill: int = 0) -> torch.Tensor:
    """Windows over the sequence axis `dim` of `x`: chunk i joined with its `before` preceding and `after`
    following chunks, [..., chunks, window, ...]; beyond either end filled with `fill` (no wrap-around).

    One padded copy of `x` viewed through `unfold`, so the backward pass is a single accumulation.
    """
    dim %= x.dim()
    padded = F.pad(x, [0, 0] * (x.dim() - 1 - dim) + [before * chunk_length, after * chunk_length], value=fill)
    return padded.unfold(dim, (before + 1 + after) * chunk_length, chunk_length).movedim(-1, dim + 1)


def chunked_attention(
    module: FullAttention,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    positions: torch.Tensor,
    key_mask: torch.Tensor | None,
    chunk_length: int,
    chunks_before: int,
    chunks_after: int,
    exclude_self: bool,
    causal: bool,
    with_logsumexp: bool = False,
    exporting: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor, torch.Tensor]:
    """Softmax attention of each chunk of `chunk_length` rows to itself and its neighbouring chunks.

    query/key/value: [..., L, head_dim], L a multiple of `chunk_length`, rows in the order to chunk.
    positions: [..., L] (broadcastable), each row's position in the input (for the causal mask).
    key_mask: [..., L] (broadcastable) bool, False for keys nobody may attend to (padding), or None.
    With `exclude_self`, row i does not attend to key row i unless nothing else is allowed.
    Returns the context [..., L, head_dim], each row's logsumexp of scores [..., L] (fp32; only
    `with_logsumexp`), and the probabilities [..., chunks, chunk_length, window] with the positions
    of the keys they refer to [..., chunks, window] (-1: no key there).
    """
    chunks = query.shape[-2] // chunk_length

    def windows(x: torch.Tensor, dim: int, fill: int = 0) -> torch.Tensor:
        return look_around(x, dim, chunk_length, chunks_before, chunks_after, fill)

    key_positions = windows(positions if key_mask is None else positions.where(key_mask, -1), -1, fill=-1)
    blocked = key_positions[..., None, :] < 0  # outside the input or padding: [..., chunks, 1, window]
    if causal:
        blocked = blocked | (key_positions[..., None, :] > positions.unflatten(-1, (chunks, chunk_length))[..., None])
    own_key = chunks_before * chunk_length if exclude_self else None  # a row's own key: this diagonal
    dropout = module.attention_dropout if module.training else 0.0
    arguments = (query.unflatten(-2, (chunks, chunk_length)) * module.scaling, windows(key, -2), windows(value, -2),
                 blocked, own_key)
    if torch.compiler.is_compiling() and torch.is_grad_enabled():
        # Dynamo fails to trace the autograd.Function in a training graph (torch 2.13: "lift_tracked_freevar_to_input
        # should not be called on root SubgraphTracer", pytorch/pytorch#111031): the same forward, differentiated by
        # autograd.
        context, logsumexp, probs, _ = window_attention(*arguments, dropout, with_logsumexp, exporting)
    else:
        context, logsumexp, probs = WindowAttention.apply(
            *arguments, key_mask is not None, dropout, with_logsumexp, exporting,
        )
    return context.flatten(-3, -2), logsumexp.flatten(-2) if with_logsumexp else None, probs, key_positions


def score_dtype(dtype: torch.dtype) -> torch.dtype:
    """Scores and probabilities are at least fp32."""
    return torch.promote_types(dtype, torch.float32)


def fill_own_key_scores(scores: torch.Tensor, own_key: int, value: float, exporting: bool) -> torch.Tensor:
    """Sets, in place, each row's score against its own key in [..., c, window] `scores` (the diagonal starting at
    column `own_key`); returns `scores`."""
    chunk_length = scores.shape[-2]
    if exporting:  # torch.onnx cannot convert a write to a diagonal view (nor, in torch.cond, an indexed one)
        rows = torch.arange(chunk_length, device=scores.device)
        scores.masked_fill_(rows[:, None] + own_key == torch.arange(scores.shape[-1], device=scores.device), value)
    else:  # a mask would be a pass over all scores, where the diagonal writes only the chunk's own keys
        scores[..., own_key : own_key + chunk_length].diagonal(dim1=-2, dim2=-1).fill_(value)
    return scores


def window_attention(query, keys, values, blocked, own_key, dropout, with_logsumexp, exporting):
    """`WindowAttention`'s forward: context, logsumexp (or None), probabilities and the dropout's keep mask (or None).

    query [..., chunks, c, d] (scaled), keys/values [..., chunks, window, d], blocked [..., chunks, c | 1, window].
    """
    scores = torch.matmul(query, keys.mT).to(score_dtype(query.dtype))
    if own_key is not None:  # before the mask: a blocked own key (padding) stays blocked
        fill_own_key_scores(scores, own_key, SELF_SCORE, exporting)
    scores.masked_fill_(blocked, MASKED_SCORE)
    probs = torch.softmax(scores, dim=-1)
    # p_max = exp(max - logsumexp); None when not asked for (two passes over the scores saved)
    logsumexp = scores.amax(-1) - probs.amax(-1).log() if with_logsumexp else None
    del scores
    dropped, keep = torch.native_dropout(probs, dropout, True) if dropout else (probs, None)
    return torch.matmul(dropped.to(values.dtype), values), logsumexp, probs, keep


class WindowAttention(torch.autograd.Function):
    """Masked softmax attention of query chunks to their key windows, with each row's logsumexp.

    One function instead of autograd through its pieces: the masks are applied in place, the
    logsumexp comes from the softmax (max score - log max probability) instead of a second pass
    of exponentials, and the backward pass is softmax's own formula with the logsumexp gradient
    folded in (d score = p * (d p - sum(p * d p) + d logsumexp)). Masked scores count as
    constants: their gradient is zero, as for `masked_fill`.
    """

    @staticmethod
    def forward(ctx, query, keys, values, blocked, own_key, padded, dropout, with_logsumexp, exporting):
        # Windows overlap (views of one padded copy): made contiguous once here rather than by every matmul.
        keys, values = keys.contiguous(), values.contiguous()
        context, logsumexp, probs, keep = window_attention(
            query, keys, values, blocked, own_key, dropout, with_logsumexp, exporting
        )
        ctx.save_for_backward(query, keys, values, blocked, probs, keep, context)
        ctx.own_key, ctx.padded, ctx.dropout, ctx.exporting = own_key, padded, dropout, exporting
        return context, logsumexp, probs

    @staticmethod
    def backward(ctx, d_context, d_logsumexp, d_probs_direct):
        query, keys, values, blocked, probs, keep, context = ctx.saved_tensors
        dropped = probs if keep is None else probs * keep / (1 - ctx.dropout)
        d_values = torch.matmul(dropped.to(values.dtype).mT, d_context)
        d_probs = torch.matmul(d_context, values.mT).to(probs.dtype)
        if keep is not None:
            d_probs = d_probs * keep / (1 - ctx.dropout)
        if d_probs_direct is not None:
            d_probs += d_probs_direct
        if keep is None and d_probs_direct is None:  # sum_j p_j d p_j = d context . context
            row_dot = (d_context.to(probs.dtype) * context.to(probs.dtype)).sum(-1, keepdim=True)
        else:
            row_dot = (d_probs * probs).sum(-1, keepdim=True)
        if d_logsumexp is not None:
            row_dot = row_dot - d_logsumexp[..., None]
        d_scores = d_probs.sub_(row_dot).mul_(probs)
        if ctx.own_key is not None:
            fill_own_key_scores(d_scores, ctx.own_key, 0, ctx.exporting)
        if ctx.padded:  # rows of padding have every key blocked: probabilities are not zero there
            d_scores.masked_fill_(blocked, 0)
        d_scores = d_scores.to(query.dtype)
        return torch.matmul(d_scores, keys), torch.matmul(d_scores.mT, query), d_values, None, None, None, None, None, None


def dense_weights(probs: torch.Tensor, query_positions: torch.Tensor, key_positions: torch.Tensor, length: int):
    """Chunked probabilities [batch, heads, ..., chunks, c, window] -> [batch, heads, length, length].

    Positions as `chunked_attention` takes (queries, [..., length]) and returns them (keys); the
    probabilities of every leading dimension after heads (e.g. hashing rounds) are summed.
    """
    probs = probs * (key_positions[..., None, :] >= 0)
    index = query_positions.unflatten(-1, (-1, probs.shape[-2]))[..., None] * length
    index = (index + key_positions.clamp(min=0)[..., None, :]).expand_as(probs)
    batch, heads = probs.shape[:2]
    weights = probs.new_zeros(batch, heads, length * length)
    return weights.scatter_add_(-1, index.reshape(batch, heads, -1), probs.reshape(batch, heads, -1)).view(
        batch, heads, length, length
    )


@register_attention("chunked_local")
class ChunkedLocalAttention(FullAttention):
    """Chunks of `local_chunk_length` positions attend to themselves and their neighbouring chunks.

    Exact dense attention (`FullAttention.attend`) where that is cheaper or the same function: for every
    sequence of at most `full_attention_max_length` real tokens (decided per sequence), and for inputs whose
    chunks reach the whole input.
    """

    exclude_self = False
    config_defaults = defaults_of(HfeReformerConfig, "local_chunk_length", "local_num_chunks_before",
                                  "local_num_chunks_after", "full_attention_max_length", "is_decoder")
    # The fields `chunk_length`, `chunks_before`, `chunks_after` come from.
    chunk_fields = ("local_chunk_length", "local_num_chunks_before", "local_num_chunks_after")

    def __init__(self, config, layer_idx: int):
        super().__init__(config, layer_idx)
        self.chunk_length, self.chunks_before, self.chunks_after = (self.option(config, name) for name in self.chunk_fields)
        self.full_attention_max_length = self.option(config, "full_attention_max_length")
        self.causal = self.option(config, "is_decoder")

    @classmethod
    def check_config(cls, config, layer_idx: int) -> None:
        chunk_length, *neighbours = cls.chunk_fields
        if cls.option(config, chunk_length) <= 0:
            raise ValueError(f"`{chunk_length}` must be positive, got {cls.option(config, chunk_length)}.")
        for name in (*neighbours, "full_attention_max_length"):
            if cls.option(config, name) < 0:
                raise ValueError(f"`{name}` must be >= 0, got {cls.option(config, name)}.")

    def covers(self, length: int) -> bool:
        """Whether an input of `length` tokens gets dense attention (then it is not padded)."""
        chunks = -(-length // self.chunk_length)
        return length <= self.full_attention_max_length or chunks - 1 <= min(self.chunks_before, self.chunks_after)

    def choose_path(self, length, output_attentions, exporting):
        # Under export the chunked path serves every length (see `exported`), so the input is always chunked.
        if not exporting and self.covers(length):
            return "dense", 1
        return "chunked", self.chunk_length

    def dense_mask(
        self, attention_mask: torch.Tensor | None, length: int, like: torch.Tensor, exporting: bool = False
    ) -> torch.Tensor | None:
        """The dense fallback's mask: the padding mask itself, or an additive [batch | 1, 1, L, L] mask
        when the pattern also masks pairs (causal, no attention to self)."""
        if not (self.causal or self.exclude_self):
            return attention_mask
        positions = torch.arange(length, device=like.device)
        blocked = (positions[None, :] > positions[:, None]) & self.causal
        blocked = blocked[None, None] if attention_mask is None else blocked | ~attention_mask[:, None, None, :]
        low = torch.finfo(like.dtype).min
        mask = torch.zeros(blocked.shape, dtype=like.dtype, device=like.device).masked_fill(blocked, low)
        return fill_own_key_scores(mask, 0, low / 2, exporting) if self.exclude_self else mask

    def attention(self, hidden_states, attention_mask, output_attentions, plan, **kwargs):
        if plan.exporting:
            return self.exported(hidden_states, attention_mask, output_attentions, plan.length)
        if plan.path == "dense":
            return self.dense_attention(hidden_states, attention_mask, output_attentions)
        context, weights = self.chunked(*self.chunk_projections(hidden_states), attention_mask, output_attentions)
        # Sequences of at most `full_attention_max_length` real tokens get dense attention, as they do alone.
        return self.dense_for_short_sequences(
            hidden_states, attention_mask, output_attentions, self.full_attention_max_length, context, weights
        )

    def dense_attention(self, hidden_states, attention_mask, output_attentions):
        return self.dense(*self.project_qkv(hidden_states), attention_mask, output_attentions)

    def chunk_projections(self, hidden_states: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor]:
        """What `chunked` reads: query, key, value [batch, heads, L, head_dim] (LSH: no key, see there)."""
        return self.project_qkv(hidden_states)

    def dense(
        self,
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        attention_mask: torch.Tensor | None,
        output_attentions: bool,
        exporting: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The dense fallback: context [batch, L, hidden] and, if asked, the weights. Under export eager attention
        even without weights: in a torch.cond branch transformers' sdpa wrapper would compare the query count
        with 1, which the branch's symbolic length cannot decide."""
        mask = self.dense_mask(attention_mask, query.shape[2], query, exporting)
        context, weights = self.attend(query, key, value, mask, output_attentions or exporting)
        return context, weights if output_attentions else None

    def chunked(
        self,
        query: torch.Tensor,
        key: torch.Tensor | None,
        value: torch.Tensor,
        attention_mask: torch.Tensor | None,
        output_attentions: bool,
        exporting: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The sparse path: context [batch, L, hidden] and, if asked, the weights."""
        length = query.shape[2]
        positions = torch.arange(length, device=query.device)
        key_mask = None if attention_mask is None else attention_mask[:, None]
        context, _, probs, key_positions = chunked_attention(
            self, query, key, value, positions, key_mask, self.chunk_length, self.chunks_before,
            self.chunks_after, self.exclude_self, self.causal, exporting=exporting,
        )
        return self.merge_heads(context), dense_weights(probs, positions, key_positions, length) if output_attentions else None

    def exported(
        self,
        hidden_states: torch.Tensor,
        attention_mask: torch.Tensor | None,
        output_attentions: bool,
        input_length: int,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """`forward` under torch.export, one program for every length: the chunked path, which is the dense function
        wherever the chunks cover the input. The one real switch, inputs of at most `full_attention_max_length`
        tokens (the caller's length before the backbone's padding, `input_length`), is a torch.cond."""
        if not self.full_attention_max_length:
            return self.chunked(*self.chunk_projections(hidden_states), attention_mask, output_attentions, True)
        if attention_mask is None:
            attention_mask = hidden_states.new_ones(hidden_states.shape[:2], dtype=torch.bool)
        # torch 2.13 workarounds: operands detached (torch.onnx fails to decompose a torch.cond with operands that
        # require grad, pytorch/pytorch#145300, and sizes from `export_padded_length`), so the exported attention has no gradient; outputs
        # flattened (torch.cond rejects the strides of a [batch, L, ...] output with a symbolic L).
        operands = (*(x.detach() for x in self.project_qkv(hidden_states)), attention_mask)

        def flat(path, **options):
            def run(query, key, value, attention_mask) -> tuple[torch.Tensor, ...]:
                outputs = path(query, key, value, attention_mask, output_attentions, **options)
                return tuple(x.flatten() for x in outputs if x is not None)
            return run

        outputs = torch.cond(input_length <= self.full_attention_max_length, flat(self.dense, exporting=True),
                             flat(self.chunked, exporting=True), operands)
        batch, length, hidden = hidden_states.shape
        context = outputs[0].view(batch, length, hidden)
        return context, outputs[1].view(batch, self.num_heads, length, length) if output_attentions else None
