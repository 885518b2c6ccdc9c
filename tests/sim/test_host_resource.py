"""The host thread as a resource of the ``wc`` simulator (doppler_lab.hardware.host): it serialises
launches and copy issues, binds only where a cluster or profile gives it costs, is fitted by the
calibration, and travels in cluster and profile files."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest

from doppler_lab.hardware.cluster import Cluster, Device, make_cluster
from doppler_lab.hardware.host import Host
from doppler_lab.house.errors import ClusterError, FormatError
from doppler_lab.ir.graph import GraphBuilder
from doppler_lab.ir.placement import Placement
from doppler_lab.timing.calibration import Profile, fit_host
from doppler_lab.timing.raw_data import CalibrationRaw, read_raw, write_raw
from doppler_lab.timing.sim import Simulator
from doppler_lab.timing.sim import _kernels as K
from doppler_lab.workloads.random_dag import random_dag


def independent_ops(n: int, cost: float) -> GraphBuilder:
    b = GraphBuilder(f"independent-{n}")
    for i in range(n):
        b.add_node(f"v{i}", cost=cost)
    return b


def with_host(cluster: Cluster, **kw: float) -> Cluster:
    return replace(cluster, host=Host(**kw))


@pytest.mark.parametrize("n", [1, 7, 40])
def test_the_host_serialises_launches(n):
    g = independent_ops(n, cost=0.01).build()
    h = 3.0 * g.time_scale  # seconds: 3 raw units per launch, far above an op's 0.01
    cluster = with_host(make_cluster("uniform", 2), launch_s=h)
    dev = np.arange(n) % 2
    sim = Simulator(g, cluster, "wc")
    # every launch takes the host in turn: n launches of 3 units, then the last op's rest
    assert sim.makespan(dev) >= n * 3.0 * g.time_scale
    tr = sim.run(dev)
    starts = np.sort(tr.start)
    assert np.all(np.diff(starts) >= 3.0 * g.time_scale - 1e-12)  # one launch at a time
    assert sim.makespans(np.stack([dev, dev]))[0] == sim.makespan(dev)
    # without the host the two devices run their ops side by side
    plain = Simulator(g, make_cluster("uniform", 2), "wc").makespan(dev)
    assert plain == pytest.approx((n + 1) // 2 * 0.01)


def test_copy_issues_take_the_host_before_the_link():
    b = GraphBuilder("fan-out")
    a = b.add_node("a", cost=1.0)
    b.add_node("b", cost=1.0, inputs=[a], edge_costs=[4.0])
    g = b.build()
    unit = g.time_scale
    cluster = with_host(make_cluster("uniform", 2), copy_s=2.0 * unit)
    tr = Simulator(g, cluster, "wc").run([0, 1])
    # a [0,1]; the copy is issued [1,3] and runs [3,7]; b [7,8]
    assert tr.transfer_start[0] == pytest.approx(3.0 * unit)
    assert tr.makespan == pytest.approx(8.0 * unit)


def test_capacity_slows_devices_beyond_it():
    g = independent_ops(2, cost=10.0).build()
    plain = make_cluster("uniform", 2)
    sim = Simulator(g, with_host(plain, parallel_capacity=1.0), "wc")
    # the second op starts while two devices are busy: 2 / 1 times its time
    assert sim.makespan([0, 1]) == pytest.approx(20.0 * g.time_scale)
    assert Simulator(g, plain, "wc").makespan([0, 1]) == pytest.approx(10.0 * g.time_scale)


def _kernel_runs(sim: Simulator, dev: np.ndarray, host: tuple | None, priority=None):
    g = sim.graph
    d = np.asarray(dev, dtype=sim._index)
    opts = sim._plain
    if priority is not None:
        opts = tuple(K.RunOptions(*opts)._replace(priority=priority, use_priority=True))
    out = K.new_buffers(g.num_nodes, g.num_edges)
    out.tr_link.fill(-1)
    if host is None:
        m, ntr = K.wc_kernel(*sim._records, d, opts, tuple(out))
    else:
        m, ntr = K.wc_host_kernel(*sim._records, d, opts, tuple(out), host)
    return m, ntr, out


@pytest.mark.parametrize("seed", range(6))
def test_a_host_without_costs_changes_nothing_to_the_bit(seed):
    rng = np.random.default_rng(seed)
    g = random_dag(300, width=12, seed=seed, comm_ratio=float(rng.uniform(0.2, 3)))
    cluster = make_cluster("p100x4") if seed % 2 else make_cluster("uniform", 4)
    sim = Simulator(g, cluster, "wc")
    for _ in range(4):
        dev = rng.integers(0, 4, g.num_nodes)
        pr = rng.random(g.num_nodes) if seed % 3 == 0 else None
        m0, n0, a = _kernel_runs(sim, dev, None, pr)
        m1, n1, b = _kernel_runs(sim, dev, (0.0,) * 4, pr)
        assert m0 == m1 and n0 == n1
        for x, y in zip(a, b):
            np.testing.assert_array_equal(
                x[: n0 if x.shape[0] == g.num_edges else None],
                y[: n0 if y.shape[0] == g.num_edges else None],
            )
    # a host with no costs binds nowhere: the same simulator as the preset's
    zero = Simulator(g, with_host(cluster), "wc")
    dev = rng.integers(0, 4, (5, g.num_nodes))
    np.testing.assert_array_equal(zero.makespans(dev), sim.makespans(dev))
    assert zero._host is None
    # paper and bsp semantics ignore the host
    costly = with_host(cluster, launch_s=1.0, copy_s=1.0, parallel_capacity=1.0)
    for sem in ("paper", "bsp"):
        np.testing.assert_array_equal(
            Simulator(g, costly, sem).makespans(dev), Simulator(g, cluster, sem).makespans(dev)
        )


def _probe_from_the_model(host: Host) -> dict[str, float]:
    """The host probe's periods, measured on simulated runs of a cluster with ``host``."""
    from doppler_lab.executor.profiling import (
        _chains,
        _period,
        _shifted_placement,
        chain_placement,
        tiny_chain_graph,
    )

    dev = Device("w", kind="cpu", launch_overhead_s=20e-6)
    lane = make_cluster("cpu", 2).routes  # one copy lane, as the CPU backend's
    cluster = Cluster(
        "probe", (dev, dev), np.full((2, 2), 1e12), np.full((2, 2), 1e-6), lane, host=host
    )
    g1, g2 = tiny_chain_graph(60), tiny_chain_graph(120, chains=2)
    runs = {
        "launch_alone_s": (g1, chain_placement(g1, [0])),
        "launch_busy_s": (g2, chain_placement(g2, [0, 1])),
        "copy_alone_s": (g1, _shifted_placement(g1, 2)),
        "copy_busy_s": (g2, _shifted_placement(g2, 2)),
    }
    out: dict[str, float] = {"devices": 2}
    for key, (g, pl) in runs.items():
        tr = Simulator(g, cluster, "wc").run(pl)
        out[key] = float(np.median([_period(tr, ops) for ops in _chains(g)]))
    return out


@pytest.mark.parametrize(("launch", "copy"), [(15e-6, 10e-6), (12e-6, 0.0), (0.0, 0.0)])
def test_calibration_recovers_known_host_costs(launch, copy, tmp_path):
    pytest.importorskip("torch")
    probe = _probe_from_the_model(Host(launch_s=launch, copy_s=copy))
    host = fit_host(probe, routes=make_cluster("cpu", 2).routes)
    assert host.launch_s == pytest.approx(launch, rel=1e-6, abs=1e-12)
    assert host.copy_s == pytest.approx(copy, rel=1e-6, abs=1e-12)
    assert host.parallel_capacity is None
    # through a raw file and its refit, as `calibrate --from` does
    base = make_cluster("cpu", 2)
    raw = CalibrationRaw("synthetic", "cpu", base, [], [], (2e-6, 2e-6), {}, probe)
    path = write_raw(tmp_path / "r.json.gz", "test", raw, {})
    prof = read_raw(path)["calibration"].fit()
    assert prof.host == host
    assert prof.cluster.host == host


def test_the_fit_keeps_a_short_capacity_and_no_probe_gives_no_host():
    probe = {"devices": 2, "launch_alone_s": 5e-6, "launch_busy_s": 5.2e-6}
    assert fit_host({}) is None
    assert fit_host(probe, capacity=1.95) == Host()  # the host does not bind
    # two devices at 1.2 of 2 cores: a busy period of 2 / 1.2 x alone is the cores, not the host
    assert fit_host({**probe, "launch_busy_s": 8e-6}, capacity=1.2) == Host(parallel_capacity=1.2)
    assert fit_host({**probe, "launch_busy_s": 20e-6}, capacity=1.2).launch_s == 5e-6  # capped
    # below one device is the load moving between the capacity probe's timings
    assert fit_host(probe, capacity=0.7) == Host(parallel_capacity=1.0)


def test_host_costs_round_trip_in_cluster_and_profile_files(tmp_path):
    host = Host(launch_s=1.5e-5, copy_s=4e-6, parallel_capacity=1.6)
    cluster = with_host(make_cluster("cpu", 2), **host.to_dict())
    again = Cluster.from_dict(json.loads(json.dumps(cluster.to_dict())))
    assert again.host == host and again.first(1).host == host
    assert "host" not in make_cluster("p100x4").to_dict()  # presets' files are unchanged
    prof = Profile(
        "p",
        "cpu",
        cluster.devices,
        cluster.bandwidth_bytes_per_s,
        cluster.latency_s,
        cluster.routes,
        cluster.link_names,
        host=host,
    )
    loaded = Profile.load(prof.save(tmp_path / "p.json"))
    assert loaded.host == host and loaded.cluster.host == host
    g = random_dag(60, seed=1)
    dev = np.arange(g.num_nodes) % 2
    assert Simulator(g, loaded.cluster, "wc").makespan(dev) == Simulator(g, cluster, "wc").makespan(
        dev
    )


@pytest.mark.parametrize(
    ("host", "message"),
    [
        ({"launch_s": -1}, "cluster host launch_s is -1; expected a finite number >= 0"),
        ({"copy_s": "fast"}, "cluster host copy_s is 'fast'"),
        (
            {"parallel_capacity": 0},
            "cluster host parallel_capacity is 0; expected a finite number > 0",
        ),
        ({"launch": 1e-6}, "cluster host has an unknown field 'launch'"),
        (3, "cluster host"),
    ],
)
def test_bad_host_costs_give_one_line_naming_the_item(host, message):
    doc = make_cluster("cpu", 2).to_dict() | {"host": host}
    with pytest.raises(ClusterError) as exc:
        Cluster.from_dict(doc)
    assert message in str(exc.value) and "\n" not in str(exc.value)
    prof = Profile("p", "cpu", make_cluster("cpu", 2).devices, np.ones((2, 2)), np.zeros((2, 2)))
    with pytest.raises(FormatError) as exc:
        Profile.from_dict(prof.to_dict() | {"host": host})
    assert message.replace("cluster host", "profile host") in str(exc.value)
    assert "\n" not in str(exc.value)
    with pytest.raises(ClusterError, match="host launch_s is nan"):
        Host(launch_s=float("nan"))


def test_a_bad_host_probe_in_a_raw_file_is_named(tmp_path):
    raw = CalibrationRaw(
        "s",
        "cpu",
        make_cluster("cpu", 2),
        [],
        [],
        (1e-6, 1e-6),
        {},
        {"devices": 2, "launch_busy_s": -3.0},
    )
    doc = raw.to_dict()
    with pytest.raises(FormatError, match=r"raw host_probe launch_busy_s is -3\.0"):
        CalibrationRaw.from_dict(doc, "x")
    with pytest.raises(FormatError, match="raw host_probe has an unknown field 'busy'"):
        CalibrationRaw.from_dict(doc | {"host_probe": {"devices": 2, "busy": 1.0}}, "x")


def test_a_placement_object_and_priority_dispatch_use_the_host_kernel():
    g = independent_ops(6, cost=1.0).build()
    cluster = with_host(make_cluster("uniform", 2), launch_s=2.0 * g.time_scale)
    sim = Simulator(g, cluster, "wc")
    pl = Placement(np.arange(6) % 2, priority=np.arange(6.0)[::-1].copy())
    fifo, prio = sim.run(pl), sim.run(pl, dispatch="priority")
    assert fifo.makespan == prio.makespan >= 12.0 * g.time_scale
    # launches go by device, each device's best op first: v4 (device 0), then v5
    assert list(np.argsort(prio.start)[:2]) == [4, 5]
    assert list(np.argsort(fifo.start)[:2]) == [0, 1]
