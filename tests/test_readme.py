"""The README's Python example runs as written."""

import re
import subprocess
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def test_readme_python_examples_run(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the example saves a checkpoint folder
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.DOTALL)
    assert blocks, "the README has no Python example"
    for block in blocks:
        exec(compile(block, str(README), "exec"), {"__name__": "__readme__"})


def test_readme_setup_is_exactly_two_commands_of_working_scripts():
    """The set-up section names two commands; each is a script that exists and that bash can parse."""
    commands = re.findall(r"^ {4}(bash \S+)$", README.read_text(), flags=re.MULTILINE)
    assert commands == ["bash scripts/demo.sh", "bash scripts/test.sh"]
    for command in commands:
        script = README.parent / command.split()[1]
        assert subprocess.run(["bash", "-n", str(script)], capture_output=True).returncode == 0, script
    assert '"$@"' in (README.parent / "scripts" / "demo.sh").read_text()  # `bash scripts/demo.sh --overwrite_output_dir`


def test_readme_says_where_the_command_is_and_how_long_the_tests_take():
    text = " ".join(README.read_text().split())
    assert ".venv/bin/hf-efficient" in text and "source .venv/bin/activate" in text
    assert "under 15 minutes on 2 idle cores" in text and "--durations=20" in text
    assert '"$@"' in (README.parent / "scripts" / "test.sh").read_text()  # `bash scripts/test.sh --durations=20`
