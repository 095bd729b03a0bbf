"""The dense baseline: RoBERTa with full softmax attention, the reference every family is measured against."""

from huggingface_hub.dataclasses import strict

from .configuration_base import HfeConfig


@strict
class HfeRobertaConfig(HfeConfig):
    r"""
    RoBERTa with dense attention (sdpa or eager) and hf_efficient's memory options (reversible
    layers, chunked feed-forward, chunked MLM loss). Same weights as `RobertaModel`.
    """

    model_type = "hfe_roberta"
    attention_type: str = "full"
