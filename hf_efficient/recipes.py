"""The attention settings each family runs at in the recipes and the benchmarks.

One table that the workflow (its presets, training/all_stages.py, and the pretrained-start recipe,
training/long_context.py) and every benchmark (bench/) read through `family_settings`, so that the
workflow does not depend on the benchmarks. A family not listed runs with its defaults.
"""

FAMILY_SETTINGS: dict[str, dict] = {
    "hfe_roberta": {},
    "hfe_linformer": {"projected_length": 256},  # Linformer paper's k; default (headwise) sharing
    # transformers' ReformerModel's default pattern: local and LSH layers alternating, chunks of 64, local
    # chunks attending to the previous chunk only (this family's default also attends to the next one).
    "hfe_reformer": {"layer_attention_types": ["chunked_local", "lsh"] * 2, "num_hashes": 1, "lsh_chunk_length": 64,
                     "local_chunk_length": 64, "local_num_chunks_after": 0},
    "hfe_blockbert": {},  # blocks of at most `max_block_length`=512 tokens, as many as the length needs
    "hfe_bigbird": {"block_size": 64, "num_random_blocks": 3},
    "hfe_longformer": {"attention_window": 256},
}
# The pretrained-start recipe (`long-context`, `bench-quality`) where it differs from the table above: a 512-token
# encoder made long reads QA on validation no worse with the narrower window (a window of 256 reads no higher on
# look-up or far evidence), in less memory and less attention work (docs/measurements/quality.md, "The window":
# all-MiniLM-L6-v2 at 2048 tokens).
LONG_CONTEXT_SETTINGS: dict[str, dict] = {**FAMILY_SETTINGS, "hfe_longformer": {"attention_window": 128}}


def family_settings(model_type: str, num_layers: int, pretrained_start: bool = False) -> dict:
    """`model_type`'s settings for a model of `num_layers` layers: a per-layer pattern (4 layers in the table) is
    repeated or cut to that many. `pretrained_start`: the pretrained-start recipe's (`LONG_CONTEXT_SETTINGS`)."""
    settings = dict((LONG_CONTEXT_SETTINGS if pretrained_start else FAMILY_SETTINGS).get(model_type, {}))
    pattern = settings.get("layer_attention_types")
    if pattern:
        settings["layer_attention_types"] = [pattern[i % len(pattern)] for i in range(num_layers)]
    return settings
