"""Embedded default data: real text that works offline.

The files in this folder are built by ``scripts/build_data.py`` from Debian
packages; ``LICENSES.md`` gives their sources, licences and statistics and
``manifest.json`` their counts and checksums.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import datasets

__all__ = [
    "DATA_DIR",
    "KERNEL_DOCS_SPLITS",
    "load_domain_corpus",
    "load_general_corpus",
    "load_kernel_docs",
]

DATA_DIR = Path(__file__).resolve().parent
KERNEL_DOCS_SPLITS = ("train", "validation", "test")
BUILD_COMMAND = "python scripts/build_data.py"


def _read_jsonl_gz(name: str) -> list[dict[str, str]]:
    """Read the records of a ``.jsonl.gz`` file in ``DATA_DIR``."""
    path = DATA_DIR / name
    if not path.is_file():
        raise FileNotFoundError(f"embedded data file {path} is missing; build it with `{BUILD_COMMAND}`")
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        return [json.loads(line) for line in fh]


def _strings(*columns: str) -> datasets.Features:
    return datasets.Features({name: datasets.Value("string") for name in columns})


def load_general_corpus() -> datasets.Dataset:
    """General-English pretraining corpus.

    Columns: ``text`` and ``source`` (``"gcide"``, ``"wordnet"`` or
    ``"fortunes"``).
    """
    records = _read_jsonl_gz("general.jsonl.gz")
    return datasets.Dataset.from_list(records, features=_strings("text", "source"))


def load_domain_corpus() -> datasets.Dataset:
    """Linux kernel documentation for domain-adaptive pretraining.

    Columns: ``text`` and ``path`` (e.g. ``Documentation/mm/hmm.rst``).  The
    validation and test documents of :func:`load_kernel_docs` are excluded.
    """
    records = _read_jsonl_gz("domain.jsonl.gz")
    return datasets.Dataset.from_list(records, features=_strings("text", "path"))


def load_kernel_docs() -> datasets.DatasetDict:
    """Long-document classification: kernel docs labelled by subsystem.

    Splits ``train``, ``validation`` and ``test``; columns ``text``,
    ``label`` (a :class:`datasets.ClassLabel` whose names are the sorted
    ``Documentation/`` subsystem directories) and ``path``.
    """
    splits = {split: _read_jsonl_gz(f"kernel_docs_{split}.jsonl.gz") for split in KERNEL_DOCS_SPLITS}
    names = sorted({r["label"] for records in splits.values() for r in records})
    features = _strings("text", "label", "path")
    features["label"] = datasets.ClassLabel(names=names)
    return datasets.DatasetDict(
        {split: datasets.Dataset.from_list(records, features=features) for split, records in splits.items()}
    )
