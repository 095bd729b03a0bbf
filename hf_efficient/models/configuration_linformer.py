"""Linformer (Wang et al. 2020): keys and values compressed along the length axis by learned projections."""

from typing import Literal

from huggingface_hub.dataclasses import strict

from .configuration_base import HfeConfig


@strict
class HfeLinformerConfig(HfeConfig):
    r"""
    RoBERTa with Linformer attention (Wang et al. 2020, "Linformer: Self-Attention with Linear
    Complexity"): every layer multiplies its keys by a learned projection E and its values by F
    (`projected_length` x `max_sequence_length`), so each query attends to `projected_length`
    compressed rows instead of all tokens. An input of L < `max_sequence_length` tokens uses the
    first L columns (E[:, :L]); padded keys and values are zeroed before the projection, so a
    right-padded sequence computes what it computes alone.

    Args:
        projected_length (int, defaults to 256):
            k, the number of rows keys and values are projected to. A sequence of L <= k real tokens
            cannot be compressed and gets exact dense attention instead (decided per sequence and per
            call; this is a different function from the projected one, which it replaces only where
            the projection could not shorten anything). When k >= `max_sequence_length` the model is
            always dense.
        projection_sharing ("none", "headwise", "key_value" or "layerwise", defaults to "headwise"):
            Which projections are shared, as in the paper's Section 4: `"none"`, every layer has its own
            E and F per head; `"headwise"`, every layer has one E and one F for all its heads;
            `"key_value"`, every layer has one matrix used as both E and F; `"layerwise"`, one matrix
            used as E and F by every head of every Linformer layer, stored once in the first Linformer
            layer (`encoder.layer.<first>.attention.self.length_projection`).

    The model is an encoder only: `is_decoder=True` is rejected. `attention_linformer.py` reads and
    checks these fields.

    The fields every family shares (sizes, dropout, reversible layers, ...) are `HfeConfig`'s.
    """

    model_type = "hfe_linformer"
    attention_type: str = "linformer"
    projected_length: int = 256
    projection_sharing: Literal["none", "headwise", "key_value", "layerwise"] = "headwise"
