"""Reformer-style family: LSH and local attention against explicit masks, hashing, and the family's defaults.

The shared behaviour (heads, save/load, padding, reversible gradients, memory options) is in
test_conformance.py; this file checks what only this family does.
"""

import pytest
import torch

from hf_efficient import HfeReformerConfig
from hf_efficient.models.attention import build_attention
from hf_efficient.models.attention_chunked_local import MASKED_SCORE, SELF_SCORE, WindowAttention
from hf_efficient.models.attention_lsh import bucket_factors
from tests.families import tiny_config
from tests.test_conformance import build, random_ids, train_step

CHUNK = 8


def mechanism(attention_type: str, seed: int = 0, **overrides):
    """The attention module of a tiny model's only layer of `attention_type`, in eval mode."""
    config = tiny_config("hfe_reformer", attention_type=attention_type, layer_attention_types=None,
                         num_hidden_layers=1, **overrides)
    torch.manual_seed(seed)
    return build_attention(config, 0).eval()


def reference(module, hidden: torch.Tensor, mask: torch.Tensor | None, dense: bool = False):
    """The pattern's definition: per hashing round an explicit L x L mask, masked dense softmax
    attention in fp32, rounds merged by softmax over their logsumexp. Returns context and weights."""
    query, key, value = (x.float() for x in module.project_qkv(hidden))
    batch, heads, length, _ = query.shape
    positions = torch.arange(length)
    real = mask if mask is not None else torch.ones(batch, length, dtype=torch.bool)
    if module.attention_type == "lsh":
        buckets = module.hash(key, mask)  # [batch, heads, rounds, L]; padding in the bucket after the last
        slot = (buckets * length + positions).argsort(-1).argsort(-1)  # rank by (bucket, position)
    else:
        slot = positions.expand(batch, heads, 1, length)
    chunk = slot // module.chunk_length
    distance = chunk[..., None, :] - chunk[..., :, None]  # key chunk - query chunk
    allowed = (distance >= -module.chunks_before) & (distance <= module.chunks_after)
    if dense:
        allowed = torch.ones_like(allowed)
    allowed = allowed & real[:, None, None, None, :]
    if module.config.is_decoder:
        allowed = allowed & (positions[None, :] <= positions[:, None])
    scores = torch.einsum("bhqd,bhkd->bhqk", query, key)[:, :, None] * module.scaling
    scores = scores.masked_fill(~allowed, MASKED_SCORE)
    if module.exclude_self:
        scores = scores.masked_fill(torch.eye(length, dtype=torch.bool) & real[:, None, None, None, :], SELF_SCORE)
    logsumexp = scores.logsumexp(-1, keepdim=True)
    probs = torch.exp(scores - logsumexp)
    round_weights = torch.softmax(logsumexp, dim=2)
    context = ((probs @ value[:, :, None]) * round_weights).sum(2)
    return context.transpose(1, 2).reshape(batch, length, -1), (probs * round_weights).sum(2)


def padded_batch(length: int, real_lengths: tuple[int, int], seed: int = 0):
    generator = torch.Generator().manual_seed(seed)
    hidden = torch.randn(2, length, 32, generator=generator)
    mask = torch.arange(length)[None, :] < torch.tensor(real_lengths)[:, None]
    return hidden, mask


def assert_matches_reference(module, hidden, mask, dense: bool = False):
    with torch.no_grad():
        context, weights = module(hidden, mask, output_attentions=True)
        expected_context, expected_weights = reference(module, hidden, mask, dense)
    real = mask if mask is not None else torch.ones(hidden.shape[:2], dtype=torch.bool)
    assert (context - expected_context)[real].abs().max() <= 1e-5
    assert (weights - expected_weights).transpose(1, 2)[real].abs().max() <= 1e-5


# Padded lengths (chunk multiples, as the backbone delivers them) with real lengths that are and are not.
LENGTHS = [(16, (16, 9)), (24, (24, 13)), (40, (37, 40)), (64, (64, 17))]


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize(("length", "real_lengths"), LENGTHS)
@pytest.mark.parametrize(("num_hashes", "chunks_before", "chunks_after"), [(1, 1, 0), (3, 1, 0), (2, 1, 1)])
def test_lsh_equals_its_explicit_mask(length, real_lengths, num_hashes, chunks_before, chunks_after, causal):
    module = mechanism("lsh", num_hashes=num_hashes, lsh_num_chunks_before=chunks_before,
                       lsh_num_chunks_after=chunks_after, is_decoder=causal)
    assert (module.plan(length).path == "dense") == (length <= CHUNK * (1 + min(chunks_before, chunks_after)))
    assert_matches_reference(module, *padded_batch(length, real_lengths))


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize(("length", "real_lengths"), LENGTHS)
@pytest.mark.parametrize(("chunks_before", "chunks_after"), [(1, 1), (1, 0), (2, 1)])
def test_local_equals_its_explicit_mask(length, real_lengths, chunks_before, chunks_after, causal):
    module = mechanism("chunked_local", local_num_chunks_before=chunks_before, local_num_chunks_after=chunks_after,
                       is_decoder=causal)
    assert (module.plan(length).path == "dense") == (length <= CHUNK * (1 + min(chunks_before, chunks_after)))
    assert_matches_reference(module, *padded_batch(length, real_lengths))


@pytest.mark.parametrize("attention_type", ["lsh", "chunked_local"])
@pytest.mark.parametrize("causal", [False, True])
def test_short_inputs_get_exact_dense_attention(attention_type, causal):
    """At most `full_attention_max_length` tokens: unpadded, exact (shared-QK without self for LSH) dense attention."""
    module = mechanism(attention_type, full_attention_max_length=40, is_decoder=causal)
    assert module.pad_multiple(40) == 1 and module.pad_multiple(41) == CHUNK
    for length, real_lengths in [(13, (13, 6)), (40, (40, 21))]:
        assert (module.plan(length).path == "dense")
        assert_matches_reference(module, *padded_batch(length, real_lengths), dense=True)
        assert_matches_reference(module, padded_batch(length, real_lengths)[0], None, dense=True)


@pytest.mark.parametrize("num_hashes", [1, 2])
def test_lsh_chunks_reaching_everything_equal_dense_shared_qk_attention(num_hashes):
    """The chunked LSH path, forced to run where its chunks see every chunk, computes the dense fallback."""
    module = mechanism("lsh", num_hashes=num_hashes, lsh_num_chunks_before=4, lsh_num_chunks_after=4)
    hidden, mask = padded_batch(40, (40, 29))
    assert (module.plan(40).path == "dense")
    with torch.no_grad():
        dense = module(hidden, mask)[0]
        module.covers = lambda length: False
        chunked = module(hidden, mask)[0]
    assert (chunked - dense)[mask].abs().max() <= 1e-5


def lsh_error(num_hashes: int, seed: int) -> float:
    """Mean distance of LSH attention from full shared-QK attention on inputs with peaked attention."""
    module = mechanism("lsh", seed=seed, num_hashes=num_hashes, hash_seed=seed, num_buckets=16)
    with torch.no_grad():
        module.query.weight.mul_(4)  # peaked attention, where hashing finds the important keys
        hidden = torch.randn(1, 256, 32, generator=torch.Generator().manual_seed(seed))
        approximate = module(hidden)[0]
        exact = reference(module, hidden, None, dense=True)[0]
    return (approximate - exact).norm().item() / exact.norm().item()


def test_more_hash_rounds_approach_full_attention():
    errors = [sum(lsh_error(num_hashes, seed) for seed in range(6)) / 6 for num_hashes in (1, 2, 4, 8)]
    assert all(later < earlier for earlier, later in zip(errors, errors[1:], strict=False)), errors
    assert errors[-1] < 0.6 * errors[0], errors


def test_hashing_is_seeded_in_eval_and_random_in_training():
    module = mechanism("lsh", num_buckets=8)
    vectors = torch.randn(2, 4, 64, 8, generator=torch.Generator().manual_seed(0))
    mask = torch.ones(2, 64, dtype=torch.bool)
    mask[1, 50:] = False
    buckets = module.hash(vectors, mask)
    assert buckets.shape == (2, 4, 2, 64) and torch.equal(buckets, module.hash(vectors, mask))
    assert (buckets[1, ..., 50:] == 8).all() and buckets[1, ..., :50].max() < 8 and len(buckets.unique()) == 9
    other_layer = mechanism("lsh", num_buckets=8, hash_seed=1)
    assert not torch.equal(buckets, other_layer.hash(vectors, mask))
    module.train()
    assert not torch.equal(module.hash(vectors, mask), module.hash(vectors, mask))


def test_reversible_backward_replays_the_forward_hashes():
    """In training, buckets are fresh random draws; the memory-saving backward must recompute the same ones."""
    model = build("hfe_reformer", "ForMaskedLM", attention_probs_dropout_prob=0.1, hidden_dropout_prob=0.1).train()
    lsh = model.roberta.encoder.layer[1].attention.self
    assert lsh.attention_type == "lsh" and model.config.reversible
    recorded = []
    original_hash = lsh.hash
    lsh.hash = lambda vectors, mask, *rest: recorded.append(original_hash(vectors, mask, *rest)) or recorded[-1]
    ids = random_ids(2, 100)
    train_step(model, ids)
    assert len(recorded) == 2  # forward, then the backward's recomputation
    assert torch.equal(recorded[0], recorded[1])
    train_step(model, ids, seed=1)
    assert not torch.equal(recorded[0], recorded[2])


def window_attention_by_autograd(query, keys, values, blocked, own_key, padded, dropout, with_logsumexp, exporting):
    """WindowAttention's definition, differentiated by autograd through its pieces."""
    scores = query @ keys.mT
    if own_key is not None:
        own = torch.zeros(scores.shape[-2:], dtype=torch.bool)
        own[:, own_key:own_key + scores.shape[-2]] = torch.eye(scores.shape[-2], dtype=torch.bool)
        scores = scores.masked_fill(own, SELF_SCORE)
    scores = scores.masked_fill(blocked, MASKED_SCORE)
    probs = torch.softmax(scores, dim=-1)
    dropped = torch.native_dropout(probs, dropout, True)[0] if dropout else probs
    return dropped @ values, scores.logsumexp(-1), probs


@pytest.mark.parametrize("dropout", [0.0, 0.3])
@pytest.mark.parametrize("exclude_self", [False, True])
@pytest.mark.parametrize("padded", [False, True])
def test_window_attention_gradients_equal_autograd_through_its_pieces(padded, exclude_self, dropout):
    """The fused backward (logsumexp and direct probability gradients folded in) against autograd, fp64."""
    generator = torch.Generator().manual_seed(0)
    chunks, chunk, window, dim = 3, 4, 8, 5
    inputs = [torch.randn(2, chunks, rows, dim, generator=generator, dtype=torch.float64, requires_grad=True)
              for rows in (chunk, window, window)]
    blocked = torch.zeros(2, chunks, 1, window, dtype=torch.bool)
    blocked[:, 0, :, :chunk] = True  # the first chunk has no previous one
    if padded:  # the second sequence's last chunk and a half are padding: its rows have no key at all
        blocked = blocked.expand(2, chunks, chunk, window).clone()
        blocked[1, 2] = True
        blocked[1, 1, 2:] = True
        blocked[0, 1, 0] = torch.arange(window) != chunk  # a row whose only key is its own
    own_key = chunk if exclude_self else None
    grads_out = [torch.randn(2, chunks, chunk, n, generator=generator, dtype=torch.float64) for n in (dim, window)]
    d_logsumexp = torch.randn(2, chunks, chunk, generator=generator, dtype=torch.float64)
    results = []
    for function in (WindowAttention.apply, window_attention_by_autograd):
        torch.manual_seed(1)
        context, logsumexp, probs = function(*inputs, blocked, own_key, padded, dropout, True, False)
        loss = (context * grads_out[0]).sum() + (logsumexp * d_logsumexp).sum() + (probs * grads_out[1]).sum()
        results.append((context, logsumexp, probs, *torch.autograd.grad(loss, inputs)))
    for ours, expected in zip(*results, strict=True):
        torch.testing.assert_close(ours, expected, atol=1e-10, rtol=1e-10)


def test_derived_bucket_count_follows_the_length():
    assert bucket_factors(None, 16, 8) == [4]
    assert bucket_factors(None, 8192, 64) == [256 // 16, 16]
    assert bucket_factors(None, 65536, 64) == [32, 64]
    assert bucket_factors([4, 8], 65536, 64) == [4, 8]
    module = mechanism("lsh", num_buckets=[4, 6])
    buckets = module.hash(torch.randn(1, 4, 64, 8, generator=torch.Generator().manual_seed(0)), None)
    assert buckets.max() < 24 and len(buckets.unique()) > 12


def test_family_defaults_and_shared_qk_weights():
    config = HfeReformerConfig()
    assert config.reversible and config.mlm_loss_chunk_size > 0 and config.attention_type == "lsh"
    lsh = mechanism("lsh")
    assert not hasattr(lsh, "key") and "key.weight" not in lsh.state_dict()


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"num_buckets": 5}, "num_buckets"),
        ({"num_buckets": [4, 3]}, "num_buckets"),
        ({"num_buckets": []}, "num_buckets"),
        ({"num_hashes": 0}, "num_hashes"),
        ({"lsh_chunk_length": 0}, "lsh_chunk_length"),
        ({"local_chunk_length": -1}, "local_chunk_length"),
        ({"lsh_num_chunks_before": -1}, "lsh_num_chunks_before"),
        ({"local_num_chunks_after": -2}, "local_num_chunks_after"),
        ({"full_attention_max_length": -1}, "full_attention_max_length"),
    ],
)
def test_invalid_reformer_configs_name_the_field(overrides, field):
    with pytest.raises(ValueError, match=field):
        tiny_config("hfe_reformer", **overrides)
