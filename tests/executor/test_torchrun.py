"""The ``dist`` backend under ``torchrun``: two agents on 127.0.0.1 stand for two hosts of two
CPU devices each (``--nnodes 2 --nproc-per-node 2``); and the multi-host cluster description."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from doppler_lab.hardware.cluster import make_cluster, make_multihost
from doppler_lab.house.errors import ClusterError, ConfigError

JOB = Path(__file__).with_name("torchrun_job.py")
#: a torchrun job of 4 ranks that has not ended after this long hangs
JOB_TIMEOUT_S = 240
GRAPH = "chainmm:scale=0.01"


def _torchrun() -> str:
    exe = Path(sys.executable).with_name("torchrun")
    return str(exe) if exe.exists() else (shutil.which("torchrun") or pytest.skip("no torchrun"))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_two_hosts(
    argv: list[str], env: dict[str, str] | None = None, nproc: int = 2
) -> list[subprocess.CompletedProcess[str]]:
    """``argv`` under two torchrun agents (node ranks 0 and 1) on 127.0.0.1; both results."""
    port = _free_port()
    base = {**os.environ, "OMP_NUM_THREADS": "1", **(env or {})}
    agents = [
        subprocess.Popen(
            [_torchrun(), "--nnodes", "2", "--nproc-per-node", str(nproc)]
            + ["--node-rank", str(n), "--master-addr", "127.0.0.1", "--master-port", str(port)]
            + ["--monitor-interval", "2", *argv],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=base,
        )
        for n in (0, 1)
    ]
    done = []
    try:
        for a in agents:
            out, err = a.communicate(timeout=JOB_TIMEOUT_S)
            done.append(subprocess.CompletedProcess(a.args, a.returncode, out, err))
    finally:
        for a in agents:
            if a.poll() is None:
                a.kill()
    return done


def test_three_placements_match_the_reference_across_two_hosts():
    agents = run_two_hosts([str(JOB), GRAPH, "round-robin", "cp", "random"])
    node0, node1 = agents
    assert node0.returncode == 0 and node1.returncode == 0, (
        node0.stderr[-2000:] + node1.stderr[-2000:]
    )
    assert node1.stdout == ""  # only rank 0 (on node 0) prints
    rows = [json.loads(line) for line in node0.stdout.splitlines()]
    assert [r["placement"] for r in rows] == ["round-robin", "cp", "random"]
    for r in rows:
        assert r["outputs_match"], r
        assert r["measured_s"] > 0 and r["simulated_wc_s"] > 0
    assert rows[0]["transfers_across_hosts"] > 0  # round robin crosses the hosts


def test_a_rank_that_dies_ends_the_job_with_an_error_on_every_other_rank():
    argv = [str(Path(sys.executable).with_name("doppler-lab")), "execute", GRAPH]
    argv += ["--cluster", "dist", "--placement", "round-robin", "--no-progress"]
    agents = run_two_hosts(["--no-python", *argv], env={"DOPPLER_LAB_TORCHRUN_DIE_RANK": "3"})
    assert all(a.returncode != 0 for a in agents)
    assert agents[0].stdout == "" and agents[1].stdout == ""
    errors = "".join(a.stderr for a in agents)
    for rank in (0, 1, 2):
        assert f"doppler-lab execute: error: rank {rank}: lost the torchrun group" in errors


@pytest.mark.slow
def test_a_rank_that_hangs_ends_the_job_after_the_collective_timeout():
    argv = [str(Path(sys.executable).with_name("doppler-lab")), "execute", GRAPH]
    argv += ["--cluster", "dist", "--no-progress"]
    env = {"DOPPLER_LAB_TORCHRUN_DIE_RANK": "3:hang", "DOPPLER_LAB_TORCHRUN_TIMEOUT_S": "10"}
    agents = run_two_hosts(["--no-python", *argv], env=env)
    assert all(a.returncode != 0 for a in agents)
    errors = "".join(a.stderr for a in agents)
    for rank in (0, 1, 2):
        assert f"error: rank {rank}: lost the torchrun group (a rank died or timed out)" in errors


@pytest.mark.slow
def test_execute_command_checks_outputs_under_torchrun():
    argv = [str(Path(sys.executable).with_name("doppler-lab")), "execute", GRAPH]
    argv += ["--cluster", "dist", "--placement", "cp", "--check", "--json", "--repeats", "2"]
    node0, node1 = run_two_hosts(["--no-python", *argv])
    assert node0.returncode == 0 and node1.returncode == 0, node0.stderr[-2000:]
    out = json.loads(node0.stdout)
    assert out["outputs_match"] and out["cluster"] == "multihost2x2cpu"
    assert out["num_devices"] == 4 and node1.stdout == ""


@pytest.mark.slow
def test_calibrate_under_torchrun_measures_the_links_between_hosts(tmp_path):
    from doppler_lab.io.documents import load_cluster

    out = tmp_path / "two-hosts.json"
    argv = [str(Path(sys.executable).with_name("doppler-lab")), "calibrate", "--cluster", "dist"]
    argv += ["--quick", "--out", str(out), "--no-progress"]
    node0, node1 = run_two_hosts(["--no-python", *argv])
    assert node0.returncode == 0 and node1.returncode == 0, node0.stderr[-2000:]
    c = load_cluster(out)
    assert c.num_devices == 4 and "host0 nic out" in c.link_names
    assert np.isfinite(c.bandwidth_bytes_per_s[0, 2]) and c.bandwidth_bytes_per_s[0, 2] > 0


@pytest.mark.gpu
def test_nccl_across_two_gpu_agents():
    torch = pytest.importorskip("torch")
    if torch.cuda.device_count() < 2:
        pytest.skip("needs 2 CUDA devices (one per rank)")
    agents = run_two_hosts([str(JOB), GRAPH, "round-robin", "cp"], nproc=1)
    assert all(a.returncode == 0 for a in agents), agents[0].stderr[-2000:]
    rows = [json.loads(line) for line in agents[0].stdout.splitlines()]
    assert [r["outputs_match"] for r in rows] == [True, True]


# -- without torchrun --------------------------------------------------------------------------
def test_world_size_must_equal_the_cluster_size():
    from doppler_lab.executor.torchrun import TorchrunBackend, under_torchrun

    env = {"RANK": "0", "WORLD_SIZE": "3", "LOCAL_RANK": "0"}
    env |= {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "1"}
    assert under_torchrun(env) and not under_torchrun({})
    with pytest.raises(ConfigError, match="WORLD_SIZE is 3 but cluster 'multihost2x2cpu' has 4"):
        TorchrunBackend(make_multihost(2, 2), env=env)
    with pytest.raises(ConfigError, match="not launched by torchrun: RANK"):
        TorchrunBackend(make_multihost(2, 2), env={})


def test_dist_under_torchrun_refuses_a_device_count_other_than_the_world_size(monkeypatch):
    from doppler_lab.executor import make_backend

    env = {"RANK": "1", "WORLD_SIZE": "4", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2"}
    for k, v in (env | {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "1"}).items():
        monkeypatch.setenv(k, v)
    with pytest.raises(ConfigError, match="--devices 3 under torchrun with WORLD_SIZE 4"):
        make_backend("dist", 3)
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "3")
    with pytest.raises(ConfigError, match="WORLD_SIZE 4 is not a multiple of LOCAL_WORLD_SIZE 3"):
        make_backend("dist")
    monkeypatch.setenv("DOPPLER_LAB_TORCHRUN_TIMEOUT_S", "soon")
    with pytest.raises(ConfigError, match="DOPPLER_LAB_TORCHRUN_TIMEOUT_S='soon': expected"):
        make_backend(make_multihost(2, 2))


def test_multihost_cluster_routes_cross_host_transfers_through_the_nics():
    c = make_cluster("multihost:hosts=2,devices=2,inter_gbps=1,inter_latency_us=20")
    assert c.num_devices == 4 and c.devices[2].name == "host1/cpu:0"
    names = [
        list(map(c.link_names.__getitem__, c.routes[a, b][c.routes[a, b] >= 0]))
        for a, b in ((0, 1), (1, 3), (3, 0))
    ]
    assert names == [
        ["host0 memory"],
        ["host0 nic out", "host1 nic in"],
        ["host1 nic out", "host0 nic in"],
    ]
    assert c.bandwidth_bytes_per_s[0, 2] == 1e9 and c.latency_s[0, 2] == pytest.approx(20e-6)
    assert c.bandwidth_bytes_per_s[0, 1] > c.bandwidth_bytes_per_s[0, 2]
    gpu = make_cluster("multihost:kind=gpu,hosts=3,devices=2")
    assert gpu.num_devices == 6 and gpu.devices[0].kind == "gpu"
    with pytest.raises(ClusterError, match="bad parameter 'nodes=2'"):
        make_cluster("multihost:nodes=2")
    with pytest.raises(ClusterError, match="has 4 devices, not 3"):
        make_cluster("multihost", 3)


def test_simulator_and_placers_use_the_multihost_cluster():
    from doppler_lab.ir.placement import Placement
    from doppler_lab.placers import place
    from doppler_lab.timing.sim import simulate
    from doppler_lab.workloads import build_from_spec

    g = build_from_spec(GRAPH)
    c = make_multihost(2, 2, inter_bytes_per_s=0.1e9)
    alternate = np.arange(g.num_nodes) % 2
    same_host = simulate(g, c, Placement(alternate), semantics="wc")  # devices 0 and 1
    across = simulate(g, c, Placement(2 * alternate), semantics="wc")  # devices 0 and 2
    assert across.makespan > same_host.makespan  # the slow NICs cost time
    assert place("cp", g, c, seed=0).device.max() < 4
