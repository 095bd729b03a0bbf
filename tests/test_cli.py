"""The `hf-efficient` command: every subcommand answers --help, bad command lines fail with one line, one spelling,
and the command imports only what the subcommand on its command line needs (with its arguments cached: no torch)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import hf_efficient
import hf_efficient_cli
from hf_efficient.cli import build_parser, main
from hf_efficient_cli import COMMANDS

SPELLING_COMMANDS = ("pretrain", "adapt", "finetune", "workflow", "demo", "convert")


def test_version():
    result = subprocess.run([sys.executable, "-m", "hf_efficient.cli", "--version"], capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0 and hf_efficient.__version__ in result.stdout


def imported_after(cache: Path, *argvs: list[str]) -> set[str]:
    """The top-level modules (and hf_efficient's) a fresh interpreter with the cache folder `cache` holds after
    `main(argv)` for each of `argvs`."""
    script = ("import json, sys\nfrom hf_efficient_cli import main\n"
              f"codes = [main(argv) for argv in {argvs!r}]\n"
              "print(json.dumps([codes, sorted({name.split('.')[0] for name in sys.modules} | "
              "{name for name in sys.modules if name.startswith('hf_efficient')})]))")
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600,
                            env={**os.environ, "HF_EFFICIENT_CACHE": str(cache)})
    codes, modules = json.loads(result.stdout.splitlines()[-1])
    assert codes == [0 if "--help" in argv or not argv else 2 for argv in argvs], result.stderr
    return set(modules)


def test_the_top_level_help_and_a_mistyped_command_import_nothing_heavy(tmp_path):
    modules = imported_after(tmp_path, ["--help"], [], ["nope"])
    assert not modules & {"hf_efficient", "torch", "transformers", "datasets", "numpy"}, modules


def test_a_command_imports_its_own_module_only_and_once_its_arguments_are_cached_not_torch(tmp_path):
    argvs = (["finetune", "--help"], ["finetune", "--max_lenght", "64"], ["finetune", "--max_length"])
    modules = imported_after(tmp_path, *argvs)  # no cache yet: the real parser, which is described in it
    assert "hf_efficient.cli.finetune" in modules
    # peft is imported by `import hf_efficient` (it registers the families' targets in peft's tables)
    assert not modules & {"hf_efficient.bench", "hf_efficient.convert", "sklearn", "matplotlib", "evaluate"}, modules
    assert (tmp_path / "cli" / "finetune.json").is_file()
    modules = imported_after(tmp_path, *argvs)
    assert not modules & {"hf_efficient", "torch", "transformers", "datasets", "numpy"}, modules


def answers(capsys, argvs: list[list[str]]) -> list[tuple[int, str, str]]:
    """(exit status, stdout, stderr) of `main(argv)` for each of `argvs`."""
    return [(main(argv), *capsys.readouterr()) for argv in argvs]


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_the_cached_arguments_answer_help_and_argument_errors_as_the_real_parser(command, capsys, monkeypatch,
                                                                                 tmp_path):
    monkeypatch.setenv("HF_EFFICIENT_CACHE", str(tmp_path))
    argvs = [[command, "--help"], [command, "--max_lenght", "5"], [command, "--output_dir"], [command, "-x"]]
    real = answers(capsys, argvs)  # no cache yet: the real parser, which is described in it
    assert build_parser(command, use_cache=True).commands.choices[command].get_default("run") is None  # cached
    assert answers(capsys, argvs) == real


@pytest.mark.parametrize("broken", ['{"key": "KEY", "argu', '{"key": "KEY", "description": null, "epilog": null, '
                                    '"usage": null, "arguments": [{"flags": ["--a"], "dest": "a", "nargs": "bad", '
                                    '"metavar": null, "required": false, "hidden": false, "help": null}]}'])
def test_a_stale_or_broken_cache_is_rebuilt_from_the_real_parser(broken, capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("HF_EFFICIENT_CACHE", str(tmp_path))
    real = answers(capsys, [["convert", "--help"]])
    cached = tmp_path / "cli" / "convert.json"
    written, key = cached.read_text(), json.loads(cached.read_text())["key"]
    cached.write_text(broken.replace("KEY", key))
    assert answers(capsys, [["convert", "--help"]]) == real
    assert cached.read_text() == written
    monkeypatch.setattr(hf_efficient_cli, "package_version", lambda: "0.0.1")  # another install
    assert build_parser("convert", use_cache=True).commands.choices["convert"].get_default("run") is not None
    assert json.loads(cached.read_text())["key"] != key


def test_no_command_prints_the_commands(capsys):
    assert main([]) == 0
    out = capsys.readouterr().out
    assert all(command in out for command in COMMANDS)
    assert sorted(build_parser().commands.choices) == sorted(COMMANDS)


def test_every_command_help_is_whole_sentences_and_the_two_demos_name_each_other():
    for name, (_, summary) in COMMANDS.items():
        assert summary[0].isupper() and summary.endswith("."), name
    assert "`demo --from_scratch`" in COMMANDS["workflow"][1] and "`workflow`" in COMMANDS["demo"][1]


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_command_answers_help(command, capsys):
    assert main([command, "--help"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"usage: hf-efficient {command} ")
    assert COMMANDS[command][1].split()[0] in out  # its description


def one_line_error(capsys, argv: list[str]) -> str:
    assert main(argv) == 2
    captured = capsys.readouterr()
    lines = captured.err.splitlines()
    assert len(lines) == 1 and "usage:" not in captured.err and "Traceback" not in captured.err, captured.err
    assert not lines[0].endswith("."), lines[0]
    return lines[0]


def test_an_option_of_another_command_is_one_line_naming_the_command(capsys):
    line = one_line_error(capsys, ["finetune", "--model_type", "x"])
    assert line.startswith("hf-efficient finetune: error: unrecognized arguments: --model_type x")


def test_a_misspelt_option_names_the_closest_one(capsys):
    line = one_line_error(capsys, ["pretrain", "--max-lenght", "64"])
    assert line.endswith("unrecognized arguments: --max-lenght 64; did you mean --max_length? "
                         "(see `hf-efficient pretrain --help`)"), line
    assert "invalid int value: 'abc'" in one_line_error(capsys, ["adapt", "--max_length", "abc"])
    assert "invalid choice: 'nope'" in one_line_error(capsys, ["nope"])


def test_an_error_of_the_run_names_the_command_and_has_no_final_full_stop(capsys, tmp_path):
    line = one_line_error(capsys, ["finetune", "--model_name_or_path", str(tmp_path / "none"), "--output_dir",
                                   str(tmp_path / "out")])
    assert line == f"hf-efficient finetune: error: checkpoint folder {tmp_path / 'none'} does not exist"
    line = one_line_error(capsys, ["pretrain", "--output_dir", str(tmp_path), "--model_type", "hfe_longfromer"])
    assert line.startswith("hf-efficient pretrain: error: unknown --model_type 'hfe_longfromer'; "
                           "did you mean hfe_longformer?"), line


@pytest.mark.parametrize("command", SPELLING_COMMANDS)
def test_help_shows_transformers_underscore_spelling_only(command, capsys):
    assert main([command, "--help"]) == 0
    out = capsys.readouterr().out
    assert "--max_length" in out and "--max-length" not in out


@pytest.mark.parametrize("argv", [["convert", "src", "out"], ["finetune"], ["workflow"]])
def test_the_dashed_spelling_still_parses(argv):
    args = build_parser(argv[0]).parse_args([*argv, "--max-length", "256"])
    assert args.max_length == 256


def test_a_too_old_transformers_is_one_line_naming_the_version(tmp_path):
    """An install without dependencies (an image's own transformers) meets the package's version check, not an
    AttributeError mid-run."""
    script = ("import importlib.metadata as metadata, sys\nreal = metadata.version\n"
              "metadata.version = lambda name: '5.17.0' if name == 'transformers' else real(name)\n"
              "from hf_efficient_cli import main\nsys.exit(main(['bench', '--lengths', '512']))")
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600,
                            env={**os.environ, "HF_EFFICIENT_CACHE": str(tmp_path)})
    assert result.returncode == 1 and result.stdout == ""
    assert result.stderr.splitlines() == [
        "hf-efficient: error: transformers>=5.23,<6 is required for a normal functioning of this module, but found "
        "transformers==5.17.0."]
