"""Tests of the embedded default data in hf_efficient/data and its loaders."""

from __future__ import annotations

import gzip
import hashlib
import importlib.util
import json
import re
from collections import Counter
from pathlib import Path

import datasets
import pytest

import hf_efficient.data as data_module
from hf_efficient.data import (
    DATA_DIR,
    KERNEL_DOCS_SPLITS,
    load_domain_corpus,
    load_general_corpus,
    load_kernel_docs,
)

MANIFEST = json.loads((DATA_DIR / "manifest.json").read_text(encoding="utf-8"))
BUILD_SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "build_data.py"


def read_records(name: str) -> list[dict[str, str]]:
    with gzip.open(DATA_DIR / name, "rt", encoding="utf-8") as fh:
        return [json.loads(line) for line in fh]


@pytest.fixture(scope="module")
def kernel_docs() -> datasets.DatasetDict:
    return load_kernel_docs()


@pytest.fixture(scope="module")
def general() -> datasets.Dataset:
    return load_general_corpus()


@pytest.fixture(scope="module")
def domain() -> datasets.Dataset:
    return load_domain_corpus()


@pytest.fixture(scope="module")
def build_data():
    spec = importlib.util.spec_from_file_location("build_data", BUILD_SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_files_match_manifest():
    expected = {"general.jsonl.gz", "domain.jsonl.gz"} | {
        f"kernel_docs_{split}.jsonl.gz" for split in KERNEL_DOCS_SPLITS
    }
    assert set(MANIFEST["files"]) == expected
    assert {p.name for p in DATA_DIR.glob("*.jsonl.gz")} == expected
    for name, info in MANIFEST["files"].items():
        payload = (DATA_DIR / name).read_bytes()
        assert len(payload) == info["bytes"], name
        assert hashlib.sha256(payload).hexdigest() == info["sha256"], name
        assert len(read_records(name)) == info["records"], name


def test_licenses_name_every_source_package():
    licenses = (DATA_DIR / "LICENSES.md").read_text(encoding="utf-8")
    for package, version in MANIFEST["packages"].items():
        assert f"`{package}` {version}" in licenses
    assert "WordNet 3.0 Copyright 2006 by Princeton University" in licenses


def test_total_size_is_bounded():
    total = sum(p.stat().st_size for p in DATA_DIR.iterdir() if p.is_file())
    assert total <= 15 * 1024 * 1024


def test_loaders_return_documented_columns(general, domain, kernel_docs):
    string = datasets.Value("string")
    assert general.features == datasets.Features({"source": string, "text": string})
    assert set(general["source"]) == {"gcide", "wordnet", "fortunes"}
    assert domain.features == datasets.Features({"path": string, "text": string})
    assert list(kernel_docs) == list(KERNEL_DOCS_SPLITS)
    for split in kernel_docs.values():
        assert set(split.column_names) == {"text", "label", "path"}
        assert split.features["text"] == string
        assert split.features["path"] == string
        label = split.features["label"]
        assert isinstance(label, datasets.ClassLabel)
        assert label.names == sorted(label.names) == MANIFEST["kernel_docs"]["labels"]
        assert label.num_classes == 10
        assert set(split["label"]) == set(range(10))


def test_kernel_docs_splits_are_disjoint(kernel_docs):
    paths = {split: kernel_docs[split]["path"] for split in KERNEL_DOCS_SPLITS}
    for split, split_paths in paths.items():
        assert len(set(split_paths)) == len(split_paths), split
    assert not set(paths["train"]) & set(paths["validation"])
    assert not set(paths["train"]) & set(paths["test"])
    assert not set(paths["validation"]) & set(paths["test"])


def test_kernel_docs_split_is_stratified(kernel_docs):
    names = kernel_docs["train"].features["label"].names
    counts = {split: Counter(names[i] for i in kernel_docs[split]["label"]) for split in KERNEL_DOCS_SPLITS}
    assert counts == {split: Counter(MANIFEST["kernel_docs"]["counts"][split]) for split in KERNEL_DOCS_SPLITS}
    for label in names:
        total = sum(counts[split][label] for split in KERNEL_DOCS_SPLITS)
        for split in ("validation", "test"):
            assert abs(counts[split][label] - 0.1 * total) <= 1, (label, split)


def test_labels_are_the_documentation_directory(kernel_docs):
    for split in kernel_docs.values():
        names = split.features["label"].names
        for label, path in zip(split["label"], split["path"], strict=True):
            assert path.startswith(f"Documentation/{names[label]}/")


def test_kernel_docs_are_long(kernel_docs):
    words = [len(t.split()) for s in kernel_docs.values() for t in s["text"]]
    assert min(words) >= 200
    assert sum(w * 1.3 > 512 for w in words) / len(words) > 0.5


def test_domain_corpus_excludes_heldout_documents(domain, kernel_docs):
    domain_paths = set(domain["path"])
    assert len(domain_paths) == len(domain)
    for split in ("validation", "test"):
        assert not domain_paths & set(kernel_docs[split]["path"]), split
    assert set(kernel_docs["train"]["path"]) <= domain_paths


def test_texts_are_clean(general, domain, kernel_docs):
    for dataset in (general, domain, *kernel_docs.values()):
        assert all(text.strip() for text in dataset["text"])
    gcide = [t for t, s in zip(general["text"], general["source"], strict=True) if s == "gcide"]
    gcide_markup = re.compile(r"</?\w+>|[{}\\]|\[1913 Webster|\[PJC\]|\['e\]|\[=a\]")
    assert not [t for t in gcide if gcide_markup.search(t)]
    rst_markup = re.compile(
        r"^\s*\.\. (?:toctree|kernel-doc|include|_[\w-]+:|SPDX)"
        r"|^[=\-~^*#]{4,}$|:(?:ref|doc|c:func|c:type):`",
        re.MULTILINE,
    )
    kernel_texts = [t for s in (domain, *kernel_docs.values()) for t in s["text"]]
    assert not [t[:80] for t in kernel_texts if rst_markup.search(t)]


def test_missing_file_names_the_build_command(tmp_path, monkeypatch):
    monkeypatch.setattr(data_module, "DATA_DIR", tmp_path)
    with pytest.raises(FileNotFoundError, match=r"general\.jsonl\.gz.*scripts/build_data\.py"):
        load_general_corpus()


def test_clean_rst_keeps_prose_only(build_data):
    source = """.. SPDX-License-Identifier: GPL-2.0

.. _label:

=====
Title
=====

See :ref:`the guide <guide>` and ``foo()``::

    int code(void);

.. note::
   Kept **note**.

.. toctree::
   :maxdepth: 2

   hidden
"""
    assert build_data.clean_rst(source) == "Title\n\nSee the guide and foo():\n\n   Kept note."


def test_clean_gcide_removes_dictionary_markup(build_data):
    entry = (
        'Affect \\Af*fect"\\ ([a^]f*f[e^]kt"), v. t. [L. affectus. See {Fact}.]\n'
        "   1. To act upon. [Obs.] Caf['e]. --Milton.\n"
        "   [1913 Webster]\n"
    )
    assert build_data.clean_gcide(entry) == (
        "Affect, v. t. [L. affectus. See Fact.] 1. To act upon. [Obs.] Cafe. --Milton."
    )
