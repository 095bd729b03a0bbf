"""`hf-efficient convert`'s arguments, and `--set` and `--positions`, which `long-context` takes too."""

from __future__ import annotations

import argparse

from ..convert import POSITION_INITS, convert
from ..training.stage import parse_overrides


def add_conversion_options(parser: argparse.ArgumentParser) -> None:
    """`--set` and `--positions`: the options of a conversion that `convert` and `long-context` share."""
    parser.add_argument("--set", dest="options", action="append", default=[], metavar="FIELD=VALUE",
                        help="a family config field, value parsed as a Python literal or JSON when it can be (repeatable), "
                             "e.g. --set attention_window=256")
    parser.add_argument("--positions", default="tile", choices=sorted(POSITION_INITS),
                        help="how the position table grows past the source's length: tile (Longformer's copy, "
                             "default) or interpolate (the pretrained table stretched)")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("source", help="local folder of a RoBERTa or BERT checkpoint (any head)")
    parser.add_argument("output", help="folder to write the converted checkpoint to")
    parser.add_argument("--family", default="hfe_roberta", help="model_type of the target family (default hfe_roberta)")
    parser.add_argument("--max_length", "--max-length", type=int, help="longest input of the converted model (default: the source's)")
    add_conversion_options(parser)
    parser.add_argument("--tokenizer", help="tokenizer folder (default: the source folder)")
    parser.add_argument("--base_model", "--base-model", help="name of the source checkpoint for the model card (default: its path)")
    parser.add_argument("--license", help="license field of the model card (default: the source card's, else unknown)")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> None:
    result = convert(args.source, args.family, args.max_length, parse_overrides(args.options, "--set"), tokenizer=args.tokenizer,
                     output_dir=args.output, base_model=args.base_model, license=args.license, positions=args.positions)
    print(result.report.summary())
    print(f"saved to {args.output}; next: hf-efficient adapt --model_name_or_path {args.output} "
          f"--output_dir {args.output}-adapted")
