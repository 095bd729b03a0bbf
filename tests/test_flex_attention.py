"""The fused FlexAttention path of every block-sparse family against the families' reference patterns, its block
masks shared between layers, and how `attn_implementation` selects it (models/attention_flex.py).

On CPU the fused kernel runs forward only, compiled (transformers' flex_attention integration), so these are
inference checks; gradients are checked on a GPU (`bash scripts/gpu_check.sh kernels`). Lengths over 128 tokens
span several of the block mask's 128-token tiles, where skipped, partial and full tiles are told apart."""

import pytest
import torch
from transformers import AutoModel

from hf_efficient.models import attention_flex, attention_sliding
from hf_efficient.models.attention_flex import uses_fused_path
from tests.families import TINY, tiny_config
from tests.pattern_reference import assert_matches_reference, assert_padding_anywhere_is_ignored
from tests.test_bigbird import mechanism as bigbird_mechanism
from tests.test_bigbird import padded_batch
from tests.test_bigbird import reference_pattern as bigbird_reference
from tests.test_blockbert import mechanism as blockbert_mechanism
from tests.test_blockbert import reference_pattern as blockbert_reference
from tests.test_longformer import config as longformer_config
from tests.test_longformer import inputs, reference, run_padded

pytestmark = pytest.mark.skipif(not attention_flex.flex_available(), reason="this torch has no FlexAttention")


def forced(attention):
    """`attention` (a mechanism) with the fused path forced, as `attn_implementation="flex_attention"` does."""
    attention.config._attn_implementation = "flex_attention"
    return attention


@pytest.mark.parametrize(("window", "dilations", "length"), [
    (8, [1, 1, 1, 1], 300),
    (8, [1, 2, 1, 3], 300),
    (300, [1, 1, 1, 1], 700),  # tiles wholly inside the window: full tiles
    (8, [1, 1, 1, 1], 100),  # one tile
])
@pytest.mark.parametrize("globals_at", [(), (0, 5, 90)])
def test_longformer_fused_matches_the_reference(window, dilations, length, globals_at):
    """Window, per-head dilation, global tokens (both directions: their rows keep their own dense pass), padding."""
    torch.manual_seed(0)
    attention = forced(attention_sliding.SlidingAttention(
        longformer_config(attention_window=window, attention_dilation=dilations, max_position_embeddings=length + 2), 0
    ).eval())
    hidden, valid, is_global = inputs(length, globals_at)
    expected, _ = reference(attention, hidden, valid, is_global)
    with torch.no_grad():
        assert attention.plan(length).path == "fused"
        context, _ = run_padded(attention, hidden, valid, is_global if globals_at else None)
    assert (context - expected).mul(valid[..., None]).abs().max() <= 1e-5


@pytest.mark.parametrize(("lengths", "padded_length"), [([300, 300], 300), ([300, 161], 300), ([130, 53], 130)])
def test_bigbird_fused_matches_the_reference(lengths, padded_length):
    """Window, global and random blocks (this layer's seed) and padding, as the blocked kernel computes them."""
    attention = forced(bigbird_mechanism(layer=1))
    hidden, mask = padded_batch(lengths, padded_length)
    with torch.no_grad():
        assert attention.plan(padded_length).path == "fused"
    given_mask = None if min(lengths) == padded_length else mask
    assert_matches_reference(attention, hidden, given_mask, mask, bigbird_reference(attention, mask))


@pytest.mark.parametrize(("settings", "lengths", "padded_length"), [
    ({"num_blocks": 2}, [300, 300], 300),
    ({"num_blocks": 3, "block_permutations": [[0, 1, 2], [1, 2, 0], [2, 0, 1], [2, 1, 0]]}, [300, 131], 300),
    ({"num_blocks": 4}, [200, 3], 200),  # the short sequence has empty blocks: zero context there
])
def test_blockbert_fused_matches_the_reference(settings, lengths, padded_length):
    """Each head's permuted blocks of each sequence's real tokens, padding."""
    attention = forced(blockbert_mechanism(**settings))
    torch.manual_seed(1)
    hidden = torch.randn(len(lengths), padded_length, TINY["hidden_size"])
    mask = torch.arange(padded_length)[None, :] < torch.tensor(lengths)[:, None]
    with torch.no_grad():
        assert attention.plan(padded_length).path == "fused"
    given_mask = None if min(lengths) == padded_length else mask
    assert_matches_reference(attention, hidden, given_mask, mask, blockbert_reference(attention.permutations, mask))


def test_blockbert_fused_blocks_of_at_most_max_block_length_per_sequence():
    """`max_block_length`: each sequence its own number of blocks, with the default cyclic permutations."""
    attention = forced(blockbert_mechanism(max_block_length=64))
    torch.manual_seed(1)
    hidden = torch.randn(2, 300, TINY["hidden_size"])
    mask = torch.arange(300)[None, :] < torch.tensor([300, 100])[:, None]
    n = attention.blocks_of(mask.sum(1))
    per_sequence = [attention.key_blocks(n[b:b + 1], torch.arange(int(n[b])).view(1, 1, -1))[0].tolist() for b in range(2)]
    assert_matches_reference(attention, hidden, mask, mask, blockbert_reference(per_sequence[0], mask, per_sequence))


@pytest.mark.parametrize("family", ["hfe_bigbird", "hfe_blockbert"])
def test_fused_padding_anywhere_counts_only_real_tokens(family):
    """Blocks are made of each sequence's real tokens wherever the padding is, on the fused path too."""
    attention = forced(bigbird_mechanism() if family == "hfe_bigbird" else blockbert_mechanism(num_blocks=3))
    hidden = torch.randn(1, 200, TINY["hidden_size"])
    mask = torch.ones(1, 260, dtype=torch.bool)
    mask[0, [0, 1, 30, 63]] = False
    mask[0, 204:] = False  # 200 real tokens, with holes and padding on both sides of a tile boundary
    assert_padding_anywhere_is_ignored(attention, hidden, mask)


@pytest.mark.parametrize("model_type", ["hfe_longformer", "hfe_bigbird", "hfe_blockbert", "hfe_roberta"])
def test_attn_implementation_flex_attention_gives_the_default_paths_outputs(model_type, tmp_path):
    """`from_pretrained(..., attn_implementation="flex_attention")`: every sparse layer takes the fused path (dense
    layers flex with a padding block mask), and the hidden states equal the default path's on a padded batch."""
    torch.manual_seed(0)
    AutoModel.from_config(tiny_config(model_type)).save_pretrained(tmp_path)
    default = AutoModel.from_pretrained(tmp_path).eval()
    fused = AutoModel.from_pretrained(tmp_path, attn_implementation="flex_attention").eval()
    assert fused.config._attn_implementation == "flex_attention"
    ids = torch.randint(5, 99, (3, 100))
    mask = torch.ones(3, 100, dtype=torch.long)
    mask[1, 70:] = 0
    mask[2, :7] = 0
    extra = {}
    if model_type == "hfe_longformer":
        extra["global_attention_mask"] = torch.zeros_like(mask)
        extra["global_attention_mask"][0, [0, 5]] = 1
    with torch.no_grad():
        paths = {layer.attention.self.plan(100).path for layer in fused.encoder.layer}
        assert paths == ({"dense"} if model_type == "hfe_roberta" else {"fused"})
        expected = default(ids, attention_mask=mask, **extra).last_hidden_state
        got = fused(ids, attention_mask=mask, **extra).last_hidden_state
    assert (got - expected).mul(mask[..., None]).abs().max() <= 1e-5


def test_layers_with_one_pattern_share_one_block_mask_per_forward(monkeypatch):
    """Two layers with the same window build one block mask per forward; another forward (new masks) builds anew;
    layers with different windows build one each."""
    builds = []
    build = attention_sliding.block_mask_from_tiles
    monkeypatch.setattr(attention_sliding, "block_mask_from_tiles", lambda *args: builds.append(1) or build(*args))
    ids = torch.randint(5, 99, (2, 100))
    mask = torch.ones(2, 100, dtype=torch.long)
    mask[1, 60:] = 0
    for windows, per_forward in (([8, 8], 1), ([8, 6], 2)):
        model = AutoModel.from_config(tiny_config("hfe_longformer", attention_window=windows),
                                      attn_implementation="flex_attention").eval()
        for forward in (1, 2):
            with torch.no_grad():
                model(ids, attention_mask=mask)
            assert len(builds) == forward * per_forward
        builds.clear()


def test_the_default_takes_the_fused_path_where_it_is_the_fastest_exact_one():
    """By device and attention dropout (a function of them, so the CUDA choices are checked on CPU)."""
    assert uses_fused_path("sdpa", "cuda", dropout=0.0)
    assert uses_fused_path(None, "cuda", dropout=0.0)
    assert not uses_fused_path("sdpa", "cuda", dropout=0.1)  # the kernel has no dropout: the blocked kernels
    assert not uses_fused_path("sdpa", "cpu", dropout=0.0)  # measured slower than the blocked kernels; no backward
    assert not uses_fused_path("eager", "cuda", dropout=0.0)
    assert uses_fused_path("flex_attention", "cpu", dropout=0.1)  # forced: the kernel says why it cannot run


def test_default_cpu_paths_are_unchanged():
    """On CPU the default keeps the blocked kernels, training and inference (compiled flex measured slower)."""
    attention = bigbird_mechanism()
    for gradients in (True, False):
        with torch.set_grad_enabled(gradients):
            assert attention.plan(300).path == "blocked"


@pytest.mark.parametrize(("mode", "message"), [
    ("gradients", "computes no gradients"),
    ("dropout", "has no attention dropout"),
])
def test_forced_flex_that_cannot_run_is_one_clear_error(mode, message):
    model = AutoModel.from_config(tiny_config("hfe_longformer", attention_probs_dropout_prob=0.1),
                                  attn_implementation="flex_attention")
    ids = torch.randint(5, 99, (1, 100))
    with pytest.raises(ValueError, match=message), torch.set_grad_enabled(mode == "gradients"):
        model.train(mode == "dropout")(ids)


def test_without_flex_attention_the_fused_path_is_never_taken(monkeypatch):
    """torch without FlexAttention (before 2.5; the import is guarded): the default never takes the fused path, and
    forcing it says what is missing."""
    monkeypatch.setattr(attention_flex, "flex_attention", None)
    model = AutoModel.from_config(tiny_config("hfe_bigbird")).eval()
    ids = torch.randint(5, 99, (1, 100))
    with torch.no_grad():
        assert not uses_fused_path("sdpa", "cuda", dropout=0.0)
        model(ids)
        model.config._attn_implementation = "flex_attention"
        with pytest.raises(ValueError, match="needs torch >= 2.5"):
            model(ids)


def test_the_block_mask_cache_matches_the_very_mask_tensors():
    """A hit needs the same tensors, unchanged: not an equal new one, not one changed in place, not None for a dead one."""
    built = []

    def build():
        built.append(1)
        return len(built)

    mask = torch.ones(1, 8, dtype=torch.bool)
    assert attention_flex.shared_block_mask("p", (mask,), build) == attention_flex.shared_block_mask("p", (mask,), build) == 1
    assert attention_flex.shared_block_mask("p", (mask.clone(),), build) == 2
    mask = torch.ones(1, 8, dtype=torch.bool)
    attention_flex.shared_block_mask("p", (mask,), build)
    mask[0, 0] = False
    assert attention_flex.shared_block_mask("p", (mask,), build) == 4
    del mask
    assert attention_flex.shared_block_mask("p", (None,), build) == 5
    assert attention_flex.shared_block_mask("p", (None,), build) == 5


def test_a_compiled_model_takes_the_fused_path_too():
    """torch.compile of a model forced to flex (CPU: the kernel is called from the graph, compiled on its own)."""
    torch.manual_seed(0)
    model = AutoModel.from_config(tiny_config("hfe_blockbert"), attn_implementation="flex_attention").eval()
    ids = torch.randint(5, 99, (2, 100))
    mask = torch.ones(2, 100, dtype=torch.long)
    mask[1, 60:] = 0
    with torch.no_grad():
        expected = model(ids, attention_mask=mask).last_hidden_state
        got = torch.compile(model)(ids, attention_mask=mask).last_hidden_state
    assert (got - expected).mul(mask[..., None]).abs().max() <= 1e-5


def test_tiles_are_counted_exactly_under_autocast():
    """The tile counts are matrix products: under bf16 autocast (or TF32) they must stay exact, or a tile with one
    forbidden pair would be taken as full, its mask never evaluated."""
    classes = torch.arange(1024)[None] % 128  # every tile holds each class once
    table = torch.ones(1, 2, 128, 128, dtype=torch.bool)
    table[0, 1, 5, 7] = False  # one forbidden pair in each tile of head 1: 16,383 allowed of 16,384
    exact = attention_flex.class_table_block_mask(classes, classes, table, 1)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        under_autocast = attention_flex.class_table_block_mask(classes, classes, table, 1)
    for name in ("kv_num_blocks", "kv_indices", "full_kv_num_blocks", "full_kv_indices"):
        assert torch.equal(getattr(exact, name), getattr(under_autocast, name)), name
    expected = table[0][:, classes[0][:, None], classes[0][None, :]]  # [heads, queries, keys]
    tiles = expected.view(2, 8, 128, 8, 128)
    assert torch.equal(exact.full_kv_num_blocks[0], tiles.all(4).all(2).sum(-1, dtype=torch.int32))
    assert torch.equal(exact.kv_num_blocks[0] + exact.full_kv_num_blocks[0], tiles.any(4).any(2).sum(-1, dtype=torch.int32))
