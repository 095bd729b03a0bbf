"""BlockBERT family: blockwise attention with a block permutation per head (Qiu et al. 2019)."""

from huggingface_hub.dataclasses import strict

from .configuration_base import HfeConfig


@strict
class HfeBlockBertConfig(HfeConfig):
    r"""
    RoBERTa with BlockBERT's attention (`attention_type="blockbert"`, see `attention_blockbert.py`, which reads
    and checks the fields below): each sequence's real tokens are cut into n equal blocks, and in head h the
    queries of block i attend only to the keys of block pi_h(i).

    Args:
        max_block_length (int, defaults to 512):
            Without `num_blocks`, each sequence of l real tokens gets the fewest blocks of at most this many tokens,
            n = ceil(l / max_block_length), decided per sequence: a sequence of up to `max_block_length` tokens gets
            exact dense attention, and the attention's cost grows as l * max_block_length rather than l^2 / n. 512 is
            the largest block the paper trained with (n=2 at 1024 tokens) and RoBERTa's own length.
        num_blocks (int, optional):
            A fixed n for every sequence (the paper's setting; 1 is dense attention), overriding `max_block_length`.
            A sequence of l real tokens is split evenly: its token of rank p (0-based, padding not counted) is in
            block floor(p * n / l), so blocks hold ceil(l / n) or floor(l / n) tokens and padding never moves a
            boundary. At most the longest input (`max_position_embeddings` minus the position offset).
        block_permutations (list[list[int]], optional):
            One permutation of `range(num_blocks)` per attention head (the same in every layer; needs `num_blocks`):
            head h's query block i attends to key block `block_permutations[h][i]`. Defaults, for every n, to the paper's
            assignment (its n=2 and n=3 settings for 12 heads, generalised): each cyclic shift
            s = 1 .. n-1 (block i -> block (i + s) mod n) gets max(1, heads // 6) heads, shifts in turn, while
            at least one head is left; the remaining heads use the identity. For 12 heads and n=2 that is 10
            identity heads and 2 swapped heads; for 4 heads and n=2, 3 identity heads and 1 swapped head.

    The fields every family shares (sizes, dropout, reversible layers, ...) are `HfeConfig`'s.
    """

    model_type = "hfe_blockbert"
    attention_type: str = "blockbert"
    max_block_length: int = 512
    num_blocks: int | None = None
    block_permutations: list[list[int]] | None = None
