"""BlockBERT family: the permuted blocks against an explicit mask, the default permutations, the config."""

import pytest
import torch

from hf_efficient import HfeBlockBertConfig, HfeBlockBertModel
from hf_efficient.models.attention_blockbert import BlockBertAttention
from tests.families import TINY
from tests.pattern_reference import (
    assert_gradients_match_reference,
    assert_matches_reference,
    assert_padding_anywhere_is_ignored,
)


def mechanism(**overrides):
    torch.manual_seed(0)
    return HfeBlockBertModel(HfeBlockBertConfig(**{**TINY, **overrides})).encoder.layer[0].attention.self.eval()


def reference_pattern(permutations: list[list[int]], attention_mask: torch.Tensor, per_sequence=None) -> torch.Tensor:
    """bool [batch, heads, length, length]: the real tokens split into n even blocks, query block i -> key block pi_h(i).

    `per_sequence`, if given, is a list with the `permutations` of each sequence (then they may differ in n).
    """
    batch, length = attention_mask.shape
    allowed = torch.zeros(batch, len(permutations), length, length, dtype=torch.bool)
    for b in range(batch):
        if per_sequence is not None:
            permutations = per_sequence[b]
        n = len(permutations[0])
        real = attention_mask[b].nonzero().flatten()
        bounds = [-(-len(real) * i // n) for i in range(n + 1)]  # block i holds ranks [ceil(i l / n), ceil((i+1) l / n))
        blocks = [real[bounds[i]:bounds[i + 1]] for i in range(n)]
        for h, permutation in enumerate(permutations):
            for i, j in enumerate(permutation):
                allowed[b, h, blocks[i][:, None], blocks[j][None, :]] = True
    return allowed


@pytest.mark.parametrize(
    ("settings", "lengths", "padded_length"),
    [
        ({"num_blocks": 2}, [64, 64], 64),
        ({"num_blocks": 2}, [13, 13], 13),
        ({"num_blocks": 2}, [100, 37], 100),
        ({"num_blocks": 3, "block_permutations": [[0, 1, 2], [1, 2, 0], [2, 0, 1], [2, 1, 0]]}, [50, 23], 50),
        ({"num_blocks": 4}, [30, 3], 30),  # the short sequence has an empty block: zero context there
    ],
)
def test_blocks_match_the_reference_mask(settings, lengths, padded_length):
    attention = mechanism(**settings)
    torch.manual_seed(1)
    hidden = torch.randn(len(lengths), padded_length, TINY["hidden_size"])
    mask = torch.arange(padded_length)[None, :] < torch.tensor(lengths)[:, None]
    given_mask = None if min(lengths) == padded_length else mask
    assert_matches_reference(attention, hidden, given_mask, mask, reference_pattern(attention.permutations, mask))


@pytest.mark.parametrize("blocks", [{"num_blocks": 3}, {"max_block_length": 12}])
def test_blocks_are_made_of_real_tokens_wherever_the_padding_is(blocks):
    attention = mechanism(**blocks)
    torch.manual_seed(1)
    hidden = torch.randn(1, 40, TINY["hidden_size"])
    mask = torch.ones(1, 46, dtype=torch.bool)
    mask[0, [0, 5, 6, 20, 44, 45]] = False
    assert_padding_anywhere_is_ignored(attention, hidden, mask)


def test_blocked_gradients_match_the_reference():
    attention = mechanism(num_blocks=3)
    torch.manual_seed(1)
    hidden = torch.randn(2, 31, TINY["hidden_size"])
    mask = torch.ones(2, 31, dtype=torch.bool)
    mask[1, 20:] = False
    assert_gradients_match_reference(attention, hidden, mask, reference_pattern(attention.permutations, mask))


def default_permutations(blocks: int) -> list[list[int]]:
    return BlockBertAttention.head_block_permutations(HfeBlockBertConfig(**{**TINY, "num_blocks": blocks}))


@pytest.mark.parametrize("compiling", [False, True])
@pytest.mark.parametrize(
    ("lengths", "padded_length"),
    [([40, 40], 40), ([43, 43], 43), ([45, 23, 8, 1], 50), ([12, 9], 12), ([9, 9], 9)],
)
def test_max_block_length_gives_each_sequence_its_own_number_of_blocks(lengths, padded_length, compiling, monkeypatch):
    """n = ceil(l / max_block_length) per sequence (the default cyclic permutations of that n; 1 block: dense), also
    with the grid bounded from the length alone, as under torch.compile."""
    monkeypatch.setattr(torch.compiler, "is_compiling", lambda: compiling)
    attention = mechanism(max_block_length=10)
    torch.manual_seed(1)
    hidden = torch.randn(len(lengths), padded_length, TINY["hidden_size"])
    mask = torch.arange(padded_length)[None, :] < torch.tensor(lengths)[:, None]
    given_mask = None if min(lengths) == padded_length else mask
    per_sequence = [default_permutations(-(-length // 10)) for length in lengths]
    allowed = reference_pattern(per_sequence[0], mask, per_sequence)
    assert_matches_reference(attention, hidden, given_mask, mask, allowed)
    if given_mask is not None:
        assert_gradients_match_reference(attention, hidden, mask, allowed)


@pytest.mark.parametrize(
    ("heads", "blocks", "expected"),
    [
        (12, 2, [[0, 1]] * 10 + [[1, 0]] * 2),  # the paper's n=2 setting
        (12, 3, [[0, 1, 2]] * 8 + [[1, 2, 0]] * 2 + [[2, 0, 1]] * 2),  # the paper's n=3 setting
        (4, 2, [[0, 1]] * 3 + [[1, 0]]),
        (2, 4, [[0, 1, 2, 3], [1, 2, 3, 0]]),  # at least one identity head
    ],
)
def test_default_permutations_follow_the_paper(heads, blocks, expected):
    config = HfeBlockBertConfig(**{**TINY, "hidden_size": 8 * heads, "num_attention_heads": heads, "num_blocks": blocks})
    assert BlockBertAttention.head_block_permutations(config) == expected


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"num_blocks": 0}, "num_blocks"),
        ({"num_blocks": 500}, "num_blocks"),
        ({"max_block_length": 0}, "max_block_length"),
        ({"block_permutations": [[0, 1]] * 4}, "block_permutations"),  # permutations need a fixed num_blocks
        ({"num_blocks": 2, "block_permutations": [[0, 1]] * 3}, "block_permutations"),
        ({"num_blocks": 2, "block_permutations": [[0, 1], [1, 0], [0, 0], [0, 1]]}, "block_permutations"),
        ({"num_blocks": 3, "block_permutations": [[0, 1]] * 4}, "block_permutations"),
    ],
)
def test_invalid_settings_name_the_field(overrides, field):
    with pytest.raises(ValueError, match=field):
        HfeBlockBertConfig(**{**TINY, **overrides})


@pytest.mark.slow
def test_max_block_length_exports_with_a_dynamic_length():
    """Under torch.export the number of blocks is symbolic: the pattern path serves every length (11 tokens: one
    block, dense in eager mode; 100: 7 blocks) and matches eager mode."""
    from tests.test_ecosystem import assert_exports_with_a_dynamic_length, base_model

    assert_exports_with_a_dynamic_length(base_model("hfe_blockbert", num_blocks=None, max_block_length=16))
