#!/usr/bin/env python3
"""The recommended recipe, from a pretrained 512-token checkpoint to a long-document model, as the code runs it:
the family, its window, the positions, adapt or not, and the fine-tuning batch, learning rate and epochs that
`hf-efficient bench-quality` measured it at. Pages include the file it writes instead of restating the settings:

    python scripts/recipe_table.py --markdown docs/measured/recipe.md

Read from `hf_efficient/recipes.py` and the defaults of `hf-efficient long-context` and `bench-quality`, so a change
there changes this table (tests/test_recipe_docs.py checks that the pages state no other recipe).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from hf_efficient.bench import quality
from hf_efficient.cli import long_context
from hf_efficient.models.configuration_longformer import HfeLongformerConfig
from hf_efficient.recipes import FAMILY_SETTINGS, LONG_CONTEXT_SETTINGS


def defaults(add_arguments) -> argparse.Namespace:
    """A command's defaults, from its own argument definitions (the required ones given a placeholder)."""
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return parser.parse_args(["--output_dir", "-"])


def recipe() -> dict[str, str]:
    """setting -> the recipe's value, as the pages quote it."""
    convert, measured = defaults(long_context.add_arguments), defaults(quality.add_arguments)
    window = LONG_CONTEXT_SETTINGS[convert.family]["attention_window"]
    return {
        "family": f"Longformer-style (`{convert.family}`)",
        "attention_window": str(window),
        "positions": f"`{convert.positions}`",
        "adapt": "none" if convert.adapt_steps == 0 else f"{convert.adapt_steps} steps",
        "batch": str(measured.long_batch_size),
        "learning rate": f"{measured.learning_rate:.0e}".replace("e-0", "e-"),
        "epochs": f"{measured.num_train_epochs:g}",
        "tokens": ", ".join(str(length) for length in measured.lengths),
    }


def recipe_table() -> str:
    r, convert = recipe(), defaults(long_context.add_arguments)
    family_window = FAMILY_SETTINGS[convert.family]["attention_window"]
    config_window = HfeLongformerConfig().attention_window
    return "\n".join([
        "| setting | the recipe | where the code sets it |",
        "|---|---|---|",
        f"| family | {r['family']} | `hf-efficient long-context --family` |",
        f"| `attention_window` | {r['attention_window']} tokens in all (w / 2 each side) | `LONG_CONTEXT_SETTINGS` in "
        "`hf_efficient/recipes.py` |",
        f"| positions past 512 | {r['positions']}: the pretrained positions copied in tiles | `--positions` |",
        f"| domain MLM before fine-tuning (adapt) | {r['adapt']} | `long-context --adapt_steps` |",
        f"| fine-tuning batch | {r['batch']} | `bench-quality --long_batch_size` |",
        f"| fine-tuning learning rate | {r['learning rate']} | `bench-quality --learning_rate` |",
        f"| fine-tuning epochs | {r['epochs']} | `bench-quality --num_train_epochs` |",
        f"| measured at | {r['tokens']} tokens, all-MiniLM-L6-v2 | `bench-quality --lengths` |",
        "",
        f"Other windows you will meet: {config_window} is the config's default "
        f"(`AutoConfig.for_model(\"{convert.family}\")`, Longformer's), and {family_window} is what the benchmarks and "
        "the from-scratch workflow run (`FAMILY_SETTINGS` in `hf_efficient/recipes.py`).",
    ])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--markdown", help="also write the table to this Markdown file")
    args = parser.parse_args(argv)
    text = recipe_table()
    print(text)
    if args.markdown:
        Path(args.markdown).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
