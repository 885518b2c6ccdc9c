"""The cached sweep behind notebooks 03 and 07-09: a sweep stopped part-way (Ctrl-C) keeps every
finished (graph, method, seed) run, and running it again computes only the missing ones; the
``auto`` runner falls back to local processes when no Ray cluster is up."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from sweeps import TINY_SWEEP as TINY

from doppler_lab.house.runners import LocalRunner, Run, make_runner
from doppler_lab.lab.bench.policy import run_case, training_runs


def _counted(cfg, case, method, seed, root, log: str, stop_at: int | None = None):
    """``run_case``, logging each call that trains (no ``result.json`` yet); Ctrl-C at seed
    ``stop_at`` before it starts."""
    if seed == stop_at:
        raise KeyboardInterrupt
    done = list(Path(root).rglob(f"seed{seed}-*/result.json"))
    if not done:
        with open(log, "a") as f:
            f.write(f"{seed}\n")
    return run_case(cfg, case, method, seed, root)


def _runs(root: Path, log: Path, stop_at: int | None = None) -> list[Run]:
    return [
        Run(_counted, r.args, {"log": str(log), "stop_at": stop_at}, r.label)
        for r in training_runs(TINY, ["doppler"], range(3), root)
    ]


def test_an_interrupted_sweep_keeps_its_finished_runs_and_computes_only_the_missing(tmp_path):
    root, log = tmp_path / "runs", tmp_path / "trained.log"
    with pytest.raises(KeyboardInterrupt):
        LocalRunner().run(_runs(root, log, stop_at=1), progress=False)
    kept = sorted(root.rglob("result.json"))
    assert len(kept) == 1 and "seed0-" in str(kept[0])  # seed 0 finished before the stop
    first = json.loads(kept[0].read_text())
    again = LocalRunner().run(_runs(root, log), progress=False)
    assert log.read_text().split() == ["0", "1", "2"]  # seed 0 trained once, then read back
    assert again.values[0] == first  # the very record, its train_s included
    assert [v["seed"] for v in again.values] == [0, 1, 2]
    # a third run of the sweep reads everything back
    third = LocalRunner().run(_runs(root, log), progress=False)
    assert third.values == again.values and log.read_text().split() == ["0", "1", "2"]


def test_the_cache_is_keyed_by_settings_and_code_version(tmp_path):
    root = tmp_path / "runs"
    (case,) = [r.args[1] for r in training_runs(TINY, ["doppler"], [0], root)]
    a = run_case(TINY, case, "doppler", 0, root)
    b = run_case(TINY.__class__(**{**TINY.__dict__, "samples": 3}), case, "doppler", 0, root)
    dirs = sorted(p.parent.name for p in root.rglob("result.json"))
    assert len(dirs) == 2 and all(d.startswith("seed0-") for d in dirs)
    assert a["code_version"] == b["code_version"]


def test_auto_runs_on_local_processes_without_a_ray_cluster(monkeypatch):
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    runner = make_runner("auto", jobs=None)
    assert isinstance(runner, LocalRunner) and runner.jobs == (os.cpu_count() or 1)
    assert make_runner("auto", jobs=3).jobs == 3
    assert LocalRunner(4).run([Run(abs, (-2,))], progress=False).values == [2]  # one run: no pool


def test_auto_joins_the_ray_cluster_ray_address_names(monkeypatch):
    pytest.importorskip("ray")
    from doppler_lab.house.runners import RayRunner

    monkeypatch.setenv("RAY_ADDRESS", "head:6379")
    runner = make_runner("auto", jobs=None)  # nothing is started or joined until it runs
    assert isinstance(runner, RayRunner) and runner.address == "head:6379"


def test_a_sweep_after_torch_ran_in_this_process_runs_in_fresh_processes(tmp_path):
    """A sweep's process has often run torch (an adoption check compared weights, a notebook
    trained before): processes forked from it died ("fork() called from a process already
    using GNU OpenMP") or hung; the sweeps start theirs with spawn."""
    from doppler_lab.lab.bench.policy import ablation_rows

    root = tmp_path / "runs"
    (case,) = [r.args[1] for r in training_runs(TINY, ["doppler"], [0], root)]
    run_case(TINY, case, "doppler", 0, root)  # torch trains in this process
    _, runs = ablation_rows(TINY, root, jobs=2)
    assert sorted(r["seed"] for r in runs) == [0, 1, 2]
