"""Run folders (:mod:`doppler_lab.house.runfolder`): one writer at a time (a lock naming its holder,
stale locks taken over), and only folders of the same command unless ``--force``."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from doppler_lab.cli import main
from doppler_lab.house.errors import RunFolderError
from doppler_lab.house.runfolder import LOCK_NAME, MARKER_NAME, run_folder

REPO = Path(__file__).resolve().parents[1]
GRAPH = "chainmm:matrices=3,scale=0.001"
TRAIN = ["train", "--stage", "sim", "--graph", GRAPH, "--episodes", "2", "--no-progress"]
TRAIN += ["--policy-set", "hidden=16", "--policy-set", "mp_steps=2"]


def _one_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    return lines[0]


@pytest.mark.parametrize(
    "argv",
    [
        TRAIN,
        ["adapt", GRAPH, "--episodes", "8"],
        ["train-general", "--tasks", "2", "--imitation-episodes", "0", "--sim-episodes", "0"],
        ["demo", "--quick"],
    ],
    ids=["train", "adapt", "train-general", "demo"],
)
def test_a_second_writer_is_refused_naming_the_holder(tmp_path, capsys, argv):
    out = tmp_path / "run"
    command = argv[0]
    with run_folder(out, command):
        assert main([*argv, "--out", str(out)]) == 2
        err = _one_line(capsys.readouterr().err)
        assert f"run folder {out} is in use by doppler-lab {command} (PID {os.getpid()})" in err
    assert not (out / LOCK_NAME).exists()  # released


def test_the_lock_of_a_live_process_refuses_and_of_a_dead_one_is_taken_over(tmp_path, capsys):
    out = tmp_path / "run"
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time\n"
            "from doppler_lab.house.runfolder import run_folder\n"
            "with run_folder(sys.argv[1], 'train'):\n"
            "    print('locked', flush=True)\n"
            "    time.sleep(60)\n",
            str(out),
        ],
        stdout=subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    try:
        assert holder.stdout.readline().strip() == b"locked"
        with pytest.raises(RunFolderError, match=f"PID {holder.pid}"):
            with run_folder(out, "train"):
                pass
        os.kill(holder.pid, signal.SIGKILL)  # dies holding it: the file stays, naming it
        holder.wait(timeout=30)
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait(timeout=30)
    assert (out / LOCK_NAME).read_text().split()[0] == str(holder.pid)
    with run_folder(out, "train"):  # taken over
        assert (out / LOCK_NAME).read_text().split()[0] == str(os.getpid())
    assert main([*TRAIN, "--out", str(out)]) == 0
    capsys.readouterr()


def test_a_stale_lock_file_of_a_dead_pid_is_taken_over(tmp_path, capsys):
    out = tmp_path / "run"
    out.mkdir()
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait(timeout=30)
    (out / LOCK_NAME).write_text(f"{dead.pid} somehost train\n")
    (out / MARKER_NAME).write_text(json.dumps({"command": "train", "version": 1}))
    assert main([*TRAIN, "--out", str(out)]) == 0
    assert (out / "policy.pt").is_file() and not (out / LOCK_NAME).exists()
    capsys.readouterr()


def test_a_folder_of_someone_elses_files_is_refused_unless_force(tmp_path, capsys):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "config.json").write_text('{"my": "own"}')
    (out / "metrics.csv").write_text("a,b\n1,2\n")
    assert main([*TRAIN, "--out", str(out)]) == 2
    err = _one_line(capsys.readouterr().err)
    assert f"run folder {out} holds files doppler-lab train did not mark" in err
    assert "config.json, metrics.csv" in err and "--force" in err
    assert (out / "config.json").read_text() == '{"my": "own"}'  # untouched
    assert not (out / MARKER_NAME).exists()
    assert main([*TRAIN, "--out", str(out), "--force"]) == 0
    assert json.loads((out / MARKER_NAME).read_text())["command"] == "train"
    # marked now: the same command resumes it (a finished run: nothing new) without --force
    assert main([*TRAIN, "--out", str(out)]) == 0
    capsys.readouterr()


def test_a_run_of_another_command_is_refused(tmp_path, capsys):
    out = tmp_path / "run"
    with run_folder(out, "adapt"):
        pass
    (out / "adapter.pt").write_bytes(b"x")
    assert main([*TRAIN, "--out", str(out)]) == 2
    err = _one_line(capsys.readouterr().err)
    assert "holds a run of doppler-lab adapt, not of train" in err


def test_an_out_that_is_a_file_is_one_line(tmp_path, capsys):
    out = tmp_path / "file"
    out.write_text("x")
    assert main([*TRAIN, "--out", str(out)]) == 2
    assert "is a file; expected a folder" in _one_line(capsys.readouterr().err)


def test_a_new_folder_is_marked_and_the_lock_goes(tmp_path):
    out = tmp_path / "a" / "b"
    with run_folder(out, "train") as folder:
        assert folder == out and (out / LOCK_NAME).is_file()
        assert json.loads((out / MARKER_NAME).read_text()) == {"command": "train", "version": 1}
    assert sorted(p.name for p in out.iterdir()) == [MARKER_NAME]
    t0 = time.monotonic()
    with run_folder(out, "train"):  # again, at once
        pass
    assert time.monotonic() - t0 < 5
