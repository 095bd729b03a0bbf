"""Fixtures several test files share. The suite's `hf-efficient` runs cache their commands' arguments
(hf_efficient_cli.py) in a folder of their own, not the user's cache."""

from __future__ import annotations

import pytest

from hf_efficient.training import memory_fit


@pytest.fixture(autouse=True, scope="session")
def cli_cache(tmp_path_factory):
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("HF_EFFICIENT_CACHE", str(tmp_path_factory.mktemp("hf_efficient_cache")))
        yield


@pytest.fixture
def free_for(monkeypatch):
    """`free_for(n)`: the free memory `memory_fit` sees becomes what n sequences of its measured step need, and a
    byte more."""
    real, measured = memory_fit.measure, {}

    def measure(trainer):
        measured["estimate"] = real(trainer)
        return measured["estimate"]

    def patch(sequences: int) -> None:
        monkeypatch.setattr(memory_fit, "measure", measure)
        monkeypatch.setattr(memory_fit, "available_bytes",
                            lambda device: (measured["estimate"].needed(sequences) + 1) / memory_fit.USABLE)

    return patch
