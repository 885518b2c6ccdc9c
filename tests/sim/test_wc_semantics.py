"""wc and bsp semantics: contention, dedupe, latency, dispatch order, noise, batch."""

from __future__ import annotations

import numpy as np
import pytest

from doppler_lab.hardware.cluster import Cluster, Device, make_cluster
from doppler_lab.house.errors import PlacementError, SimulationError
from doppler_lab.ir.graph import GraphBuilder
from doppler_lab.ir.placement import Placement
from doppler_lab.timing.sim import Simulator, simulate, simulate_batch
from doppler_lab.workloads.random_dag import random_dag


def two_producers():
    """a, b (cost 1) feed c; transfers cost 5 (explicit)."""
    b = GraphBuilder("fan-in")
    a = b.add_node("a", cost=1.0)
    bb = b.add_node("b", cost=1.0)
    b.add_node("c", cost=1.0, inputs=[a, bb], edge_costs=[5.0, 5.0])
    return b.build()


def test_transfers_on_one_link_are_serialised_in_wc_not_in_paper():
    g = two_producers()
    cluster = make_cluster("uniform", 2)
    wc = simulate(g, cluster, [0, 0, 1], semantics="wc")
    # a [0,1], b [1,2]; a->1 on link 0->1 [1,6]; b->1 waits for the link: [6,11]; c [11,12]
    np.testing.assert_array_equal(np.sort(wc.transfer_start), [1, 6])
    assert wc.start[2] == 11 and wc.makespan == 12
    paper = simulate(g, cluster, [0, 0, 1], semantics="paper")
    assert paper.start[2] == 7  # transfers overlap: [1,6] and [2,7]
    assert wc.check(g) == [] and paper.check(g) == []


def test_one_copy_per_tensor_and_device():
    b = GraphBuilder("fan-out")
    a = b.add_node("a", cost=1.0)
    b.add_node("b", cost=1.0, inputs=[a], edge_costs=[4.0])
    b.add_node("c", cost=1.0, inputs=[a], edge_costs=[4.0])
    g = b.build()
    cluster = make_cluster("uniform", 2)
    wc = simulate(g, cluster, [0, 1, 1], semantics="wc")
    assert wc.num_transfers == 1 and wc.makespan == 1 + 4 + 2
    paper = simulate(g, cluster, [0, 1, 1], semantics="paper")
    assert paper.num_transfers == 2 and paper.makespan == 1 + 4 + 2
    assert wc.check(g) == []


def test_latency_and_bandwidth_from_the_cluster():
    b = GraphBuilder("mm")
    x = b.add_input("x", (256, 256))
    y = b.add_elementwise("y", "relu", [x])
    b.add_elementwise("z", "relu", [y])
    g = b.build()
    dev = (Device("d0", launch_overhead_s=0.0), Device("d1", launch_overhead_s=0.0))
    cluster = Cluster("c", dev, np.full((2, 2), 1e9), np.full((2, 2), 1e-3))
    tr = simulate(g, cluster, [0, 0, 1], semantics="wc")
    (k,) = range(tr.num_transfers)
    assert tr.transfer_end[k] - tr.transfer_start[k] == pytest.approx(1e-3 + 256 * 256 * 4 / 1e9)


def test_fifo_by_ready_time_then_id_and_priority_dispatch():
    b = GraphBuilder("three")
    for name in ("p", "q", "r"):
        b.add_node(name, cost=1.0)
    g = b.build()
    cluster = make_cluster("uniform", 1)
    fifo = simulate(g, cluster, [0, 0, 0], semantics="wc")
    np.testing.assert_array_equal(fifo.start, [0, 1, 2])
    pl = Placement(np.zeros(3, int), priority=[2.0, 0.0, 1.0])
    prio = simulate(g, cluster, pl, semantics="wc", dispatch="priority")
    np.testing.assert_array_equal(prio.start, [2, 0, 1])
    with pytest.raises(PlacementError, match="needs a placement with a priority"):
        simulate(g, cluster, [0, 0, 0], semantics="wc", dispatch="priority")
    with pytest.raises(SimulationError, match="needs semantics 'wc'"):
        simulate(g, cluster, pl, semantics="paper", dispatch="priority")


def test_noise_is_seeded():
    g = random_dag(80, seed=2)
    cluster = make_cluster("uniform", 3)
    dev = np.arange(g.num_nodes) % 3
    sim = Simulator(g, cluster, "wc", noise=0.2)
    a, b, c = sim.run(dev, seed=1), sim.run(dev, seed=1), sim.run(dev, seed=2)
    np.testing.assert_array_equal(a.start, b.start)
    assert a.makespan != c.makespan
    with pytest.raises(SimulationError, match="needs a seed"):
        sim.run(dev)
    quiet = Simulator(g, cluster, "wc")
    assert (
        quiet.run(dev, seed=1).makespan
        == quiet.run(dev, seed=99).makespan
        == quiet.run(dev).makespan
    )
    with pytest.raises(SimulationError, match="noise sigma -1"):
        Simulator(g, cluster, "wc", noise=-1)
    with pytest.raises(SimulationError, match="unknown semantics 'async'"):
        Simulator(g, cluster, "async")


@pytest.mark.parametrize("semantics", ["paper", "wc", "bsp"])
def test_batch_equals_one_by_one(semantics):
    g = random_dag(120, seed=4)
    cluster = make_cluster("uniform", 4)
    rng = np.random.default_rng(0)
    pls = rng.integers(0, 4, size=(16, g.num_nodes))
    sim = Simulator(g, cluster, semantics)
    batch = sim.makespans(pls)
    one = [sim.run(p).makespan for p in pls]
    np.testing.assert_allclose(batch, one, rtol=0, atol=0)
    np.testing.assert_allclose(simulate_batch(g, cluster, pls, semantics), batch)


def test_bsp_levels_are_separated_by_barriers():
    g = random_dag(60, width=6, seed=5)
    tr = simulate(g, make_cluster("uniform", 3), np.arange(60) % 3, semantics="bsp")
    assert tr.check(g) == []
    for level in range(int(g.depth.max())):
        ends = tr.end[g.depth == level]
        starts = tr.start[g.depth == level + 1]
        assert starts.min() >= ends.max()


def test_bad_placements():
    g = random_dag(10, seed=0)
    cluster = make_cluster("uniform", 2)
    with pytest.raises(PlacementError, match="placement has 3 entries but graph"):
        simulate(g, cluster, [0, 1, 0])
    with pytest.raises(PlacementError, match=r"node 4 \('v4'\) is on device 5, expected 0..1"):
        simulate(g, cluster, [0, 0, 0, 0, 5, 0, 0, 0, 0, 0])
    with pytest.raises(PlacementError, match="expected an integer id"):
        Placement(np.array([0.5, 1.0]))


def test_batch_array_validation():
    g = random_dag(20, seed=0)
    sim = Simulator(g, make_cluster("uniform", 2), "paper")
    bad = np.zeros((3, 20), dtype=int)
    bad[2, 7] = 4
    with pytest.raises(PlacementError, match=r"placement 2: node 7 \('v7'\) is on device 4"):
        sim.makespans(bad)
    with pytest.raises(PlacementError, match="21 entries each"):
        sim.makespans(np.zeros((2, 21), dtype=int))
    with pytest.raises(PlacementError, match="integer device ids"):
        sim.makespans(np.zeros((2, 20)))
    assert sim.makespans(np.zeros((0, 20), dtype=int)).shape == (0,)


@pytest.mark.parametrize("semantics", ["paper", "wc"])
def test_parallel_batch_keeps_torch_threads(semantics):
    """numba's OpenMP layer must not change the thread count a torch training loop asked for
    (also once torch's own OpenMP runtime has started)."""
    import subprocess
    import sys

    code = (
        "import torch, numpy as np\n"
        "torch.set_num_threads(1)\n"
        "torch.nn.GRUCell(64, 64)(torch.randn(300, 64))  # torch's OpenMP runtime started\n"
        "from doppler_lab.timing.sim import Simulator\n"
        "from doppler_lab.hardware import make_cluster\n"
        "from doppler_lab.workloads.random_dag import random_dag\n"
        "g = random_dag(50, seed=0)\n"
        f"Simulator(g, make_cluster('uniform', 2), '{semantics}').makespans(np.zeros((4, 50), int))\n"
        "print(torch.get_num_threads())\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "1"
