"""BigBird-style family: the block pattern against an explicit mask, the random plan, the dense paths, the config."""

import pytest
import torch

from hf_efficient import HfeBigBirdConfig, HfeBigBirdModel
from tests.families import TINY
from tests.pattern_reference import (
    assert_gradients_match_reference,
    assert_matches_reference,
    assert_padding_anywhere_is_ignored,
)

BLOCK, RANDOM = 4, 1


def mechanism(layer: int = 0, **overrides):
    torch.manual_seed(0)
    config = HfeBigBirdConfig(**{**TINY, "block_size": BLOCK, "num_random_blocks": RANDOM, **overrides})
    return HfeBigBirdModel(config).encoder.layer[layer].attention.self.eval()


def reference_pattern(attention, attention_mask: torch.Tensor) -> torch.Tensor:
    """bool [batch, heads, length, length] built from the documented semantics, one block pair at a time."""
    batch, length = attention_mask.shape
    size = attention.block_size
    allowed = torch.zeros(batch, attention.num_heads, length, length, dtype=torch.bool)
    for b in range(batch):
        real = attention_mask[b].nonzero().flatten()
        blocks = -(-len(real) // size)
        last = blocks - 1
        random, drawn = attention.random_blocks(length, torch.tensor([last]))
        for h in range(attention.num_heads):
            for i in range(blocks):
                if i in (0, last):
                    keys = set(range(blocks))
                else:
                    keys = {i - 1, i, i + 1, 0, last} | {int(j) for j, ok in zip(random[0, h, i], drawn[0, h, i], strict=True) if ok}
                for j in keys:
                    queries, targets = real[i * size:(i + 1) * size], real[j * size:(j + 1) * size]
                    allowed[b, h, queries[:, None], targets[None, :]] = True
    return allowed


def padded_batch(lengths: list[int], padded_length: int) -> tuple[torch.Tensor, torch.Tensor]:
    torch.manual_seed(1)
    hidden = torch.randn(len(lengths), padded_length, TINY["hidden_size"])
    mask = torch.arange(padded_length)[None, :] < torch.tensor(lengths)[:, None]
    return hidden, mask


@pytest.mark.parametrize(
    ("lengths", "padded_length"),
    [([64, 64], 64), ([100, 61], 100), ([53, 31], 56), ([40, 22], 40), ([30, 17], 30)],
)
def test_every_path_matches_the_reference_mask(lengths, padded_length):
    """Blocked (> 48 tokens), pattern-masked dense (25..48) and plain dense (<= 20) paths, block multiples or not."""
    attention = mechanism()
    attention.chunk_tokens = 16
    hidden, mask = padded_batch(lengths, padded_length)
    assert_matches_reference(attention, hidden, mask, mask, reference_pattern(attention, mask))


def test_padding_anywhere_counts_only_real_tokens():
    """Blocks are made of real tokens in order, so left padding or holes give the same outputs as none."""
    attention = mechanism()
    hidden, _ = padded_batch([60], 60)
    mask = torch.ones(1, 64, dtype=torch.bool)
    mask[0, [0, 1, 30, 63]] = False
    assert_padding_anywhere_is_ignored(attention, hidden, mask)


@pytest.mark.parametrize("recompute_min_length", [0, 8192])
def test_blocked_gradients_match_the_reference(recompute_min_length):
    """With the chunks recomputed in backward (from `blocked_recompute_min_length` up) or kept."""
    attention = mechanism(blocked_recompute_min_length=recompute_min_length)
    attention.chunk_tokens = 24  # several chunks of query blocks
    hidden, mask = padded_batch([64, 57], 64)
    assert_gradients_match_reference(attention, hidden, mask, reference_pattern(attention, mask))


def test_random_plan_is_seeded_fixed_and_drawn_from_the_free_blocks():
    attention = mechanism(num_random_blocks=3)
    last = torch.tensor([20, 7])
    random, drawn = attention.random_blocks(24, last)
    again, _ = attention.random_blocks(32, last)  # more padding blocks: same plan
    assert torch.equal(random, again[:, :, :24])
    for b, m in enumerate(last.tolist()):
        for h in range(attention.num_heads):
            for i in range(1, m):
                free = {j for j in range(1, m) if abs(i - j) > 1}
                chosen = [int(j) for j, ok in zip(random[b, h, i], drawn[b, h, i], strict=True) if ok]
                assert len(set(chosen)) == len(chosen) == min(3, len(free)) and set(chosen) <= free
    assert not torch.equal(random[0], random[0, [1, 0, 2, 3]])  # heads differ
    assert not torch.equal(random, mechanism(num_random_blocks=3, layer=1).random_blocks(24, last)[0])
    assert not torch.equal(random, mechanism(num_random_blocks=3, random_blocks_seed=5).random_blocks(24, last)[0])
    assert torch.equal(random, mechanism(num_random_blocks=3).random_blocks(24, last)[0])


def test_path_is_chosen_per_call_and_never_changes_the_module():
    model = HfeBigBirdModel(HfeBigBirdConfig(**{**TINY, "block_size": BLOCK, "num_random_blocks": RANDOM})).eval()
    attention = model.encoder.layer[0].attention.self
    assert [attention.pad_multiple(n) for n in (13, 20, 48, 49, 100)] == [1, 1, 1, BLOCK, BLOCK]
    ids = torch.randint(3, TINY["vocab_size"], (1, 90))
    with torch.no_grad():
        before = model(ids).last_hidden_state
        model(ids[:, :10])
        model(ids[:, :30], output_attentions=True)
        after = model(ids).last_hidden_state
    assert torch.equal(before, after)


@pytest.mark.parametrize(("overrides", "field"), [
    ({"block_size": 0}, "block_size"), ({"num_random_blocks": -1}, "num_random_blocks"),
    ({"blocked_recompute_min_length": -1}, "blocked_recompute_min_length"),
])
def test_invalid_settings_name_the_field(overrides, field):
    with pytest.raises(ValueError, match=field):
        HfeBigBirdConfig(**{**TINY, **overrides})
