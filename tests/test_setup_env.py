"""scripts/setup_env.sh runs pip only when the install is missing or out of date (a fake `.venv/bin/python` records
what it is asked, so no package is installed)."""

import os
import shutil
import stat
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FAKE_PYTHON = """#!/usr/bin/env bash
echo "$*" >> "$CALLS"
if [ "$1" = "-c" ]; then exit "${INSTALLED:-0}"; fi
"""


def pip_calls(root: Path, installed: bool = True) -> list[str]:
    """The pip commands one run of the script in `root` made; `installed`: what the version check finds."""
    calls = root / "calls.log"
    calls.unlink(missing_ok=True)
    env = {**os.environ, "CALLS": str(calls), "INSTALLED": "0" if installed else "1"}
    subprocess.run(["bash", "scripts/setup_env.sh"], cwd=root, env=env, check=True, timeout=60)
    return [line for line in calls.read_text().splitlines() if line.startswith("-m pip")]


def test_setup_skips_pip_when_current_and_reinstalls_when_the_metadata_or_torch_changes(tmp_path):
    for name in ("setup.cfg", "setup.py", "pyproject.toml", "scripts/setup_env.sh"):
        (tmp_path / name).parent.mkdir(exist_ok=True)
        shutil.copy(ROOT / name, tmp_path / name)
    python = tmp_path / ".venv" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text(FAKE_PYTHON)
    python.chmod(python.stat().st_mode | stat.S_IEXEC)

    first = pip_calls(tmp_path)
    assert len(first) == 3 and first[-1] == "-m pip install --quiet -e .[dev]", first
    assert pip_calls(tmp_path) == []  # the second run: nothing to do
    assert len(pip_calls(tmp_path, installed=False)) == 3  # torch (or hf_efficient) missing or of another version
    assert pip_calls(tmp_path) == []
    with open(tmp_path / "setup.cfg", "a") as file:
        file.write("\n# a new dependency\n")
    assert len(pip_calls(tmp_path)) == 3
    assert pip_calls(tmp_path) == []
