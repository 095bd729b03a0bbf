"""The configuration every family shares: RoBERTa's fields plus the attention and memory options."""

from typing import ClassVar, Literal

from huggingface_hub.dataclasses import strict
from transformers import PreTrainedConfig

from .attention import attention_key, check_attention_config


@strict
class HfeConfig(PreTrainedConfig):
    r"""
    Shared by every hf_efficient family. The RoBERTa fields keep their meaning (a RoBERTa state dict
    loads by name); the rest choose the attention and the memory tricks. A family's config (e.g.
    `HfeLongformerConfig`) adds its attention's fields and defaults; any `PreTrainedConfig` field
    (`num_labels`, `problem_type`, `output_attentions`, ...) applies as in transformers.

    Args:
        vocab_size (int, defaults to 50265):
            Size of the token vocabulary (RoBERTa's).
        hidden_size (int, defaults to 768):
            Width of the hidden states; a multiple of `num_attention_heads`.
        num_hidden_layers (int, defaults to 12):
            Number of encoder layers.
        num_attention_heads (int, defaults to 12):
            Attention heads per layer.
        intermediate_size (int, defaults to 3072):
            Width of the feed-forward layer.
        hidden_act (str, defaults to "gelu"):
            Activation of the feed-forward layer (a key of transformers' `ACT2FN`).
        hidden_dropout_prob (float, defaults to 0.1):
            Dropout of the embeddings, the attention output and the feed-forward output.
        attention_probs_dropout_prob (float, defaults to 0.1):
            Dropout of the attention weights.
        max_position_embeddings (int, defaults to 514):
            Size of the position table. The longest input is this minus the position offset
            (`max_sequence_length`: 512 for RoBERTa's 514).
        type_vocab_size (int, defaults to 1):
            Number of token types (segments).
        initializer_range (float, defaults to 0.02):
            Standard deviation of the normal initialisation of the weights.
        layer_norm_eps (float, defaults to 1e-5):
            Epsilon of the layer norms.
        pad_token_id (int, optional, defaults to 1):
            Id of the padding token (`<pad>`).
        bos_token_id (int, optional, defaults to 0):
            Id of the first token (`<s>`).
        eos_token_id (int or list[int], optional, defaults to 2):
            Id of the separator and last token (`</s>`).
        classifier_dropout (float, optional):
            Dropout of the classification heads; `None` uses `hidden_dropout_prob`.
        tie_word_embeddings (bool, defaults to True):
            Tie the masked-LM decoder to the word embeddings.
        attention_type (str, defaults to "full"):
            Registry key of the attention mechanism every layer uses (`"full"`, `"blockbert"`, `"sliding"`, ...).
            The mechanism reads its own fields (e.g. `attention_window` for `"sliding"`): a family config declares
            them, any other config may pass them as extra arguments or use the mechanism's defaults.
        layer_attention_types (list[str], optional):
            One registry key per layer, overriding `attention_type` (e.g. alternating local and LSH layers).
        reversible (bool, defaults to False):
            RevNet residual layers (y1 = x1 + Attn(x2), y2 = x2 + FFN(y1)) with pre-layer-norm blocks:
            activations are recomputed in backward, so training memory does not grow with depth.
            Gradient checkpointing then applies only to inputs that keep their activations (see below).
        reversible_recompute_min_length (int, defaults to 1024):
            Reversible layers recompute activations in the backward pass for inputs of at least this many
            tokens (padded length). Shorter inputs keep their activations, as ordinary layers do: the same
            gradients without recomputing every layer, and little memory at such lengths. 0: always recompute.
        mlm_loss_chunk_size (int, defaults to 0):
            When > 0, a MaskedLM head in training mode computes its loss over the labelled positions in
            chunks of this many tokens and never materialises the [length, vocab] logits (it returns
            `logits=None`). 0 computes full logits as RoBERTa does.
        position_numbering ("padding_offset" or "absolute", defaults to "padding_offset"):
            `"padding_offset"` numbers positions from `pad_token_id + 1` and gives padding the padding
            position (RoBERTa); `"absolute"` numbers them 0, 1, 2, ... (BERT).
        classifier_pooling ("cls", "mean" or "pair", defaults to "cls"):
            What the sequence-classification head reads, named as in transformers' `ModernBertConfig`:
            `"cls"` the first token (RoBERTa), `"mean"` the mean over the real tokens (`attention_mask`).
            With local attention the first token sees only its window (unless it is global), and a
            briefly pretrained model has not learnt to gather the sequence into it; the mean sees every token.
            `"pair"` classifies a text pair from the means u, v of its two segments (`token_type_ids` 0 and 1)
            as `[u, v, |u - v|, u * v]` (sentence-transformers' SoftmaxLoss head); it needs a `type_vocab_size`
            of at least 2 and the tokenizer's `token_type_ids` of `tokenizer(text, text_pair)`.
        chunk_size_feed_forward (int, defaults to 0):
            transformers' field: when > 0, the feed-forward layer runs over chunks of this many tokens
            (less peak memory, same result).

    Bad values raise a `ValueError` naming the field, at construction and when a model is built.
    """

    model_type = "hfe_base"
    # The FSDP2 units of `from_pretrained(..., distributed_config=DistributedConfig(fsdp_size=N))`: each encoder layer,
    # then the root (transformers' default plan names Llama's modules, which these models do not have).
    base_model_fsdp_plan: ClassVar[dict[str, str]] = {"encoder.layer.*": "free_full_weight"}

    vocab_size: int = 50265
    hidden_size: int = 768
    num_hidden_layers: int = 12
    num_attention_heads: int = 12
    intermediate_size: int = 3072
    hidden_act: str = "gelu"
    hidden_dropout_prob: float | int = 0.1
    attention_probs_dropout_prob: float | int = 0.1
    max_position_embeddings: int = 514
    type_vocab_size: int = 1
    initializer_range: float = 0.02
    layer_norm_eps: float = 1e-5
    pad_token_id: int | None = 1
    bos_token_id: int | None = 0
    eos_token_id: int | list[int] | None = 2
    classifier_dropout: float | int | None = None
    tie_word_embeddings: bool = True
    attention_type: str = "full"
    layer_attention_types: list[str] | None = None
    reversible: bool = False
    reversible_recompute_min_length: int = 1024
    mlm_loss_chunk_size: int = 0
    position_numbering: Literal["padding_offset", "absolute"] = "padding_offset"
    classifier_pooling: str = "cls"  # checked in check_fields, so a bad value is a ValueError

    def __post_init__(self, **kwargs):
        super().__post_init__(**kwargs)
        # Checked here rather than in a `validate_*` hook so that users get a plain ValueError
        # (strict's validators re-wrap errors into a non-ValueError exception).
        self.check_fields()

    def check_fields(self) -> None:
        """Raise ValueError naming the first field that cannot work, including each layer's mechanism's fields.

        Run at construction and again when a model is built (a config may have been edited since)."""
        for name in ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
                     "intermediate_size", "max_position_embeddings", "type_vocab_size"):
            if getattr(self, name) <= 0:
                raise ValueError(f"`{name}` must be positive, got {getattr(self, name)}.")
        if self.hidden_size % self.num_attention_heads:
            raise ValueError(
                f"`hidden_size` ({self.hidden_size}) must be a multiple of `num_attention_heads` "
                f"({self.num_attention_heads})."
            )
        for name in ("hidden_dropout_prob", "attention_probs_dropout_prob"):
            if not 0 <= getattr(self, name) < 1:
                raise ValueError(f"`{name}` must be in [0, 1), got {getattr(self, name)}.")
        if self.classifier_pooling not in ("cls", "mean", "pair"):
            raise ValueError(f"`classifier_pooling` must be \"cls\", \"mean\" or \"pair\", got {self.classifier_pooling!r}.")
        if self.classifier_pooling == "pair" and self.type_vocab_size < 2:
            raise ValueError(f"`classifier_pooling` \"pair\" tells the two texts apart by token_type_ids and needs "
                             f"`type_vocab_size` >= 2, got {self.type_vocab_size} (a BERT-style checkpoint has 2; "
                             "else use \"mean\").")
        for name in ("mlm_loss_chunk_size", "chunk_size_feed_forward", "reversible_recompute_min_length"):
            if getattr(self, name) < 0:
                raise ValueError(f"`{name}` must be >= 0, got {getattr(self, name)}.")
        if self.max_sequence_length <= 0:
            raise ValueError(
                f"`max_position_embeddings` ({self.max_position_embeddings}) leaves no room for tokens after "
                f"the padding offset ({self.position_offset})."
            )
        check_attention_config(self)

    @property
    def position_offset(self) -> int:
        """Index of the first real token's position embedding."""
        return self.position_offset_for(position_numbering=self.position_numbering, pad_token_id=self.pad_token_id)

    @classmethod
    def position_offset_for(cls, **fields) -> int:
        """`position_offset` of `cls(**fields)`, known before building it (to size `max_position_embeddings`)."""
        if fields.get("position_numbering", cls.position_numbering) == "absolute":
            return 0
        pad_token_id = fields.get("pad_token_id", cls.pad_token_id)
        return (pad_token_id if pad_token_id is not None else 0) + 1

    @property
    def max_sequence_length(self) -> int:
        """Longest input the position table supports."""
        return self.max_position_embeddings - self.position_offset

    def attention_type_of_layer(self, layer_idx: int) -> str:
        """The registry key of layer `layer_idx`'s mechanism."""
        if self.layer_attention_types is not None:
            return attention_key(self.layer_attention_types[layer_idx])
        return attention_key(self.attention_type)
