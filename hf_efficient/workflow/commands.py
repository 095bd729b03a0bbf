"""The workflow's subcommands of `hf-efficient`: pretrain, adapt, finetune, distill, workflow and demo."""

import argparse

from . import all_stages, distill, mlm, tasks


def add_commands(commands: argparse._SubParsersAction) -> None:
    mlm.add_pretrain_arguments(commands.add_parser(
        "pretrain", help="MLM pretraining from scratch (trains a byte-level BPE tokenizer unless one is given)"))
    mlm.add_adapt_arguments(commands.add_parser(
        "adapt", help="domain-adaptive MLM: continue a checkpoint on domain text"))
    tasks.add_finetune_arguments(commands.add_parser(
        "finetune", help="fine-tune a checkpoint: --task classification (accuracy, macro-F1), token_classification "
                         "(entity F1) or question_answering (exact match, F1)"))
    distill.add_arguments(commands.add_parser("distill", help="distil a teacher checkpoint into a smaller or efficient student (--task mlm | classification | token_classification | question_answering)"))
    for name in ("workflow", "demo"):
        all_stages.add_arguments(commands.add_parser(name, help="pretrain -> adapt -> finetune in one run (default: embedded data)"))
