"""The suite's `hf-efficient` runs cache their commands' arguments (hf_efficient_cli.py) in a folder of their own,
not the user's cache."""

import pytest


@pytest.fixture(autouse=True, scope="session")
def cli_cache(tmp_path_factory):
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("HF_EFFICIENT_CACHE", str(tmp_path_factory.mktemp("hf_efficient_cache")))
        yield
