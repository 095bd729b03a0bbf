"""The attention side of the wiring: mechanisms own their config fields, one plan per forward, and its defects' fixes."""

import logging
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from transformers import AutoModel, AutoModelForMaskedLM

import hf_efficient
from hf_efficient import HfeLongformerConfig, HfeReformerConfig, HfeRobertaConfig
from hf_efficient.models.attention import ATTENTION_REGISTRY
from hf_efficient.models.attention_blockbert import BlockBertAttention
from hf_efficient.models.attention_chunked_local import ChunkedLocalAttention
from hf_efficient.tensor_memory import LiveTensorBytes
from tests.families import TINY, tiny_config
from tests.test_conformance import FAMILIES, build, model_class, random_ids

# Fields that make every mechanism's pattern active at a few dozen tokens, whatever config carries them.
ACTIVE = {"attention_window": 8, "num_blocks": 2, "block_size": 4, "num_random_blocks": 1, "projected_length": 8,
          "local_chunk_length": 8, "lsh_chunk_length": 8, "num_buckets": 4, "full_attention_max_length": 0}


def config_class(model_type: str):
    return model_class(model_type).config_class


@pytest.mark.parametrize("model_type", FAMILIES)
@pytest.mark.parametrize("key", sorted(ATTENTION_REGISTRY))
def test_any_mechanism_runs_in_any_family(model_type, key):
    """A layer of any registered mechanism in any family's config builds and runs, with its fields or their defaults."""
    family_key = config_class(model_type)().attention_type
    for extra in ({}, ACTIVE):
        config = config_class(model_type)(**{**TINY, **extra}, layer_attention_types=[key, family_key])
        torch.manual_seed(0)
        model = AutoModel.from_config(config).eval()
        ids = random_ids(2, 30)
        mask = torch.ones_like(ids)
        mask[1, 20:] = 0
        hidden = model(ids, attention_mask=mask).last_hidden_state
        assert hidden.shape == (2, 30, TINY["hidden_size"]) and hidden.isfinite().all()
        alone = model(ids[1:, :20]).last_hidden_state
        torch.testing.assert_close(hidden[1, :20], alone[0], atol=1e-5, rtol=0)


def test_a_sliding_layer_in_the_dense_family_reads_its_own_fields():
    torch.manual_seed(0)
    model = AutoModel.from_config(HfeRobertaConfig(**TINY, layer_attention_types=["sliding", "full"], attention_window=8))
    assert model.encoder.layer[0].attention.self.window == 8
    assert model.pad_multiple(100) == 4
    with pytest.raises(ValueError, match="attention_window"):
        HfeRobertaConfig(**TINY, layer_attention_types=["sliding", "full"], attention_window=7)


@pytest.mark.parametrize(("model_type", "field", "value"), [
    ("hfe_longformer", "attention_window", 7),
    ("hfe_longformer", "attention_dilation", [1, 2]),
    ("hfe_blockbert", "num_blocks", 0),
    ("hfe_bigbird", "block_size", 0),
    ("hfe_linformer", "projected_length", 0),
    ("hfe_reformer", "num_buckets", 3),
    ("hfe_reformer", "local_chunk_length", 0),
    ("hfe_roberta", "layer_attention_types", ["full", "no_such_attention"]),
])
def test_a_config_edited_after_construction_is_checked_when_a_model_is_built(model_type, field, value):
    config = tiny_config(model_type)
    setattr(config, field, value)
    with pytest.raises(ValueError, match=field):
        AutoModel.from_config(config)


def test_older_attention_keys_still_load(tmp_path):
    """`"block"` and `"local"` were renamed `"blockbert"` and `"chunked_local"`; saved configs keep loading."""
    config = HfeReformerConfig(**TINY, layer_attention_types=["local", "lsh"])
    model = AutoModel.from_config(config)
    assert isinstance(model.encoder.layer[0].attention.self, ChunkedLocalAttention)
    model.save_pretrained(tmp_path)
    loaded = AutoModel.from_pretrained(tmp_path)
    assert isinstance(loaded.encoder.layer[0].attention.self, ChunkedLocalAttention)
    blockbert = AutoModel.from_config(tiny_config("hfe_blockbert", attention_type="block"))
    assert isinstance(blockbert.encoder.layer[0].attention.self, BlockBertAttention)


def test_config_modules_do_not_import_the_kernels():
    models = Path(hf_efficient.__file__).parent
    code = textwrap.dedent("""
        import sys
        import models.configuration_longformer, models.configuration_reformer
        kernels = sorted(name for name in sys.modules if name.startswith("models.attention_") or name == "models.backbone")
        assert not kernels, kernels
        models.configuration_longformer.HfeLongformerConfig(attention_window=8)
    """)
    subprocess.run([sys.executable, "-c", code], cwd=models, check=True, env={**os.environ, "PYTHONPATH": str(models)})


@pytest.mark.parametrize("model_type", FAMILIES)
def test_pad_multiple_is_public_and_follows_the_plans(model_type):
    model = build(model_type)
    expected = {"hfe_longformer": 12, "hfe_bigbird": 4, "hfe_reformer": 8}.get(model_type, 1)
    assert model.pad_multiple(100) == expected


def test_reformer_sequence_gives_the_same_result_alone_and_in_a_longer_batch():
    """Dense attention up to `full_attention_max_length` is decided per sequence, not from the batch's padded length."""
    config = HfeReformerConfig(**{**TINY, "max_position_embeddings": 700}, layer_attention_types=["local", "lsh"],
                               num_buckets=8)
    torch.manual_seed(0)
    model = AutoModel.from_config(config).eval()
    ids = random_ids(2, 600)
    mask = torch.ones_like(ids)
    mask[0, 97:] = 0
    ids[0, 97:] = config.pad_token_id
    with torch.no_grad():
        batch = model(ids, attention_mask=mask).last_hidden_state
        alone = model(ids[:1, :97]).last_hidden_state
    torch.testing.assert_close(batch[0, :97], alone[0], atol=1e-5, rtol=0)


def retain_grad_cases():
    """(model_type, pattern, config overrides): sparse paths that pad, dense ones, reversible and not."""
    cases = [(model_type, "sparse", {}) for model_type in FAMILIES]
    cases += [("hfe_reformer", "full_coverage", {"reversible": True}), ("hfe_roberta", "sparse", {"reversible": True})]
    return cases


@pytest.mark.parametrize(("model_type", "pattern", "overrides"), retain_grad_cases())
@pytest.mark.parametrize("output_attentions", [False, True])
def test_returned_hidden_states_and_attentions_are_the_tensors_in_the_graph(model_type, pattern, overrides,
                                                                            output_attentions):
    """transformers' `test_retain_grad_hidden_states_attentions`, at a length the sparse patterns pad."""
    torch.manual_seed(0)
    config = tiny_config(model_type, pattern, hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1, **overrides)
    model = AutoModel.from_config(config, attn_implementation="eager").train()
    outputs = model(random_ids(2, 50), output_hidden_states=True, output_attentions=output_attentions)
    hidden_states = outputs.hidden_states[0]
    hidden_states.retain_grad()
    # The chunked Reformer paths return their weights as a by-product: the output is not computed from them.
    weights_in_graph = output_attentions and not (model_type == "hfe_reformer" and pattern == "sparse")
    if weights_in_graph:
        attentions = outputs.attentions[0]
        attentions.retain_grad()
    outputs[0].flatten()[0].backward(retain_graph=True)
    assert hidden_states.grad is not None
    if weights_in_graph:
        assert attentions.grad is not None


def test_gradient_checkpointing_checkpoints_reversible_layers_that_keep_their_activations(caplog):
    """Below `reversible_recompute_min_length` reversible layers keep activations: checkpointing then applies."""
    config = HfeReformerConfig(**{**TINY, "reversible_recompute_min_length": 1024})
    ids = random_ids(2, 40)
    torch.manual_seed(0)
    model = AutoModelForMaskedLM.from_config(config).train()
    torch.manual_seed(1)
    model(ids, labels=ids).loss.backward()
    plain = {name: p.grad.clone() for name, p in model.named_parameters()}
    model.zero_grad()
    with caplog.at_level(logging.INFO, logger="hf_efficient"):
        model.activation_checkpointing_enable()
    assert "reversible_recompute_min_length" in caplog.text
    calls = []
    for layer in model.roberta.encoder.layer:
        checkpoint = layer._gradient_checkpointing_func
        layer._gradient_checkpointing_func = lambda *args, checkpoint=checkpoint, **kwargs: (
            calls.append(1), checkpoint(*args, **kwargs))[1]
    torch.manual_seed(1)
    model(ids, labels=ids).loss.backward()
    assert len(calls) == config.num_hidden_layers
    for name, p in model.named_parameters():
        torch.testing.assert_close(p.grad, plain[name], atol=1e-6, rtol=0, msg=name)


@pytest.mark.parametrize("model_type", FAMILIES)
def test_fp64_attention_weights_are_computed_in_fp64(model_type):
    """With weights requested (eager / pattern-masked softmax) fp64 stays fp64: the outputs match the sdpa paths."""
    model = build(model_type).double()
    ids = random_ids(2, 50)
    mask = torch.ones_like(ids)
    mask[1, 37:] = 0
    with torch.no_grad():
        plain = model.roberta(ids, attention_mask=mask)
        weighted = model.roberta(ids, attention_mask=mask, output_attentions=True)
    assert all(weights.dtype == torch.float64 for weights in weighted.attentions)
    real = mask.bool()  # padded queries' outputs are discarded, and differ between paths
    torch.testing.assert_close(weighted.last_hidden_state[real], plain.last_hidden_state[real], atol=1e-12, rtol=0)


def test_global_attention_mask_of_the_wrong_shape_names_the_input_and_both_shapes():
    model = build("hfe_longformer")
    with pytest.raises(ValueError, match=r"`global_attention_mask` must have shape \(2, 10\).*got \(2, 5\)"):
        model(random_ids(2, 10), global_attention_mask=torch.ones(2, 5, dtype=torch.bool))


def test_the_global_projections_get_a_gradient_without_global_tokens():
    config = HfeLongformerConfig(**TINY, attention_window=8)
    model = AutoModelForMaskedLM.from_config(config).train()
    ids = random_ids(2, 40)
    model(ids, labels=ids).loss.backward()
    assert all(p.grad is not None for p in model.parameters())


DDP_SCRIPT = """
import sys
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from tests.test_conformance import FAMILIES, model_class, random_ids
from tests.distributed_worker import leave_process_group
from tests.families import tiny_config

rank = int(sys.argv[1])
dist.init_process_group("gloo", init_method=sys.argv[2], rank=rank, world_size=2)
torch.set_num_threads(1)
for model_type in FAMILIES:
    for head in ("ForMaskedLM", "ForTokenClassification"):
        torch.manual_seed(0)
        model = model_class(model_type, head)(tiny_config(model_type)).train()
        model.activation_checkpointing_enable()
        ddp = DistributedDataParallel(model, find_unused_parameters=False)
        optimizer = torch.optim.SGD(ddp.parameters(), lr=1e-3)
        # Short inputs (every dense fallback), then short and long ones mixed; never a global token.
        for step, lengths in enumerate([(6, 5), (6, 40), (40, 13)]):
            ids = random_ids(2, max(lengths), seed=step + rank)
            mask = (torch.arange(ids.shape[1]) < torch.tensor(lengths)[:, None]).long()
            labels = ids if head == "ForMaskedLM" else ids % 2
            loss = ddp(ids, attention_mask=mask, labels=labels).loss
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
leave_process_group()
"""


def test_every_family_trains_under_ddp_with_activation_checkpointing_and_no_unused_parameters(tmp_path):
    """Two gloo processes, `find_unused_parameters=False`: every parameter must get a gradient in every step."""
    init = f"file://{tmp_path / 'rendezvous'}"
    root = Path(__file__).parent.parent
    env = {**os.environ, "PYTHONPATH": str(root), "OMP_NUM_THREADS": "1"}
    processes = [subprocess.Popen([sys.executable, "-c", DDP_SCRIPT, str(rank), init], cwd=root, env=env,
                                  stderr=subprocess.PIPE, text=True) for rank in range(2)]
    errors = [process.communicate(timeout=300)[1] for process in processes]
    assert all(process.returncode == 0 for process in processes), "\n".join(errors)[-4000:]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("model_type", ["hfe_bigbird", "hfe_longformer"])
def test_blocked_paths_rebuild_their_key_blocks_in_backward(model_type, dtype):
    """From `blocked_recompute_min_length` up, the key and value blocks gathered for each query block (and
    Longformer-style's global keys and values) are not kept from forward to backward (`rebuilt_in_backward`): less
    memory is left alive by the forward, the same gradients, under autocast too (rebuilt in the forward's dtype)."""
    ids = random_ids(2, 100)
    inputs = {"global_attention_mask": ids == ids[0, 0]} if model_type == "hfe_longformer" else {}
    kept_and_rebuilt = []
    for min_length in (8192, 0):
        model = build(model_type, "ForMaskedLM", blocked_recompute_min_length=min_length).train()
        assert {layer.attention.self.plan(100).path for layer in model.roberta.encoder.layer} == {"blocked"}
        with LiveTensorBytes() as memory, torch.autocast("cpu", dtype=dtype, enabled=dtype != torch.float32):
            loss = model(ids, labels=ids, **inputs).loss
            saved = memory.live
        loss.backward()
        kept_and_rebuilt.append((saved, {name: p.grad for name, p in model.named_parameters()}))
    (kept, kept_grads), (rebuilt, rebuilt_grads) = kept_and_rebuilt
    assert rebuilt < 0.9 * kept
    for name, grad in kept_grads.items():
        torch.testing.assert_close(rebuilt_grads[name], grad, atol=1e-5, rtol=1e-4)
