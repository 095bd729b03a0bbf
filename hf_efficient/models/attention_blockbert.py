"""BlockBERT attention (Qiu et al. 2019): blockwise attention with one block permutation per head.

Semantics, for a sequence with l real tokens cut into n blocks: the real token of rank p (its index among the
sequence's real tokens) is in block floor(p * n / l); in head h a real query of block i attends to the real keys
of block pi_h(i). n is `num_blocks` when set, otherwise the fewest blocks of at most `max_block_length` tokens,
ceil(l / max_block_length), decided per sequence (so a sequence of at most `max_block_length` real tokens gets
exact dense attention, alone or padded into a batch); pi_h is `block_permutations[h]`, or the default cyclic
shift of head h for that n (`cyclic_key_blocks`). Padded keys get zero weight. A query whose key block is
empty (only when l < n) gets a zero context; padded queries' outputs are finite and discarded.

How it runs (the plan, chosen per call; the module never changes):
- one block (n = 1, or an input of at most `max_block_length` tokens): "dense", dense attention (`FullAttention.attend`);
- attention weights requested: "pattern", dense attention with the pattern as a mask (O(length^2), like the weights);
- otherwise "blocked": queries are laid out as [batch * blocks, heads, slots, head_dim] and each head's key and
  value blocks are gathered in its permuted order, so one `scaled_dot_product_attention` call computes
  every block of every head. Without padding and with length a multiple of n the layout is a free view;
  otherwise one gather per tensor packs the blocks (slots past a shorter block are masked).
No padding to a multiple is needed (the plan's multiple is 1): the blocks are built from the real tokens;
under export the plan pads to a multiple of `num_blocks` (which keeps the block size a simple symbol), or,
with `max_block_length` (a symbolic number of blocks), takes the "pattern" path at every length.

Attention weights are [batch, heads, length, length] (zero outside the pattern), as RoBERTa's.
"""

import torch
from torch import nn

from .attention import defaults_of, register_attention
from .attention_flex import TILE, class_table_block_mask, fused_attention, shared_block_mask
from .attention_full import FullAttention
from .blocking import gather_tokens, pattern_attention, real_tokens_first, token_ranks
from .configuration_blockbert import HfeBlockBertConfig


def cyclic_key_blocks(heads: int, blocks: torch.Tensor, query_blocks: torch.Tensor) -> torch.Tensor:
    """The paper's default assignment, generalised (see `HfeBlockBertConfig.block_permutations`): the key block of
    each head's `query_blocks` [batch | 1, 1, k] in sequences of `blocks` [batch | 1] blocks -> [batch | 1, heads, k].

    Each cyclic shift s = 1 .. n-1 gets max(1, heads // 6) heads, shifts in turn, while at least one head is
    left; the first heads keep the identity (shift 0).
    """
    per_shift = max(1, heads // 6)
    blocks = blocks.view(-1, 1, 1)
    shifted_heads = ((blocks - 1) * per_shift).clamp(max=heads - 1)
    rank = torch.arange(heads, device=blocks.device).view(1, heads, 1) - (heads - shifted_heads)
    shift = torch.where(rank >= 0, 1 + rank.clamp(min=0) // per_shift, 0)
    return (query_blocks + shift) % blocks


@register_attention("blockbert")
class BlockBertAttention(FullAttention):
    config_defaults = defaults_of(HfeBlockBertConfig, "num_blocks", "max_block_length", "block_permutations")

    def __init__(self, config, layer_idx: int):
        super().__init__(config, layer_idx)
        self.num_blocks = self.option(config, "num_blocks")
        self.max_block_length = self.option(config, "max_block_length")
        self.permutations = None if self.num_blocks is None else self.head_block_permutations(config)

    @classmethod
    def check_config(cls, config, layer_idx: int) -> None:
        num_blocks, permutations = cls.option(config, "num_blocks"), cls.option(config, "block_permutations")
        max_block_length = cls.option(config, "max_block_length")
        if num_blocks is not None and not 1 <= num_blocks <= config.max_sequence_length:
            raise ValueError(
                f"`num_blocks` must be None or between 1 and the longest input ({config.max_sequence_length} tokens), "
                f"got {num_blocks}."
            )
        if not isinstance(max_block_length, int) or max_block_length < 1:
            raise ValueError(f"`max_block_length` must be a positive int, got {max_block_length!r}.")
        if permutations is not None:
            if num_blocks is None:
                raise ValueError("`block_permutations` needs `num_blocks` (they permute range(num_blocks)).")
            if len(permutations) != config.num_attention_heads:
                raise ValueError(
                    f"`block_permutations` has {len(permutations)} entries but the model has "
                    f"`num_attention_heads`={config.num_attention_heads} (one permutation per head)."
                )
            for permutation in permutations:
                if sorted(permutation) != list(range(num_blocks)):
                    raise ValueError(
                        f"`block_permutations`: {permutation} is not a permutation of range(num_blocks={num_blocks})."
                    )

    @classmethod
    def head_block_permutations(cls, config) -> list[list[int]]:
        """The permutation of every head for `num_blocks`: `block_permutations`, or the paper's default."""
        permutations = cls.option(config, "block_permutations")
        if permutations is not None:
            return [list(permutation) for permutation in permutations]
        blocks = cls.option(config, "num_blocks")
        # On the CPU explicitly: models are built under transformers' meta-device context, where nothing can be read.
        query_blocks = torch.arange(blocks, device="cpu").view(1, 1, blocks)
        return cyclic_key_blocks(config.num_attention_heads, torch.tensor([blocks], device="cpu"), query_blocks)[0].tolist()

    def blocks_of(self, lengths: torch.Tensor) -> torch.Tensor:
        """n of sequences of `lengths` [batch] real tokens: `num_blocks`, or the fewest of at most `max_block_length`."""
        if self.num_blocks is not None:
            return torch.full_like(lengths, self.num_blocks)
        return (-(-lengths // self.max_block_length)).clamp(min=1)

    def choose_path(self, length, output_attentions, exporting):
        one_block = self.num_blocks == 1 or (self.num_blocks is None and not exporting and length <= self.max_block_length)
        if one_block:
            return "dense", 1
        # Under export the number of blocks of `max_block_length` is symbolic: the pattern as a mask serves every length.
        if output_attentions or (exporting and self.num_blocks is None):
            return "pattern", 1
        if not exporting and self.takes_fused_path():
            return "fused", TILE
        # Under export a multiple of n keeps the block size a simple symbol (padding never moves a block).
        return "blocked", self.num_blocks if exporting and self.num_blocks else 1

    def attention(self, hidden_states, attention_mask, output_attentions, plan, **kwargs):
        query, key, value = self.project_qkv(hidden_states)
        if plan.path == "dense":
            return self.attend(query, key, value, attention_mask, output_attentions)
        if plan.path == "pattern":
            pattern = self.pattern(attention_mask, query.shape[2])
            return pattern_attention(self, query, key, value, pattern, output_attentions)
        if plan.path == "fused":
            return fused_attention(self, query, key, value, self.block_mask(attention_mask, query)), None
        return self.blocked_attention(query, key, value, attention_mask, plan.exporting), None

    def key_blocks(self, blocks: torch.Tensor, query_blocks: torch.Tensor) -> torch.Tensor:
        """The key block of each head's `query_blocks` [batch | 1, 1, k] in sequences of `blocks` [batch | 1] blocks:
        [batch | 1, heads, k]."""
        if self.permutations is None:
            return cyclic_key_blocks(self.num_heads, blocks, query_blocks)
        table = torch.tensor(self.permutations, dtype=torch.long, device=blocks.device)[None]
        return table.expand(query_blocks.shape[0], -1, -1).gather(2, query_blocks.expand(-1, self.num_heads, -1))

    def token_blocks(self, attention_mask: torch.Tensor | None, length: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(the mask, all True without one [1, length]; each token's block [batch, length], -1 for padding; n [batch])."""
        if attention_mask is None:
            attention_mask = torch.ones(1, length, dtype=torch.bool, device=self.query.weight.device)
        ranks, counts = token_ranks(attention_mask)
        n = self.blocks_of(counts)
        return attention_mask, torch.where(attention_mask, ranks * n[:, None] // counts.clamp(min=1)[:, None], -1), n

    def pattern(self, attention_mask: torch.Tensor | None, length: int) -> torch.Tensor:
        """The explicit pattern, bool [batch, heads, length, length] (True: the query may attend to the key)."""
        attention_mask, blocks, n = self.token_blocks(attention_mask, length)
        key_blocks_of_queries = self.key_blocks(n, blocks.clamp(min=0)[:, None, :])
        return (
            (key_blocks_of_queries[..., None] == blocks[:, None, None, :])
            & attention_mask[:, None, :, None]
            & attention_mask[:, None, None, :]
        )

    def block_mask(self, attention_mask: torch.Tensor | None, query: torch.Tensor):
        """The fused path's block mask: a table over blocks (query block i of head h -> its key block; a last class for
        padding, which neither attends nor is attended), looked up by each token's block."""
        batch, _, length, _ = query.shape

        def build():
            _, blocks, n = self.token_blocks(attention_mask, length)
            # At most this many blocks in any sequence, known without reading the mask.
            grid = self.num_blocks or -(-length // self.max_block_length)
            query_blocks = torch.arange(grid, device=blocks.device)
            key_blocks = self.key_blocks(n, query_blocks.view(1, 1, grid))  # [batch | 1, heads, grid]
            table = (key_blocks[..., None] == query_blocks) & (query_blocks < n.view(-1, 1, 1))[..., None]
            table = nn.functional.pad(table, (0, 1, 0, 1), value=False)
            classes = torch.where(blocks < 0, grid, blocks)
            return class_table_block_mask(classes, classes, table, batch)

        pattern = ("blockbert", self.num_blocks, self.max_block_length, tuple(map(tuple, self.permutations or ())),
                   batch, length, query.device)
        return shared_block_mask(pattern, (attention_mask,), build)

    def slot_layout(
        self, attention_mask: torch.Tensor, blocks: torch.Tensor, grid: int, slot_count: int, exporting: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Where each sequence's `blocks` [batch] blocks go in a [grid, slot_count] grid of slots.

        Returns the token filling each slot [batch, grid * slot_count], whether it is a real token of the
        block [batch, grid * slot_count], and the slot of every token [batch, length] (0 for padding).
        """
        ranks, counts = token_ranks(attention_mask)
        counts, n = counts.clamp(min=1)[:, None], blocks[:, None]
        device = attention_mask.device
        block = torch.arange(grid, device=device)[:, None].expand(grid, slot_count).reshape(-1)
        offset = torch.arange(slot_count, device=device).expand(grid, slot_count).reshape(-1)
        # Block j holds the ranks [ceil(j * l / n), ceil((j + 1) * l / n)).
        rank = (block * counts + n - 1) // n + offset
        valid = (rank < ((block + 1) * counts + n - 1) // n) & (block < n)
        order, _ = real_tokens_first(attention_mask, exporting)
        source = order.gather(1, rank.clamp(max=attention_mask.shape[1] - 1))
        token_block = ranks.clamp(min=0) * n // counts
        token_slot = token_block * slot_count + ranks.clamp(min=0) - (token_block * counts + n - 1) // n
        return source, valid, token_slot

    def grid_of(
        self, attention_mask: torch.Tensor, blocks: torch.Tensor, exporting: bool
    ) -> tuple[int, int]:
        """(blocks, slots per block) of the grid every sequence's blocks fit in: the largest n and block in the
        batch; under torch.compile, where they cannot be read from the mask, a bound from the length."""
        length = attention_mask.shape[1]
        if self.num_blocks is not None:
            return self.num_blocks, -(-length // self.num_blocks)
        if torch.compiler.is_compiling():
            return -(-length // self.max_block_length), self.max_block_length
        block_lengths = -(-attention_mask.sum(dim=1) // blocks)
        return int(blocks.max()), int(block_lengths.max())

    def blocked_attention(
        self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, attention_mask: torch.Tensor | None,
        exporting: bool = False,
    ) -> torch.Tensor:
        """The fast path: one fused attention call over every (block, head); returns [batch, length, hidden]."""
        batch, heads, length, head_dim = query.shape
        device = query.device
        # [batch, length, heads, head_dim]: the projections' own memory layout, so views are free.
        query, key, value = (x.transpose(1, 2) for x in (query, key, value))
        if attention_mask is None and not exporting:  # every sequence has the same `length` tokens, so the same blocks
            grid = self.num_blocks or -(-length // self.max_block_length)
            if length % grid == 0:
                slots, mask, token_slot = length // grid, None, None
                table = self.key_blocks(torch.tensor([grid], device=device), torch.arange(grid, device=device).view(1, 1, grid))
                key_source = self.key_slots(table, grid, slots).expand(batch, -1, -1)
        if attention_mask is None and (exporting or length % grid):
            attention_mask = torch.ones(batch, length, dtype=torch.bool, device=device)
        if attention_mask is not None:
            blocks = self.blocks_of(attention_mask.sum(dim=1))
            grid, slots = self.grid_of(attention_mask, blocks, exporting)
            source, valid, token_slot = self.slot_layout(attention_mask, blocks, grid, slots, exporting)
            table = self.key_blocks(blocks, torch.arange(grid, device=device).view(1, 1, grid))
            key_slots = self.key_slots(table, grid, slots).expand(batch, -1, -1)
            query = gather_tokens(query, source)
            key_source = source.gather(1, key_slots.reshape(batch, -1)).view(batch, grid * slots, heads)
            mask = valid.gather(1, key_slots.reshape(batch, -1)).view(batch, grid, slots, heads)
            mask = mask.permute(0, 1, 3, 2).reshape(batch * grid, heads, 1, slots)
            if exporting:  # a query axis of 1 broadcast against the symbolic one would need a guard
                mask = mask.expand(-1, -1, slots, -1)
        key, value = (gather_tokens(x, key_source) for x in (key, value))
        # [batch, grid * slots, heads, head_dim] -> [batch * grid, heads, slots, head_dim] (a view).
        query, key, value = (x.view(batch * grid, slots, heads, head_dim).transpose(1, 2) for x in (query, key, value))
        context = nn.functional.scaled_dot_product_attention(
            query, key, value, attn_mask=mask, dropout_p=self.attention_dropout, scale=self.scaling
        )
        context = context.transpose(1, 2).reshape(batch, grid * slots, heads * head_dim)
        return context if token_slot is None else gather_tokens(context, token_slot)

    @staticmethod
    def key_slots(table: torch.Tensor, grid: int, slots: int) -> torch.Tensor:
        """[batch | 1, grid * slots, heads]: slot (i, s) of head h reads key slot (table[h, i], s)."""
        offset = torch.arange(slots, device=table.device)[None, None, :, None]
        return (table.transpose(1, 2)[:, :, None, :] * slots + offset).reshape(table.shape[0], grid * slots, -1)
