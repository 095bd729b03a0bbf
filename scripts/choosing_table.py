#!/usr/bin/env python3
"""The "Choosing a family" table: each family's training step against dense attention over 512-token windows, per
length, sorted into cheaper than the windows, about their cost, or dearer (docs/measured/).

It reads the measured tables the benchmarks page includes, so the summary cannot disagree with them:

    python scripts/choosing_table.py docs/measured/windows_1k_4k.md docs/measured/windows_minilm_1k_4k.md \
        docs/measured/linformer_reformer_1k_4k.md docs/measured/windows_8192.md \
        --markdown docs/measured/choosing_a_family.md

It reads the Markdown that `hf-efficient bench --markdown` wrote: every column headed "fwd+bwd / windows", its
length from the "N tokens" heading above the table. A family measured in several tables (or sizes) gets its range;
one measured at some lengths only is listed as not measured at the others.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

TOLERANCE = 0.05  # a family within 5% of the windows' cost is "about" it: the tables' run-to-run noise is larger
DENSE = "dense over the whole input"
# row name in a measured table -> the family (or setting) it stands for in the summary
FAMILIES = {
    "hfe_roberta": DENSE,
    "hfe_linformer": "Linformer",
    "hfe_reformer": "Reformer-style",
    "hfe_reformer 4 hashes": "Reformer-style with 4 hashes",
    "hfe_longformer": "Longformer-style",
    "hfe_longformer, 16 global tokens": "Longformer-style with 16 global tokens",
    "hfe_bigbird": "BigBird-style",
    "hfe_blockbert": "BlockBERT",
    "hfe_blockbert 2 blocks": "BlockBERT (n = 2)",
}
# rows that are no choice for a user: the yardsticks, and settings only the family pages discuss
LEFT_OUT = {
    "hfe_roberta over 512-token windows",
    "no attention (floor)",
    "hfe_reformer not reversible",
    "hfe_blockbert blocks of 1024",
    "hfe_bigbird, blocks kept",
    "hfe_longformer, 16 global tokens, blocks kept",
    "transformers Longformer",
    "transformers BigBird",
    "transformers Reformer 1 hash",
    "transformers Reformer 4 hashes",
}
RATIO = re.compile(r"(\d+\.\d+)x")
HEADING_LENGTH = re.compile(r"^(?:#+ |\*\*)(\d+) tokens")
TRAINING_COLUMN = "fwd+bwd / windows"
CLASSES = ("cheaper than the windows", "about the windows' cost", "dearer")

Ratios = dict[int, dict[str, list[float]]]  # length -> family -> its ratios to the windows, one per table or size


def cells(line: str) -> list[str]:
    return [cell.strip() for cell in line.strip().strip("|").split("|")]


def ratio_columns(header: list[str], heading_length: int | None, where: str) -> dict[int, int]:
    """column index -> length, for a table's training-step-over-windows columns (none: not such a table)."""
    columns = [index for index, cell in enumerate(header) if cell == TRAINING_COLUMN]
    if columns and heading_length is None:
        raise ValueError(f"{where}: a {TRAINING_COLUMN!r} table with no 'N tokens' heading above it")
    return dict.fromkeys(columns, heading_length)


def read_ratios(path: Path, ratios: Ratios) -> None:
    """Add each family's training-step ratios to the windows from one measured Markdown file to `ratios`."""
    lines = path.read_text().splitlines()
    heading_length, columns = None, {}
    for number, line in enumerate(lines, 1):
        where = f"{path}:{number}"
        heading = HEADING_LENGTH.match(line)
        if heading:
            heading_length = int(heading[1])
        if not line.startswith("|"):
            columns = {}
        elif number == 1 or not lines[number - 2].startswith("|"):  # a table's header
            columns = ratio_columns(cells(line), heading_length, where)
        elif columns and "---" not in line:
            row = cells(line)
            found = [(length, RATIO.match(row[index])) for index, length in columns.items() if index < len(row)]
            found = [(length, float(match[1])) for length, match in found if match]
            if not found or row[0] in LEFT_OUT:  # the windows' own seconds, a failed run, a yardstick
                continue
            if row[0] not in FAMILIES:
                raise ValueError(f"{where}: row {row[0]!r} is in neither FAMILIES nor LEFT_OUT of {Path(__file__).name}")
            for length, value in found:
                ratios.setdefault(length, {}).setdefault(FAMILIES[row[0]], []).append(value)


def classify(values: list[float]) -> str:
    """Cheaper or dearer only when every measurement is, by more than `TOLERANCE`; else about the windows' cost."""
    if max(values) < 1 - TOLERANCE:
        return CLASSES[0]
    if min(values) > 1 + TOLERANCE:
        return CLASSES[2]
    return CLASSES[1]


def span(values: list[float]) -> str:
    low, high = min(values), max(values)
    return f"{low:.2f}x" if low == high else f"{low:.2f}-{high:.2f}x"


def choosing_table(ratios: Ratios) -> str:
    """A legend, then a row per length: the families in each class, cheapest first, and those not measured there."""
    families = sorted({family for row in ratios.values() for family in row})
    lines = [
        f"Training step (forward + backward) per document divided by dense attention's over 512-token windows; "
        f"each family's lowest-highest over the tables read. Cheaper or dearer: every measurement "
        f"below {1 - TOLERANCE:.2f}x or above {1 + TOLERANCE:.2f}x; about: the rest.",
        "",
        "| tokens | " + " | ".join(CLASSES) + " | not measured against the windows |",
        "|---|---|---|---|---|",
    ]
    for length, row in sorted(ratios.items()):
        classes: dict[str, list[str]] = {name: [] for name in CLASSES}
        for family, values in sorted(row.items(), key=lambda item: (min(item[1]), item[0])):
            classes[classify(values)].append(f"{family} {span(values)}")
        missing = [family for family in families if family not in row]
        lines.append(f"| {length} | " + " | ".join(", ".join(names) or "-" for names in classes.values())
                     + f" | {', '.join(missing) or '-'} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("tables", nargs="+", help="measured Markdown tables (docs/measured/*.md)")
    parser.add_argument("--markdown", help="also write the table to this Markdown file")
    args = parser.parse_args(argv)
    ratios: Ratios = {}
    try:
        for table in args.tables:
            read_ratios(Path(table), ratios)
        if not ratios:
            raise ValueError(f"no {TRAINING_COLUMN!r} column in {', '.join(args.tables)}")
    except (OSError, ValueError) as error:
        parser.error(str(error))
    text = choosing_table(ratios)
    print(text)
    if args.markdown:
        Path(args.markdown).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
