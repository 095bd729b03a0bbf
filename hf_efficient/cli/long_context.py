"""`hf-efficient long-context`'s arguments: the pretrained-start recipe (`training.long_context`)."""

from __future__ import annotations

import argparse

from ..training.long_context import MINILM, long_context
from ..training.stage import parse_overrides
from .convert import add_conversion_options


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--base_model", default=MINILM, help="RoBERTa/BERT checkpoint folder, or minilm (default)")
    parser.add_argument("--family", default="hfe_longformer", help="model_type of the long family")
    parser.add_argument("--max_length", type=int, default=4096, help="tokens of the converted model (default 4096)")
    parser.add_argument("--adapt_steps", type=int, default=0,
                        help="domain MLM steps after the conversion (default 0, convert only: on the measured tasks no "
                             "adapt paid for itself, docs/quality.md)")
    parser.add_argument("--max_train_documents", type=int, help="adapt on at most this many domain documents")
    parser.add_argument("--lm_head_steps", type=int, default=0,
                        help="before adapt, train its new LM head alone this many steps, the encoder frozen (default 0)")
    parser.add_argument("--output_dir", required=True, help="writes converted/ and adapted/ here")
    add_conversion_options(parser)  # over the family's recipe settings (hf_efficient/recipes.py)
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> None:
    results = long_context(args.base_model, args.family, args.max_length, args.output_dir, args.adapt_steps,
                           max_train_documents=args.max_train_documents, settings=parse_overrides(args.options, "--set"),
                           positions=args.positions, lm_head_steps=args.lm_head_steps)
    loss = "" if results["mlm_loss_after"] is None else \
        f"; held-out MLM loss {results['mlm_loss_before']:.3f} -> {results['mlm_loss_after']:.3f}"
    print(f"next: hf-efficient finetune --model_name_or_path {results['checkpoint']} ...{loss}")
