"""Sarkar's edge-zeroing clustering: its estimate, the two steps, the paper's graphs."""

from __future__ import annotations

import numpy as np
import pytest

from doppler_lab.hardware.cluster import make_cluster
from doppler_lab.house.errors import ConfigError
from doppler_lab.io.documents import read_paper_graph
from doppler_lab.ir.graph import cost_graph
from doppler_lab.placers import available_placers, get_placer, place
from doppler_lab.placers.clustering import (
    ClusteringModel,
    clustering_devices,
    clustering_variants,
    schedule_length,
)
from doppler_lab.timing.cost_model import CostModel
from doppler_lab.timing.sim import Simulator
from doppler_lab.workloads import build_from_spec

from paper_graphs import PAPER_GRAPHS_4GPU, PAPER_GRAPHS_8GPU, paper_graph_path
from placer_helpers import small_dag


@pytest.mark.parametrize(
    ("spec", "cluster"),
    [
        ("random_dag:num_nodes=60,width=8,integer_costs=false,seed=1", ("uniform", 4)),
        ("random_dag:num_nodes=80,width=6,integer_costs=false,seed=2", ("p100x4", None)),
        ("random_dag:num_nodes=40,width=3,integer_costs=false,seed=3", ("uniform", 3)),
    ],
)
def test_timing_model_is_the_paper_simulator(spec, cluster):
    # costs drawn from a continuum: no two ops become ready on a device at the same instant,
    # the one case where the simulator's event order and the model's node ids may differ
    g = build_from_spec(spec)
    c = make_cluster(cluster[0], cluster[1]) if cluster[1] else make_cluster(cluster[0])
    sim = Simulator(g, c, "paper")
    rng = np.random.default_rng(0)
    for _ in range(25):
        dev = rng.integers(0, c.num_devices, g.num_nodes)
        assert schedule_length(g, c, dev) == pytest.approx(sim.makespan(dev), rel=1e-12)


def test_virtual_devices_use_mean_costs():
    # two ops joined by a 10-unit edge; op 1 is twice as slow on device 1
    g = cost_graph(np.array([2.0, 2.0]), np.array([10.0, 0.0]), np.array([0]), np.array([1]))
    c = make_cluster("uniform", 2)
    model = ClusteringModel(g, CostModel(g, c))
    assert model.length(np.array([0, 0])) == pytest.approx(4.0)
    assert model.length(np.array([0, 1])) == pytest.approx(14.0)
    # virtual processors 2 and 3: the mean transfer, then the mean compute
    assert model.length(np.array([2, 3]), 4) == pytest.approx(14.0)
    assert model.length(np.array([2, 2]), 4) == pytest.approx(4.0)


def _chains(num: int, length: int, comm: float) -> tuple:
    n = num * length
    src = np.array([k * length + i for k in range(num) for i in range(length - 1)])
    return cost_graph(np.ones(n), np.full(n, comm), src, src + 1)


def test_heavy_chains_are_zeroed_and_spread():
    g, c = _chains(4, 6, 50.0), make_cluster("uniform", 4)
    p = place("clustering", g, c)
    rows = p.device.reshape(4, 6)
    assert all(len(set(r)) == 1 for r in rows)  # no transfer
    assert sorted(rows[:, 0]) == [0, 1, 2, 3]  # one chain per device
    assert p.meta["clusters"] == 4
    assert Simulator(g, c, "paper").makespan(p) == pytest.approx(6.0)


def test_fan_in_of_heavy_tensors_is_gathered():
    # four producers (10 units each) send 40-unit tensors to one cheap consumer: spreading them
    # saves 30 of compute and costs a 40-unit transfer; the clustering keeps them together
    comp = np.array([10.0, 10.0, 10.0, 10.0, 1.0])
    comm = np.array([40.0, 40.0, 40.0, 40.0, 0.0])
    g = cost_graph(comp, comm, np.array([0, 1, 2, 3]), np.array([4, 4, 4, 4]))
    c = make_cluster("uniform", 4)
    p = place("clustering", g, c)
    assert len(set(p.device)) == 1
    sim = Simulator(g, c, "paper")
    assert sim.makespan(p) == pytest.approx(41.0)
    assert sim.makespan(place("heft", g, c)) > 41.0


def test_cheap_transfers_spread_the_work():
    g, c = _chains(4, 6, 0.0), make_cluster("uniform", 4)
    # no edge costs anything: nothing is zeroed, and the mapping balances the 24 ops
    p = place("clustering", g, c)
    assert np.bincount(p.device, minlength=4).tolist() == [6, 6, 6, 6]


def test_deterministic_registered_and_inputs_filled():
    assert "clustering" in available_placers()
    g, c = small_dag(50, 3, edge_prob=0.12, inputs=4), make_cluster("p100x4")
    placer = get_placer("clustering")
    a = placer.place(g, c, np.random.default_rng(0))
    b = placer.place(g, c, np.random.default_rng(1))
    assert np.array_equal(a.device, b.device)
    assert a.placer == "clustering"
    assert set(a.meta) >= {"clusters", "model_runs", "passes", "model_length"}
    for v in np.flatnonzero(g.is_input):
        succ = g.successors(int(v))
        if succ.size:
            assert a.device[v] == a.device[succ[0]]
    one = place("clustering", g, make_cluster("uniform", 1))
    assert not one.device.any()


@pytest.mark.parametrize("name", [*PAPER_GRAPHS_4GPU, *PAPER_GRAPHS_8GPU])
def test_paper_graphs_beat_heft(name):
    g = read_paper_graph(paper_graph_path(name))
    c = make_cluster("uniform", 8 if name in PAPER_GRAPHS_8GPU else 4)
    sim = Simulator(g, c, "paper")
    p = place("clustering", g, c)
    ours, heft = sim.makespan(p), sim.makespan(place("heft", g, c))
    # chain_mm: a tie (1300.11 against 1300.07); a third better or more elsewhere
    assert ours <= heft * (1.0001 if name == "chain_mm_112nodes" else 0.7)
    # the model is the simulator on these graphs
    assert p.meta["model_length"] * g.time_scale == pytest.approx(ours, rel=1e-9)
    # YARDSTICK's best known: ffnn's is reached, the transformer block's within 0.1%
    best = {"ffnn_192nodes": 56.696, "transformer_block_215nodes": 166.74}
    if name in best:
        assert ours <= best[name] * 1.001


def test_cluster_labels_follow_the_placed_mates_else_cp():
    """Stage I's ``cluster`` labels: CP's devices (smallest earliest start) until a clustering
    mate of the op is placed, then the device with the largest share of their compute."""
    from doppler_lab.placers.clustering import ClusterLabeller, cluster_arrays
    from doppler_lab.placers.critical_path import CriticalPathTeacher
    from doppler_lab.timing.episode import Episode

    g = read_paper_graph(paper_graph_path("chain_mm_112nodes"))
    cost = CostModel(g, make_cluster("uniform", 4))
    of, ptr, members = cluster_arrays(g, cost)
    lab, cp = ClusterLabeller(g, cost), CriticalPathTeacher(g, cost)
    ep, rng = Episode(g, cost, "paper"), np.random.default_rng(0)
    followed = 0
    while not ep.done:
        v = int(cp.node_choices(ep.candidates())[0])
        est = ep.est(v)
        label = lab(ep, v, est, rng)
        mates = members[ptr[of[v]] : ptr[of[v] + 1]]
        placed = mates[ep.device[mates] >= 0]
        if placed.size == 0:
            np.testing.assert_array_equal(label, cp.device_choices(est))
        else:
            share = np.bincount(ep.device[placed], weights=cost.mean_compute[placed], minlength=4)
            np.testing.assert_array_equal(label, np.flatnonzero(share == share.max()))
            followed += 1
        ep.assign(v, int(label[-1]), est)
    assert followed == lab.calls > 0
    # b-level order with these labels beats CP's rule on this graph
    sim = Simulator(g, make_cluster("uniform", 4), "paper")
    ours = sim.makespan(np.where(ep.device < 0, 0, ep.device))
    assert ours < sim.makespan(place("cp", g, make_cluster("uniform", 4)))


def test_cap_bounds_each_clusters_work():
    # 4 heavy chains of 6 ops on 4 devices: unbounded, each chain is one cluster (6 units,
    # a device's whole part); at a cap of half a part no cluster computes more than 3 units
    g, c = _chains(4, 6, 50.0), make_cluster("uniform", 4)
    model = ClusteringModel(g, CostModel(g, c))
    assert model.cap_work(None) == np.inf
    assert model.cap_work(0.5) == pytest.approx(3.0)
    for cap, most in ((None, 6.0), (1.0, 6.0), (0.5, 3.0), (0.25, 1.0)):
        cl, _ = model.clusters(cap)
        work = np.bincount(cl, weights=np.ones(g.num_nodes))
        assert work.max() == pytest.approx(most)
    # the placer's option, in its meta
    p = place("clustering", g, c, cap=0.5)
    assert p.meta["cap"] == 0.5 and p.meta["clusters"] == 8


def test_a_single_op_above_the_cap_stays_alone():
    comp = np.array([10.0, 1.0, 1.0])
    g = cost_graph(comp, np.array([5.0, 5.0, 0.0]), np.array([0, 1]), np.array([1, 2]))
    model = ClusteringModel(g, CostModel(g, make_cluster("uniform", 2)))
    cl, _ = model.clusters(0.5)  # at most 3 units: op 0 alone, ops 1-2 together
    assert cl[0] != cl[1] and cl[1] == cl[2]


@pytest.mark.parametrize("cap", [0, -0.5, float("nan"), float("inf"), "half", True])
def test_bad_cap_is_refused_by_name(cap):
    with pytest.raises(ConfigError, match="cap"):
        get_placer("clustering", cap=cap)


def test_variants_are_distinct_and_start_with_the_unbounded():
    g, c = _chains(4, 6, 50.0), make_cluster("uniform", 4)
    cost = CostModel(g, c)
    out = clustering_variants(g, cost, (1.0, 0.5, 0.5))
    assert out[0][1]["cap"] is None
    assert np.array_equal(out[0][0], clustering_devices(g, cost)[0])
    keys = [d.tobytes() for d, _ in out]
    assert len(keys) == len(set(keys))  # cap 1.0 places like the unbounded one: left out
    assert [m["cap"] for _, m in out] == [None, 0.5]


def test_bounded_clustering_places_the_full_layer_near_the_best_known():
    # Sarkar's clusters are too coarse for 4 devices here (129.52); a quarter of a device's
    # part leaves the mapping pieces it can balance (YARDSTICK's best known: 122.11)
    name = "full_transformer_layer_261nodes"
    g = read_paper_graph(paper_graph_path(name))
    c = make_cluster("uniform", 4)
    sim = Simulator(g, c, "paper")
    plain = sim.makespan(place("clustering", g, c))
    bounded = sim.makespan(place("clustering", g, c, cap=0.25))
    assert plain == pytest.approx(129.52, abs=0.01)
    assert bounded <= 122.11 * 1.005
