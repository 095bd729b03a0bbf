"""BlockBERT family: blockwise attention with a block permutation per head (Qiu et al. 2019)."""

from huggingface_hub.dataclasses import strict

from .configuration_base import HfeConfig


@strict
class HfeBlockBertConfig(HfeConfig):
    r"""
    RoBERTa with BlockBERT's attention (`attention_type="block"`, see `attention_block.py`): each
    sequence's real tokens are cut into `num_blocks` equal blocks, and in head h the queries of block i
    attend only to the keys of block pi_h(i).

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
    attention_type: str = "block"
    num_blocks: int = 2
    block_permutations: list[list[int]] | None = None

    def check_fields(self) -> None:
        super().check_fields()
        if not 1 <= self.num_blocks <= self.max_sequence_length:
            raise ValueError(
                f"`num_blocks` must be between 1 and the longest input ({self.max_sequence_length} tokens), "
                f"got {self.num_blocks}."
            )
        if self.block_permutations is not None:
            if len(self.block_permutations) != self.num_attention_heads:
                raise ValueError(
                    f"`block_permutations` has {len(self.block_permutations)} entries but the model has "
                    f"`num_attention_heads`={self.num_attention_heads} (one permutation per head)."
                )
            for permutation in self.block_permutations:
                if sorted(permutation) != list(range(self.num_blocks)):
                    raise ValueError(
                        f"`block_permutations`: {permutation} is not a permutation of range(num_blocks={self.num_blocks})."
                    )

    def head_block_permutations(self) -> list[list[int]]:
        """The permutation of every head: `block_permutations`, or the paper's default described above."""
        if self.block_permutations is not None:
            return [list(permutation) for permutation in self.block_permutations]
        heads, blocks = self.num_attention_heads, self.num_blocks
        per_shift = max(1, heads // 6)
        shifts = [shift for shift in range(1, blocks) for _ in range(per_shift)][: heads - 1]
        identity_heads = [0] * (heads - len(shifts))
        return [[(block + shift) % blocks for block in range(blocks)] for shift in identity_heads + shifts]
