"""A byte-level BPE tokenizer with RoBERTa's special tokens, trained on the corpus and saved as a folder.

transformers 5's `RobertaTokenizerFast(vocab_file=..., merges_file=...)` silently builds a 5-token
tokenizer, so the trained tokenizer is wrapped from the `tokenizers` object and always reloaded from
its saved folder (`hf_efficient.hub.load_tokenizer`).
"""

from __future__ import annotations

from collections.abc import Iterable

from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, processors, trainers
from transformers import PreTrainedTokenizerBase, RobertaTokenizerFast

SPECIAL_TOKENS = ("<s>", "<pad>", "</s>", "<unk>", "<mask>")  # ids 0-4, as in RoBERTa


def check_vocab_size(vocab_size: int) -> None:
    if vocab_size < 256 + len(SPECIAL_TOKENS):
        raise ValueError(f"--vocab_size must be at least {256 + len(SPECIAL_TOKENS)} (256 bytes + special tokens), "
                         f"got {vocab_size}")


def train_tokenizer(texts: Iterable[str], vocab_size: int, max_length: int) -> PreTrainedTokenizerBase:
    """Train byte-level BPE on `texts`: ids 0-4 are `<s> <pad> </s> <unk> <mask>`; `<mask>` strips the space before it."""
    check_vocab_size(vocab_size)
    specials = [*SPECIAL_TOKENS[:-1], AddedToken("<mask>", lstrip=True, special=True)]
    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, min_frequency=2, special_tokens=specials,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False,
    )
    backend.train_from_iterator(texts, trainer=trainer)
    backend.post_processor = processors.RobertaProcessing(
        ("</s>", backend.token_to_id("</s>")), ("<s>", backend.token_to_id("<s>")), trim_offsets=True, add_prefix_space=False
    )
    return RobertaTokenizerFast(
        tokenizer_object=backend, bos_token="<s>", eos_token="</s>", sep_token="</s>", cls_token="<s>",
        unk_token="<unk>", pad_token="<pad>", mask_token="<mask>", model_max_length=max_length,
    )
