"""Tiny test settings for every family: the one place a new family joins the shared test suites.

Each case gives settings under which the family's sparse pattern is ACTIVE at the test lengths,
and settings under which the pattern COVERS the whole input (the family must then compute exactly
what the dense family computes from the same weights).
"""

from collections.abc import Callable
from dataclasses import dataclass, field

import torch

import hf_efficient

TINY = {
    "vocab_size": 99,
    "hidden_size": 32,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "intermediate_size": 37,
    "max_position_embeddings": 130,
    "hidden_dropout_prob": 0.0,
    "attention_probs_dropout_prob": 0.0,
    "reversible_recompute_min_length": 0,  # tiny inputs: exercise the memory-saving backward of reversible layers
}


@dataclass
class FamilyCase:
    model_type: str
    sparse: dict = field(default_factory=dict)
    full_coverage: dict = field(default_factory=dict)
    # Called on a model built with `full_coverage` after the dense weights were loaded, for families
    # whose extra parameters must be set to make the pattern exact (e.g. identity projections).
    make_dense_equivalent: Callable[[torch.nn.Module], None] | None = None
    # Lengths at which the sparse settings are exercised (not all multiples of the block sizes).
    lengths: tuple[int, ...] = (13, 64, 100)
    # False only where the pattern itself depends on the padded length (e.g. hashing into chunks):
    # padding invariance is then checked with the full-coverage pattern.
    padding_invariant: bool = True


def identity_projections(model: torch.nn.Module) -> None:
    """Linformer: E = F = identity, so with k = L the projection keeps every key and value."""
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if name.endswith("length_projection.weight"):
                parameter.copy_(torch.eye(*parameter.shape[-2:]).expand_as(parameter))


FAMILY_CASES = {case.model_type: case for case in [
    FamilyCase("hfe_roberta"),
    # k = 8 projects every test length; "layerwise" is the sharing that tests save/load hardest.
    # With k = 128 >= every length the family computes exact dense attention.
    FamilyCase("hfe_linformer", sparse={"projected_length": 8, "projection_sharing": "layerwise"},
               full_coverage={"projected_length": 128}, make_dense_equivalent=identity_projections),
    # Chunks of 8 with no dense threshold: every test length runs the chunked local and LSH paths
    # (2 hashing rounds, fixed bucket count so padding leaves the hashing unchanged). Local layers
    # are exact dense attention when their chunks reach the whole input (default threshold 512).
    FamilyCase("hfe_reformer", sparse={"layer_attention_types": ["chunked_local", "lsh"], "lsh_chunk_length": 8,
                                       "local_chunk_length": 8, "num_buckets": 4, "num_hashes": 2,
                                       "full_attention_max_length": 0},
               full_coverage={"attention_type": "chunked_local", "reversible": False}),
    # Windows 8 and 6 per layer (reach 4 and 3, so inputs pad to multiples of 12) and one head with
    # dilation 2: 13 tokens run the pattern-masked dense path, 64 and 100 the blocked one.
    FamilyCase("hfe_longformer", sparse={"attention_window": [8, 6], "attention_dilation": [1, 2, 1, 1]},
               full_coverage={"attention_window": 256}),
    # 2 blocks of each sequence's real tokens, heads 0-2 identity and head 3 swapped; 1 block is dense.
    FamilyCase("hfe_blockbert", sparse={"num_blocks": 2}, full_coverage={"num_blocks": 1}),
    # Blocks of 4, 1 random block: 13 tokens are covered whole (dense), 64 and 100 run the blocked path.
    # Blocks of 128 make every input one global block (dense).
    FamilyCase("hfe_bigbird", sparse={"block_size": 4, "num_random_blocks": 1},
               full_coverage={"block_size": 128, "num_random_blocks": 0}),
]}


def tiny_config(model_type: str, pattern: str = "sparse", **overrides):
    """A tiny config of `model_type` with its `sparse` or `full_coverage` settings."""
    case = FAMILY_CASES[model_type]
    config_class = hf_efficient.FAMILIES[model_type].config_class
    settings = case.sparse if pattern == "sparse" else case.full_coverage
    return config_class(**{**TINY, **settings, **overrides})
