#!/usr/bin/env python3
"""The decision table: for documents of a length, on a CPU or a GPU, for classification or question answering, which
family to use, its cost against dense attention over 512-token windows and its quality against truncation and the
windows, each cell labelled with where it was measured and linked to its table (docs/decide.md).

It reads the measured files the other pages include, so it cannot disagree with them:

    python scripts/decision_table.py --markdown docs/measured/decision.md

Cost: the training step (forward + backward) per document over the windows' ("fwd+bwd / windows", the tables
`hf-efficient bench` wrote) and, where measured, inference in documents per second. Quality: the recipe's long rows in
the tables `hf-efficient bench-quality` wrote (`QUALITY`), the only family whose quality is measured.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from markdown.extensions.toc import slugify

sys.path.insert(0, str(Path(__file__).resolve().parent))
from choosing_table import DENSE, FAMILIES, read_ratios  # noqa: E402

DOCS = Path(__file__).resolve().parent.parent / "docs"
# bench-quality's tables -> the page sections that show each (its main tasks', its held-out task's): the budget the
# validation curves choose first, then the one-epoch ablation; a task's quality comes from the first table that has it
QUALITY = {"quality/epochs-3/quality.json": ("quality.md#results", "quality.md#the-held-out-task"),
           "quality/quality.json": ("quality.md#one-epoch-an-ablation",) * 2}
LONG_FAMILY = FAMILIES["hfe_longformer"]  # the family bench-quality measured: the only one with quality evidence
WINDOWS = "hfe_roberta over 512-token windows"  # the yardstick row of every measured table
# The measured training-step tables, by device (the device's name: the tables say only "cpu" or "cuda")
TRAINING = {
    "CPU": ["measured/windows_1k_4k.md", "measured/windows_minilm_1k_4k.md", "measured/linformer_reformer_1k_4k.md",
            "measured/windows_8192.md"],
    "GPU (NVIDIA H200)": ["measured/gpu_h200_bench.md"],
}
INFERENCE = {"CPU": ["measured/inference_2k_4k.md", "measured/inference_8k.md"],
             "GPU (NVIDIA H200)": ["measured/gpu_h200_inference.md"]}
# document lengths a reader has -> the measured lengths that stand for them
BANDS = {"513-2,048 tokens": (513, 2048), "2,049-8,192 tokens": (2049, 8192), "beyond 8,192 tokens": (8193, 10**9)}
TASKS = {"classification": ("long_match",), "question answering": ("long_qa", "far_qa", "man_qa")}
HELD_OUT = {"man_qa": "man_qa (held out)"}  # bench-quality's held-out task: no recipe choice read it
# a table written before `hf-efficient bench` printed its setup above it: its command's (benchmark size, float32)
UNLABELLED = {"measured/linformer_reformer_1k_4k.md": ("float32", "hidden 256 x 4 layers")}
SETUP = re.compile(r"on (\w+), batch [^,]+, hidden_size=(\d+), num_hidden_layers=(\d+).*?, "
                   r"(float32 / bfloat16|float32|bfloat16|float16), ")
INFERENCE_HEADING = re.compile(r"^#+ (\d+) tokens, inference")
DOCS_PER_SECOND = re.compile(r"^batch (\d+)(?:, (\w+))? docs/s$")


@dataclass
class Source:
    """A measured file: what it was measured at (for the cell's label) and where a page shows it (the link)."""

    path: str
    size: str  # "hidden 256 x 4 layers"
    dtype: str
    link: str


def source(path: str) -> Source:
    """`path`'s setup from its first line, and the heading of the page section that includes it."""
    if path in UNLABELLED:
        dtype, size = UNLABELLED[path]
        return Source(path, size, dtype, section_link(path))
    first = (DOCS / path).read_text().splitlines()[0]
    match = SETUP.search(first)
    if not match:
        raise ValueError(f"docs/{path}: its first line names no device, size and dtype: {first[:80]!r}")
    return Source(path, f"hidden {match[2]} x {match[3]} layers", match[4], section_link(path))


def section_link(path: str) -> str:
    """The link, from docs/decide.md, to the section of the user page that includes `path` (the first such page)."""
    for page in sorted(DOCS.rglob("*.md")):
        if page.relative_to(DOCS).parts[0] in ("measured", "quality", "api") or page.name == "decide.md":
            continue
        heading = None
        for line in page.read_text().splitlines():
            if line.startswith("#"):
                heading = line.lstrip("#").strip()
            if line.strip() == f'--8<-- "{path}"':
                anchor = f"#{slugify(heading, '-')}" if heading and not line.startswith("# ") else ""
                return f"{page.relative_to(DOCS).as_posix()}{anchor}"
    raise ValueError(f"no page includes docs/{path}")


Measured = list[tuple[Source, int]]  # the tables a figure comes from, each with the length it measured


def training_ratios(paths: list[str]) -> dict[int, dict[str, tuple[float, float, Measured]]]:
    """length -> family -> (lowest, highest ratio to the windows, where it was measured)."""
    found: dict[int, dict[str, tuple[float, float, Measured]]] = {}
    for path in paths:
        ratios: dict = {}
        read_ratios(DOCS / path, ratios)
        where = source(path)
        for length, families in ratios.items():
            for family, values in families.items():
                low, high, sources = found.setdefault(length, {}).get(family, (min(values), max(values), []))
                found[length][family] = (min(low, *values), max(high, *values), [*sources, (where, length)])
    return found


def inference_rates(paths: list[str]) -> dict[int, dict[str, list[tuple[str, float, Source]]]]:
    """length -> row -> [(batch and dtype, documents per second, its table)] from the inference tables."""
    found: dict[int, dict[str, list[tuple[str, float, Source]]]] = {}
    for path in paths:
        where, length, columns = source(path), None, {}
        for line in (DOCS / path).read_text().splitlines():
            heading = INFERENCE_HEADING.match(line)
            if heading:
                length = int(heading[1])
            elif line.startswith("| model"):
                cells = [cell.strip() for cell in line.strip("| ").split("|")]
                columns = {index: DOCS_PER_SECOND.match(cell) for index, cell in enumerate(cells)}
                columns = {index: f"batch {m[1]}, {m[2] or where.dtype}" for index, m in columns.items() if m}
            elif line.startswith("|") and "---" not in line and length and columns:
                cells = [cell.strip() for cell in line.strip("| ").split("|")]
                for index, setting in columns.items():
                    value = cells[index].replace(",", "")
                    if re.fullmatch(r"\d+(\.\d+)?", value):
                        found.setdefault(length, {}).setdefault(cells[0], []).append((setting, float(value), where))
    return found


def label(measured: Measured, setting: str = "") -> str:
    """"[float32, hidden 256 x 4 layers, 1,024-2,048 tokens](link)": what the figures beside it were measured at,
    one link per section that shows them."""
    found: dict[tuple[str, str], set[int]] = {}
    for where, length in measured:
        found.setdefault((f"{setting or where.dtype}, {where.size}", where.link), set()).add(length)
    return " and ".join(f"[{text}, {'-'.join(f'{n:,}' for n in sorted({min(at), max(at)}))} tokens]({link})"
                        for (text, link), at in found.items())


def span(low: float, high: float) -> str:
    return f"{low:.2f}x" if f"{low:.2f}" == f"{high:.2f}" else f"{low:.2f}-{high:.2f}x"


def across(ratios: dict[int, dict[str, tuple]], lengths: list[int], family: str) -> tuple | None:
    """`family`'s (lowest, highest ratio, tables) over the band's lengths; None where one length lacks it."""
    rows = [ratios[n][family] for n in lengths if family in ratios[n]]
    if len(rows) < len(lengths):
        return None
    return min(r[0] for r in rows), max(r[1] for r in rows), [s for r in rows for s in r[2]]


def choose(ratios: dict[int, dict[str, tuple]], lengths: list[int]) -> str:
    """Dense over the whole input where its training step measured no dearer than the family with quality evidence
    at every length of the band (full attention, which every family approximates), else that family."""
    dense, family = across(ratios, lengths, DENSE), across(ratios, lengths, LONG_FAMILY)
    return "dense over the whole input" if dense and family and dense[1] <= family[0] else LONG_FAMILY


def training_cell(ratios: dict[int, dict[str, tuple]], lengths: list[int]) -> str:
    """The training step of the family and of dense over the whole input against the windows', and the cheapest."""
    parts, sources = [], []
    for name in (LONG_FAMILY, DENSE):
        value = across(ratios, lengths, name)
        if value:
            parts.append(f"{name} {span(*value[:2])}")
            sources += value[2]
    longest = ratios[lengths[-1]]
    cheapest = min((name for name in longest if name != DENSE), key=lambda name: longest[name][0])
    if cheapest != LONG_FAMILY:
        parts.append(f"cheapest {cheapest} {span(*longest[cheapest][:2])} at {lengths[-1]:,}")
    return f"{'; '.join(parts)} ({label(sources)})"


def inference_cell(rates: dict[int, dict[str, list]], lengths: list[int]) -> str:
    """Documents per second of the family and of dense over the whole input against the windows', at the band's
    longest length measured, at the table's first batch."""
    length = max((n for n in lengths if n in rates), default=None)
    if length is None:
        return "not measured"
    rows = rates[length]
    setting, windows, where = rows[WINDOWS][0]
    parts = [f"{FAMILIES[row]} {value / windows:.2f}x" for row in ("hfe_longformer", "hfe_roberta")
             for s, value, _ in rows[row] if s == setting]
    return f"{'; '.join(parts)} ({label([(where, length)], setting)})"


TRUNCATED_ROW, WINDOWS_ROW = "dense truncated 512", "dense 512 sliding windows"  # bench-quality's baselines


def quality_by_task() -> dict[str, tuple[list[dict], str]]:
    """task -> (its rows, a link labelled with the setup, epochs and seeds they were measured at), each task from the
    first table in `QUALITY` that has it."""
    by_task = {}
    for path, (section, held_out_section) in QUALITY.items():
        report = json.loads((DOCS / path).read_text())
        epochs = report["budget"]["num_train_epochs"]
        for task in dict.fromkeys(row["task"] for row in report["table"]):
            rows = [row for row in report["table"] if row["task"] == task]
            long = next(row for row in rows if is_long_row(row))
            shown = [long, *(row for row in rows if row["row"] in (TRUNCATED_ROW, WINDOWS_ROW))]
            seeds = min(row["seeds"] for row in shown)  # the fewest behind a number the cell shows
            link = (f"[CPU, float32, all-MiniLM-L6-v2 (hidden 384 x 6 layers), {long['length']:,} tokens, "
                    f"{epochs:g} epoch{'s' * (epochs != 1)}, {seeds} seed{'s' * (seeds != 1)}]"
                    f"({held_out_section if task in HELD_OUT else section})")
            by_task.setdefault(task, (rows, link))
    return by_task


def is_long_row(row: dict) -> bool:
    """The recipe's long row: the family at its length, no variant or equal-compute twin."""
    return row["row"].startswith("hfe_longformer ") and row["row"].count(" ") == 1


def quality_cell(quality: dict[str, tuple[list[dict], str]], tasks: tuple[str, ...]) -> str:
    """The recipe's long row / truncated / windows per task, in the table's metric, and TF-IDF where it reads higher;
    each followed by the link to its table (one link for consecutive tasks of the same table)."""
    parts = []
    for task in tasks:
        table, link = quality[task]
        rows = {row["row"]: row["metric_mean"] for row in table}
        long = next(row["metric_mean"] for row in table if is_long_row(row))
        part = (f"{HELD_OUT.get(task, task)} {long:.1f} / {rows[TRUNCATED_ROW]:.1f} / "
                f"{rows[WINDOWS_ROW]:.1f}")
        if rows["TF-IDF"] > long:
            part += f" (TF-IDF {rows['TF-IDF']:.1f} reads higher)"
        if parts and parts[-1][1] == link:
            parts[-1] = (f"{parts[-1][0]}; {part}", link)
        else:
            parts.append((part, link))
    return "; ".join(f"{part} ({link})" for part, link in parts)


GPU = "GPU (NVIDIA H200)"


def dense_on_gpu() -> str:
    """Where dense attention is the answer, in one sentence: documents per second on the GPU at its shortest measured
    length, the faster of dense over the whole input and over the windows against the fastest family, at each batch."""
    rates = inference_rates(INFERENCE[GPU])
    length = min(rates)
    rows = rates[length]
    families = [row for row in rows if row in FAMILIES and FAMILIES[row] != DENSE]

    def rate(row: str, setting: str) -> float:
        return next(value for s, value, _ in rows[row] if s == setting)

    parts, faster = [], True
    for setting, _, _ in rows[WINDOWS]:
        dense = max(("hfe_roberta", WINDOWS), key=lambda row: rate(row, setting))
        best = max(families, key=lambda row: rate(row, setting))
        faster &= rate(dense, setting) > rate(best, setting)
        how = "over the whole input" if dense == "hfe_roberta" else "over 512-token windows"
        parts.append(f"at {setting.split(',')[0]}, {rate(dense, setting):,.0f} documents a second {how} against "
                     f"{rate(best, setting):,.0f} for the fastest family, {FAMILIES[best]}")
    verdict = "faster than every family" if faster else "not always faster than the families"
    where = rows[WINDOWS][0][2]
    return (f"On an NVIDIA H200, dense attention read {length:,}-token documents {verdict} "
            f"([{where.dtype}, {where.size}]({where.link})): {'; '.join(parts)}.")


def quality_summary(quality: dict[str, tuple[list[dict], str]]) -> str:
    """The quality tables in one row per task: the recipe's long row, truncation, the windows and TF-IDF, and where
    they were measured."""
    columns = {TRUNCATED_ROW: "truncated to 512", WINDOWS_ROW: "512-token windows",
               "TF-IDF": "TF-IDF (no model)"}
    lines = ["| task | metric (%) | whole document | " + " | ".join(columns.values()) + " | measured |",
             "|---|---|---|---|---|---|---|"]
    for task, (table, link) in quality.items():
        rows = {row["row"]: row for row in table}
        long = next(row for row in table if is_long_row(row))
        metric = "accuracy" if task in TASKS["classification"] else "F1"
        figures = [f"{rows[name]['metric_mean']:.1f}" for name in columns]
        lines.append(f"| {HELD_OUT.get(task, task)} | test {metric} | {long['metric_mean']:.1f} ({FAMILIES['hfe_longformer']}, "
                     f"{long['length']:,}) | " + " | ".join(figures) + f" | {link} |")
    return "\n".join(lines)


def decision_table() -> str:
    quality = quality_by_task()
    lines = ["<!-- --8<-- [start:gpu] -->", dense_on_gpu(), "<!-- --8<-- [end:gpu] -->", "",
             "<!-- --8<-- [start:quality] -->", quality_summary(quality), "<!-- --8<-- [end:quality] -->", "",
             "<!-- --8<-- [start:table] -->",
             "| documents | device | task | use | training step / the windows' | documents per second / the windows' | "
             "quality: whole document / truncated to 512 / windows (%) |", "|---|---|---|---|---|---|---|",
             "| up to 512 tokens | any | any | dense: the checkpoint as it was trained | - | - | - |"]
    very_long = section_link("measured/compare_32768.md")
    for band, (low, high) in BANDS.items():
        for device, paths in TRAINING.items():
            ratios = training_ratios(paths)
            lengths = sorted(n for n in ratios if low <= n <= high)
            for task, tasks in TASKS.items():
                if not lengths:
                    lines.append(f"| {band} | {device} | {task} | not measured against the windows "
                                 f"([very long inputs]({very_long})) | - | - | - |")
                    continue
                lines.append(f"| {band} | {device} | {task} | {choose(ratios, lengths)} | "
                             f"{training_cell(ratios, lengths)} | {inference_cell(inference_rates(INFERENCE[device]), lengths)} | "
                             f"{quality_cell(quality, tasks)} |")
    return "\n".join([*lines, "<!-- --8<-- [end:table] -->"])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--markdown", help="also write the table to this Markdown file")
    args = parser.parse_args(argv)
    try:
        text = decision_table()
    except (OSError, ValueError, KeyError) as error:
        parser.error(str(error))
    print(text)
    if args.markdown:
        Path(args.markdown).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
