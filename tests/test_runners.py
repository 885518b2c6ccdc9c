"""Runners: a small sweep of training runs gives the same results locally and on a local Ray
cluster (2 CPUs); a run whose worker is killed after a checkpoint resumes from it when the sweep
is restarted; a failing run is named and the others finish (``keep_going``)."""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path

import pytest

from doppler_lab.house.errors import ConfigError, RunError
from doppler_lab.house.runners import LocalRunner, RayRunner, Run, make_runner
from doppler_lab.lab.bench.policy import run_case, training_runs

ray = pytest.importorskip("ray")
from sweeps import TINY_SWEEP as TINY  # noqa: E402

#: what differs between two runs of one configuration: the wall clock and the run directory
VOLATILE = ("train_s", "checkpoint")


def _differ(a: list[dict], b: list[dict]) -> list[dict]:
    """Per run, the fields whose values differ (besides :data:`VOLATILE`)."""
    return [
        {k: (x[k], y.get(k)) for k in x if k not in VOLATILE and x[k] != y.get(k)}
        for x, y in zip(a, b, strict=True)
    ]


def _sweep(root: Path, seeds: range) -> list[Run]:
    return training_runs(TINY, ["doppler"], seeds, root)


@pytest.fixture(scope="module")
def ray_cluster():
    # the probes below are defined here: Ray's workers get them by value, not by import
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    runner = RayRunner(num_cpus=2)  # a local cluster of 2 CPUs, no dashboard
    runner.connect()
    yield runner
    ray.shutdown()


@pytest.fixture(scope="module")
def local_values(tmp_path_factory):
    """The tiny sweep (seeds 0 and 1) by the local runner: the reference of the Ray runs."""
    root = tmp_path_factory.mktemp("local")
    return LocalRunner().run(_sweep(root, range(2)), progress=False).values


def _first_to_create(path: str) -> bool:
    """Whether this process created ``path`` (atomically: of two workers reaching the same
    update at the same moment, only one is killed; a check-then-touch let both die)."""
    try:
        os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        return False
    return True


def _probed_run_case(cfg, case, method, seed, root, kill_marker=None, starts=None):
    """:func:`run_case` recording the update each training session starts from (``starts``)
    and killing its own process after Stage II's second checkpoint (once, ``kill_marker``)."""
    from doppler_lab.train.loop import Trainer

    run, save = Trainer.run, Trainer.save

    def probed_run(self):
        if starts is not None and self.config.stage == "sim":
            with open(starts, "a") as f:
                f.write(json.dumps({"seed": seed, "update": self.update}) + "\n")
        return run(self)

    def probed_save(self, path, with_train_state=True, **kwargs):
        out = save(self, path, with_train_state, **kwargs)
        hit = self.config.stage == "sim" and self.update == 2 and with_train_state
        if kill_marker is not None and hit and _first_to_create(kill_marker):
            os.kill(os.getpid(), signal.SIGKILL)  # the worker dies, as with its machine
        return out

    Trainer.run, Trainer.save = probed_run, probed_save
    try:
        return run_case(cfg, case, method, seed, root)
    finally:
        Trainer.run, Trainer.save = run, save


def _fails_on_seed_1(cfg, case, method, seed, root):
    if seed == 1:
        raise ConfigError(f"seed {seed} is not wanted here")
    return run_case(cfg, case, method, seed, root)


def test_local_and_ray_sweeps_agree_and_cache(tmp_path, ray_cluster, local_values):
    on_ray = ray_cluster.run(_sweep(tmp_path / "ray", range(2)), progress=False)
    assert not on_ray.failures
    assert [r["seed"] for r in on_ray.values] == [0, 1]
    assert _differ(local_values, on_ray.values) == [{}, {}]
    # a finished run is read back, not rerun: the same record, train_s included
    again = ray_cluster.run(_sweep(tmp_path / "ray", range(2)), progress=False)
    assert again.values == on_ray.values


def test_killed_worker_resumes_from_its_checkpoint(tmp_path, ray_cluster, local_values):
    marker, starts = tmp_path / "killed", tmp_path / "starts.jsonl"
    root = tmp_path / "ray"
    runs = [
        Run(_probed_run_case, r.args, {"kill_marker": str(marker), "starts": str(starts)}, r.label)
        for r in _sweep(root, range(2))
    ]
    first = ray_cluster.run(runs, progress=False, keep_going=True)
    (failed,) = first.failures  # one worker was killed; the other run finished
    assert marker.exists() and failed.label in ("chainmm/doppler/seed0", "chainmm/doppler/seed1")
    assert "died" in failed.message.lower() or "crash" in failed.message.lower(), failed.message
    killed_seed = int(failed.label[-1])
    assert first.values[1 - killed_seed]["seed"] == 1 - killed_seed
    second = ray_cluster.run(runs, progress=False)  # the sweep restarted
    sessions = [json.loads(line) for line in starts.read_text().splitlines()]
    resumed = [s["update"] for s in sessions if s["seed"] == killed_seed]
    assert resumed == [0, 2]  # the second session starts at the checkpoint, not at 0
    assert _differ(local_values, second.values) == [{}, {}]


def test_keep_going_names_the_failed_run_and_finishes_the_others(tmp_path, ray_cluster):
    runs = [Run(_fails_on_seed_1, r.args, label=r.label) for r in _sweep(tmp_path, range(3))]
    sweep = ray_cluster.run(runs, progress=False, keep_going=True)
    (failure,) = sweep.failures
    assert failure.label == "chainmm/doppler/seed1" and "not wanted" in failure.message
    assert [v["seed"] for v in sweep.done()] == [0, 2]
    assert sweep.notes() == [f"run chainmm/doppler/seed1 failed: {failure.message}"]


def test_without_keep_going_the_first_failure_stops_the_sweep():
    runs = [Run(int, ("3",), label="ok"), Run(int, ("x",), label="bad x"), Run(int, ("4",))]
    with pytest.raises(RunError, match=r"^run bad x failed: ValueError: invalid literal"):
        LocalRunner().run(runs, progress=False)
    sweep = LocalRunner().run(runs, progress=False, keep_going=True)
    assert sweep.values == [3, None, 4] and sweep.done() == [3, 4]


def test_local_processes_can_be_spawned_not_forked():
    # a process that trained with torch forks workers that die at once: spawn them instead
    runs = [Run(abs, (-i,), label=f"abs {-i}") for i in range(3)]
    assert LocalRunner(2, "spawn").run(runs, progress=False).values == [0, 1, 2]
    with pytest.raises(ConfigError, match="start_method = 'thread', expected fork, spawn"):
        LocalRunner(2, "thread")


def test_make_runner_names():
    assert isinstance(make_runner("local"), LocalRunner)
    assert isinstance(make_runner("ray", address="auto"), RayRunner)
    with pytest.raises(ConfigError, match="unknown runner 'dask'"):
        make_runner("dask")
    with pytest.raises(ConfigError, match="--ray-address needs --runner ray"):
        make_runner("local", address="h:6379")


def test_bench_flags_reach_a_sweep_or_are_refused(capsys):
    from doppler_lab.cli import main

    # bench sim runs no sweep: asking for Ray there is a one-line error, exit 2
    assert main(["bench", "sim", "--runner", "ray", "--out", "unused"]) == 2
    assert "has no sweep of runs" in capsys.readouterr().err
    assert main(["bench", "quality", "--runner", "local", "--ray-address", "h:1"]) == 2
    assert "--ray-address needs --runner ray" in capsys.readouterr().err


def test_the_bar_shows_running_done_failed_and_the_last_run(capsys):
    runs = [Run(int, ("1",), label="one"), Run(int, ("y",), label="why")]
    LocalRunner().run(runs, desc="demo", keep_going=True)
    err = capsys.readouterr().err
    assert "running 1, done 1, failed 0, last one" in err
    assert "running 0, done 1, failed 1, last why (failed)" in err
