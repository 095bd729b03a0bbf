"""The three-stage workflow through `transformers.Trainer`: general MLM pretraining -> domain-adaptive MLM ->
supervised fine-tuning, each stage's output folder the next stage's input. See docs/workflow.md.
"""

from ..hub import load_tokenizer

# the tasks register in this order, the order `--task` lists them in and messages name them
# isort: off
from .classify import FinetuneArguments, finetune
from .token_classification import TokenClassificationArguments, finetune_token_classification
from .question_answering import QuestionAnsweringArguments, finetune_question_answering
from .multiple_choice import finetune_multiple_choice

# isort: on
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
