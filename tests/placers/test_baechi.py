"""ETF and m-TOPO: earliest-start choices, topological fill, memory caps."""

from __future__ import annotations

import numpy as np
import pytest

from doppler_lab.hardware.cluster import make_cluster
from doppler_lab.house.errors import ConfigError, PlacementError
from doppler_lab.ir.graph import GraphBuilder
from doppler_lab.placers import get_placer, place
from doppler_lab.placers.baechi import device_memory
from doppler_lab.timing.cost_model import CostModel
from doppler_lab.timing.schedule import ListScheduleState

from placer_helpers import assert_valid_schedule, small_dag

RNG = np.random.default_rng(0)


def test_etf_always_takes_the_earliest_start_pair():
    g = small_dag(18, 2, num_devices=3, inputs=3)
    c = make_cluster("uniform", 3)
    cost = CostModel(g, c)
    s = get_placer("etf").schedule(g, c, RNG)
    order = s.order()
    state = ListScheduleState(g, cost, "est")
    for v in order:  # replay: at every step no (candidate, device) pair starts earlier
        earliest = min(state.est(int(u)).min() for u in state.candidates())
        assert s.start[v] == pytest.approx(earliest)
        state.assign(int(v), int(s.placement.device[v]))
    assert_valid_schedule(g, cost, s.placement.device, s.start, s.finish)


def test_etf_spreads_independent_equal_tasks():
    b = GraphBuilder("indep")
    for i in range(8):
        b.add_node(f"t{i}", cost=1.0)
    g = b.build()
    s = get_placer("etf").schedule(g, make_cluster("uniform", 4), RNG)
    assert s.makespan == 2.0
    assert np.bincount(s.placement.device, minlength=4).tolist() == [2, 2, 2, 2]


@pytest.mark.parametrize("name", ["etf", "m-topo"])
@pytest.mark.parametrize("seed", range(3))
def test_memory_cap_is_respected(name, seed):
    g = small_dag(24, seed, inputs=3)  # every node outputs 4 bytes, inputs are 8 bytes
    c = make_cluster("uniform", 3)
    total = device_memory(g, np.zeros(g.num_nodes, dtype=int), 1)[0]
    cap = 0.6 * total
    p = place(name, g, c, seed=0, memory_cap=cap)
    used = device_memory(g, p.device, 3)
    assert np.all(used <= cap)
    np.testing.assert_allclose(used, p.meta["memory_used"])


def test_etf_without_cap_can_exceed_what_the_cap_allows():
    # two chains with heavy transfers: unconstrained ETF keeps everything on one device
    b = GraphBuilder("chain")
    prev = None
    for i in range(6):
        prev = b.add_node(
            f"c{i}",
            cost=1.0,
            out_bytes=4.0,
            inputs=[] if prev is None else [prev],
            edge_costs=None if prev is None else [100.0],
        )
    g = b.build()
    c = make_cluster("uniform", 2)
    free = place("etf", g, c)
    assert np.unique(free.device).size == 1
    capped = place("etf", g, c, memory_cap=12.0)
    assert np.all(device_memory(g, capped.device, 2) <= 12.0)
    assert np.unique(capped.device).size == 2


def test_m_topo_fills_devices_in_topological_order():
    g = small_dag(30, 4)
    c = make_cluster("uniform", 4)
    p = place("m-topo", g, c)
    topo = g.topo_order[~g.is_input[g.topo_order]]
    assert np.all(np.diff(p.device[topo]) >= 0)  # contiguous blocks in topological order
    # every device but the last is filled up to its share (total / D): the next node overflows it
    share = 4.0 * topo.size / 4
    used = device_memory(g, p.device, 4)
    assert np.all(used[:3] <= share)
    assert np.all(used[:3] + 4.0 > share)


@pytest.mark.parametrize("name", ["etf", "m-topo"])
def test_impossible_caps_are_clear_errors(name):
    g = small_dag(10, 1, inputs=1)
    c = make_cluster("uniform", 2)
    with pytest.raises(PlacementError, match="no placement meets the cap"):
        place(name, g, c, memory_cap=3.0)  # one node needs 4 bytes
    with pytest.raises(PlacementError, match="no placement meets the cap"):
        place(name, g, c, memory_cap=10.0)  # 48 bytes in all, 20 available
    for bad in (0, -1.0, "lots", [1.0, float("nan")]):
        with pytest.raises(ConfigError, match="memory_cap"):
            get_placer(name, memory_cap=bad)
    with pytest.raises(ConfigError, match="entries for 2 devices"):
        place(name, g, c, memory_cap=[100.0, 100.0, 100.0])


def test_device_caps_come_from_the_cluster():
    g = small_dag(10, 1)
    p = place("etf", g, make_cluster("p100x4"), memory_cap="device")
    assert np.all(device_memory(g, p.device, 4) <= 16e9)
