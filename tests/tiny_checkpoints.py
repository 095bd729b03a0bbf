"""Tiny RoBERTa/BERT source checkpoints and a tiny byte-level BPE tokenizer, built offline, for the
conversion, hub and ecosystem tests. Family settings come from `tests.families`."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import transformers
from tokenizers import ByteLevelBPETokenizer
from tokenizers.processors import RobertaProcessing

import hf_efficient
from tests.families import FAMILY_CASES, TINY

FAMILIES = sorted(hf_efficient.FAMILIES)
HEAD_NAMES = tuple(hf_efficient.HEADS)
SOURCE_SIZE = {key: TINY[key] for key in ("hidden_size", "num_hidden_layers", "num_attention_heads",
                                          "intermediate_size", "hidden_dropout_prob", "attention_probs_dropout_prob")}
TEXT = (
    "The kernel schedules tasks on every processor. Memory pages are mapped into the address space of a process, "
    "and the scheduler decides which task runs next. A long document has many sentences, and an encoder reads "
    "all of them at once when its attention is efficient enough. "
)


def family_options(model_type: str, pattern: str, num_layers: int = TINY["num_hidden_layers"],
                   num_heads: int = TINY["num_attention_heads"]) -> dict:
    """The family's `sparse` or `full_coverage` settings from tests/families.py, without the size fields;
    per-layer and per-head lists repeated to `num_layers` layers / `num_heads` heads."""
    case = FAMILY_CASES.get(model_type)
    settings = {} if case is None else (case.sparse if pattern == "sparse" else case.full_coverage)
    options = {key: value for key, value in settings.items() if key not in TINY}
    for key, value in options.items():
        for tiny, count in ((TINY["num_hidden_layers"], num_layers), (TINY["num_attention_heads"], num_heads)):
            if isinstance(value, list) and len(value) == tiny:  # one entry per layer / per head
                options[key] = (value * count)[:count]
    return options


def roberta_source(head: str = "ForMaskedLM", vocab_size: int = TINY["vocab_size"], max_tokens: int = 128,
                   num_labels: int = 3, seed: int = 0) -> transformers.PreTrainedModel:
    torch.manual_seed(seed)
    num_labels = 2 if head == "ForQuestionAnswering" else num_labels
    config = transformers.RobertaConfig(
        vocab_size=vocab_size, max_position_embeddings=max_tokens + 2, num_labels=num_labels, **SOURCE_SIZE
    )
    return getattr(transformers, f"Roberta{head}")(config).eval()


def bert_source(head: str = "ForMaskedLM", vocab_size: int = TINY["vocab_size"], max_tokens: int = 128,
                num_labels: int = 3, seed: int = 0) -> transformers.PreTrainedModel:
    torch.manual_seed(seed)
    num_labels = 2 if head == "ForQuestionAnswering" else num_labels
    config = transformers.BertConfig(
        vocab_size=vocab_size, max_position_embeddings=max_tokens, num_labels=num_labels, **SOURCE_SIZE
    )
    return getattr(transformers, f"Bert{head}")(config).eval()


def random_inputs(kind: str, batch: int = 2, length: int = 40, vocab_size: int = TINY["vocab_size"],
                  choices: int | None = None, seed: int = 1) -> dict[str, torch.Tensor]:
    """Token ids (5..vocab) with the second row padded from 3/4 of the length; BERT gets token types."""
    generator = torch.Generator().manual_seed(seed)
    pad = 1 if kind == "roberta" else 0
    ids = torch.randint(5, vocab_size, (batch, length), generator=generator)
    mask = torch.ones(batch, length, dtype=torch.long)
    mask[-1, length * 3 // 4:] = 0
    ids[mask == 0] = pad
    inputs = {"input_ids": ids, "attention_mask": mask}
    if kind == "bert":
        inputs["token_type_ids"] = (torch.arange(length) >= length // 2).long().expand(batch, length).clone()
    if choices:
        inputs = {name: value[:, None].expand(batch, choices, length).clone() for name, value in inputs.items()}
    return inputs


def build_tokenizer(folder: Path, max_length: int = 512) -> transformers.PreTrainedTokenizerFast:
    """A byte-level BPE tokenizer with RoBERTa's special tokens (<s>=0, <pad>=1, </s>=2, <unk>=3, <mask>=4)."""
    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator([TEXT] * 20, vocab_size=300, min_frequency=2,
                            special_tokens=["<s>", "<pad>", "</s>", "<unk>", "<mask>"], show_progress=False)
    bpe.post_processor = RobertaProcessing(("</s>", 2), ("<s>", 0))
    tokenizer = transformers.PreTrainedTokenizerFast(
        tokenizer_object=bpe._tokenizer, bos_token="<s>", eos_token="</s>", sep_token="</s>", cls_token="<s>",
        unk_token="<unk>", pad_token="<pad>", mask_token="<mask>", model_max_length=max_length,
    )
    tokenizer.save_pretrained(folder)
    return transformers.AutoTokenizer.from_pretrained(folder)


@pytest.fixture(scope="session")
def tokenizer_dir(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("tokenizer")
    build_tokenizer(folder)
    return folder


@pytest.fixture(scope="session")
def roberta_folder(tmp_path_factory, tokenizer_dir) -> Path:
    """A saved tiny RobertaForMaskedLM (128 tokens) with the tiny tokenizer, as `save_pretrained` writes it."""
    folder = tmp_path_factory.mktemp("roberta_source")
    tokenizer = transformers.AutoTokenizer.from_pretrained(tokenizer_dir)
    roberta_source("ForMaskedLM", vocab_size=len(tokenizer)).save_pretrained(folder)
    tokenizer.model_max_length = 128
    tokenizer.save_pretrained(folder)
    return folder
