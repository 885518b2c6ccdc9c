"""CP-SAT: optimal on small graphs (checked by brute force), bound and gap under a time limit."""

from __future__ import annotations

import numpy as np
import pytest

from doppler_lab.hardware.cluster import Cluster, Device, make_cluster
from doppler_lab.house.errors import ConfigError
from doppler_lab.ir.graph import GraphBuilder
from doppler_lab.placers import get_placer, place
from doppler_lab.placers.exact import MAX_NODES_WITHOUT_TIME_LIMIT, delay_model
from doppler_lab.timing.cost_model import CostModel

from placer_helpers import assert_valid_schedule, brute_force_delay_model, small_dag


def _solve(g, c, **opts):
    return get_placer("exact", workers=1, **opts).schedule(g, c, np.random.default_rng(0))


@pytest.mark.parametrize(
    ("n", "devices", "seed", "per_device"),
    [(5, 2, 0, False), (6, 2, 1, False), (5, 3, 2, True), (5, 2, 3, True), (6, 3, 4, False)],
)
def test_optimal_equals_brute_force(n, devices, seed, per_device):
    g = small_dag(n, seed, num_devices=devices if per_device else None, edge_prob=0.5, inputs=1)
    c = make_cluster("uniform", devices)
    cost = CostModel(g, c)
    s = _solve(g, c)
    assert s.meta["optimal"] is True
    assert s.makespan == pytest.approx(brute_force_delay_model(g, cost))
    assert s.meta["bound"] == pytest.approx(s.makespan)
    assert s.meta["gap"] == pytest.approx(0.0, abs=1e-12)
    assert_valid_schedule(g, cost, s.placement.device, s.start, s.finish)


def test_optimal_with_device_pair_dependent_transfers():
    # three devices, link 0<->1 fast and the others slow: transfer time depends on the pair
    d = 3
    devs = tuple(Device(f"d{i}", launch_overhead_s=0.0) for i in range(d))
    bw = np.array([[1.0, 1.0, 0.25], [1.0, 1.0, 0.25], [0.25, 0.25, 1.0]])
    c = Cluster("pairs", devs, bw, np.zeros((d, d)))
    b = GraphBuilder("pairs")
    a = b.add_node("a", cost=[2.0, 2.0, 2.0], out_bytes=3.0)
    x = b.add_node("x", cost=[4.0, 4.0, 4.0], inputs=[a], out_bytes=2.0)
    y = b.add_node("y", cost=[4.0, 4.0, 1.0], inputs=[a], out_bytes=2.0)
    b.add_node("z", cost=[1.0, 1.0, 1.0], inputs=[x, y], out_bytes=1.0)
    g = b.build()
    cost = CostModel(g, c)
    m = delay_model(g, cost)
    assert not m.identical and not m.rounded
    s = _solve(g, c)
    assert s.meta["optimal"] is True
    assert s.makespan == pytest.approx(brute_force_delay_model(g, cost))


def test_time_limited_large_graph_reports_bound_and_gap():
    g = small_dag(60, 7, edge_prob=0.1)
    c = make_cluster("uniform", 4)
    cost = CostModel(g, c)
    s = _solve(g, c, time_limit=1.0)
    assert s.meta["bound"] <= s.makespan + 1e-9
    assert s.meta["bound"] >= cost.lower_bound() * g.time_scale - 1e-9
    assert 0.0 <= s.meta["gap"] < 1.0
    heft = get_placer("heft").schedule(g, c, np.random.default_rng(0))
    assert s.makespan <= heft.makespan + 1e-9  # HEFT is the hint: never worse than it
    assert_valid_schedule(g, cost, s.placement.device, s.start, s.finish)


def test_large_graph_without_time_limit_is_refused():
    g = small_dag(MAX_NODES_WITHOUT_TIME_LIMIT + 1, 0, edge_prob=0.1)
    with pytest.raises(ConfigError, match="time_limit"):
        place("exact", g, make_cluster("uniform", 2))


@pytest.mark.parametrize("bad", [0, -1, float("nan"), "10"])
def test_bad_time_limit_is_refused(bad):
    with pytest.raises(ConfigError, match="time_limit"):
        get_placer("exact", time_limit=bad)


def test_non_integer_costs_are_rounded_and_flagged():
    g = small_dag(5, 0).with_costs(np.array([1.1, 2.3, 0.7, 1.9, 2.2]), None)
    g = g.with_costs(g.compute_cost, np.full(g.num_edges, 0.35))
    s = _solve(g, make_cluster("uniform", 2))
    assert s.meta["rounded"] is True and s.meta["optimal"] is False
    assert s.makespan == pytest.approx(
        brute_force_delay_model(g, CostModel(g, make_cluster("uniform", 2))), rel=1e-3
    )
