"""torch.compile for every family: same results as eager, no graph breaks, a bounded number of recompilations.

Inductor on CPU compiles each graph with a C++ compiler (20 s to 2 min per family on a shared core), so the
full per-family matrix is slow; the default suite keeps one cheap check (dynamo capture + AOT autograd,
without code generation) on the dense family.
"""

import pytest
import torch
import torch._dynamo
from torch._dynamo.utils import counters

from tests.test_conformance import FAMILIES, attention_inputs, build, random_ids

LENGTHS = (13, 64, 100, 77)  # short (dense path where a family has one), block multiples and not
# Compilations allowed per compiled frame over the 4 LENGTHS with `dynamic=True`: fewer than the lengths, so
# at least one length reuses a graph (a family compiles one graph per attention path its plan picks, e.g.
# BigBird: whole-input dense at 13 tokens, blocked at 64/100). Checked with dynamo's recompile limit (an error
# when it is exceeded). With a padding mask even the dense family compiles more than once (measured: a limit
# of 1 is hit).
MAX_COMPILES = {name: len(LENGTHS) - 1 for name in FAMILIES}
# Inductor failures measured with torch 2.13 on CPU (2 cores, gcc), strict xfails until torch or the kernels change.
INDUCTOR_CPP_VECMASK = (
    "inductor's C++ code for the sliding-window kernel does not compile: \"operands to '?:' have different types "
    "'VecMask<int, 1>' and 'VecMask<float, 1>'\" (torch 2.13 CPU codegen bug, AVX512); eager and aot_eager work")
DYNAMO_ITEM_NODE = (
    "training-mode compile fails in dynamo: \"Argument 'item' of Node 'scaled_dot_product_attention' / 'attn_output' "
    "does not belong to this Graph\": a .item() size (attention_sliding.py:134 global-token count; BigBird's "
    "blocked plan) crosses a graph break into the attention call; fix with the graph-break fixes in GRAPH_BREAKS or "
    "capture_scalar_outputs=True")
FORWARD_FAILURES = {"hfe_longformer": INDUCTOR_CPP_VECMASK}
TRAINING_FAILURES = {"hfe_longformer": DYNAMO_ITEM_NODE, "hfe_bigbird": DYNAMO_ITEM_NODE}


def with_failures(failures: dict) -> list:
    return [pytest.param(name, marks=[pytest.mark.xfail(strict=True, reason=failures[name])]) if name in failures
            else name for name in FAMILIES]


def inputs_at(model, length: int) -> tuple[torch.Tensor, dict]:
    ids = random_ids(2, length)
    mask = torch.ones_like(ids)
    mask[1, length // 2:] = 0
    return ids, {"attention_mask": mask, **attention_inputs(model, 2, length)}


def loss_and_grads(model, ids, inputs, run=None) -> tuple[torch.Tensor, dict]:
    """One training step of `run` (the compiled wrapper, or `model` itself); `model`'s gradients."""
    model.zero_grad(set_to_none=True)
    torch.manual_seed(0)
    loss = (model if run is None else run)(ids, labels=ids, **inputs).loss
    loss.backward()
    return loss.detach(), {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}


def compile_afresh(model, **options):
    """`torch.compile` with dynamo's caches and counters emptied, so `counters` count this model alone."""
    torch._dynamo.reset()
    counters.clear()
    return torch.compile(model, dynamic=True, **options)


def assert_same_training_step(model, compiled, length: int, atol: float = 1e-5) -> None:
    ids, inputs = inputs_at(model, length)
    expected_loss, expected = loss_and_grads(model, ids, inputs)
    loss, grads = loss_and_grads(model, ids, inputs, compiled)
    torch.testing.assert_close(loss, expected_loss, atol=atol, rtol=0)
    assert grads.keys() == expected.keys()
    for name in expected:
        torch.testing.assert_close(grads[name], expected[name], atol=atol, rtol=10 * atol)


def test_dense_family_trains_compiled_in_one_graph_across_lengths():
    """Default suite: full-graph capture (no break), forward+backward equal to eager, one graph for every length."""
    model = build("hfe_roberta").train()
    compiled = compile_afresh(model, backend="aot_eager", fullgraph=True)
    for length in LENGTHS[:3]:
        assert_same_training_step(model, compiled, length)
    assert counters["stats"]["unique_graphs"] == 1


@pytest.mark.slow
@pytest.mark.parametrize("model_type", with_failures(FORWARD_FAILURES))
def test_inductor_forward_matches_eager_with_bounded_recompilation(model_type):
    model = build(model_type).eval()
    compiled = compile_afresh(model)
    limits = {"recompile_limit": MAX_COMPILES[model_type], "fail_on_recompile_limit_hit": True}
    with torch.no_grad(), torch._dynamo.config.patch(**limits):
        for length in LENGTHS:
            ids, inputs = inputs_at(model, length)
            torch.testing.assert_close(compiled(ids, **inputs).logits, model(ids, **inputs).logits, atol=1e-5, rtol=1e-4)


@pytest.mark.slow
@pytest.mark.parametrize("model_type", with_failures(TRAINING_FAILURES))
def test_inductor_forward_backward_matches_eager(model_type):
    """Eager's random numbers (LSH rotations in training); fused kernels reorder sums, hence 2e-4 (Reformer measured
    1.1e-5 on the loss, 1.1e-4 on one gradient element)."""
    import torch._inductor.config

    model = build(model_type).train()
    with torch._inductor.config.patch(fallback_random=True):
        assert_same_training_step(model, compile_afresh(model), 64, atol=2e-4)


# Measured with torch 2.13, training mode, 64 tokens, padding mask, MLM labels (torch._dynamo.explain). Fixed: Linformer's
# short-sequence fallback selects with torch.where under compile; the Reformer family's reversible stack is
# activation-checkpointed per layer under compile (no RNG recording), and its chunked MLM loss weights rows by the
# label mask (ignore_index) instead of selecting them.
GRAPH_BREAKS = {
    "hfe_longformer": (
        "8 breaks, 9 graphs: the global-token count is read with .item() (models/attention_sliding.py:134, "
        "'Unsupported Tensor.item() call with capture_scalar_outputs=False'). Fix: set "
        "torch._dynamo.config.capture_scalar_outputs=True when compiling (the code already torch._check()s the bound "
        "for export), or pad global tokens to a static bound"),
}


@pytest.mark.slow
@pytest.mark.parametrize("model_type", with_failures(GRAPH_BREAKS))
def test_training_forward_has_no_graph_breaks(model_type):
    """`torch._dynamo.explain` of the training-mode forward (with grad: the reversible stack's path)."""
    model = build(model_type).train()
    ids, inputs = inputs_at(model, 64)
    torch._dynamo.reset()
    explanation = torch._dynamo.explain(model)(ids, labels=ids, **inputs)
    assert explanation.graph_break_count == 0, [str(reason.reason)[:200] for reason in explanation.break_reasons]
