"""Cores shared by the devices and the copy lanes (``Host.cores``, doppler_lab.hardware.host):
processor sharing in the ``wc`` kernel, set by a CPU profile's calibration from its measured
parallel capacity, and checked where it comes from a file."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from doppler_lab.hardware.cluster import Cluster, make_cluster
from doppler_lab.hardware.host import Host
from doppler_lab.house.errors import ClusterError
from doppler_lab.ir.graph import GraphBuilder
from doppler_lab.timing.calibration import fit_profile
from doppler_lab.timing.sim import Simulator
from doppler_lab.workloads.random_dag import random_dag


def cores(cluster: Cluster, n: float, **kw: float) -> Cluster:
    return replace(cluster, host=Host(cores=n, **kw))


def two_ops(cost: float = 10.0):
    b = GraphBuilder("two")
    b.add_node("a", cost=cost)
    b.add_node("b", cost=cost)
    return b.build()


@pytest.mark.parametrize(("n", "want"), [(1.0, 20.0), (1.5, 10.0 * 2 / 1.5), (2.0, 10.0)])
def test_two_busy_devices_share_the_cores(n, want):
    g = two_ops()
    sim = Simulator(g, cores(make_cluster("uniform", 2), n), "wc")
    # both run from 0 at n / 2 of their speed (no faster than alone): 10 units of work each
    assert sim.makespan([0, 1]) == pytest.approx(want * g.time_scale, rel=1e-5)
    # one device alone is never slowed
    assert sim.makespan([0, 0]) == pytest.approx(20.0 * g.time_scale, rel=1e-12)


def test_a_copy_lane_takes_a_core_from_the_running_ops():
    """a (device 0, 1 unit) feeds b (device 1, 1 unit) through a copy of 4 units on the one
    lane; c (device 0, 10 units) runs beside it all. On one core: a [0, 1]; the copy is issued
    at 1 while device 0 has c ready, two threads for one core, so it takes 8 units, [1, 9]; c
    shares the core with it (4 units of work by 9), then with b, which starts at 9 and needs
    [9, 11] for its 1 unit (c does 1 more); c's last 5 units end at 16. On 1.5 cores: the copy
    takes 4 x 2 / 1.5, c and b run at 0.75 of their speed beside it and each other."""
    b = GraphBuilder("lane")
    a = b.add_node("a", cost=1.0)
    b.add_node("b", cost=1.0, inputs=[a], edge_costs=[4.0])
    b.add_node("c", cost=10.0)
    g = b.build()
    unit = g.time_scale
    tr = Simulator(g, cores(make_cluster("uniform", 2), 1.0), "wc").run([0, 1, 0])
    assert tr.transfer_end[0] == pytest.approx(9.0 * unit, rel=1e-12)
    assert tr.end[1] == pytest.approx(11.0 * unit, rel=1e-5)
    assert tr.makespan == pytest.approx(16.0 * unit, rel=1e-5)
    tr15 = Simulator(g, cores(make_cluster("uniform", 2), 1.5), "wc").run([0, 1, 0])
    copy = 4.0 * 2 / 1.5
    assert tr15.transfer_end[0] == pytest.approx((1 + copy) * unit, rel=1e-12)
    assert tr15.end[1] == pytest.approx((1 + copy + 1 / 0.75) * unit, rel=1e-5)
    # c: 0.75 of its speed from 1 until b ends, then alone
    done = 0.75 * (copy + 1 / 0.75)
    assert tr15.makespan == pytest.approx((1 + copy + 1 / 0.75 + 10 - done) * unit, rel=1e-5)
    # two cores: the copy and c run side by side, then b and c: nothing is slowed
    tr2 = Simulator(g, cores(make_cluster("uniform", 2), 2.0), "wc").run([0, 1, 0])
    assert tr2.makespan == pytest.approx(11.0 * unit, rel=1e-12)


@pytest.mark.parametrize("seed", range(4))
def test_shared_cores_only_slow_and_batches_agree(seed):
    rng = np.random.default_rng(seed)
    g = random_dag(200, width=10, seed=seed, comm_ratio=float(rng.uniform(0.2, 2)))
    plain = make_cluster("uniform", 4)
    devs = rng.integers(0, 4, (6, g.num_nodes))
    base = Simulator(g, plain, "wc").makespans(devs)
    prev = base
    for n in (4.0, 3.0, 2.0, 1.0):  # fewer cores: never faster
        sim = Simulator(g, cores(plain, n), "wc")
        got = sim.makespans(devs)
        assert np.all(got >= prev * (1 - 1e-9))
        assert [sim.makespan(d) for d in devs] == list(got)  # one at a time = the batch
        prev = got
    # on one core nothing runs beside anything: at least the sum of the ops' times
    total = float(Simulator(g, plain, "wc").cost.compute[g.compute_nodes, 0].sum()) * g.time_scale
    assert np.all(prev >= total * (1 - 1e-5))


def test_a_cpu_profile_gets_the_measured_capacity_as_its_cores():
    base = make_cluster("cpu", 2)
    dispatch = (2e-6, 2e-6)
    prof = fit_profile("p", "cpu", base, [], [], dispatch, {"parallel_capacity": 1.8})
    assert prof.host == Host(cores=1.8) and prof.cluster.host.cores == 1.8
    # clipped to [1, devices]; other backends and a missing probe give no cores
    assert fit_profile("p", "dist", base, [], [], dispatch, {"parallel_capacity": 2.3}).host == (
        Host(cores=2.0)
    )
    assert fit_profile("p", "cpu", base, [], [], dispatch, {"parallel_capacity": 0.6}).host == (
        Host(cores=1.0)
    )
    assert fit_profile("p", "cuda", base, [], [], dispatch, {"parallel_capacity": 1.8}).host is None
    assert fit_profile("p", "cpu", base, [], [], dispatch, {}).host is None
    # the cores replace the coarser capacity that a host probe would have kept
    probe = {"devices": 2, "launch_alone_s": 5e-6, "launch_busy_s": 5.2e-6}
    meta = {"parallel_capacity": 1.2}
    got = fit_profile("p", "cpu", base, [], [], dispatch, meta, probe).host
    assert got.parallel_capacity is None and got.cores == 1.2


def test_cores_travel_in_files_and_bad_cores_are_named():
    cluster = cores(make_cluster("cpu", 2), 1.75, launch_s=3e-6)
    again = Cluster.from_dict(cluster.to_dict())
    assert again.host == cluster.host and again.to_dict()["host"]["cores"] == 1.75
    # a host without cores writes no cores field: files written before it are unchanged
    assert "cores" not in Host(launch_s=1e-6).to_dict()
    for bad, message in (
        (0.5, "host cores is 0.5; expected 0 (not modelled) or at least 1"),
        (-1, "cluster host cores is -1; expected a finite number >= 0"),
        ("two", "cluster host cores is 'two'"),
    ):
        with pytest.raises(ClusterError) as exc:
            Cluster.from_dict(make_cluster("cpu", 2).to_dict() | {"host": {"cores": bad}})
        assert message in str(exc.value) and "\n" not in str(exc.value)
    with pytest.raises(ClusterError, match="host cores is inf"):
        Host(cores=float("inf"))
