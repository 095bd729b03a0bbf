"""Longformer-style family: exact sliding-window attention with dilation and global tokens (Beltagy et al. 2020)."""

from huggingface_hub.dataclasses import strict

from .configuration_base import HfeConfig


@strict
class HfeLongformerConfig(HfeConfig):
    r"""
    RoBERTa with Longformer's attention (`attention_type="sliding"`, see `attention_sliding.py`, which reads and
    checks `attention_window`, `attention_dilation`, `blocked_recompute_min_length` and `max_compiled_global_tokens`): each
    token attends to a window of neighbours, global tokens attend to and are attended by every token.

    Args:
        attention_window (int or list[int], defaults to 512):
            Total span of the sliding window, as transformers' `LongformerConfig` defines it: one even value
            of at least 2 for every layer, or one per layer. Query i attends to the keys j with |i - j| <= w / 2
            (times the head's dilation, below).
        attention_dilation (int or list[int], defaults to 1):
            Gap between attended neighbours, one value >= 1 for every head or one per head (the same in
            every layer). A head with dilation d attends to the keys j with (i - j) a multiple of d and
            |i - j| <= d * w / 2, so it sees as many keys as with d = 1 over a d times wider span. A dilated
            span must fit the longest input: d * w / 2 < `max_position_embeddings` minus the position
            offset (a wider one could never be used in full).
        blocked_recompute_min_length (int, defaults to 0):
            From this many tokens (the caller's length) up, the blocked path does not keep the key and value
            blocks it gathers for each query block (several times the keys and values) from the forward to the
            backward: backward gathers them again (a copy of them, not the attention recomputed). At 2-4K tokens
            this keeps about two thirds of the training memory (less than dense attention over 512-token windows)
            for a few percent more time per step at most; a length above the input keeps them, and so does a model
            under `torch.compile`. Results are the same either way.
        max_compiled_global_tokens (int, defaults to 64):
            Under `torch.compile` the global path has this many entries whatever the input (a count read from
            the data would break the graph): at most this many global tokens per sequence, checked when the
            compiled model runs. Eager and exported models take any number.
        sep_token_id (int, optional, defaults to 2):
            Separator token (`</s>`). When no `global_attention_mask` is given, question answering puts
            global attention on the tokens before the first separator (the question) and multiple choice
            on the tokens after the first separator pair (the choice), as transformers' Longformer does;
            sequence classification puts it on the first token (`<s>`).

    Per call, the models take `global_attention_mask` (bool or 0/1 [batch, length], True for tokens
    with global attention); the heads above fill it in when it is not given.

    At input lengths up to `2 * attention_window` (the layer's) the exact pattern is computed as dense
    attention with a pattern mask and no padding, which is faster there; when the window covers the
    whole input (w / 2 >= length - 1, dilation 1) it is plain dense attention.

    The fields every family shares (sizes, dropout, reversible layers, ...) are `HfeConfig`'s.
    """

    model_type = "hfe_longformer"
    attention_type: str = "sliding"
    attention_window: int | list[int] = 512
    attention_dilation: int | list[int] = 1
    blocked_recompute_min_length: int = 0
    max_compiled_global_tokens: int = 64
    sep_token_id: int | None = 2
