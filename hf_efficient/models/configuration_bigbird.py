"""BigBird-style family: blocked window, global blocks and random blocks (Zaheer et al. 2020, ITC)."""

from huggingface_hub.dataclasses import strict

from .configuration_base import HfeConfig


@strict
class HfeBigBirdConfig(HfeConfig):
    r"""
    RoBERTa with BigBird's block-sparse attention (`attention_type="bigbird"`, see `attention_bigbird.py`, which reads
    and checks the fields below).
    Each sequence's real tokens are cut into blocks of `block_size` (the last may be shorter); the first
    and last blocks are global (they attend to every token and every token attends to them), and every
    other query block attends to its own and both neighbouring blocks and to `num_random_blocks` others.

    Args:
        block_size (int, defaults to 64):
            Tokens per block. Sequences of at most `(4 + num_random_blocks) * block_size` tokens are covered
            whole by the pattern and run as dense attention.
        num_random_blocks (int, defaults to 3):
            r, the random key blocks of every non-global query block, drawn (without replacement, per layer,
            head and query block) from the sequence's blocks it does not already attend to; fewer when fewer
            are left (then the pattern covers the whole sequence).
        random_blocks_seed (int, defaults to 0):
            Seed of the random blocks. The plan is a fixed function of (seed, layer, head, query block, key
            block) - a counter-based hash, not a stateful generator - so it is the same in training and
            eval, on every device, and under gradient checkpointing or reversible recomputation; a sequence
            gets the same random blocks whatever the length of the batch it is padded into.
        blocked_recompute_min_length (int, defaults to 0):
            From this many tokens (the caller's length) up, the blocked path does not keep the key and value
            blocks it gathers for each query block (several times the keys and values) from the forward to the
            backward: backward gathers them again (a copy of them, not the attention recomputed). At 2-4K tokens
            this keeps about two thirds of the training memory (less than dense attention over 512-token windows)
            for a few percent more time per step at most; a length above the input keeps them, and so does a model
            under `torch.compile`. Results are the same either way.

    The fields every family shares (sizes, dropout, reversible layers, ...) are `HfeConfig`'s.
    """

    model_type = "hfe_bigbird"
    attention_type: str = "bigbird"
    block_size: int = 64
    num_random_blocks: int = 3
    random_blocks_seed: int = 0
    blocked_recompute_min_length: int = 0
