"""MLM text for pretraining, adaptation and distillation: a corpus (`tasks.task_data.load_corpus`) packed into
sequences and masked reproducibly (also across a resumed run).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import datasets
import torch
from transformers import DataCollatorForLanguageModeling, PreTrainedTokenizerBase, TrainerCallback

from ..tasks.task_data import tokenizer_map


def pack_with_held_out(corpus: datasets.Dataset, fraction: float, seed: int, tokenizer: PreTrainedTokenizerBase,
                       max_length: int, text_column: str) -> tuple[datasets.Dataset, datasets.Dataset]:
    """Packed (training, held-out) sequences of `corpus`: `fraction` of its documents held out (at least one, never
    all), twice as many while they make less than one sequence, so that a small corpus (`--max_documents`) still
    gets its MLM loss measured."""
    if len(corpus) < 2:
        raise ValueError("the corpus needs at least 2 documents: one to train on and one held out")
    count = max(1, round(len(corpus) * fraction))
    while True:
        parts = corpus.train_test_split(test_size=min(count, len(corpus) - 1), seed=seed, shuffle=True)
        held = pack(parts["test"], tokenizer, max_length, text_column, "the held-out text", allow_empty=True)
        if len(held) or count >= len(corpus) - 1:
            break
        count *= 2
    if len(held) == 0:
        raise ValueError(f"the held-out text is shorter than one sequence of {max_length} tokens; give more text or a "
                         "smaller --max_length")
    return pack(parts["train"], tokenizer, max_length, text_column, "the training text"), held


def pack(dataset: datasets.Dataset, tokenizer: PreTrainedTokenizerBase, max_length: int, text_column: str,
         what: str, allow_empty: bool = False) -> datasets.Dataset:
    """Tokenize documents (each `<s> ... </s>`), concatenate and cut into sequences of exactly `max_length` tokens.

    The remainder of each map batch (< `max_length` tokens) is dropped, as in transformers' `run_mlm.py`.
    """

    def group(batch: dict, tokenizer: PreTrainedTokenizerBase) -> dict:
        encoded = tokenizer(batch[text_column], return_special_tokens_mask=True, return_attention_mask=False)
        packed = {}
        for key, rows in encoded.items():
            flat = [token for row in rows for token in row]
            usable = len(flat) - len(flat) % max_length
            packed[key] = [flat[i : i + max_length] for i in range(0, usable, max_length)]
        return packed

    saved_max = tokenizer.model_max_length
    tokenizer.model_max_length = int(1e30)  # documents are longer than one sequence on purpose: no warning
    try:
        packed = tokenizer_map(dataset, group, tokenizer, batched=True, batch_size=2000,
                               remove_columns=dataset.column_names, desc=f"Packing {what} into {max_length}-token sequences")
    finally:
        tokenizer.model_max_length = saved_max
    if len(packed) == 0 and not allow_empty:
        raise ValueError(f"{what} is shorter than one sequence of {max_length} tokens; give more text or a smaller --max_length")
    return packed


def mask_once(packed: datasets.Dataset, collator: DataCollatorForLanguageModeling, seed: int) -> datasets.Dataset:
    """Held-out MLM examples with masks drawn once from `seed`, so that losses before and after training compare."""
    inputs = torch.tensor(packed["input_ids"])
    special = torch.tensor(packed["special_tokens_mask"], dtype=torch.bool)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        input_ids, labels = collator.torch_mask_tokens(inputs, special_tokens_mask=special)
    return datasets.Dataset.from_dict({"input_ids": input_ids.tolist(), "labels": labels.tolist()})


@dataclass
class MLMCollator(DataCollatorForLanguageModeling):
    """Masks training batches reproducibly; passes held-out batches that already carry `labels` (`mask_once`).

    The masks of a batch are drawn from a generator seeded by (`mask_seed`, epoch, the batch's
    `example_index` values), never from the global RNG: the Trainer collates batches ahead of the
    step that uses them, so masks drawn from the global RNG would differ between an uninterrupted run
    and one resumed from a checkpoint. The epoch is kept current by `MaskEpochCallback`.
    """

    mask_seed: int = 0
    epoch: int = 0

    def torch_call(self, examples: list) -> dict:
        if "labels" in examples[0]:
            return {key: torch.tensor([example[key] for example in examples]) for key in ("input_ids", "labels")}
        indices = sorted(int(example["example_index"]) for example in examples)
        examples = [{key: value for key, value in example.items() if key != "example_index"} for example in examples]
        digest = hashlib.sha256(repr((self.mask_seed, self.epoch, indices)).encode()).digest()
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(int.from_bytes(digest[:8], "little") & (2**63 - 1))
            return super().torch_call(examples)


class MaskEpochCallback(TrainerCallback):
    """Tells the `MLMCollator` which epoch it is collating (so that each epoch draws new masks)."""

    def __init__(self, collator: MLMCollator):
        self.collator = collator

    def on_epoch_begin(self, args, state, control, **kwargs):
        self.collator.epoch = int(state.epoch or 0)
