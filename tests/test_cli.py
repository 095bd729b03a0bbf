"""The `hf-efficient` command: every subcommand answers --help, bad command lines fail with one line, one spelling."""

import subprocess
import sys

import pytest

import hf_efficient
from hf_efficient.cli import build_parser, main

COMMANDS = sorted(build_parser().commands.choices)
SPELLING_COMMANDS = ("pretrain", "adapt", "finetune", "workflow", "demo", "convert")


def test_version():
    result = subprocess.run([sys.executable, "-m", "hf_efficient.cli", "--version"], capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0 and hf_efficient.__version__ in result.stdout


def test_no_command_prints_the_commands(capsys):
    assert main([]) == 0
    out = capsys.readouterr().out
    assert all(command in out for command in COMMANDS)


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_answers_help(command, capsys):
    assert main([command, "--help"]) == 0
    assert capsys.readouterr().out.startswith(f"usage: hf-efficient {command} ")


def one_line_error(capsys, argv: list[str]) -> str:
    assert main(argv) == 2
    captured = capsys.readouterr()
    lines = captured.err.splitlines()
    assert len(lines) == 1 and "usage:" not in captured.err and "Traceback" not in captured.err, captured.err
    return lines[0]


def test_an_option_of_another_command_is_one_line_naming_the_command(capsys):
    line = one_line_error(capsys, ["finetune", "--model_type", "x"])
    assert line.startswith("hf-efficient finetune: error: unrecognized arguments: --model_type x")


def test_a_misspelt_option_names_the_closest_one(capsys):
    assert "--max-lenght -> --max_length?" in one_line_error(capsys, ["pretrain", "--max-lenght", "64"])
    assert "invalid int value: 'abc'" in one_line_error(capsys, ["adapt", "--max_length", "abc"])
    assert "invalid choice: 'nope'" in one_line_error(capsys, ["nope"])


@pytest.mark.parametrize("command", SPELLING_COMMANDS)
def test_help_shows_transformers_underscore_spelling_only(command, capsys):
    assert main([command, "--help"]) == 0
    out = capsys.readouterr().out
    assert "--max_length" in out and "--max-length" not in out


@pytest.mark.parametrize("argv", [["convert", "src", "out"], ["finetune"], ["workflow"]])
def test_the_dashed_spelling_still_parses(argv):
    args = build_parser().parse_args([*argv, "--max-length", "256"])
    assert args.max_length == 256
