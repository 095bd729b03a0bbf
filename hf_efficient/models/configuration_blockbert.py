"""BlockBERT family: blockwise attention with a block permutation per head (Qiu et al. 2019)."""

from huggingface_hub.dataclasses import strict

from .configuration_base import HfeConfig


@strict
class HfeBlockBertConfig(HfeConfig):
    r"""
    RoBERTa with BlockBERT's attention (`attention_type="blockbert"`, see `attention_blockbert.py`, which reads
    and checks the fields below): each sequence's real tokens are cut into `num_blocks` equal blocks, and in
    head h the queries of block i attend only to the keys of block pi_h(i).

    num_blocks (`int`, defaults to 2):
        n, the number of blocks each sequence is cut into. A sequence of l real tokens is split evenly:
        its token of rank p (0-based, padding not counted) is in block floor(p * n / l), so blocks hold
        ceil(l / n) or floor(l / n) tokens and padding never moves a boundary. 1 is dense attention.
        At most the longest input (`max_position_embeddings` minus the position offset).
    block_permutations (`list[list[int]]`, *optional*):
        One permutation of `range(num_blocks)` per attention head (the same in every layer): head h's
        query block i attends to key block `block_permutations[h][i]`. Defaults to the paper's
        assignment (its n=2 and n=3 settings for 12 heads, generalised): each cyclic shift
        s = 1 .. n-1 (block i -> block (i + s) mod n) gets max(1, heads // 6) heads, shifts in turn, while
        at least one head is left; the remaining heads use the identity. For 12 heads and n=2 that is 10
        identity heads and 2 swapped heads; for 4 heads and n=2, 3 identity heads and 1 swapped head.
    """

    model_type = "hfe_blockbert"
    attention_type: str = "blockbert"
    num_blocks: int = 2
    block_permutations: list[list[int]] | None = None
