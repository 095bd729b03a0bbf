"""Build an evaluation-only classification task from Debian manual pages: the text of a page, labelled by its section.

Used to check that fine-tuning defaults chosen on kernel_docs carry over to other text (docs/workflow.md);
never used to choose them. Extract the packages first, e.g.

    apt-get download manpages manpages-dev coreutils util-linux e2fsprogs iproute2 procps findutils man-db passwd login
    for f in *.deb; do dpkg-deb -x "$f" root; done
    python scripts/build_manpages_task.py root/usr/share/man runs/manpages

Pages that only redirect (`.so`) are skipped; per-section caps make the task imbalanced (section 3 largest).
"""

from __future__ import annotations

import gzip
import json
import random
import re
import sys
from pathlib import Path

CAPS = {"1": 60, "2": 100, "3": 400, "5": 40, "7": 50, "8": 60}
ESCAPES = [(re.compile(r"\\f(\(..|\[[^]]*\]|.)"), ""), (re.compile(r"\\\*(\(..|\[[^]]*\]|.)"), ""),
           (re.compile(r"\\\((em|en|hy|bu)"), "-"), (re.compile(r"\\[-e]"), lambda m: "-" if m[0] == "\\-" else "\\"),
           (re.compile(r"\\[&|^%]"), ""), (re.compile(r"\\ "), " ")]


def page_text(raw: str) -> str | None:
    """Plain text of a roff page: macro names, comments, the title line (.TH names the section) and escapes removed."""
    if re.search(r"^\.so ", raw, re.M):
        return None
    lines = []
    for line in raw.splitlines():
        if line.startswith((".\\\"", "'\\\"", ".TH")):
            continue
        if line.startswith((".", "'")):
            line = line[1:].partition(" ")[2]
        for pattern, replacement in ESCAPES:
            line = pattern.sub(replacement, line)
        line = line.replace('"', "").strip()
        if line:
            lines.append(line)
    return " ".join(lines) or None


def main(man_dir: str, out_dir: str, seed: int = 0) -> None:
    rng = random.Random(seed)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    splits = {"train": [], "validation": [], "test": []}
    for section, cap in CAPS.items():
        pages = []
        for path in sorted(Path(man_dir, f"man{section}").glob("*")):
            raw = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
            text = page_text(raw.decode("utf-8", "replace"))
            if text:
                pages.append({"text": text, "label": f"man{section}", "page": path.name})
        rng.shuffle(pages)
        pages = pages[:cap]
        cut = [round(len(pages) * 0.7), round(len(pages) * 0.85)]
        splits["train"] += pages[: cut[0]]
        splits["validation"] += pages[cut[0] : cut[1]]
        splits["test"] += pages[cut[1] :]
    for name, records in splits.items():
        rng.shuffle(records)
        with open(out / f"{name}.jsonl", "w") as handle:
            handle.writelines(json.dumps(record) + "\n" for record in records)
        print(name, len(records))


if __name__ == "__main__":
    main(*sys.argv[1:3])
