"""The fused path: a mechanism's pattern as a FlexAttention block mask, computed by one compiled kernel.

`torch.nn.attention.flex_attention` compiles a `mask_mod` (whether query q may attend to key kv) and a block mask
(which 128 x 128 tiles hold any allowed pair, and which hold only allowed pairs) into one fused kernel, forward and
backward on CUDA, forward only on CPU, that skips the empty tiles. Each mechanism keeps its own `mask_mod` and its own
tile classification next to its other paths; this module holds what they share:
- `uses_fused_path`: whether a call takes the fused path, from `config._attn_implementation` (transformers'
  convention: "eager", "sdpa", "flex_attention"), the device, and whether attention dropout is due;
- `check_fused_call`: the one clear error for a forced call the kernel cannot serve (CPU with gradients, dropout);
- `block_mask_from_tiles`: a `BlockMask` from the tiles' classification, computed at tile level (a handful of small
  tensors), never by evaluating the `mask_mod` over every query and key;
- `class_table_block_mask`: the whole fused mask for a pattern given as a table over token classes (BigBird-style's
  blocks, BlockBERT's permuted blocks): the tiles are classified by counting allowed pairs with two matrix products;
- `shared_block_mask`: one block mask per forward for a shape, pattern and padding, shared by every layer with that
  pattern (the backbone hands every layer the same mask tensors, so their identity keys the cache);
- `fused_attention`: the compiled call.

torch without FlexAttention (before 2.5) imports this module too: the fused path is then never chosen, and forcing it
is a ValueError.
"""

import functools
import weakref
from collections import OrderedDict
from collections.abc import Callable, Hashable

import torch

try:
    from torch.nn.attention.flex_attention import BlockMask, flex_attention
except ImportError:  # torch < 2.5: no FlexAttention
    BlockMask = flex_attention = None

# The tile size of the block masks: the kernels' default, and the smallest sparse tile on Hopper.
TILE = 128
# Block masks kept for reuse: every pattern of one forward, and a few more for alternating shapes.
CACHE_SIZE = 16


def flex_available() -> bool:
    return flex_attention is not None


def check_fused_call(device_type: str, dropout: float) -> None:
    """ValueError, one line, where the fused kernel cannot compute this call exactly."""
    if not flex_available():
        raise ValueError(f'attn_implementation="flex_attention" needs torch >= 2.5 with FlexAttention (this is {torch.__version__}).')
    if device_type == "cpu" and torch.is_grad_enabled():
        raise ValueError(
            'attn_implementation="flex_attention" on CPU computes no gradients (torch has no FlexAttention backward on '
            'CPU): run it under torch.no_grad() / torch.inference_mode(), or train with attn_implementation="sdpa".'
        )
    if dropout > 0:
        raise ValueError(
            f'attn_implementation="flex_attention" has no attention dropout: call model.eval(), or set '
            f"`attention_probs_dropout_prob` to 0 (it is {dropout}) to train with it."
        )


def uses_fused_path(implementation: str | None, device_type: str, dropout: float) -> bool:
    """Whether a sparse mechanism's call takes the fused path (the caller has ruled out export and attention weights).

    "flex_attention" forces it (`check_fused_call` then says why a call cannot take it); "eager" never takes it; the
    default ("sdpa", None) takes it where it is the fastest exact path: on CUDA whenever no attention dropout is to be
    applied (the kernel has none). Not on CPU: there the compiled kernel measured slower than every family's blocked
    kernel for inference (scripts/flex_cpu_inference.py), and it has no backward.
    """
    if implementation == "flex_attention":
        return True
    return implementation in (None, "sdpa") and flex_available() and dropout == 0 and device_type == "cuda"


def tile_extents(length: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """First and last position [tiles] of each tile of `length` positions."""
    first = torch.arange(0, length, TILE, device=device)
    return first, (first + TILE - 1).clamp(max=length - 1)


def per_tile(flags: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """bool [batch, length] -> (any, all) [batch, tiles]: whether some / every position of each tile is flagged."""
    batch, length = flags.shape
    padded = torch.nn.functional.pad(flags, (0, -length % TILE), value=False).view(batch, -1, TILE)
    counts = padded.sum(-1)
    sizes = tile_extents(length, flags.device)
    return counts > 0, counts == (sizes[1] - sizes[0] + 1)


def block_mask_from_tiles(possible: torch.Tensor, full: torch.Tensor, mask_mod: Callable, length: int) -> "BlockMask":
    """The `BlockMask` of a pattern whose tiles are classified as bool [batch | 1, heads | 1, tiles, tiles]: `possible`
    (the kernel computes the tile, evaluating `mask_mod`) and `full` (every pair of the tile is allowed: computed
    without evaluating it). `possible` must hold every tile with an allowed pair whose row is kept (a caller may leave
    out tiles of discarded rows) and `full` no tile with a forbidden pair; a tile `possible` without an allowed pair,
    or wholly allowed but not `full`, only costs time."""
    full = full & possible
    partial = possible & ~full

    def sparse(tiles: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        # Each query tile's count of kept key tiles and their indices, the kept first (as `create_block_mask` lays them out).
        order = torch.argsort((~tiles).to(torch.uint8), dim=-1, stable=True)
        return tiles.sum(-1, dtype=torch.int32), order.to(torch.int32)

    return BlockMask.from_kv_blocks(*sparse(partial), *sparse(full), BLOCK_SIZE=TILE, mask_mod=mask_mod,
                                    seq_lengths=(length, length))


def class_table_block_mask(query_class: torch.Tensor, key_class: torch.Tensor, table: torch.Tensor, batch: int) -> "BlockMask":
    """The block mask of the pattern `table[b, h, query_class[b, q], key_class[b, kv]]` for `batch` sequences.

    `query_class`, `key_class`: long [batch | 1, length], each position's class (< the table's classes);
    `table`: bool [batch | 1, heads, query classes, key classes]; with a batch of 1 every sequence has that pattern,
    and the tiles are classified once for all (the kernel broadcasts them). A tile pair's allowed pairs are counted
    exactly as (positions of each class in the query tile) @ table @ (positions of each class in the key tile)^T.
    """
    sequences, length = query_class.shape

    def class_counts(classes: torch.Tensor, count: int) -> torch.Tensor:  # [sequences, tiles, classes]
        slot = torch.arange(length, device=classes.device) // TILE * count + classes
        # float64: the products count pairs exactly, also where TF32 is on or under autocast (which leaves float64 be)
        counts = torch.zeros(sequences, -(-length // TILE) * count, dtype=torch.float64, device=classes.device)
        return counts.scatter_add_(1, slot, torch.ones_like(counts[:, :1]).expand_as(slot)).view(sequences, -1, count)

    query_counts = class_counts(query_class, table.shape[-2])
    key_counts = class_counts(key_class, table.shape[-1])
    allowed = query_counts[:, None] @ table.to(query_counts.dtype) @ key_counts[:, None].transpose(-1, -2)
    first, last = tile_extents(length, query_class.device)
    size = (last - first + 1).to(allowed.dtype)
    # The kernel calls `mask_mod` with every sequence's index.
    query_class, key_class = query_class.expand(batch, -1), key_class.expand(batch, -1)
    table = table.expand(batch, -1, -1, -1)

    def mask_mod(b, h, q_idx, kv_idx):
        return table[b, h, query_class[b, q_idx], key_class[b, kv_idx]]

    return block_mask_from_tiles(allowed > 0, allowed == size[:, None] * size, mask_mod, length)


_cache: "OrderedDict[Hashable, tuple[tuple, BlockMask]]" = OrderedDict()


def shared_block_mask(pattern: Hashable, tensors: tuple[torch.Tensor | None, ...], build: Callable[[], "BlockMask"]) -> "BlockMask":
    """`build()`, or the block mask it made for the same `pattern` (hashable: the mechanism's pattern and the input's
    shape) and the same `tensors` (the masks the pattern reads: the very objects, unchanged since).

    The backbone hands every layer of one forward the same mask tensors, so each pattern's block mask is built once
    per forward and shared by every layer with that pattern. Under torch.compile it is built in the graph (no cache).
    """
    if torch.compiler.is_compiling():
        return build()
    hit = _cache.get(pattern)
    if hit is not None and len(hit[0]) == len(tensors) and all(
        (t is None) if seen is None else (t is not None and seen[0]() is t and seen[1] == t._version)
        for seen, t in zip(hit[0], tensors, strict=True)
    ):
        _cache.move_to_end(pattern)
        return hit[1]
    block_mask = build()
    for key in [key for key, (seen, _) in _cache.items() if any(ref is not None and ref[0]() is None for ref in seen)]:
        del _cache[key]  # entries of tensors gone (past forwards): their block masks are not kept alive
    _cache[pattern] = (tuple(None if t is None else (weakref.ref(t), t._version) for t in tensors), block_mask)
    if len(_cache) > CACHE_SIZE:
        _cache.popitem(last=False)
    return block_mask


@functools.cache
def compiled_flex_attention(dynamic: bool | None):
    """`flex_attention` through torch.compile, one per `dynamic` setting (compiled once per shape and pattern code)."""
    return torch.compile(flex_attention, dynamic=dynamic)


@torch.compiler.disable
def flex_attention_outside_graph(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, block_mask, scale: float):
    """The statically compiled CPU kernel, called from a compiled model's graph (a graph break): torch 2.13's inductor
    fails to lower the CPU flex kernel inside a larger graph (NoValidChoicesError, or an unpacking error)."""
    return compiled_flex_attention(False)(query, key, value, block_mask=block_mask, scale=scale)


def fused_attention(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                    block_mask: "BlockMask | None") -> torch.Tensor:
    """The compiled FlexAttention kernel over [batch, heads, length, head_dim] under `block_mask` (None: every pair);
    returns the context [batch, length, hidden]. Inside a compiled model on CUDA the plain function (the model's
    compilation fuses it). On CPU every shape is compiled statically (the plans pad lengths to a multiple of `TILE`):
    with a symbolic length torch 2.13's C++ flex template fails to build (`cur_qSplitSize4` undeclared; no upstream
    issue found), so the automatic dynamic shapes transformers' own integration relies on cannot be used there."""
    check_fused_call(query.device.type, module.attention_dropout)
    if query.device.type == "cpu":
        kernel = flex_attention_outside_graph if torch.compiler.is_compiling() else compiled_flex_attention(False)
    else:
        kernel = flex_attention if torch.compiler.is_compiling() else compiled_flex_attention(None)
    return module.merge_heads(kernel(query, key, value, block_mask=block_mask, scale=module.scaling))
