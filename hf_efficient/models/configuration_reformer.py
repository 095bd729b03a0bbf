"""Reformer-style RoBERTa (Kitaev et al. 2020): LSH attention, optional local layers, reversible residual layers."""

from huggingface_hub.dataclasses import strict

from .configuration_base import HfeConfig


@strict
class HfeReformerConfig(HfeConfig):
    r"""
    RoBERTa with the Reformer's attention and memory tricks (Kitaev et al. 2020, "Reformer: The
    Efficient Transformer").

    `"lsh"` layers use shared-QK attention: one `query` projection (no `key`; a converted RoBERTa
    checkpoint's `key` weights are dropped), keys are the queries normalised to length
    sqrt(head_dim). Each of `num_hashes` rounds hashes the queries by a random rotation into
    buckets, sorts the tokens by (bucket, position) (padding last), cuts the sorted sequence into
    chunks of `lsh_chunk_length`, and lets each chunk attend to itself and
    `lsh_num_chunks_before` / `lsh_num_chunks_after` neighbouring chunks of the same round (no
    wrap-around). A token never attends to itself unless it has no other target. Rounds are merged
    with weights softmax(logsumexp of each round's scores), as in the paper.
    `"chunked_local"` layers (`"local"` in older configs, still accepted; normal query/key/value) cut the sequence by position into chunks of
    `local_chunk_length`, each attending to itself and `local_num_chunks_before` /
    `local_num_chunks_after` neighbours. Mix them with `layer_attention_types`, e.g.
    `["chunked_local", "lsh", "chunked_local", "lsh"]` (transformers' ReformerModel's default `attn_layers`);
    by default every layer is `"lsh"`. `attention_lsh.py` and `attention_chunked_local.py` read and check
    the fields below.

    Both are exact dense attention (LSH: shared-QK, without attention to self) for every sequence of
    at most `full_attention_max_length` real tokens (decided per sequence, so padding a sequence into
    a longer batch never changes its result), and wherever the chunks reach the whole input. For
    LSH that is a different function from the hashed approximation it replaces: a model behaves
    slightly differently just below and just above the threshold.

    Args:
        num_hashes (int, defaults to 1):
            Hashing rounds per LSH layer. More rounds cost proportionally more and approximate full
            shared-QK attention better.
        num_buckets (int, list[int] or None, defaults to None):
            Buckets per hashing round, even. A list of even factors hashes each factor with its own
            rotations and combines them (bucket = b_1 + f_1 * (b_2 + f_2 * ...)): the same number of
            buckets for a cheaper hash. `None` derives it from the padded input length L per call:
            the power of two nearest below 2 * L / `lsh_chunk_length` (at least 2), factorised into
            two factors above 64 buckets. Set it explicitly for outputs that do not depend on how
            much a batch is padded.
        lsh_chunk_length (int, defaults to 64):
            Tokens per chunk of the bucket-sorted sequence.
        lsh_num_chunks_before (int, defaults to 1):
            Neighbouring chunks before it in the sorted sequence that each LSH chunk also attends to.
        lsh_num_chunks_after (int, defaults to 0):
            Neighbouring chunks after it in the sorted sequence that each LSH chunk also attends to.
        local_chunk_length (int, defaults to 64):
            Tokens per chunk of a local layer.
        local_num_chunks_before (int, defaults to 1):
            Neighbouring chunks before it that a local chunk also attends to.
        local_num_chunks_after (int, defaults to 1):
            Neighbouring chunks after it that a local chunk also attends to (transformers' Reformer uses 0, a
            decoder's choice; an encoder looks both ways).
        hash_seed (int, defaults to 0):
            In eval mode, layer i draws its rotations from a generator seeded with `hash_seed + i`, so
            outputs are deterministic. In training, rotations come from torch's global RNG (fresh
            buckets every step, replayed exactly by reversible and checkpointed backward passes).
        full_attention_max_length (int, defaults to 512):
            Sequences of at most this many real tokens get exact dense attention in LSH and local layers,
            where it is faster than chunking. 0: only where the chunks cover the whole input.
        is_decoder (bool, defaults to False):
            Causal masking in LSH and local layers (a token attends to no later position).
        reversible (bool, defaults to True):
            As in `HfeConfig`, on by default here: training memory independent of depth.
        mlm_loss_chunk_size (int, defaults to 1024):
            As in `HfeConfig`, on by default here: no [length, vocab] logits in a masked-LM training step.

    The fields every family shares (sizes, dropout, reversible layers, ...) are `HfeConfig`'s.
    """

    model_type = "hfe_reformer"
    attention_type: str = "lsh"
    reversible: bool = True
    mlm_loss_chunk_size: int = 1024
    num_hashes: int = 1
    num_buckets: int | list[int] | None = None
    lsh_chunk_length: int = 64
    lsh_num_chunks_before: int = 1
    lsh_num_chunks_after: int = 0
    local_chunk_length: int = 64
    local_num_chunks_before: int = 1
    local_num_chunks_after: int = 1
    hash_seed: int = 0
    full_attention_max_length: int = 512
    is_decoder: bool = False
