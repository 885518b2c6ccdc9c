"""The previous resume checkpoint is kept (``checkpoints/last.prev.pt``): a corrupt ``last.pt``
falls back to it with a note; both bad is one line saying what to do (``--force``)."""

from __future__ import annotations

import pytest
import torch

from doppler_lab.cli import main
from doppler_lab.hardware.cluster import make_cluster
from doppler_lab.house.errors import CheckpointError
from doppler_lab.policies.policy_config import PolicyConfig
from doppler_lab.train import Trainer, preset, read_rows, train
from doppler_lab.workloads import build_from_spec

SMALL = PolicyConfig(hidden=16, head_hidden=16, mp_steps=2, num_bases=4)
GRAPH = "chainmm:matrices=3,scale=0.001"


class _Stop(Exception):
    pass


def _stop_after(n):
    def cb(trainer, row):
        if row["update"] == n:
            raise _Stop

    return cb


@pytest.fixture(scope="module")
def graph():
    return build_from_spec(GRAPH)


@pytest.fixture(scope="module")
def cluster():
    return make_cluster("p100x4")


def _cfg():
    return preset(
        "sim", episodes=24, episodes_per_update=4, semantics="wc", sil_coef=0.5, noise=0.1
    ).replace(checkpoint_every=2)


def _cut(tmp_path, graph, cluster):
    cut = tmp_path / "cut"
    with pytest.raises(_Stop):
        train(_cfg(), [graph], cluster, SMALL, cut, callbacks=[_stop_after(5)], progress=False)
    return cut


def test_saving_keeps_the_previous_checkpoint(tmp_path, graph, cluster):
    cut = _cut(tmp_path, graph, cluster)
    last = torch.load(cut / "checkpoints" / "last.pt", weights_only=True)
    prev = torch.load(cut / "checkpoints" / "last.prev.pt", weights_only=True)
    assert (last["train"]["update"], prev["train"]["update"]) == (4, 2)


def test_a_corrupt_last_checkpoint_resumes_from_the_one_before(tmp_path, graph, cluster, capsys):
    full = train(_cfg(), [graph], cluster, SMALL, out_dir=tmp_path / "full", progress=False)
    cut = _cut(tmp_path, graph, cluster)
    (cut / "checkpoints" / "last.pt").write_bytes(b"half a checkpoint")
    capsys.readouterr()
    trainer = Trainer(_cfg(), [graph], cluster, SMALL, cut, progress=False)
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "last.pt cannot be read" in err[0]
    assert err[0].endswith("resuming from " + str(cut / "checkpoints" / "last.prev.pt"))
    assert trainer.update == 2
    trainer.run()
    # resumed two updates earlier, the run still ends as the uninterrupted one
    assert read_rows(cut / "metrics.csv") == read_rows(tmp_path / "full" / "metrics.csv")
    a, b = trainer.policy.state_dict(), full.policy.state_dict()
    for k in a:
        torch.testing.assert_close(a[k], b[k], rtol=0, atol=0, msg=k)


def test_both_checkpoints_bad_says_what_to_do_and_force_starts_again(
    tmp_path, graph, cluster, capsys
):
    cut = _cut(tmp_path, graph, cluster)
    for name in ("last.pt", "last.prev.pt"):
        (cut / "checkpoints" / name).write_bytes(b"garbage")
    with pytest.raises(CheckpointError) as info:
        Trainer(_cfg(), [graph], cluster, SMALL, cut, progress=False)
    msg = str(info.value)
    assert "\n" not in msg and "last.pt" in msg and "last.prev.pt" in msg
    assert "--force" in msg and "--init" in msg
    capsys.readouterr()
    trainer = Trainer(_cfg(), [graph], cluster, SMALL, cut, progress=False, force=True)
    assert trainer.update == 0 and "starting the stage again" in capsys.readouterr().err
    assert len(trainer.run().rows) == 6


def test_the_train_command_falls_back_and_force_restarts(tmp_path, capsys):
    out = tmp_path / "run"
    args = ["train", "--stage", "sim", "--graph", GRAPH, "--episodes", "8", "--out", str(out)]
    args += ["--episodes-per-update", "2", "--set", "checkpoint_every=1", "--no-progress"]
    args += ["--policy-set", "hidden=16", "--policy-set", "mp_steps=2"]
    assert main(args) == 0
    (out / "policy.pt").unlink()  # as if interrupted after the last checkpoint
    (out / "checkpoints" / "last.pt").write_bytes(b"garbage")
    capsys.readouterr()
    assert main(args) == 0
    assert "resuming from" in capsys.readouterr().err
    (out / "checkpoints" / "last.pt").write_bytes(b"garbage")
    (out / "checkpoints" / "last.prev.pt").write_bytes(b"garbage")
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--force" in err
    assert main(args + ["--force"]) == 0
    capsys.readouterr()
