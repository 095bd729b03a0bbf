"""The `hf-efficient` command answers --help and --version."""

import subprocess
import sys

import hf_efficient


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "hf_efficient.cli", *args], capture_output=True, text=True, timeout=120)


def test_version():
    result = run("--version")
    assert result.returncode == 0 and hf_efficient.__version__ in result.stdout


def test_help_lists_the_subcommands():
    result = run("--help")
    assert result.returncode == 0 and "compare" in result.stdout
