"""The three-stage workflow through `transformers.Trainer`: general MLM pretraining -> domain-adaptive MLM ->
supervised fine-tuning, each stage's output folder the next stage's input. See docs/workflow.md.
"""

from ..hub import load_tokenizer
from ..tasks.question_answering import QuestionAnsweringArguments
from ..tasks.token_classification import TokenClassificationArguments
from .finetuning import (
    FinetuneArguments,
    finetune,
    finetune_multiple_choice,
    finetune_question_answering,
    finetune_token_classification,
)
from .mlm import AdaptArguments, PretrainArguments, adapt, pretrain
from .stage import Interrupted
from .tokenizer import train_tokenizer

__all__ = [
    "AdaptArguments",
    "FinetuneArguments",
    "Interrupted",
    "PretrainArguments",
    "QuestionAnsweringArguments",
    "TokenClassificationArguments",
    "adapt",
    "finetune",
    "finetune_multiple_choice",
    "finetune_question_answering",
    "finetune_token_classification",
    "load_tokenizer",
    "pretrain",
    "train_tokenizer",
]
