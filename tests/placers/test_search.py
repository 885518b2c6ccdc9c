"""Local search and the enumerative optimiser: budgets, never worse than their start."""

from __future__ import annotations

import numpy as np
import pytest

from doppler_lab.hardware.cluster import make_cluster
from doppler_lab.house.errors import ConfigError
from doppler_lab.ir.graph import GraphBuilder
from doppler_lab.placers import get_placer, place
from doppler_lab.placers.enumerative import group_choices, load_cost, node_groups
from doppler_lab.placers.local_search import (
    DescentOptions,
    iterated_search,
    neighbours,
    search_devices,
)
from doppler_lab.timing.cost_model import CostModel
from doppler_lab.timing.sim import Simulator

from placer_helpers import small_dag


@pytest.fixture(scope="module")
def case():
    g = small_dag(40, 11, edge_prob=0.08, inputs=2)
    return g, make_cluster("uniform", 4)


@pytest.mark.parametrize("method", ["anneal", "hill", "ils"])
@pytest.mark.parametrize("start", ["cp", "round-robin", "random"])
def test_local_search_never_worse_than_start_and_within_budget(case, method, start):
    g, c = case
    sim = Simulator(g, c, "paper")
    p = place("local-search", g, c, seed=3, budget=150, method=method, start=start, batch=16)
    init = place(start, g, c, seed=np.random.default_rng(3))
    assert p.meta["start_makespan"] == pytest.approx(sim.makespan(init))
    assert sim.makespan(p) == pytest.approx(p.meta["best_makespan"])
    assert p.meta["best_makespan"] <= p.meta["start_makespan"]
    assert p.meta["sim_calls"] <= 150


def test_local_search_improves_a_bad_start_and_is_reproducible(case):
    g, c = case
    a = place("local-search", g, c, seed=1, budget=300, start="single", method="hill")
    b = place("local-search", g, c, seed=1, budget=300, start="single", method="hill")
    assert a.meta["best_makespan"] < a.meta["start_makespan"]
    np.testing.assert_array_equal(a.device, b.device)
    assert a.meta["sim_calls"] == 300


def test_local_search_ils_is_the_doppler_search_without_a_policy(case):
    g, c = case
    sim = Simulator(g, c, "wc")
    p = place("local-search", g, c, seed=5, budget=200, method="ils", start="heft", semantics="wc")
    rng = np.random.default_rng(5)
    init = place("heft", g, c, seed=rng)
    found = iterated_search(sim, init.device, sim.makespan(init), 200, rng, calls_used=1)
    assert p.device[g.compute_nodes].tolist() == found.device[g.compute_nodes].tolist()
    assert p.meta["sim_calls"] == found.calls == 200
    assert p.meta["best_makespan"] == pytest.approx(found.cost)
    assert found.cost <= sim.makespan(init)
    with pytest.raises(ConfigError, match="method"):
        get_placer("local-search", method="beam")


# recorded before local search's loop moved into search_devices (shared with the doppler search)
LOCAL_SEARCH_RECORDED = {
    ("anneal", 0): (
        50.0,
        [3, 3, 3, 3, 0, 1, 1, 0, 0, 0, 3, 0, 2, 3, 1, 1, 3, 0, 2, 0, 0]
        + [0, 2, 1, 3, 1, 3, 2, 1, 2, 3, 0, 1, 1, 2, 2, 0, 3, 2, 3, 1, 0],
    ),
    ("hill", 1): (
        50.0,
        [1, 1, 1, 1, 1, 2, 2, 0, 2, 1, 2, 2, 1, 1, 1, 3, 2, 0, 3, 0, 0]
        + [1, 0, 3, 2, 3, 2, 2, 3, 3, 3, 2, 1, 0, 3, 0, 2, 0, 1, 3, 0, 0],
    ),
}


@pytest.mark.parametrize(("method", "seed"), list(LOCAL_SEARCH_RECORDED))
def test_local_search_placements_are_unchanged_for_a_seed(case, method, seed):
    g, c = case
    p = place("local-search", g, c, seed=seed, budget=300, method=method)
    makespan, device = LOCAL_SEARCH_RECORDED[(method, seed)]
    assert p.meta["best_makespan"] == pytest.approx(makespan)
    assert p.device.tolist() == device


def test_search_devices_counts_the_callers_calls(case):
    g, c = case
    sim = Simulator(g, c, "paper")
    start = place("round-robin", g, c).device
    cost = sim.makespan(start)
    out = search_devices(sim, start, 50, np.random.default_rng(0), start_cost=cost, calls_used=20)
    assert out.calls == 50 and out.start_cost == cost and out.cost <= cost
    assert sim.makespan(out.device) == pytest.approx(out.cost)
    # without a known start cost, the start costs one call
    assert (
        search_devices(sim, start, 5, np.random.default_rng(0), DescentOptions(batch=8)).calls == 5
    )


def test_neighbours_draw_the_new_device_from_prefs():
    rng = np.random.default_rng(0)
    dev = np.zeros(10, dtype=np.int64)
    prefs = np.tile([5.0, 0.0, 1.0, 0.0], (10, 1))  # never devices 1 or 3
    nb = neighbours(dev, np.arange(10), 4, 300, rng, swap_prob=0.0, prefs=prefs)
    assert ((nb != dev).sum(axis=1) == 1).all()  # the current device is left out
    assert set(np.unique(nb).tolist()) == {0, 2}


def test_neighbours_are_one_move_away():
    rng = np.random.default_rng(0)
    dev = rng.integers(0, 3, 30)
    movable = np.arange(2, 30)
    nb = neighbours(dev, movable, 3, 200, rng, swap_prob=0.5)
    changed = (nb != dev).sum(axis=1)
    assert set(changed.tolist()) <= {1, 2}
    assert np.all(nb[:, :2] == dev[:2])  # only movable nodes move
    two = nb[changed == 2]
    # a swap exchanges the devices of two nodes: the multiset of devices is unchanged
    assert np.all(np.sort(two, axis=1) == np.sort(dev))


@pytest.mark.parametrize("bad", [0, -5, 2.5, None])
def test_bad_budgets_are_refused(bad):
    with pytest.raises(ConfigError, match="budget"):
        get_placer("local-search", budget=bad)
    if bad is not None:
        with pytest.raises(ConfigError, match="budget"):
            get_placer("enumerative", budget=bad)


def test_enumerative_never_worse_than_start_within_budget(case):
    g, c = case
    sim = Simulator(g, c, "paper")
    start = sim.makespan(place("cp", g, c, seed=np.random.default_rng(0)))
    p = place("enumerative", g, c, seed=0)
    assert sim.makespan(p) <= start
    assert sim.makespan(p) == pytest.approx(p.meta["objective"])
    # one pass over single nodes: the start plus (D - 1) alternatives per node
    assert p.meta["sim_calls"] == 1 + 3 * g.compute_nodes.size
    q = place("enumerative", g, c, seed=0, budget=50, passes=3)
    assert q.meta["sim_calls"] <= 50


def test_enumerative_greedy_step_is_the_best_choice_per_node():
    # two independent equal nodes and 2 devices: the pass must split them
    b = GraphBuilder("two")
    b.add_node("a", cost=5.0)
    b.add_node("b", cost=5.0)
    g = b.build()
    c = make_cluster("uniform", 2)
    p = place("enumerative", g, c, start="single")
    assert sorted(p.device.tolist()) == [0, 1]


def test_block_groups_and_their_choices():
    b = GraphBuilder("blocks")
    ids = [b.add_node(f"mm[{i}]", cost=1.0) for i in range(4)]
    b.add_node("sum[0]", cost=1.0, inputs=ids, edge_costs=[1.0] * 4)
    g = b.build()
    groups = node_groups(g, "prefix")
    assert [x.tolist() for x in groups] == [[0, 1, 2, 3], [4]]
    cur = np.zeros(5, dtype=np.int64)
    ch = group_choices(cur, groups[0], 2)
    # all-on-1, and round-robin layouts 0101 / 1010 (all-on-0 is the current one)
    assert {tuple(r[:4]) for r in ch} == {(1, 1, 1, 1), (0, 1, 0, 1), (1, 0, 1, 0)}
    p = place("enumerative", g, c := make_cluster("uniform", 2), group="prefix", start="single")
    assert Simulator(g, c).makespan(p) < 5.0


def test_load_cost_counts_compute_and_received_transfers():
    b = GraphBuilder("lc")
    a = b.add_node("a", cost=2.0)
    b.add_node("b", cost=3.0, inputs=[a], edge_costs=[7.0])
    g = b.build()
    cost = CostModel(g, make_cluster("uniform", 2))
    out = load_cost(cost, np.array([[0, 0], [0, 1]]))
    assert out.tolist() == [5.0, 10.0]
    p = place("enumerative", g, make_cluster("uniform", 2), cost="load", start="round-robin")
    assert p.device.tolist() in ([0, 0], [1, 1])
    assert p.meta["sim_calls"] == 0
