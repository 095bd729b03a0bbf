"""Longformer-style family: exact sliding-window attention with dilation and global tokens (Beltagy et al. 2020)."""

from huggingface_hub.dataclasses import strict

from .configuration_base import HfeConfig


@strict
class HfeLongformerConfig(HfeConfig):
    r"""
    RoBERTa with Longformer's attention (`attention_type="sliding"`, see `attention_sliding.py`): each
    token attends to a window of neighbours, global tokens attend to and are attended by every token.

    attention_window (`int` or `list[int]`, defaults to 512):
        Total span of the sliding window, as transformers' `LongformerConfig` defines it: one even value
        >= 2 for every layer, or one per layer. Query i attends to the keys j with |i - j| <= w / 2
        (times the head's dilation, below).
    attention_dilation (`int` or `list[int]`, defaults to 1):
        Gap between attended neighbours, one value >= 1 for every head or one per head (the same in
        every layer). A head with dilation d attends to the keys j with (i - j) a multiple of d and
        |i - j| <= d * w / 2, so it sees as many keys as with d = 1 over a d times wider span. A dilated
        span must fit the longest input: d * w / 2 < `max_position_embeddings` minus the position
        offset (a wider one could never be used in full).
    sep_token_id (`int`, *optional*, defaults to 2):
        Separator token (`</s>`). When no `global_attention_mask` is given, question answering puts
        global attention on the tokens before the first separator (the question) and multiple choice
        on the tokens after the first separator pair (the choice), as transformers' Longformer does;
        sequence classification puts it on the first token (`<s>`).

    Per call, the models take `global_attention_mask` (bool or 0/1 [batch, length], True for tokens
    with global attention); the heads above fill it in when it is not given.

    At input lengths up to `2 * attention_window` (the layer's) the exact pattern is computed as dense
    attention with a pattern mask and no padding, which is faster there; when the window covers the
    whole input (w / 2 >= length - 1, dilation 1) it is plain dense attention.
    """

    model_type = "hfe_longformer"
    attention_type: str = "sliding"
    attention_window: int | list[int] = 512
    attention_dilation: int | list[int] = 1
    sep_token_id: int | None = 2

    def check_fields(self) -> None:
        super().check_fields()
        windows = self.per_entry("attention_window", self.attention_window, self.num_hidden_layers, "num_hidden_layers")
        if any(w < 2 or w % 2 for w in windows):
            raise ValueError(f"`attention_window` must be even and >= 2 (the total span), got {self.attention_window}.")
        dilations = self.per_entry(
            "attention_dilation", self.attention_dilation, self.num_attention_heads, "num_attention_heads"
        )
        if any(d < 1 for d in dilations):
            raise ValueError(f"`attention_dilation` must be >= 1, got {self.attention_dilation}.")
        widest = max(dilations) * max(windows) // 2
        if max(dilations) > 1 and widest >= self.max_sequence_length:
            raise ValueError(
                f"`attention_dilation` {self.attention_dilation} has no room: a dilated window reaches {widest} tokens "
                f"each side but inputs have at most {self.max_sequence_length} (`max_position_embeddings`)."
            )

    @staticmethod
    def per_entry(name: str, value: int | list[int], count: int, count_name: str) -> list[int]:
        """One value, or a list of `count` values -> the list; a list of another length is a ValueError naming `name`."""
        if isinstance(value, int):
            return [value] * count
        if len(value) != count:
            raise ValueError(f"`{name}` has {len(value)} entries but the model has `{count_name}`={count}.")
        return list(value)

    def attention_window_of_layer(self, layer_idx: int) -> int:
        return self.per_entry("attention_window", self.attention_window, self.num_hidden_layers, "")[layer_idx]

    def attention_dilation_of_heads(self) -> list[int]:
        return self.per_entry("attention_dilation", self.attention_dilation, self.num_attention_heads, "")
