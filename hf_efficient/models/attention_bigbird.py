"""BigBird-style block-sparse attention (Zaheer et al. 2020, the ITC variant).

Semantics, for a sequence with l real tokens and blocks of b tokens (`block_size`): the real token of
rank p (its index among the sequence's real tokens) is in block floor(p / b); blocks 0 .. m-1 with
m = ceil(l / b). Blocks 0 and m-1 are global: their queries attend to every real key, and every query
attends to their keys. A query of any other block i attends to the keys of blocks i-1, i, i+1, 0, m-1,
and of r random blocks (`num_random_blocks`) drawn without replacement from the blocks j with
0 < j < m-1 and |i - j| > 1 (all of them when fewer than r are left). Padded keys get zero weight; padded
queries get a zero or discarded context.

The random plan is a counter-based hash of (`random_blocks_seed`, layer, head, i, j): the candidates with
the r smallest hashes are drawn. It depends on nothing else (not on the batch, the device, the mode, or
any state), so training and eval, recomputation in backward, and every batch padding see the same plan.

How it runs (the plan, chosen per call from the length alone; the module never changes):
- length <= (4 + r) * b: every sequence's pattern covers all of it, so "dense" (`FullAttention.attend`);
- length <= 2 * (5 + r) * b (`dense_pattern_max_length`), or weights requested: "pattern", dense attention
  with the pattern as an additive mask (measured faster than gathering blocks there; O(length^2) memory);
- otherwise "blocked", on the input padded to a multiple of b with each sequence's real tokens packed first:
  every query block gathers its 5 + r key blocks and one `scaled_dot_product_attention` call over
  [batch, heads * blocks] computes all non-global blocks (the grid's first and last blocks, global or padding
  in every sequence, are skipped); one more dense call over all keys computes the two global query blocks. Time O(length * (5 + r) * b). The gathered blocks are 5 + r times the keys, so
  they are built in chunks of `chunk_tokens` query tokens and, with gradients on (from `blocked_recompute_min_length`
  tokens up: by default always; eager only), not kept for backward, which gathers them again (`attend_to_blocks`): what is
  saved for backward is O(length), as for a fused dense kernel, for one more gather.

Attention weights (`output_attentions=True`) are [batch, heads, length, padded length]: row i holds query
i's weights over every key (zero outside the pattern); columns past the input are internal padding.
"""

import torch
from torch import nn

from .attention import (
    attend_to_blocks,
    check_recompute_min_length,
    defaults_of,
    recompute_blocked,
    register_attention,
)
from .attention_flex import TILE, class_table_block_mask, fused_attention, shared_block_mask
from .attention_full import FullAttention
from .blocking import gather_tokens, pattern_attention, real_tokens_first, token_ranks
from .configuration_bigbird import HfeBigBirdConfig

_NOT_DRAWN = 1 << 62


def hash32(x):
    """A 32-bit integer mix (for ints or int64 tensors with values in [0, 2**32)); the random plan's source."""
    for _ in range(2):
        x = ((x >> 16) ^ x) * 0x45D9F3B & 0xFFFFFFFF
    return (x >> 16) ^ x


@register_attention("bigbird")
class BigBirdAttention(FullAttention):
    # Up to 2 * (5 + r) blocks (a query block then attends to at least half of them), one dense kernel
    # with the pattern as a mask was measured faster than gathering blocks.
    dense_pattern_max_blocks_factor = 2
    # Query tokens per chunk of the blocked path (see `blocked_attention`): smaller chunks gather smaller buffers
    # each step; 1024 was the faster training step at 2048 tokens and no slower at 4096.
    chunk_tokens = 1024

    config_defaults = defaults_of(HfeBigBirdConfig, "block_size", "num_random_blocks", "random_blocks_seed",
                                  "blocked_recompute_min_length")

    def __init__(self, config, layer_idx: int):
        super().__init__(config, layer_idx)
        self.block_size = self.option(config, "block_size")
        self.num_random_blocks = self.option(config, "num_random_blocks")
        self.recompute_min_length = self.option(config, "blocked_recompute_min_length")
        self.seed = hash32(hash32(self.option(config, "random_blocks_seed") & 0xFFFFFFFF) ^ layer_idx)

    @classmethod
    def check_config(cls, config, layer_idx: int) -> None:
        if cls.option(config, "block_size") < 1:
            raise ValueError(f"`block_size` must be >= 1, got {cls.option(config, 'block_size')}.")
        if cls.option(config, "num_random_blocks") < 0:
            raise ValueError(f"`num_random_blocks` must be >= 0, got {cls.option(config, 'num_random_blocks')}.")
        check_recompute_min_length(cls.option(config, "blocked_recompute_min_length"))

    @property
    def dense_length(self) -> int:
        """Inputs up to this length are covered whole by the pattern: dense attention is exact."""
        return (4 + self.num_random_blocks) * self.block_size

    @property
    def dense_pattern_max_length(self) -> int:
        """Inputs up to this length run as dense attention with the pattern as a mask."""
        return self.dense_pattern_max_blocks_factor * (5 + self.num_random_blocks) * self.block_size

    def choose_path(self, length, output_attentions, exporting):
        # Under export the blocked path serves every length: it computes the pattern exactly at any length.
        if exporting:
            return "pattern" if output_attentions else "blocked", self.block_size
        if length <= self.dense_length:
            return "dense", 1
        if output_attentions:
            return "pattern", 1
        if self.takes_fused_path():
            return "fused", TILE
        if length <= self.dense_pattern_max_length:
            return "pattern", 1
        return "blocked", self.block_size

    def attention(self, hidden_states, attention_mask, output_attentions, plan, **kwargs):
        query, key, value = self.project_qkv(hidden_states)
        if plan.path == "dense":
            return self.attend(query, key, value, attention_mask, output_attentions)
        if plan.path == "pattern":
            pattern = self.pattern(attention_mask, query.shape[2], None if output_attentions else query.dtype, plan.exporting)
            return pattern_attention(self, query, key, value, pattern, output_attentions)
        if plan.path == "fused":
            return fused_attention(self, query, key, value, self.block_mask(attention_mask, query)), None
        recompute = recompute_blocked(plan, self.recompute_min_length)
        return self.blocked_attention(query, key, value, attention_mask, plan.exporting, recompute), None

    def random_blocks(self, num_blocks: int, last: torch.Tensor, exporting: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
        """The random key blocks of every query block: (indices, drawn?) [batch, heads, blocks, r].

        `last` [batch] is each sequence's last block (m - 1); entries not drawn (too few candidates) are False.
        """
        device = last.device
        heads = torch.arange(self.num_heads, device=device)[:, None, None]
        query_block = torch.arange(num_blocks, device=device)[:, None]
        key_block = torch.arange(num_blocks, device=device)
        score = hash32(hash32(hash32(self.seed ^ heads) ^ query_block) ^ key_block) * num_blocks + key_block
        candidate = (key_block > 0) & (key_block < last[:, None, None, None]) & ((query_block - key_block).abs() > 1)
        score = torch.where(candidate, score, _NOT_DRAWN)
        if exporting:
            # The block count is symbolic under export: always r columns, the ones past the blocks never drawn.
            score = torch.cat([score, score.new_full((*score.shape[:-1], self.num_random_blocks), _NOT_DRAWN)], dim=-1)
            drawn, index = score.topk(self.num_random_blocks, dim=-1, largest=False)
            return index.clamp(max=num_blocks - 1), drawn < _NOT_DRAWN
        drawn, index = score.topk(min(self.num_random_blocks, num_blocks), dim=-1, largest=False)
        return index, drawn < _NOT_DRAWN

    def key_blocks(self, num_blocks: int, last: torch.Tensor, exporting: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
        """Key blocks of every non-global query block: (indices in [0, blocks), used?) [batch, heads, blocks, 5 + r].

        In order: window i-1, i, i+1 (used only strictly between the global blocks, which cover them
        otherwise), global 0, global m-1 (unless m-1 = 0), then the random blocks.
        """
        i = torch.arange(num_blocks, device=last.device)
        last = last[:, None]
        window = torch.stack([i - 1, i, i + 1], dim=-1).expand(last.shape[0], -1, -1)
        window_used = (window > 0) & (window < last[..., None])
        global_blocks = torch.stack([torch.zeros_like(last), last], dim=-1).expand(-1, num_blocks, -1)
        global_used = torch.stack([torch.ones_like(last, dtype=torch.bool), last > 0], dim=-1).expand(-1, num_blocks, -1)
        fixed = torch.cat([window.clamp(0, num_blocks - 1), global_blocks], dim=-1)[:, None]
        fixed_used = torch.cat([window_used, global_used], dim=-1)[:, None]
        random, random_used = self.random_blocks(num_blocks, last[:, 0], exporting)
        return (
            torch.cat([fixed.expand(-1, self.num_heads, -1, -1), random], dim=-1),
            torch.cat([fixed_used.expand(-1, self.num_heads, -1, -1), random_used], dim=-1),
        )

    def block_table(self, attention_mask: torch.Tensor | None, length: int, exporting: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
        """The pattern as a table over blocks: (allowed, bool [batch, heads, blocks + 1, blocks + 1]: whether a query of
        block i may attend to a key of block j; each token's block [batch, length]). Block `blocks` stands for
        padding: no query there attends, no key there is attended. Without a mask, batch 1 (every sequence's)."""
        if attention_mask is None:
            attention_mask = torch.ones(1, length, dtype=torch.bool, device=self.query.weight.device)
        ranks, counts = token_ranks(attention_mask)
        num_blocks = -(-length // self.block_size)
        last = ((counts + self.block_size - 1) // self.block_size - 1).clamp(min=0)
        blocks, used = self.key_blocks(num_blocks, last, exporting)
        allowed = torch.zeros(*blocks.shape[:3], num_blocks, dtype=torch.int32, device=blocks.device)
        allowed = allowed.scatter_add(-1, blocks, used.int()) > 0
        block = torch.arange(num_blocks, device=blocks.device)
        allowed = allowed | ((block == 0) | (block == last[:, None]))[:, None, :, None]
        table = nn.functional.pad(allowed, (0, 1, 0, 1), value=False)
        return table, torch.where(attention_mask, ranks // self.block_size, num_blocks)

    def pattern(
        self, attention_mask: torch.Tensor | None, length: int, dtype: torch.dtype | None = None, exporting: bool = False
    ) -> torch.Tensor:
        """The explicit pattern [batch, heads, length, length]: bool (True: the query may attend to the key),
        or with `dtype` the additive mask sdpa takes without converting it (0 or the dtype's minimum)."""
        table, token_block = self.block_table(attention_mask, length, exporting)
        if dtype is not None:
            table = torch.zeros(table.shape, dtype=dtype, device=table.device).masked_fill(~table, torch.finfo(dtype).min)
        batch, heads, blocks = table.shape[:3]
        rows = table.gather(2, token_block[:, None, :, None].expand(batch, heads, length, blocks))
        return rows.gather(3, token_block[:, None, None, :].expand(batch, heads, length, length))

    def block_mask(self, attention_mask: torch.Tensor | None, query: torch.Tensor):
        """The fused path's block mask: the pattern's table over blocks, looked up by each token's block (this layer's
        own: its random blocks come from its seed)."""
        batch, _, length, _ = query.shape

        def build():
            table, token_block = self.block_table(attention_mask, length)
            return class_table_block_mask(token_block, token_block, table, batch)

        pattern = ("bigbird", self.block_size, self.num_random_blocks, self.seed, batch, length, query.device)
        return shared_block_mask(pattern, (attention_mask,), build)

    def local_context(
        self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, index: torch.Tensor, key_used: torch.Tensor,
        rebuild: bool = False,
    ) -> torch.Tensor:
        """A chunk of c query blocks over their key blocks: [batch, heads, c, block, head_dim].

        `query` [batch, heads, c, block, head_dim]; `key`, `value` [batch, heads, blocks, block, head_dim]; `index`
        [batch, heads, c, 5 + r]: the key blocks of each query block in `key_blocks` order, as indices into `key`
        flattened over (batch, heads, blocks). All 5 + r blocks come from one `index_select` (whose backward is one
        index-add into one buffer; on CPU both took under half the time of indexing), not from concatenated slices.
        `rebuild`: backward gathers them again instead of the forward keeping them (`attend_to_blocks`).
        """
        batch, heads, count, size, head_dim = query.shape

        def key_blocks(x: torch.Tensor) -> torch.Tensor:
            return x.reshape(-1, size, head_dim).index_select(0, index.flatten()).view(batch, heads * count, -1, head_dim)

        return attend_to_blocks(
            query.reshape(batch, heads * count, size, head_dim),
            lambda: key_blocks(key),
            lambda: key_blocks(value),
            lambda: key_used.reshape(batch, heads * count, 1, -1),
            rebuild,
            dropout_p=self.attention_dropout,
            scale=self.scaling,
        ).view(batch, heads, count, size, head_dim)

    def blocked_attention(
        self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, attention_mask: torch.Tensor | None,
        exporting: bool = False, recompute: bool = True,
    ) -> torch.Tensor:
        """The fast path on a length that is a multiple of `block_size`; returns [batch, length, hidden].

        `recompute`: with gradients on, backward gathers each chunk's key blocks again instead of the forward keeping them."""
        batch, heads, length, head_dim = query.shape
        size, num_blocks = self.block_size, length // self.block_size
        inverse = None
        if attention_mask is None:
            counts = torch.full((batch,), length, device=query.device)
        else:
            counts = attention_mask.sum(dim=1)
            order, inverse = real_tokens_first(attention_mask, exporting)
            query, key, value = (gather_tokens(x.transpose(1, 2), order).transpose(1, 2) for x in (query, key, value))
        last = ((counts + size - 1) // size - 1).clamp(min=0)
        # Head-major blocks [batch, heads, blocks, block, head_dim].
        query, key, value = (x.contiguous().view(batch, heads, num_blocks, size, head_dim) for x in (query, key, value))

        blocks, used = self.key_blocks(num_blocks, last, exporting)
        position = blocks[..., None] * size + torch.arange(size, device=query.device)
        key_used = (used[..., None] & (position < counts.view(batch, 1, 1, 1, 1))).flatten(-2)
        flat_offset = torch.arange(batch * heads, device=query.device).view(batch, heads, 1, 1) * num_blocks
        index = flat_offset + blocks
        last_index = last.view(batch, 1, 1, 1, 1)
        # Gathers block m-1 of every head (as take_along_dim would, which torch.export cannot trace with a dynamic length).
        last_block = last_index.expand(-1, heads, -1, size, head_dim)
        # Chunks of query blocks: the key blocks gathered for them (5 + r times the keys) exist for one chunk at a
        # time, and with `recompute` are rebuilt in backward, so that memory stays O(length) like a fused dense
        # kernel's. Every per-chunk input is cut with `split`, whose backward is one concatenation.
        step = max(1, self.chunk_tokens // size)

        def cut(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
            # One chunk under export, where a chunk count would depend on the length.
            return (x,) if exporting else x.split(step, dim=2)

        recompute = recompute and torch.is_grad_enabled() and query.requires_grad
        # Grid blocks 0 and `num_blocks` - 1 are, in every sequence, a global query block or padding (real tokens
        # are packed first), so their local context would be replaced or discarded: it is not computed.
        inner = (x[:, :, 1:-1] for x in (query, index, key_used))
        local = [self.local_context(q, key, value, i, u, recompute) for q, i, u in zip(*(cut(x) for x in inner), strict=True)]

        # The global query blocks attend to every real key.
        global_query = torch.cat([query[:, :, :1], query.gather(2, last_block)], dim=2)
        real_key = None if attention_mask is None else (torch.arange(length, device=query.device) < counts[:, None])
        global_context = nn.functional.scaled_dot_product_attention(
            global_query.view(batch, heads, 2 * size, head_dim),
            key.view(batch, heads, length, head_dim),
            value.view(batch, heads, length, head_dim),
            attn_mask=None if real_key is None else real_key[:, None, None, :],
            dropout_p=self.attention_dropout,
            scale=self.scaling,
        ).view(batch, heads, 2, size, head_dim)
        # With one block, its global context is both entries; the last one is kept.
        context = torch.cat([global_context[:, :, :1], *local, global_context[:, :, 1:]], dim=2)[:, :, -num_blocks:]
        if attention_mask is not None:  # a shorter sequence's last block lies inside the grid
            block = torch.arange(num_blocks, device=query.device).view(1, 1, num_blocks, 1, 1)
            context = torch.where(block == last_index, global_context[:, :, 1:2], context)

        context = context.view(batch, heads, length, head_dim).transpose(1, 2).reshape(batch, length, heads * head_dim)
        return context if inverse is None else gather_tokens(context, inverse)
