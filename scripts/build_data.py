#!/usr/bin/env python3
"""Build the embedded default data shipped in ``hf_efficient/data/``.

The data is real text taken from Debian packages (fetched with ``apt-get
download``, unpacked with ``dpkg-deb -x``; nothing is installed):

* ``general.jsonl.gz``: a general-English pretraining corpus made of GCIDE
  dictionary entries that carry literary quotations (``dict-gcide``), WordNet
  synset glosses (``wordnet-base``) and fortune cookies (``fortunes``,
  ``fortunes-min``).  Each source is sampled deterministically to a fixed
  record budget.
* ``kernel_docs_{train,validation,test}.jsonl.gz``: a long-document
  classification task.  Linux kernel documentation files (``linux-doc-6.1``)
  are labelled with their top-level ``Documentation/`` directory; the 10
  directories with the most documents of at least ``MIN_TASK_WORDS`` words
  are kept, each capped at ``MAX_PER_LABEL`` documents, and split 80/10/10
  stratified by label.
* ``domain.jsonl.gz``: every English kernel documentation file except the
  task's validation and test documents (the domain-adaptation corpus).
* ``long_qa_{train,validation,test}.jsonl.gz``,
  ``far_qa_{train,validation,test}.jsonl.gz`` and
  ``long_match_{train,validation,test}.jsonl.gz``: long-document look-up QA,
  far-evidence QA and section matching whose evidence lies past the first 512
  tokens,
  built by ``scripts/build_long_tasks.py`` (see there and ``docs/tasks.md``);
  each document keeps its ``kernel_docs`` split, all others are training data.
* ``man_qa_{train,validation,test}.jsonl.gz``: the held-out task, "what does
  the option X of a command do?" over Debian manual pages (``MAN_PACKAGES``),
  built by ``scripts/build_man_qa.py``; no recipe choice reads it.
* ``manifest.json`` (counts, sizes, package versions, sha256 of each data
  file), ``LICENSES.md`` (licences, attribution and statistics) and
  ``long_tasks.md`` (the long tasks' tables, which ``docs/tasks.md`` includes).

Inputs are read in sorted order and all sampling uses ``SEED``; JSON is written
with sorted keys and gzip with ``mtime=0``, so two runs with the same package
versions produce byte-identical files.

Usage::

    python scripts/build_data.py [--out-dir DIR] [--deb-dir DIR] [--latest] [--tables-only]

Requires a Debian-based system with ``apt-get`` (after ``apt-get update``) and
``dpkg-deb``; the long tasks also need hf_efficient's dependencies and
scikit-learn (for their probes).
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import random
import re
import subprocess
import sys
import tempfile
from collections import Counter
from collections.abc import Iterable, Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # its sibling modules, however it is loaded
from build_man_qa import MAN_PACKAGES, build_man_qa  # noqa: E402
from text_cleaning import SEED, Record, clean_rst, join_paragraphs  # noqa: E402

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_OUT_DIR = REPO_ROOT / "hf_efficient" / "data"

# Package versions the committed data was built from (Debian 12 "bookworm").
PACKAGES = {
    "dict-gcide": "0.48.5+nmu2",
    "wordnet-base": "1:3.0-37",
    "fortunes": "1:1.99.1-7.3",
    "fortunes-min": "1:1.99.1-7.3",
    "linux-doc-6.1": "6.1.192-3",
}
KERNEL_DOC_PACKAGE = "linux-doc-6.1"

# General corpus: records sampled per source.
GENERAL_BUDGET = {"gcide": 7_000, "wordnet": 15_000, "fortunes": 8_000}
# Kernel documentation task.
NUM_LABELS = 10
MIN_TASK_WORDS = 200
MAX_PER_LABEL = 550
VALIDATION_FRACTION = 0.1
TEST_FRACTION = 0.1
# Domain corpus: documents shorter than this (after cleaning) are dropped.
MIN_DOMAIN_WORDS = 20
# Non-English documentation directories.
EXCLUDED_KERNEL_DIRS = {"translations"}
# long_tasks.md: the manifest's long_match probes (key -> the row's name), in the table's order.
PROBES = {
    "tfidf_lr_first_512_tokens": "TF-IDF (1-2-grams) + logistic regression, first 512 tokens",
    "tfidf_lr_whole_text": "TF-IDF (1-2-grams) + logistic regression, whole text",
    "head_tail_cosine_lr": "logistic regression on the TF-IDF cosine of the text before vs from `section_start`",
}



# --------------------------------------------------------------------------
# Package download
# --------------------------------------------------------------------------


def fetch_packages(packages: dict[str, str], deb_dir: Path, root: Path, latest: bool) -> dict[str, str]:
    """Download ``packages`` (name -> pinned version) into ``deb_dir`` and unpack them under ``root``.

    Returns the package versions actually used.  ``.deb`` files already in
    ``deb_dir`` with the wanted version are reused.
    """
    versions = {}
    root.mkdir(parents=True, exist_ok=True)
    for name, pinned in packages.items():
        version = candidate_version(name) if latest else pinned
        file_version = version.replace(":", "%3a")
        debs = sorted(deb_dir.glob(f"{name}_{file_version}_*.deb"))
        if not debs:
            subprocess.run(["apt-get", "download", f"{name}={version}"], cwd=deb_dir, check=True)
            debs = sorted(deb_dir.glob(f"{name}_{file_version}_*.deb"))
        subprocess.run(["dpkg-deb", "-x", str(debs[0]), str(root)], check=True)
        versions[name] = version
    return versions


def candidate_version(name: str) -> str:
    """Return the version ``apt-get`` would install for package ``name``."""
    policy = subprocess.run(["apt-cache", "policy", name], capture_output=True, text=True, check=True).stdout
    match = re.search(r"Candidate:\s*(\S+)", policy)
    if match is None or match.group(1) == "(none)":
        raise RuntimeError(f"apt has no candidate for {name}; run apt-get update")
    return match.group(1)


# --------------------------------------------------------------------------
# General English
# --------------------------------------------------------------------------

# GCIDE character codes: an accent mark around one or two letters, e.g.
# ['e] [=a] [i^] [ae]; the accent is dropped, the letters kept.
GCIDE_ACCENT = re.compile(r"\[[-'`\"=~^.,*]?([a-z]{1,2})\^?\]|\[[-'`\"=~^.,*]([A-Z])\]")
# Named codes such as [imac] (i macron), [asl] (a semi-long), [udd].
GCIDE_LETTER_CODE = re.compile(r"\[([a-z])(?:mac|sl|dd|um|cr)\]")
GCIDE_NAMED = {
    "[eth]": "ð",
    "[thorn]": "þ",
    "[yogh]": "ȝ",
    "[root]": "√",
    "[deg]": "°",
    "[sect]": "§",
    "[alpha]": "α",
    "[beta]": "β",
}
# Syllabified headword: Affect \Af*fect"\, v. t.
GCIDE_SYLLABLES = re.compile(r"\s*\\[^\\]{1,100}\\")
# Short parenthesised pronunciation: ([a^]f*f[e^]kt")
GCIDE_PRONUNCIATION = re.compile(r"\s*\((?=[^()\n]*[\[*\"])[^(){}\n]{1,60}\)")
# Whole-line labels ([1913 Webster], [Obs.]) and inline source tags ([PJC]).
GCIDE_SOURCE_LINE = re.compile(r"^\s*\[[^\]\n]*\]\s*$", re.MULTILINE)
GCIDE_SOURCE_TAG = re.compile(r"\[[^\]\n]*(?:Webster|WordNet|PJC)[^\]\n]*\]")
GCIDE_QUOTATION = re.compile(r"--\s*[A-Z][\w.'& ]*\.?\s*$", re.MULTILINE)


def read_gcide(root: Path) -> list[str]:
    """Return cleaned GCIDE entries that contain a literary quotation."""
    dictd = root / "usr/share/dictd"
    with gzip.open(dictd / "gcide.dict.dz", "rb") as fh:  # dictzip is gzip
        data = fh.read()
    spans = set()
    for line in (dictd / "gcide.index").read_text(encoding="utf-8").splitlines():
        headword, offset, length = line.split("\t")
        if not headword.startswith("00-database"):
            spans.add((decode_dictd_number(offset), decode_dictd_number(length)))
    entries = []
    for offset, length in sorted(spans):
        raw = data[offset : offset + length].decode("utf-8", errors="replace")
        if GCIDE_QUOTATION.search(raw):
            entries.append(clean_gcide(raw))
    return entries


def decode_dictd_number(value: str) -> int:
    """Decode a dictd index number (base64 digits, most significant first)."""
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
    number = 0
    for char in value:
        number = number * 64 + alphabet.index(char)
    return number


def clean_gcide(entry: str) -> str:
    """Remove dictd/GCIDE markup from one entry and rejoin wrapped lines."""
    text = GCIDE_SOURCE_LINE.sub("", entry)
    text = GCIDE_SOURCE_TAG.sub("", text)
    text = GCIDE_SYLLABLES.sub("", text)
    text = GCIDE_PRONUNCIATION.sub("", text)
    text = text.replace("{", "").replace("}", "")
    for code, char in GCIDE_NAMED.items():
        text = text.replace(code, char)
    text = GCIDE_LETTER_CODE.sub(r"\1", text)
    text = GCIDE_ACCENT.sub(lambda m: m.group(1) or m.group(2), text)
    return join_paragraphs(text)


def read_wordnet(root: Path) -> list[str]:
    """Return one ``"lemma, lemma: gloss"`` text per WordNet synset."""
    texts = []
    for pos in ("adj", "adv", "noun", "verb"):
        path = root / "usr/share/wordnet" / f"data.{pos}"
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.startswith("  "):  # licence header
                continue
            fields, gloss = line.split(" | ", 1)
            parts = fields.split()
            word_count = int(parts[3], 16)
            lemmas = [re.sub(r"\([a-z]+\)$", "", word).replace("_", " ") for word in parts[4 : 4 + 2 * word_count : 2]]
            texts.append(f"{', '.join(dict.fromkeys(lemmas))}: {gloss.strip()}")
    return texts


def read_fortunes(root: Path) -> list[str]:
    """Return fortune cookies that are mostly prose (no ASCII art)."""
    texts = []
    fortune_dir = root / "usr/share/games/fortunes"
    for path in sorted(fortune_dir.iterdir()):
        if path.suffix or path.is_symlink() or path.name == "ascii-art":
            continue
        content = path.read_text(encoding="utf-8", errors="replace")
        content = re.sub(r".\x08", "", content)  # overstrike
        for cookie in re.split(r"^%\s*$", content, flags=re.MULTILINE):
            lines = [" ".join(line.split()) for line in cookie.splitlines()]
            text = "\n".join(lines).strip()
            letters = sum(c.isalpha() or c.isspace() for c in text)
            if len(text.split()) >= 3 and letters >= 0.8 * len(text):
                texts.append(text)
    return texts


def build_general(root: Path) -> list[Record]:
    """Sample each general-English source to its ``GENERAL_BUDGET``."""
    sources = {
        "gcide": read_gcide(root),
        "wordnet": read_wordnet(root),
        "fortunes": read_fortunes(root),
    }
    records = []
    for source, texts in sources.items():
        texts = sorted(set(texts))
        budget = min(GENERAL_BUDGET[source], len(texts))
        for text in random.Random(f"{SEED}-{source}").sample(texts, budget):
            records.append({"text": text, "source": source})
    random.Random(SEED).shuffle(records)
    return records


# --------------------------------------------------------------------------
# Kernel documentation
# --------------------------------------------------------------------------

def read_kernel_docs(root: Path) -> list[Record]:
    """Return cleaned English kernel docs as ``{"path", "text"}``, by path."""
    doc_root = root / "usr/share/doc" / KERNEL_DOC_PACKAGE
    docs = []
    for path in sorted((doc_root / "Documentation").rglob("*.gz")):
        rel = path.relative_to(doc_root).as_posix()[: -len(".gz")]
        if not rel.endswith((".rst", ".txt")):
            continue
        if rel.split("/")[1] in EXCLUDED_KERNEL_DIRS:
            continue
        with gzip.open(path, "rt", encoding="utf-8", errors="replace") as fh:
            text = clean_rst(fh.read())
        if len(text.split()) >= MIN_DOMAIN_WORDS:
            docs.append({"path": rel, "text": text})
    return docs


def kernel_label(path: str) -> str | None:
    """Return the subsystem directory of a doc path, or None at top level."""
    parts = path.split("/")
    return parts[1] if len(parts) > 2 else None


def build_kernel_task(docs: list[Record]) -> dict[str, list[Record]]:
    """Label, filter, cap and split the kernel docs (stratified 80/10/10).

    Labels are the ``NUM_LABELS`` directories with the most documents of at
    least ``MIN_TASK_WORDS`` words (ties broken by name).
    """
    by_label: dict[str, list[Record]] = {}
    for doc in docs:
        label = kernel_label(doc["path"])
        if label is not None and len(doc["text"].split()) >= MIN_TASK_WORDS:
            by_label.setdefault(label, []).append({**doc, "label": label})
    ranked = sorted(by_label, key=lambda label: (-len(by_label[label]), label))
    rng = random.Random(SEED)
    splits: dict[str, list[Record]] = {"train": [], "validation": [], "test": []}
    for label in sorted(ranked[:NUM_LABELS]):
        members = by_label[label]
        rng.shuffle(members)
        members = members[:MAX_PER_LABEL]
        n_val = round(len(members) * VALIDATION_FRACTION)
        n_test = round(len(members) * TEST_FRACTION)
        splits["validation"] += members[:n_val]
        splits["test"] += members[n_val : n_val + n_test]
        splits["train"] += members[n_val + n_test :]
    for records in splits.values():
        records.sort(key=lambda record: record["path"])
    return splits


# --------------------------------------------------------------------------
# Output
# --------------------------------------------------------------------------


def write_jsonl_gz(path: Path, records: Iterable[Record]) -> None:
    """Write records as gzip-compressed JSON lines, reproducibly."""
    lines = (json.dumps(r, ensure_ascii=False, sort_keys=True) + "\n" for r in records)
    path.write_bytes(gzip.compress("".join(lines).encode("utf-8"), 9, mtime=0))


def word_stats(records: list[Record]) -> dict[str, float]:
    """Mean word count and the fraction estimated to exceed 512 BPE tokens."""
    words = [len(r["text"].split()) for r in records]
    return {
        "mean_words": round(sum(words) / len(words), 1),
        "fraction_over_512_tokens_est": round(sum(w * 1.3 > 512 for w in words) / len(words), 3),
    }


def spdx_counts(texts: Iterable[str]) -> dict[str, int]:
    """Count SPDX licence identifiers declared in the raw kernel documents."""
    counts: Counter[str] = Counter()
    for text in texts:
        match = re.search(r"SPDX-License-Identifier:\s*(.+?)\s*(?:\*/)?$", text, re.M)
        counts[match.group(1) if match else "(none; package default GPL-2)"] += 1
    return dict(sorted(counts.items()))


def raw_kernel_texts(root: Path, paths: Iterable[str]) -> Iterator[str]:
    """Yield the uncleaned text of kernel docs given their package paths."""
    doc_root = root / "usr/share/doc" / KERNEL_DOC_PACKAGE
    for path in paths:
        with gzip.open(doc_root / f"{path}.gz", "rt", errors="replace") as fh:
            yield fh.read()


def copyright_text(root: Path, package: str) -> str:
    """Return a package's Debian copyright file."""
    return (root / "usr/share/doc" / package / "copyright").read_text(encoding="utf-8")


def first_stanzas(copyright_file: str, count: int) -> str:
    """Return the first ``count`` paragraphs of a DEP-5 copyright file."""
    return "\n\n".join(copyright_file.split("\n\n")[:count])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--out-dir",
        type=Path,
        default=DEFAULT_OUT_DIR,
        help=f"where to write the data (default: {DEFAULT_OUT_DIR.relative_to(REPO_ROOT)})",
    )
    parser.add_argument(
        "--deb-dir",
        type=Path,
        help="keep/reuse downloaded .deb files here (default: a temporary dir)",
    )
    parser.add_argument(
        "--latest",
        action="store_true",
        help="use apt's candidate versions instead of the pinned PACKAGES",
    )
    parser.add_argument(
        "--tables-only",
        action="store_true",
        help="only re-render long_tasks.md from the manifest.json already in --out-dir (no packages needed)",
    )
    parser.add_argument(
        "--man-qa-only",
        action="store_true",
        help="only rebuild the held-out task (man_qa) into --out-dir, updating its entries in the manifest.json, "
        "LICENSES.md and long_tasks.md there (the kernel packages are not fetched)",
    )
    args = parser.parse_args()
    if args.tables_only:
        manifest = json.loads((args.out_dir / "manifest.json").read_text(encoding="utf-8"))
        (args.out_dir / "long_tasks.md").write_text(render_long_tasks(manifest), encoding="utf-8")
        return
    args.out_dir.mkdir(parents=True, exist_ok=True)
    if args.man_qa_only:
        rebuild_man_qa(args)
        return

    with tempfile.TemporaryDirectory() as tmp:
        deb_dir = args.deb_dir or Path(tmp) / "debs"
        deb_dir.mkdir(parents=True, exist_ok=True)
        root = Path(tmp) / "root"
        versions = fetch_packages(PACKAGES, deb_dir, root, args.latest)
        man_qa, man_versions, man_report = fetch_and_build_man_qa(deb_dir, Path(tmp) / "man", args.latest)
        versions |= man_versions

        general = build_general(root)
        docs = read_kernel_docs(root)
        task = build_kernel_task(docs)
        held_out = {r["path"] for split in ("validation", "test") for r in task[split]}
        domain = [doc for doc in docs if doc["path"] not in held_out]
        task_paths = sorted(r["path"] for records in task.values() for r in records)
        raw_docs = dict(zip((d["path"] for d in docs), raw_kernel_texts(root, (d["path"] for d in docs)), strict=True))
        kernel_splits = {r["path"]: split for split, records in task.items() for r in records}
        long_tasks, long_reports = build_long_tasks(raw_docs, kernel_splits, [r["text"] for r in general])
        licences = {
            "domain": spdx_counts(raw_kernel_texts(root, (d["path"] for d in domain))),
            "kernel_docs": spdx_counts(raw_kernel_texts(root, task_paths)),
        }
        for name, splits in long_tasks.items():
            paths = sorted({r["path"] for records in splits.values() for r in records})
            licences[name] = spdx_counts(raw_docs[path] for path in paths)
        copyrights = {name: copyright_text(root, name) for name in PACKAGES}

    outputs = {"general.jsonl.gz": general, "domain.jsonl.gz": domain}
    for split, records in task.items():
        outputs[f"kernel_docs_{split}.jsonl.gz"] = records
    for name, splits in {**long_tasks, "man_qa": man_qa}.items():
        for split, records in splits.items():
            outputs[f"{name}_{split}.jsonl.gz"] = records
    files = write_outputs(args.out_dir, outputs)

    labels = sorted({r["label"] for r in task["train"]})
    manifest = {
        "seed": SEED,
        "packages": versions,
        "files": files,
        "general": {
            "records_per_source": dict(sorted(Counter(r["source"] for r in general).items())),
            **word_stats(general),
        },
        "domain": {
            "documents": len(domain),
            "excluded_task_heldout_documents": len(held_out),
            **word_stats(domain),
            "spdx_license_identifiers": licences["domain"],
        },
        "kernel_docs": {
            "labels": labels,
            "counts": {
                split: {label: sum(r["label"] == label for r in records) for label in labels}
                for split, records in task.items()
            },
            **word_stats([r for records in task.values() for r in records]),
            "spdx_license_identifiers": licences["kernel_docs"],
        },
        **{name: {**report, "spdx_license_identifiers": licences[name]} for name, report in long_reports.items()},
        "man_qa": man_report,
    }
    (args.out_dir / "manifest.json").write_text(
        json.dumps(manifest, indent=2, sort_keys=True, ensure_ascii=False) + "\n",
        encoding="utf-8",
    )
    (args.out_dir / "LICENSES.md").write_text(render_licenses(manifest, copyrights), encoding="utf-8")
    (args.out_dir / "long_tasks.md").write_text(render_long_tasks(manifest), encoding="utf-8")
    for name, info in files.items():
        print(f"{name}: {info['records']} records, {info['bytes']} bytes")
    for name in (*long_reports, "man_qa"):
        print(f"{name}: {json.dumps(manifest[name], indent=2, sort_keys=True)}")


def write_outputs(out_dir: Path, outputs: dict[str, list[Record]]) -> dict[str, dict]:
    """Write each file's records; return the manifest's entry of each (records, bytes, sha256)."""
    files = {}
    for name, records in outputs.items():
        path = out_dir / name
        write_jsonl_gz(path, records)
        payload = path.read_bytes()
        files[name] = {"records": len(records), "bytes": len(payload), "sha256": hashlib.sha256(payload).hexdigest()}
    return files


def fetch_and_build_man_qa(deb_dir: Path, root: Path, latest: bool) -> tuple[dict[str, list[Record]], dict, dict]:
    """The held-out task's splits, its packages' versions and its manifest entry (its report and the pages used
    per package); each package is unpacked in a folder of its own under ``root``, so a page's path names it."""
    roots = {name: root / name for name in MAN_PACKAGES}
    versions = {}
    for name, version in MAN_PACKAGES.items():
        versions |= fetch_packages({name: version}, deb_dir, roots[name], latest)
    splits, report = build_man_qa(roots)
    pages = Counter(path.split("/")[0] for path in {r["path"] for records in splits.values() for r in records})
    return splits, versions, {**report, "pages_per_package": dict(sorted(pages.items()))}


def rebuild_man_qa(args: argparse.Namespace) -> None:
    """``--man-qa-only``: the held-out task's files, and its entries in the manifest and the two reports."""
    manifest = json.loads((args.out_dir / "manifest.json").read_text(encoding="utf-8"))
    with tempfile.TemporaryDirectory() as tmp:
        deb_dir = args.deb_dir or Path(tmp) / "debs"
        deb_dir.mkdir(parents=True, exist_ok=True)
        splits, versions, report = fetch_and_build_man_qa(deb_dir, Path(tmp) / "man", args.latest)
    manifest["files"] |= write_outputs(args.out_dir, {f"man_qa_{split}.jsonl.gz": r for split, r in splits.items()})
    manifest["packages"] |= versions
    manifest["man_qa"] = report
    (args.out_dir / "manifest.json").write_text(
        json.dumps(manifest, indent=2, sort_keys=True, ensure_ascii=False) + "\n", encoding="utf-8"
    )
    licences = (args.out_dir / "LICENSES.md").read_text(encoding="utf-8")
    licences = licences.split(MAN_LICENCES_HEADING)[0].rstrip() + "\n\n" + render_man_licences(manifest)
    licences = re.sub(r"(\| File \| Records \| Size \|\n\|---\|---\|---\|\n).*?\n\n",
                      lambda m: m[1] + file_rows(manifest) + "\n\n", licences, count=1, flags=re.S)
    (args.out_dir / "LICENSES.md").write_text(licences, encoding="utf-8")
    (args.out_dir / "long_tasks.md").write_text(render_long_tasks(manifest), encoding="utf-8")
    print(f"man_qa: {json.dumps(report, indent=2, sort_keys=True)}")


def build_long_tasks(
    raw_docs: dict[str, str], kernel_splits: dict[str, str], general_texts: list[str]
) -> tuple[dict[str, dict[str, list[Record]]], dict[str, dict]]:
    """Run ``scripts/build_long_tasks.py`` (imported here: it needs hf_efficient and scikit-learn)."""
    sys.path.insert(0, str(REPO_ROOT))
    from build_long_tasks import build_tasks

    return build_tasks(raw_docs, kernel_splits, general_texts)


def render_licenses(manifest: dict, copyrights: dict[str, str]) -> str:
    """Render LICENSES.md: provenance, licences and statistics of the data."""
    packages = manifest["packages"]
    task = manifest["kernel_docs"]
    label_rows = "\n".join(
        f"| {label} | " + " | ".join(str(task["counts"][s][label]) for s in task["counts"]) + " |"
        for label in task["labels"]
    )
    sources = manifest["general"]["records_per_source"]
    long_qa_share = manifest["long_qa"]["test"]["share_evidence_past_512"]
    far_qa_distance = manifest["far_qa"]["test"]["evidence_to_answer_tokens"]["min"]
    long_match_share = manifest["long_match"]["test"]["share_evidence_past_512"]

    def spdx_rows(counts: dict[str, int]) -> str:
        return "\n".join(f"| `{spdx}` | {n} |" for spdx, n in counts.items())

    def quoted(text: str) -> str:
        return "\n".join(f"    {line}".rstrip() for line in text.splitlines())

    return f"""# Embedded default data: sources, licences and statistics

Generated by `python scripts/build_data.py`; do not edit by hand.  The files
are derived from Debian 12 packages (fetched with `apt-get download`, unpacked
with `dpkg-deb -x`).  Exact counts, package versions and sha256 checksums are in
`manifest.json`.

| File | Records | Size |
|---|---|---|
{file_rows(manifest)}

## What the build script does

* **general.jsonl.gz** (`{{"text", "source"}}`): general English for
  pretraining.  {sources.get("gcide", 0)} GCIDE dictionary entries that contain a
  literary quotation (dictd markup removed: syllabified headwords,
  pronunciations, `{{cross-references}}`, `[1913 Webster]`-style source tags
  and character codes such as `['e]`), {sources.get("wordnet", 0)} WordNet
  synsets rendered as `"lemma, lemma: gloss"` and {sources.get("fortunes", 0)}
  fortune cookies (split on `%` lines; ASCII art skipped).  Each source is a
  seeded random sample of its cleaned, de-duplicated records.
* **kernel_docs_{{train,validation,test}}.jsonl.gz** (`{{"text", "label",
  "path"}}`): kernel documentation files (`.rst`/`.txt` under
  `Documentation/`, translations excluded) labelled by their top-level
  subsystem directory.  reST noise (comments, labels, toctrees, kernel-doc and
  include directives, directive options, section adornments, table borders,
  role/link/literal markup) and literal/code blocks are stripped; prose,
  lists, tables and notes are kept.  Documents with at least
  {MIN_TASK_WORDS} words are kept; the {len(task["labels"])} directories with
  the most such documents become the labels (ties broken by name); each label
  is capped at {MAX_PER_LABEL} documents (seeded sample) and split 80/10/10
  stratified by label.  Mean length {task["mean_words"]} words; an estimated
  {task["fraction_over_512_tokens_est"]:.0%} of documents exceed 512 BPE tokens
  (words x 1.3 > 512).
* **domain.jsonl.gz** (`{{"text", "path"}}`): all cleaned English kernel
  documents with at least {MIN_DOMAIN_WORDS} words, excluding the task's
  validation and test documents (so domain-adaptive pretraining never sees
  held-out task text).
* **long_qa_{{train,validation,test}}.jsonl.gz** and
  **far_qa_{{train,validation,test}}.jsonl.gz** (`{{"id", "path", "question",
  "context", "answers", "answer_token", "evidence_token"}}`, SQuAD's format) and
  **long_match_{{train,validation,test}}.jsonl.gz** (`{{"path", "text",
  "section_start", "label"}}`): long-document tasks built from the same
  kernel documents, with section titles kept as paragraphs
  (`scripts/build_long_tasks.py`; positions of the evidence and probes in
  `docs/tasks.md`).  A document keeps its `kernel_docs` split; all others are
  training documents.  In the test split, {long_qa_share:.0%} of the look-up
  QA answers and {long_match_share:.0%} of the matched sections start past token
  512, and every far-evidence answer lies at least {far_qa_distance} tokens from
  its evidence.

| Label | train | validation | test |
|---|---|---|---|
{label_rows}

## Licences and attribution

The texts keep the licences of their sources; redistributing these files means
complying with each of them.

### GCIDE (`dict-gcide` {packages["dict-gcide"]}) — GPL-2.0-or-later

The GNU Collaborative International Dictionary of English, derived from
Webster's Revised Unabridged Dictionary (1913, C. & G. Merriam Co.) and from
WordNet, edited by Patrick Cassidy and volunteer collaborators
(<https://ftp.gnu.org/gnu/gcide>).  Debian copyright file:

{quoted(copyrights["dict-gcide"])}

### WordNet 3.0 (`wordnet-base` {packages["wordnet-base"]}) — WordNet licence

George A. Miller (1995). WordNet: A Lexical Database for English.
Communications of the ACM 38(11): 39-41.  Christiane Fellbaum (1998, ed.)
WordNet: An Electronic Lexical Database. Cambridge, MA: MIT Press.
The licence requires its notice to appear on all copies; Debian copyright file:

{quoted(copyrights["wordnet-base"])}

### Fortunes (`fortunes` {packages["fortunes"]}, `fortunes-min` {packages["fortunes-min"]}) — BSD

fortune-mod data files (Ken Arnold's BSD fortune, Linux port by Florian
LaRoche, files modified by Amy A. Lewis; the `cookie` file is from Karl
Lehenbauer's alt.sources postings).  Both packages ship the same copyright
file:

{quoted(copyrights["fortunes"])}

### Linux kernel documentation (`{KERNEL_DOC_PACKAGE}` {packages[KERNEL_DOC_PACKAGE]}) — GPL-2.0 (mostly)

Copyright Linus Torvalds and many others; the Debian copyright file licenses
the tree as GPL-2 (first stanzas quoted below; the rest concerns source files
not used here).  Individual documents may declare their own licence with an
SPDX header; notably the media uAPI documentation
(`Documentation/userspace-api/media`) is `GFDL-1.1-no-invariants-or-later`.
The `path` field of every record names the original file.

{quoted(first_stanzas(copyrights[KERNEL_DOC_PACKAGE], 2))}

SPDX identifiers declared by the documents in the task splits:

| SPDX-License-Identifier | Documents |
|---|---|
{spdx_rows(task["spdx_license_identifiers"])}

SPDX identifiers declared by the documents in `domain.jsonl.gz`:

| SPDX-License-Identifier | Documents |
|---|---|
{spdx_rows(manifest["domain"]["spdx_license_identifiers"])}

SPDX identifiers declared by the documents in `long_qa_*.jsonl.gz`:

| SPDX-License-Identifier | Documents |
|---|---|
{spdx_rows(manifest["long_qa"]["spdx_license_identifiers"])}

SPDX identifiers declared by the documents in `far_qa_*.jsonl.gz`:

| SPDX-License-Identifier | Documents |
|---|---|
{spdx_rows(manifest["far_qa"]["spdx_license_identifiers"])}

SPDX identifiers declared by the documents in `long_match_*.jsonl.gz` (a
negative example ends with a section of another of these documents):

| SPDX-License-Identifier | Documents |
|---|---|
{spdx_rows(manifest["long_match"]["spdx_license_identifiers"])}

{render_man_licences(manifest)}"""


def file_rows(manifest: dict) -> str:
    """LICENSES.md's table of files."""
    return "\n".join(
        f"| `{name}` | {info['records']} | {info['bytes'] / 1e6:.2f} MB |" for name, info in manifest["files"].items()
    )


MAN_LICENCES_HEADING = "### Debian manual pages (`man_qa_*.jsonl.gz`), the held-out task"


def render_man_licences(manifest: dict) -> str:
    """LICENSES.md's last section: the held-out task's manual pages, per package."""
    pages = manifest["man_qa"]["pages_per_package"]
    man_rows = "\n".join(f"| `{name}` {manifest['packages'][name]} | {pages.get(name, 0)} |" for name in MAN_PACKAGES)
    return f"""{MAN_LICENCES_HEADING}

The held-out task's contexts are the first pages of manual pages of section 1
and 8 (rendered by `groff -mandoc`; `scripts/build_man_qa.py`).  Each page
keeps the licence of the package that ships it, as that package's Debian
copyright file (`/usr/share/doc/<package>/copyright`) states; the `path` of
every record names the package and the page.  The packages fetched, and the
pages each gave:

| Package | Pages |
|---|---|
{man_rows}
"""


def render_long_tasks(manifest: dict) -> str:
    """Render long_tasks.md: the long tasks' build report as the tables docs/tasks.md includes.

    From ``manifest.json`` alone, so the page shows the manifest's numbers and a test can re-render
    the committed file without the packages.
    """

    def table(header: list[str], rows: list[list]) -> str:
        lines = [header, ["---"] * len(header), *rows]
        return "\n".join("| " + " | ".join(str(cell) for cell in line) + " |" for line in lines)

    def spread(stats: dict, keys: tuple[str, ...]) -> str:
        return " / ".join(f"{stats[key]:,}" for key in keys)

    def size(task: str, split: str) -> str:
        return f"{manifest['files'][f'{task}_{split}.jsonl.gz']['bytes']:,} B"

    splits = ("train", "validation", "test")
    def lookup_rows(task: str) -> list[list]:
        return [[split, f"{s['examples']:,}", f"{s['documents']:,}", f"{s['mean_context_tokens']:,}",
                 s["share_evidence_past_512"], f"{s['answer_token']['median']:,}", s["share_answer_text_in_first_512"],
                 spread(s["evidence_to_answer_tokens"], ("min", "median", "max")),
                 spread(s["answer_tokens"], ("median", "max")), size(task, split)]
                for split, s in ((split, manifest[task][split]) for split in splits)]

    lookup_header = ["split", "examples", "documents", "mean context tokens", "answer past token 512",
                     "median answer token", "answer text in first 512 tokens",
                     "evidence-to-answer tokens (min / median / max)", "answer tokens (median / max)", "file"]
    far_qa_rows = [
        [split, f"{s['examples']:,}", f"{s['documents']:,}", f"{s['mean_context_tokens']:,}",
         s["share_evidence_past_512"], spread(s["answer_token"], ("min", "median", "max")),
         s["share_answer_text_in_first_512"],
         " / ".join(str(share) for share in s["share_answer_by_heading_rank_past_512"][:4]),
         s["largest_share_one_heading_rank_past_512"], s["share_drawn_answered_by_heading_match"],
         spread(s["evidence_to_answer_tokens"], ("min", "median", "max")),
         spread(s["answer_tokens"], ("median", "max")), size("far_qa", split)]
        for split, s in ((split, manifest["far_qa"][split]) for split in splits)
    ]
    match = manifest["long_match"]
    match_rows = [
        [split, f"{s['examples']:,}", f"{s['labels']['other']:,} / {s['labels']['same']:,}", f"{s['mean_tokens']:,}",
         s["share_evidence_past_512"], f"{s['median_evidence_token']:,}", size("long_match", split)]
        for split, s in ((split, match[split]) for split in splits)
    ]
    majority = [max(match[split]["labels"].values()) / match[split]["examples"] for split in ("validation", "test")]
    probe_rows = [["majority class", *(f"{share:.3f}" for share in majority)]] + [
        [PROBES[name], *(f"{match['probes'][name][split]:.3f}" for split in ("validation", "test"))] for name in PROBES
    ]
    task_bytes = {
        task: sum(manifest["files"][f"{task}_{split}.jsonl.gz"]["bytes"] for split in splits)
        for task in ("long_qa", "far_qa", "long_match", "man_qa")
    }
    return f"""### `long_qa`

{table(lookup_header, lookup_rows("long_qa"))}

### `far_qa`

{table(["split", "examples", "documents", "mean context tokens", "answer past token 512",
        "answer token (min / median / max)", "answer text in first 512 tokens",
        "answer is the 1st / 2nd / 3rd / 4th heading past token 512", "largest share of one heading rank",
        "drawn questions the heading match answers (dropped)",
        "evidence-to-answer tokens (min / median / max)", "answer tokens (median / max)", "file"], far_qa_rows)}

### `long_match`

{table(["split", "examples", "other / same", "mean tokens", "section past token 512", "median section token",
        "file"], match_rows)}

Probes, trained on the training split (scikit-learn, in the build):

{table(["probe", "validation accuracy", "test accuracy"], probe_rows)}

### `man_qa` (the held-out task)

{table(lookup_header, lookup_rows("man_qa"))}

Pages ("documents") from {len(manifest["man_qa"]["pages_per_package"])} packages; the evidence is the option's tag.

The {len(task_bytes) * len(splits)} files take {sum(task_bytes.values()):,} B in all ({", ".join(
    f"`{task}` {count:,} B" for task, count in task_bytes.items())}).
"""


if __name__ == "__main__":
    main()
