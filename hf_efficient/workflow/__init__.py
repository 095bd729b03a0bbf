"""The three-stage workflow through `transformers.Trainer`: general MLM pretraining -> domain-adaptive MLM ->
supervised fine-tuning, each stage's output folder the next stage's input. See docs/workflow.md.
"""

from ..hub import load_tokenizer
from .classify import FinetuneArguments, finetune
from .mlm import AdaptArguments, PretrainArguments, adapt, pretrain
from .question_answering import QuestionAnsweringArguments, finetune_question_answering
from .stage import Interrupted
from .token_classification import TokenClassificationArguments, finetune_token_classification
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
    "finetune_question_answering",
    "finetune_token_classification",
    "load_tokenizer",
    "pretrain",
    "train_tokenizer",
]
