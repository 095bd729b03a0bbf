"""BlockBERT attention (Qiu et al. 2019): blockwise attention with one block permutation per head.

Semantics, for a sequence with l real tokens cut into n blocks (`num_blocks`): the real token of rank p
(its index among the sequence's real tokens) is in block floor(p * n / l); in head h a real query of
block i attends to the real keys of block pi_h(i) (`BlockBertAttention.head_block_permutations(config)`). Padded keys get
zero weight. A query whose key block is empty (only when l < n) gets a zero context; padded queries'
outputs are finite and discarded.

How it runs (the plan, chosen per call; the module never changes):
- n = 1: "dense", dense attention (`FullAttention.attend`);
- attention weights requested: "pattern", dense attention with the pattern as a mask (O(length^2), like the weights);
- otherwise "blocked": queries are laid out as [batch * n, heads, block, head_dim] and each head's key and
  value blocks are gathered in its permuted order, so one `scaled_dot_product_attention` call computes
  every block of every head. Without padding and with length a multiple of n the layout is a free view;
  otherwise one gather per tensor packs the blocks (slots past a shorter block are masked).
No padding to a multiple is needed (the plan's multiple is 1): the blocks are built from the real tokens;
under export the plan pads to a multiple of n, which keeps the block size a simple symbol.

Attention weights are [batch, heads, length, length] (zero outside the pattern), as RoBERTa's.
"""

import torch
from torch import nn

from .attention import register_attention
from .attention_full import FullAttention
from .blocking import gather_tokens, pattern_attention, real_tokens_first, token_ranks


@register_attention("blockbert")
class BlockBertAttention(FullAttention):
    config_defaults = {"num_blocks": 2, "block_permutations": None}

    def __init__(self, config, layer_idx: int):
        super().__init__(config, layer_idx)
        self.num_blocks = self.option(config, "num_blocks")
        self.permutations = self.head_block_permutations(config)

    @classmethod
    def check_config(cls, config, layer_idx: int) -> None:
        num_blocks, permutations = cls.option(config, "num_blocks"), cls.option(config, "block_permutations")
        if not 1 <= num_blocks <= config.max_sequence_length:
            raise ValueError(
                f"`num_blocks` must be between 1 and the longest input ({config.max_sequence_length} tokens), "
                f"got {num_blocks}."
            )
        if permutations is not None:
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
        """The permutation of every head: `block_permutations`, or the paper's default (see `HfeBlockBertConfig`)."""
        permutations = cls.option(config, "block_permutations")
        if permutations is not None:
            return [list(permutation) for permutation in permutations]
        heads, blocks = config.num_attention_heads, cls.option(config, "num_blocks")
        per_shift = max(1, heads // 6)
        shifts = [shift for shift in range(1, blocks) for _ in range(per_shift)][: heads - 1]
        identity_heads = [0] * (heads - len(shifts))
        return [[(block + shift) % blocks for block in range(blocks)] for shift in identity_heads + shifts]

    def choose_path(self, length, output_attentions, exporting):
        if self.num_blocks == 1:
            return "dense", 1
        if output_attentions:
            return "pattern", 1
        # Under export a multiple of n keeps the block size a simple symbol (padding never moves a block).
        return "blocked", self.num_blocks if exporting else 1

    def attention(self, hidden_states, attention_mask, output_attentions, plan, **kwargs):
        query, key, value = self.project_qkv(hidden_states)
        if plan.path == "dense":
            return self.attend(query, key, value, attention_mask, output_attentions)
        if plan.path == "pattern":
            return pattern_attention(self, query, key, value, self.pattern(attention_mask, query.shape[2]), True)
        return self.blocked_attention(query, key, value, attention_mask, plan.exporting), None

    def permutation_tensor(self, device: torch.device) -> torch.Tensor:
        """[heads, n]: entry [h, i] is the key block of head h's query block i."""
        return torch.tensor(self.permutations, dtype=torch.long, device=device)

    def pattern(self, attention_mask: torch.Tensor | None, length: int) -> torch.Tensor:
        """The explicit pattern, bool [batch, heads, length, length] (True: the query may attend to the key)."""
        device = self.query.weight.device
        if attention_mask is None:
            attention_mask = torch.ones(1, length, dtype=torch.bool, device=device)
        ranks, counts = token_ranks(attention_mask)
        blocks = torch.where(attention_mask, ranks * self.num_blocks // counts.clamp(min=1)[:, None], -1)
        key_blocks_of_queries = self.permutation_tensor(device)[:, blocks.clamp(min=0)].transpose(0, 1)
        return (
            (key_blocks_of_queries[..., None] == blocks[:, None, None, :])
            & attention_mask[:, None, :, None]
            & attention_mask[:, None, None, :]
        )

    def slot_layout(
        self, attention_mask: torch.Tensor, slot_count: int, exporting: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Where each sequence's blocks go in a [n, slot_count] grid of slots.

        Returns the token filling each slot [batch, n * slot_count], whether it is a real token of the
        block [batch, n * slot_count], and the slot of every token [batch, length] (0 for padding).
        """
        n = self.num_blocks
        ranks, counts = token_ranks(attention_mask)
        counts = counts.clamp(min=1)[:, None]
        device = attention_mask.device
        block = torch.arange(n, device=device)[:, None].expand(n, slot_count).reshape(-1)
        offset = torch.arange(slot_count, device=device).expand(n, slot_count).reshape(-1)
        # Block j holds the ranks [ceil(j * l / n), ceil((j + 1) * l / n)).
        rank = (block * counts + n - 1) // n + offset
        valid = rank < ((block + 1) * counts + n - 1) // n
        order, _ = real_tokens_first(attention_mask, exporting)
        source = order.gather(1, rank.clamp(max=attention_mask.shape[1] - 1))
        token_block = ranks.clamp(min=0) * n // counts
        token_slot = token_block * slot_count + ranks.clamp(min=0) - (token_block * counts + n - 1) // n
        return source, valid, token_slot

    def blocked_attention(
        self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, attention_mask: torch.Tensor | None,
        exporting: bool = False,
    ) -> torch.Tensor:
        """The fast path: one fused attention call over every (block, head); returns [batch, length, hidden]."""
        batch, heads, length, head_dim = query.shape
        n = self.num_blocks
        slots = -(-length // n)
        # [batch, length, heads, head_dim]: the projections' own memory layout, so views are free.
        query, key, value = (x.transpose(1, 2) for x in (query, key, value))
        permutation = self.permutation_tensor(query.device)
        # Slot (i, s) of head h reads key slot (pi_h(i), s).
        key_slots = (permutation.T[:, None, :] * slots + torch.arange(slots, device=query.device)[None, :, None])
        key_slots = key_slots.reshape(n * slots, heads)
        if attention_mask is None and length % n == 0:
            key_source, mask, token_slot = key_slots.expand(batch, -1, -1), None, None
        else:
            if attention_mask is None:
                attention_mask = torch.ones(batch, length, dtype=torch.bool, device=query.device)
            source, valid, token_slot = self.slot_layout(attention_mask, slots, exporting)
            query = gather_tokens(query, source)
            key_source = source[:, key_slots]
            mask = valid[:, key_slots].view(batch, n, slots, heads).permute(0, 1, 3, 2).reshape(batch * n, heads, 1, slots)
            if exporting:  # a query axis of 1 broadcast against the symbolic one would need a guard
                mask = mask.expand(-1, -1, slots, -1)
        key, value = (gather_tokens(x, key_source) for x in (key, value))
        # [batch, n * slots, heads, head_dim] -> [batch * n, heads, slots, head_dim] (a view).
        query, key, value = (x.view(batch * n, slots, heads, head_dim).transpose(1, 2) for x in (query, key, value))
        context = nn.functional.scaled_dot_product_attention(
            query, key, value, attn_mask=mask, dropout_p=self.attention_dropout, scale=self.scaling
        )
        context = context.transpose(1, 2).reshape(batch, n * slots, heads * head_dim)
        return context if token_slot is None else gather_tokens(context, token_slot)
