"""The benchmark model size and each family's benchmark settings (the issues' field names and values)."""

from collections.abc import Sequence

import transformers

from ..models.families import FAMILIES, check_family
from ..recipes import family_settings

BENCHMARK_SIZE = {
    "hidden_size": 256,
    "num_hidden_layers": 4,
    "num_attention_heads": 4,
    "intermediate_size": 1024,
    "vocab_size": 1000,
}
# all-MiniLM-L6-v2's size (the long-context recipe's starting checkpoint): what a small real model costs.
MINILM_SIZE = {
    "hidden_size": 384,
    "num_hidden_layers": 6,
    "num_attention_heads": 12,
    "intermediate_size": 1536,
    "vocab_size": 30522,
}
MODEL_SIZES = {"benchmark": BENCHMARK_SIZE, "minilm": MINILM_SIZE}

# Config fields that change only what backward keeps: a variant setting no other is not measured in inference.
BACKWARD_SETTINGS = {"blocked_recompute_min_length"}
# Extra named settings of a family measured beside its default: name -> (model_type, overrides); the override
# `global_tokens` is not a config field but global attention on the document's first tokens.
VARIANTS: dict[str, tuple[str, dict]] = {
    "hfe_reformer 4 hashes": ("hfe_reformer", {"num_hashes": 4}),
    "hfe_reformer not reversible": ("hfe_reformer", {"reversible": False}),
    # The paper's fixed n=2 (this benchmark's BlockBERT setting before `max_block_length`), whose blocks grow with
    # the input, and blocks twice the default's, beside the default of the row above.
    "hfe_blockbert 2 blocks": ("hfe_blockbert", {"num_blocks": 2}),
    "hfe_blockbert blocks of 1024": ("hfe_blockbert", {"max_block_length": 1024}),
    # BigBird-style, and Longformer-style with global tokens (whose global keys join every block's), keeping the key
    # blocks they gather from forward to backward (a length above every input), which by default they gather again.
    "hfe_bigbird, blocks kept": ("hfe_bigbird", {"blocked_recompute_min_length": 2**31}),
    "hfe_longformer, 16 global tokens, blocks kept": ("hfe_longformer", {"blocked_recompute_min_length": 2**31,
                                                                         "global_tokens": 16}),
}


def benchmark_configs(
    length: int, families: Sequence[str] | None = None, size: str = "benchmark", **overrides
) -> dict[str, transformers.PretrainedConfig]:
    """model_type -> config of the `size` (a `MODEL_SIZES` key) with a position table long enough for `length`;
    `overrides` replace fields (a tokenizer's vocabulary size and special tokens, the depth) before the table is
    sized; a family's per-layer pattern is fitted to the depth."""
    for name in families or ():
        check_family(name, "family")
    configs, layers = {}, overrides.get("num_hidden_layers", MODEL_SIZES[size]["num_hidden_layers"])
    # the dense baseline first: the tables read every family against it
    for model_type in sorted(FAMILIES, key=lambda name: name != "hfe_roberta"):
        if families and model_type not in families:
            continue
        config_class = FAMILIES[model_type].config_class
        fields = {**MODEL_SIZES[size], "hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0,
                  **family_settings(model_type, layers), **overrides}
        configs[model_type] = config_class(
            **fields, max_position_embeddings=length + config_class.position_offset_for(**fields)
        )
    return configs


def build_model(config: transformers.PretrainedConfig) -> transformers.PreTrainedModel:
    """The family's base model (no pooler) for `config`."""
    base_model_class = FAMILIES[config.model_type].models["Model"]
    return base_model_class(config, add_pooling_layer=False)
