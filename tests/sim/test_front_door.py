"""One placement through the simulator's front door; the transfer-time rule's single home."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from doppler_lab.hardware.cluster import make_cluster
from doppler_lab.hardware.rules import transfer_time, transfer_times
from doppler_lab.house.errors import PlacementError
from doppler_lab.ir.placement import Placement
from doppler_lab.timing.cost_model import CostModel
from doppler_lab.timing.sim import Simulator
from doppler_lab.workloads import build
from doppler_lab.workloads.random_dag import random_dag


def test_transfer_rule_numpy_twin_equals_the_compiled_rule():
    rng = np.random.default_rng(0)
    fixed, lat, nbytes, inv_bw = rng.uniform(0, 10, size=(4, 50))
    nbytes *= 1e6
    compiled = [transfer_time(*args) for args in zip(fixed, lat, nbytes, inv_bw)]
    np.testing.assert_array_equal(transfer_times(fixed, lat, nbytes, inv_bw), compiled)
    # broadcasting: one link for many edges
    np.testing.assert_array_equal(
        transfer_times(fixed, lat[0], nbytes, inv_bw[0]),
        [transfer_time(f, lat[0], b, inv_bw[0]) for f, b in zip(fixed, nbytes)],
    )


@pytest.mark.parametrize("semantics", ["paper", "wc", "bsp"])
@pytest.mark.parametrize("preset", ["p100x4", "v100x8"])
def test_kernels_time_each_transfer_by_the_rule(semantics, preset):
    """Guards the kernels against a stale compiled copy of the rule, too (numba caches them by
    their own file)."""
    g = build("llama_block")
    cluster = make_cluster(preset)
    cost = CostModel(g, cluster)
    dev = np.arange(g.num_nodes) % cluster.num_devices
    tr = Simulator(g, cluster, semantics, cost_model=cost).run(dev)
    assert tr.num_transfers > 0
    eid = np.array(
        [
            next(e for e in np.flatnonzero(g.edge_src == s) if g.edge_dst[e] == d)
            for s, d in zip(tr.transfer_src, tr.transfer_dst)
        ]
    )
    a, b = tr.transfer_src_device, tr.transfer_dst_device
    rule = transfer_times(
        cost.edge_fixed[eid], cost.latency[a, b], cost.edge_bytes[eid], cost.inv_bandwidth[a, b]
    )
    np.testing.assert_allclose(
        tr.transfer_end - tr.transfer_start, rule * g.time_scale, rtol=1e-9, atol=0
    )
    assert cost.transfer_time(int(eid[0]), int(a[0]), int(b[0])) == rule[0]


@pytest.mark.parametrize("semantics", ["paper", "wc", "bsp"])
@pytest.mark.parametrize("noise", [0.0, 0.3])
def test_one_placement_gives_one_answer_on_every_path(semantics, noise):
    g = random_dag(80, seed=2)
    sim = Simulator(g, make_cluster("p100x4"), semantics, noise)
    dev = np.random.default_rng(1).integers(0, 4, g.num_nodes)
    want = sim.run(dev, seed=3).makespan
    same = [
        sim.makespan(dev, seed=3),
        sim.makespan(dev.astype(np.int32), seed=3),
        sim.makespan(dev.tolist(), seed=3),
        sim.makespan(Placement(dev), seed=3),
        sim.makespans([dev], seed=3)[0],
        sim.makespans(dev[None, :], seed=3)[0],
        sim.makespans(iter([Placement(dev)]), seed=3)[0],
    ]
    assert same == [want] * len(same)


def test_one_placement_is_checked_like_many():
    g = random_dag(10, seed=0)
    sim = Simulator(g, make_cluster("uniform", 2), "wc")
    bad = np.zeros(10, dtype=np.int64)
    bad[4] = 5
    for call in (sim.makespan, lambda p: sim.makespans([p])):
        with pytest.raises(PlacementError, match=r"node 4 \('v4'\) is on device 5, expected 0..1"):
            call(bad)
        with pytest.raises(PlacementError, match="placement has 3 entries but graph"):
            call(np.zeros(3, dtype=int))
        with pytest.raises(PlacementError, match="expected an integer id"):
            call(np.full(10, 0.5))
    with pytest.raises(PlacementError, match=r"node 4 \('v4'\) is on device -1"):
        sim.makespan(np.where(np.arange(10) == 4, -1, 0))
    with pytest.raises(PlacementError, match="integer device ids"):
        sim.makespans(np.zeros((1, 10)))
    with pytest.raises(PlacementError, match="needs a placement with a priority"):
        sim.makespans([np.zeros(10, dtype=int)], dispatch="priority")


def test_one_placement_never_starts_the_thread_pool():
    """numba's threading layer stays uninitialised until a batch of several placements runs."""
    code = (
        "import numba, numpy as np\n"
        "from doppler_lab.timing.sim import Simulator\n"
        "from doppler_lab.workloads.random_dag import random_dag\n"
        "g = random_dag(50, seed=0)\n"
        "for sem in ('paper', 'wc'):\n"
        "    sim = Simulator(g, 'p100x4', sem)\n"
        "    sim.makespan(np.zeros(50, int)); sim.makespans(np.zeros((1, 50), int))\n"
        "try:\n"
        "    numba.threading_layer()\n"
        "    print('started')\n"
        "except ValueError:\n"
        "    print('idle')\n"
        "sim.makespans(np.zeros((3, 50), int))\n"
        "print(numba.threading_layer() is not None)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["idle", "True"]
