"""The README's Python example runs as written."""

import re
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def test_readme_python_examples_run(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the example saves a checkpoint folder
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.DOTALL)
    assert blocks, "the README has no Python example"
    for block in blocks:
        exec(compile(block, str(README), "exec"), {"__name__": "__readme__"})


def test_readme_has_exactly_the_two_setup_commands():
    text = README.read_text()
    assert "bash scripts/demo.sh" in text and "bash scripts/test.sh" in text
