"""Longformer-style attention: an exact sliding window per token, per-head dilation, and global tokens.

Semantics (Beltagy et al. 2020, as transformers' `LongformerSelfAttention` computes them), for query i
and key j of a layer with window w (`attention_window`) in a head with dilation d (`attention_dilation`):
- a global query (`global_attention_mask` True) attends to every real key with its own projections
  `query_global`, `key_global`, `value_global`;
- any other query attends, with `query`, `key`, `value`, to the real keys with |i - j| <= d * w / 2 and
  (i - j) a multiple of d (the window), and to every real global key (through its local key/value).
Padded keys get zero weight; a padded query also attends to itself, so its (discarded) row stays finite.

How it runs (the plan, chosen per call from the length alone; the module never changes):
- the window covers the input (w / 2 >= length - 1, no dilation): "dense" (`FullAttention.attend`);
- length <= 2 * w, or attention weights requested: "pattern", dense attention with the pattern as a mask;
- otherwise "blocked", on the input padded to a multiple of w / 2: the sequence (each head's, reordered so that a dilation class is contiguous) is cut
  into blocks of w / 2, and each query block attends, in one fused `scaled_dot_product_attention`, to its
  own and both neighbouring key blocks plus the global keys, under a mask that makes the band exact.
  Memory and time are O(length * w). With gradients on (from `blocked_recompute_min_length` tokens up: by default
  always), the neighbour blocks of k and v and the mask the attention reads are not kept for backward, which makes
  them again (`attend_to_blocks`; eager only): what the layer keeps is O(length), close to dense sdpa's on CPU.
  Without gradients, on CPU, a batch runs sequence by sequence (each reads its keys and values in place) and, without global tokens,
  in blocks of an eighth of the window that read nine blocks (see `blocked`).
Global tokens' rows are then replaced by one dense attention of the global queries over all keys: while global tokens
x heads are fewer than the width, against the hidden states themselves, no token's global key or value projected
(`attend_to_hidden_states`).

Attention weights (`output_attentions=True`) are the full matrix [batch, heads, length, padded length]:
row i holds query i's weights over every key (zero outside the pattern); columns past the input are
the internal padding, with zero weight.
"""

import torch
import torch.nn.functional as F
from torch import nn
from transformers import initialization as init

from .attention import (
    attend_to_blocks,
    check_recompute_min_length,
    defaults_of,
    is_exporting,
    rebuilt_in_backward,
    recompute_blocked,
    register_attention,
    with_unused,
)
from .attention_flex import TILE, block_mask_from_tiles, fused_attention, per_tile, shared_block_mask, tile_extents
from .attention_full import FullAttention
from .blocking import flagged_first, pattern_attention
from .configuration_longformer import HfeLongformerConfig

GLOBAL_PROJECTIONS = {"query_global": "query", "key_global": "key", "value_global": "value"}


def additive_mask(allowed: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """bool mask -> additive float mask (0 or the dtype's minimum), which every attention implementation takes."""
    return torch.zeros(allowed.shape, dtype=dtype, device=allowed.device).masked_fill(~allowed, torch.finfo(dtype).min)


def neighbour_blocks(x: torch.Tensor, reach: int, fill: float | bool = 0) -> torch.Tensor:
    """[batch, blocks, block, ...] -> [batch, blocks, (2 reach + 1) block, ...]: each block with `reach` blocks each side.

    For one sequence, a view of the input padded by `reach` blocks each side: the attention reads the keys and values
    in place, and its backward keeps no copies of them. For several (or under export, where the batch is symbolic),
    one gather of whole blocks: the attention needs batch and blocks in one axis, which no view of them gives.
    """
    padded = F.pad(x, [0, 0] * (x.dim() - 2) + [reach, reach], value=fill)
    span = 2 * reach + 1
    if x.shape[0] == 1 and not is_exporting():
        block = x.shape[2]
        return padded.flatten(1, 2).unfold(1, span * block, block).movedim(-1, 2)
    index = torch.arange(x.shape[1], device=x.device)[:, None] + torch.arange(span, device=x.device)
    # index_select, not indexing: on CPU its forward and its backward (one index-add) are the cheaper gathers
    return padded.index_select(1, index.flatten()).view(x.shape[0], x.shape[1], span * x.shape[2], *x.shape[3:])


def in_window(offset: torch.Tensor, reach: int, dilation: torch.Tensor | None) -> torch.Tensor:
    """Whether a key `offset` (query position - key position) positions away is in the window of `reach` tokens each
    side (with `dilation`, broadcastable like `offset`: every d-th position within d * reach)."""
    if dilation is None:
        return offset.abs() <= reach
    return (offset.abs() <= dilation * reach) & (offset % dilation == 0)


@register_attention("sliding")
class SlidingAttention(FullAttention):
    extra_inputs = ("global_attention_mask",)
    config_defaults = defaults_of(HfeLongformerConfig, "attention_window", "attention_dilation",
                                  "blocked_recompute_min_length", "max_compiled_global_tokens")
    # The smallest query block of the blocked path without gradients (see `blocked`).
    min_inference_block = 32

    def __init__(self, config, layer_idx: int):
        super().__init__(config, layer_idx)
        self.window = self.per_entry(config, "attention_window", config.num_hidden_layers)[layer_idx]
        self.reach = self.window // 2
        self.dilations = self.per_entry(config, "attention_dilation", config.num_attention_heads)
        self.recompute_min_length = self.option(config, "blocked_recompute_min_length")
        self.max_compiled_global_tokens = self.option(config, "max_compiled_global_tokens")
        # Each head's dilation as a tensor, for the window test on the device. Also the module's own buffer, without
        # which transformers would skip `_init_weights` (and so `reset_extra_parameters`) on this module.
        self.register_buffer("dilation", torch.tensor(self.dilations), persistent=False)
        for name in GLOBAL_PROJECTIONS:
            setattr(self, name, nn.Linear(config.hidden_size, config.hidden_size))

    @classmethod
    def per_entry(cls, config, name: str, count: int) -> list[int]:
        """One value, or a list of `count` values -> the list; a list of another length is a ValueError naming `name`."""
        value = cls.option(config, name)
        if isinstance(value, int):
            return [value] * count
        if len(value) != count:
            count_name = "num_hidden_layers" if name == "attention_window" else "num_attention_heads"
            raise ValueError(f"`{name}` has {len(value)} entries but the model has `{count_name}`={count}.")
        return list(value)

    @classmethod
    def check_config(cls, config, layer_idx: int) -> None:
        window = cls.per_entry(config, "attention_window", config.num_hidden_layers)[layer_idx]
        if window < 2 or window % 2:
            raise ValueError(
                f"`attention_window` must be even and >= 2 (the total span), got {config.attention_window} "
                f"(layer {layer_idx}: {window})."
            )
        dilations = cls.per_entry(config, "attention_dilation", config.num_attention_heads)
        if any(d < 1 for d in dilations):
            raise ValueError(f"`attention_dilation` must be >= 1, got {cls.option(config, 'attention_dilation')}.")
        check_recompute_min_length(cls.option(config, "blocked_recompute_min_length"))
        if cls.option(config, "max_compiled_global_tokens") < 1:
            raise ValueError(f"`max_compiled_global_tokens` must be >= 1, got {cls.option(config, 'max_compiled_global_tokens')}.")
        widest = max(dilations) * window // 2
        if max(dilations) > 1 and widest >= config.max_sequence_length:
            raise ValueError(
                f"`attention_dilation` {cls.option(config, 'attention_dilation')} has no room: a dilated window of "
                f"layer {layer_idx} reaches {widest} tokens each side but inputs have at most "
                f"{config.max_sequence_length} (`max_position_embeddings`)."
            )

    def reset_extra_parameters(self, std: float) -> None:
        init.copy_(self.dilation, torch.tensor(self.dilations))
        # Children are initialised first, so the local projections already hold their values here.
        for name, local in GLOBAL_PROJECTIONS.items():
            for tensor in ("weight", "bias"):
                init.copy_(getattr(getattr(self, name), tensor), getattr(getattr(self, local), tensor))

    @torch.no_grad()
    def init_from_dense(self) -> list[str]:
        """Start the global projections as copies of the local ones, as Longformer's conversion does."""
        for name, local in GLOBAL_PROJECTIONS.items():
            getattr(self, name).load_state_dict(getattr(self, local).state_dict())
        return [f"{name}.{tensor}" for name in GLOBAL_PROJECTIONS for tensor in ("weight", "bias")]

    def covers(self, length: int) -> bool:
        """Whether every query's window reaches every key, so that the pattern is dense attention."""
        return length <= 1 or (self.reach >= length - 1 and max(self.dilations) == 1)

    def choose_path(self, length, output_attentions, exporting):
        # Under export the blocked path serves every length: it computes the pattern exactly at any length.
        if exporting:
            return "pattern" if output_attentions else "blocked", self.reach
        if self.covers(length):
            return "dense", 1
        if output_attentions:
            return "pattern", 1
        if self.takes_fused_path():
            return "fused", TILE
        if length <= 2 * self.window:
            return "pattern", 1
        return "blocked", self.reach

    def attention(self, hidden_states, attention_mask, output_attentions, plan, global_attention_mask=None, **kwargs):
        batch, length, _ = hidden_states.shape
        query, key, value = self.project_qkv(hidden_states)
        valid = attention_mask if attention_mask is not None else hidden_states.new_ones(batch, length, dtype=torch.bool)
        is_global = global_attention_mask if global_attention_mask is not None else torch.zeros_like(valid)
        global_index = self.global_index(is_global, valid, plan.exporting) if global_attention_mask is not None else None
        rebuild = torch.is_grad_enabled() and recompute_blocked(plan, self.recompute_min_length)
        if plan.path == "dense":
            context, weights = self.attend(query, key, value, attention_mask, output_attentions)
        elif plan.path == "pattern":
            position = torch.arange(length, device=valid.device)
            allowed = self.band(position[:, None], position[None, :]) & valid[:, None, None, :]
            allowed = allowed | (valid & is_global)[:, None, None, :] | torch.eye(length, dtype=torch.bool, device=valid.device)
            context, weights = self.attend(query, key, value, additive_mask(allowed, query.dtype), output_attentions)
        elif plan.path == "fused":
            block_mask = self.block_mask(valid, is_global, (attention_mask, global_attention_mask))
            context, weights = fused_attention(self, query, key, value, block_mask), None
        else:
            context, weights = self.blocked(query, key, value, valid, is_global, global_index, rebuild), None
        if global_index is None:  # no global token: the global projections still get a (zero) gradient
            return with_unused(context, [getattr(self, name) for name in GLOBAL_PROJECTIONS], hidden_states), weights
        return self.global_rows(hidden_states, context, weights, valid, global_index, plan.exporting, rebuild)

    def band(self, query_position: torch.Tensor, key_position: torch.Tensor) -> torch.Tensor:
        """bool [heads | 1, queries, keys] (broadcast): whether the key is in the query's window.

        Positions are broadcastable to [heads | 1, queries, keys]; the result broadcasts over heads.
        """
        return in_window(query_position - key_position, self.reach,
                         self.dilation[:, None, None] if max(self.dilations) > 1 else None)

    def block_mask(self, valid: torch.Tensor, is_global: torch.Tensor, masks: tuple[torch.Tensor | None, ...]):
        """The fused path's block mask of the local rows' pattern (the pattern path's mask): a query attends to the real
        keys in its window and to the real global keys, and a padded query to itself. Tiles of padded queries only are
        skipped; with dilation no tile is taken as full. Shared by the layers with the same window and dilations
        (`masks`: the caller's attention and global masks, which the pattern reads)."""
        batch, length = valid.shape
        dilated = max(self.dilations) > 1

        def build():
            global_key = valid & is_global
            first, last = tile_extents(length, valid.device)
            gap = (first[None, :] - last[:, None]).clamp(min=0) + (first[:, None] - last[None, :]).clamp(min=0)
            span = torch.maximum(last[:, None] - first[None, :], last[None, :] - first[:, None])
            near = gap <= (self.dilation[:, None, None] if dilated else 1) * self.reach  # [heads | 1, tiles, tiles]
            real, whole = per_tile(valid)
            possible = ((near & real[:, None, None, :]) | per_tile(global_key)[0][:, None, None, :]) & real[:, None, :, None]
            full = (span <= self.reach) & whole[:, None, None, :] & (not dilated)

            # The mask reads no module (a compiled kernel would be specialised on its identity), only tensors and ints.
            reach, dilation = self.reach, self.dilation if dilated else None

            def mask_mod(b, h, q_idx, kv_idx):
                windowed = in_window(q_idx - kv_idx, reach, None if dilation is None else dilation[h])
                return (valid[b, kv_idx] & (windowed | global_key[b, kv_idx])) | (q_idx == kv_idx)

            return block_mask_from_tiles(possible, full, mask_mod, length)

        pattern = ("sliding", self.reach, tuple(self.dilations), batch, length, valid.device)
        return shared_block_mask(pattern, masks, build)

    def global_index(self, is_global: torch.Tensor, valid: torch.Tensor, exporting: bool) -> tuple[torch.Tensor, torch.Tensor]:
        """The global tokens' positions [batch, most global tokens in a sequence] and which entries are real (bool)."""
        count = is_global.sum(-1)
        if torch.compiler.is_compiling() and not exporting:
            # Reading the count (`.item()`) would break the graph: a static number of entries, checked on the run.
            num_global = min(self.max_compiled_global_tokens, is_global.shape[-1])
            torch._assert_async(count.max() <= num_global, "a sequence has more global tokens than "
                                "`max_compiled_global_tokens` allows under torch.compile; raise it in the config")
        else:
            # The one data-dependent size (global tokens are few); at least 1, an unused entry, so no call branches on
            # it. `.item()` keeps it a symbol under export, its bound checked at run time.
            num_global = count.max().clamp(min=1).item()
            torch._check(num_global >= 1)
            torch._check(num_global <= is_global.shape[-1])
        index = flagged_first(is_global, exporting)[:, :num_global]
        used = (torch.arange(num_global, device=index.device) < count[:, None]) & valid.gather(1, index)
        return index, used

    def blocked(self, query, key, value, valid, is_global, global_index, rebuild: bool = False) -> torch.Tensor:
        """The local rows, block by block in O(length * window). `query`, `key`, `value`: [batch, heads, length, head_dim].

        Query blocks of half the window read three key blocks (1.5 window keys per query, the band is the window).
        On CPU without gradients (outside torch.compile and export), where nothing is kept for a backward, the
        attention runs sequence by sequence, each reading its keys and values in place rather than as copies, and,
        without global tokens, in finer blocks: query blocks of an eighth of the window (at least
        `min_inference_block` tokens) read nine key blocks (1.125 window keys per query). Both measured faster there;
        with gradients the finer blocks' backward costs what their forward saves, compiled they measured slower, and a GPU
        runs the whole batch at once. `rebuild`: backward makes the neighbour blocks and their mask again instead of
        the forward keeping them (`attend_to_blocks`).
        """
        batch, heads, length, head_dim = query.shape
        inference = not (torch.is_grad_enabled() or torch.compiler.is_compiling() or is_exporting()
                         or query.device.type != "cpu")
        # Finer blocks pay where their neighbours are read in place; global keys join them by a copy (9 blocks, not 3).
        finer = inference and global_index is None
        split = next(s for s in (4, 2, 1) if s == 1 or (finer and self.reach % s == 0
                                                        and self.reach // s >= self.min_inference_block))
        blocks, block = length * split // self.reach, self.reach // split
        query, key, value = (x.transpose(1, 2) for x in (query, key, value))  # [batch, length, heads, head_dim]
        position = torch.arange(length, device=query.device)[:, None]  # [slot, heads | 1]: token in each slot
        dilated = max(self.dilations) > 1
        if dilated:
            # Reorder each head's tokens so that a dilation class is contiguous: the dilated window becomes a plain one.
            position = torch.argsort((position % self.dilation) * length + position // self.dilation, dim=0)
            head = torch.arange(heads, device=query.device)
            query, key_slots, value_slots = (x[:, position, head] for x in (query, key, value))
        else:
            key_slots, value_slots = key, value
        query, key_slots, value_slots = (x.reshape(batch, blocks, block, heads, head_dim) for x in (query, key_slots, value_slots))
        if dilated:  # the window test needs each block's token positions: [blocks, heads, block, 1], [blocks, heads, 1, span]
            query_position = position.view(blocks, block, -1).permute(0, 2, 1)[..., None]
            key_position = neighbour_blocks(position.view(1, blocks, block, -1), split, -1)[0].permute(0, 2, 1)[:, :, None]
        else:  # positions relative to the first key of the block's neighbourhood: the same for every block
            query_position = torch.arange(block, device=query.device)[:, None] + split * block
            key_position = torch.arange((2 * split + 1) * block, device=query.device)
        band = self.band(query_position, key_position)
        global_keys = global_values = None
        if global_index is not None:
            # Every local row also attends to the global tokens, through their local key and value.
            index, used = global_index
            rows = index[..., None, None].expand(-1, -1, heads, head_dim)
            global_keys, global_values = key.gather(1, rows)[:, None], value.gather(1, rows)[:, None]

        def local_context(sequences: slice) -> torch.Tensor:
            """The context of the batch's `sequences`: [sequences, blocks, heads, block, head_dim]."""
            count = query[sequences].shape[0]

            def neighbours(flags: torch.Tensor) -> torch.Tensor:  # [batch, length] -> [sequences, blocks, span, heads | 1]
                return neighbour_blocks(flags[sequences, position].view(count, blocks, block, -1), split, False)

            def key_mask() -> torch.Tensor:
                """Which of each query block's keys each query reads [sequences * blocks, heads | 1, block, keys]."""
                # Real and not global, each flag padded alone: padding `valid & ~is_global` in one go makes inductor's
                # C++ code (torch 2.13, CPU) mix VecMask<int> and VecMask<float> in one expression, which does not compile
                # (the VecMask conversions of pytorch/pytorch#143568).
                local_key = (neighbours(valid) & ~neighbours(is_global)).permute(0, 1, 3, 2)[:, :, :, None]  # [s, n, h|1, 1, span]
                allowed = ((band & local_key) | (query_position == key_position)).expand(count, -1, -1, -1, -1)
                if global_index is not None:
                    global_key = used[sequences, None, None, None, :].expand(-1, blocks, allowed.shape[2], block, -1)
                    allowed = torch.cat([global_key, allowed], dim=-1)
                return allowed.flatten(0, 1)

            def keys_of(slots: torch.Tensor, global_slots: torch.Tensor | None) -> torch.Tensor:
                """Each query block's keys (or values) [sequences * blocks, heads, keys, head_dim]: its own and its
                neighbouring blocks (absent ones masked), after the global tokens' if any."""
                keys = neighbour_blocks(slots[sequences], split)
                if global_slots is not None:
                    keys = torch.cat([global_slots[sequences].expand(-1, blocks, -1, -1, -1), keys], dim=2)
                return keys.transpose(2, 3).flatten(0, 1)

            context = attend_to_blocks(
                query[sequences].transpose(2, 3).flatten(0, 1),
                lambda: keys_of(key_slots, global_keys),
                lambda: keys_of(value_slots, global_values),
                key_mask,
                rebuild,
                dropout_p=self.attention_dropout,
                scale=self.scaling,
            )
            return context.view(count, blocks, heads, block, head_dim)

        if inference and batch > 1:
            context = torch.cat([local_context(slice(sequence, sequence + 1)) for sequence in range(batch)])
        else:
            context = local_context(slice(None))
        context = context.transpose(2, 3).reshape(batch, length, heads, head_dim)
        if dilated:
            context = context[:, torch.argsort(position, dim=0), head]
        return context.reshape(batch, length, heads * head_dim)

    def global_rows(self, hidden_states, context, weights, valid, global_index, exporting: bool, rebuild: bool = False):
        """Replace the global tokens' rows by their attention over every key, with the global projections: computed
        against the hidden states themselves where that is cheaper, else against every token's global key and value
        (and there alone the weights, when asked for). `rebuild`: backward makes again what the forward would keep."""
        batch, length, hidden = hidden_states.shape
        index, used = global_index
        rows = index[..., None].expand(-1, -1, hidden)
        query = self.split_heads(self.query_global(hidden_states.gather(1, rows)))
        allowed = valid[:, None, :] | (index[..., None] == torch.arange(length, device=index.device))
        if weights is None and not exporting and self.reads_hidden_states(index.shape[1]):
            global_context = self.attend_to_hidden_states(query, hidden_states, allowed, rebuild)
        else:
            global_context, global_weights = self.attend_to_global_projections(
                query, hidden_states, allowed, weights is not None, exporting, rebuild)
        context = context.scatter(1, rows, torch.where(used[..., None], global_context, context.gather(1, rows)))
        if weights is not None:
            rows = index[:, None, :, None].expand(-1, self.num_heads, -1, weights.shape[-1])
            weights = weights.scatter(2, rows, torch.where(used[:, None, :, None], global_weights, weights.gather(2, rows)))
        return context, weights

    def reads_hidden_states(self, num_global: int) -> bool:
        """Whether the global queries attend to the hidden states themselves (`attend_to_hidden_states`): cheaper while
        heads x global tokens stay under the width, and only with plain linear global projections whose weights are
        at hand (not peft's adapters, nor FSDP2's sharded modules, whose class `fully_shard` changes, nor DeepSpeed
        ZeRO-3's partitioned parameters: their weights are whole only within their own call)."""
        return self.num_heads * num_global < self.config.hidden_size and all(
            type(projection) is nn.Linear and not hasattr(projection.weight, "ds_id")
            for projection in (self.key_global, self.value_global))

    def attend_to_hidden_states(self, query, hidden_states, allowed, rebuild: bool) -> torch.Tensor:
        """The global queries' context [batch, global, hidden] without projecting any token's global key or value.

        With h' = [h, 1] (each hidden state and a one): q . (W_k h + b_k) = [q W_k, q . b_k] . h', and a context
        P (W_v h + b_v) = [W_v, b_v] (P h'), exactly, attention dropout on P included. So each head's global queries
        are taken into the hidden states' space, attend there in one fused call (heads x global rows over the length),
        and the result is projected once: heads x global tokens rows, against two projections of every token.
        `rebuild`: backward makes h' again instead of the forward keeping it (`rebuilt_in_backward`). Both sides are
        padded with zeros to a multiple of 8 wide: the fused kernel's backward on CPU took 1.7 times as long at a
        width of 257 as at 264.
        """
        batch, heads, num_global, head_dim = query.shape
        padding = -(hidden_states.shape[-1] + 1) % 8

        def with_bias(projection: nn.Linear) -> torch.Tensor:  # [heads, head_dim, width]: [W, b, 0] by head
            weight = torch.cat([projection.weight, projection.bias[:, None]], dim=1)
            return F.pad(weight, (0, padding)).view(heads, head_dim, -1)

        def extended() -> torch.Tensor:  # h' [batch, 1, length, width]: [h, 1, 0]
            return F.pad(F.pad(hidden_states, (0, 1), value=1.0), (0, padding))[:, None]

        query = torch.einsum("bhqe,hed->bhqd", query, with_bias(self.key_global)).flatten(1, 2)[:, None]
        mask = allowed[:, None].expand(-1, heads, -1, -1).reshape(batch, 1, heads * num_global, -1)
        states = extended()
        with rebuilt_in_backward(*[(states, extended)] if rebuild else []):
            mixed = F.scaled_dot_product_attention(query, states, states, attn_mask=additive_mask(mask, query.dtype),
                                                   dropout_p=self.attention_dropout, scale=self.scaling)
        mixed = mixed.view(batch, heads, num_global, -1)
        return torch.einsum("bhqd,hed->bqhe", mixed, with_bias(self.value_global)).flatten(2)

    def attend_to_global_projections(self, query, hidden_states, allowed, output_attentions: bool, exporting: bool,
                                     rebuild: bool):
        """The global queries' context and weights over every token's global key and value (`rebuild`: backward
        projects them again instead of the forward keeping them, where the projections are plain linear layers)."""
        projections = (self.key_global, self.value_global)
        key, value = (self.split_heads(projection(hidden_states)) for projection in projections)
        # Only a plain linear layer computes the same twice: a wrapped one (peft's adapters with dropout) is kept.
        recipes = [(x, lambda projection=projection: self.split_heads(projection(hidden_states)))
                   for x, projection in zip((key, value), projections, strict=True)
                   if rebuild and type(projection) is nn.Linear]
        with rebuilt_in_backward(*recipes):
            if exporting:  # transformers' sdpa wrapper branches on the query count, a data-dependent size here
                return pattern_attention(self, query, key, value, allowed[:, None], output_attentions)
            return self.attend(query, key, value, additive_mask(allowed[:, None], query.dtype), output_attentions)
