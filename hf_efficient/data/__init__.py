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
    "LONG_MATCH_LABELS",
    "load_domain_corpus",
    "load_far_qa",
    "load_general_corpus",
    "load_kernel_docs",
    "load_long_match",
    "load_long_qa",
    "load_man_qa",
]

DATA_DIR = Path(__file__).resolve().parent
KERNEL_DOCS_SPLITS = ("train", "validation", "test")
LONG_MATCH_LABELS = ("other", "same")
BUILD_COMMAND = "python scripts/build_data.py"


def _read_jsonl_gz(name: str) -> list[dict]:
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


def _splits(name: str, features: datasets.Features, record=lambda r: r) -> datasets.DatasetDict:
    """The splits of ``name``, each stored record passed through ``record``."""
    return datasets.DatasetDict(
        {
            split: datasets.Dataset.from_list(
                [record(r) for r in _read_jsonl_gz(f"{name}_{split}.jsonl.gz")], features=features
            )
            for split in KERNEL_DOCS_SPLITS
        }
    )


def _qa_splits(name: str) -> datasets.DatasetDict:
    features = _strings("id", "path", "question", "context")
    features["answers"] = datasets.Sequence(
        {"text": datasets.Value("string"), "answer_start": datasets.Value("int32")}
    )
    features["answer_token"] = datasets.Value("int32")
    features["evidence_token"] = datasets.Value("int32")
    return _splits(name, features)


def load_long_qa() -> datasets.DatasetDict:
    """Look-up QA over long kernel documents, in SQuAD's format.

    "What is the first sentence under the heading "<title>"?" Splits ``train``,
    ``validation`` and ``test`` (by document); columns ``id``, ``path``,
    ``question``, ``context`` (up to 1,920 tokens of all-MiniLM-L6-v2's
    tokenizer), ``answers`` (``{"text": [...], "answer_start": [...]}``, one
    answer at its character offset), ``answer_token`` and ``evidence_token``
    (token indices of the answer and of the heading the question names).  Most
    answers start past the first 512 tokens; ``docs/tasks.md`` gives the
    positions.
    """
    return _qa_splits("long_qa")


def load_far_qa() -> datasets.DatasetDict:
    """Far-evidence QA: questions no 512-token window can answer, in SQuAD's format.

    "Under which heading does the document say: "<sentence>"?", where the
    sentence starts more than 512 tokens below its heading and the heading
    past token 512 of the context (each question's own window of the
    document, up to 1,920 tokens); the columns are :func:`load_long_qa`'s
    (``evidence_token`` is the quoted sentence's).
    """
    return _qa_splits("far_qa")


def load_man_qa() -> datasets.DatasetDict:
    """The held-out task: "what does the option X of a command do?" over Debian manual pages, in SQuAD's format.

    A corpus apart from the kernel documentation that the recipe's settings were chosen on; no choice reads its
    scores.  Splits ``train``, ``validation`` and ``test`` (by page); the columns are :func:`load_long_qa`'s
    (``path`` is ``package/section/page``, the context a page's first 1,920 tokens at most, the answer the first
    sentence of the option's description, ``evidence_token`` the option's tag).  Most answers start past token 512.
    """
    return _qa_splits("man_qa")


def load_long_match() -> datasets.DatasetDict:
    """Does a long kernel document's last section belong to it?

    Splits ``train``, ``validation`` and ``test`` (by document); columns
    ``text``, ``label`` (:class:`datasets.ClassLabel`: ``other`` or
    ``same``), ``path`` (the document the text starts with),
    ``section_start`` (character offset of the last section, always past the
    first 512 tokens), and the text's two parts as a text pair: ``document``
    (``text[:section_start]``) and ``section`` (``text[section_start:]``).
    """
    features = _strings("text", "label", "path", "document", "section")
    features["label"] = datasets.ClassLabel(names=list(LONG_MATCH_LABELS))
    features["section_start"] = datasets.Value("int32")

    def parts(r: dict) -> dict:
        return {**r, "document": r["text"][: r["section_start"]], "section": r["text"][r["section_start"] :]}

    return _splits("long_match", features, parts)
