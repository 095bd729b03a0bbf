"""Two runs on one output folder: the second refuses with one line; a lock a killed run left does not block."""

import os
import subprocess
import sys
import textwrap

import pytest

from hf_efficient.cli import main
from hf_efficient.training import stage

HOLDER = textwrap.dedent("""
    import sys
    from hf_efficient.training import stage
    stage.lock_output_dir(sys.argv[1])
    print("holding", flush=True)
    sys.stdin.readline()  # until the test says so
    stage.release_output_dir(sys.argv[1])
""")


def test_a_second_run_on_a_held_folder_refuses_with_one_line(tmp_path, capsys):
    out = tmp_path / "out"
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(out)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True, env={**os.environ, "PYTHONPATH": os.getcwd()})
    try:
        assert holder.stdout.readline() == "holding\n"
        assert main(["adapt", "--model_name_or_path", str(tmp_path / "any"), "--output_dir", str(out),
                     "--report_to", "none"]) == 2
        assert capsys.readouterr().err == (
            f"hf-efficient adapt: error: {out} is in use by another run (pid {holder.pid}, lock file {out / stage.LOCK_FILE}): "
            "wait for it to finish, or choose another --output_dir\n")
        holder.communicate("\n", timeout=60)  # the first run is unharmed: it finishes and releases the folder
    finally:
        holder.kill()
    assert holder.returncode == 0
    assert not (out / stage.LOCK_FILE).exists()
    stage.lock_output_dir(str(out))  # free again
    stage.release_output_dir(str(out))


def test_a_lock_file_left_by_a_killed_run_does_not_block(tmp_path):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    (tmp_path / stage.LOCK_FILE).write_text(f"{dead.pid}\n")  # as a run killed with -9 leaves it
    stage.lock_output_dir(str(tmp_path))
    try:
        assert (tmp_path / stage.LOCK_FILE).read_text() == f"{os.getpid()}\n"
    finally:
        stage.release_output_dir(str(tmp_path))
    assert not (tmp_path / stage.LOCK_FILE).exists()


def test_the_same_process_may_take_its_own_folder_again(tmp_path):
    stage.lock_output_dir(str(tmp_path))
    try:
        stage.lock_output_dir(str(tmp_path))  # e.g. a run resumed in the same Python session
    finally:
        stage.release_output_dir(str(tmp_path))


@pytest.fixture(autouse=True)
def nothing_held_after():
    yield
    assert not stage.HELD_FOLDERS
