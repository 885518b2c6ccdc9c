"""The ``wc`` estimate of the episode state: link contention, one copy per tensor and device."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from doppler_lab.hardware.cluster import make_cluster
from doppler_lab.house.errors import PlacementError
from doppler_lab.ir.graph import GraphBuilder
from doppler_lab.placers import place
from doppler_lab.policies.checkpoint import load_policy, make_policy
from doppler_lab.policies.env import PlacementEnv
from doppler_lab.policies.policy_config import PolicyConfig
from doppler_lab.timing.cost_model import CostModel
from doppler_lab.timing.schedule import (
    EdgeCosts,
    ListScheduleState,
    PredArrays,
    WcState,
    _wc_ready,
    estimate_for,
)
from doppler_lab.timing.sim import simulate
from doppler_lab.workloads import build_from_spec
from doppler_lab.workloads.random_dag import random_dag


def chain(costs: list[float], comm: list[float]):
    b = GraphBuilder("chain")
    prev = b.add_node("n0", cost=costs[0])
    for i, c in enumerate(costs[1:], 1):
        prev = b.add_node(f"n{i}", cost=c, inputs=[prev], edge_costs=[comm[i - 1]])
    return b.build()


def run(graph, cluster, device, order=None, estimate="wc"):
    """Assign ``device`` in ``order`` (default topological); returns the state."""
    state = ListScheduleState(graph, CostModel(graph, cluster), estimate)
    for v in graph.topo_order if order is None else order:
        if not graph.is_input[v]:
            state.assign(int(v), int(device[v]))
    return state


@settings(max_examples=40, deadline=None)
@given(
    st.integers(2, 12).flatmap(
        lambda n: st.tuples(
            st.lists(st.integers(1, 20), min_size=n, max_size=n),
            st.lists(st.integers(0, 20), min_size=n - 1, max_size=n - 1),
            st.lists(st.integers(0, 3), min_size=n, max_size=n),
        )
    ),
    st.sampled_from(["p100x4", "v100x8", "uniform"]),
)
def test_chain_estimate_is_the_wc_simulation(data, cluster_name):
    costs, comm, device = data
    g = chain([float(c) for c in costs], [float(c) for c in comm])
    cluster = (
        make_cluster(cluster_name, 4) if cluster_name == "uniform" else make_cluster(cluster_name)
    )
    state = run(g, cluster, device)
    trace = simulate(g, cluster, device, semantics="wc")
    np.testing.assert_array_equal(state.start, trace.start)
    np.testing.assert_array_equal(state.finish, trace.end)
    assert state.schedule_makespan == trace.makespan


def test_fan_in_serialises_on_the_link_and_fan_out_sends_once():
    b = GraphBuilder("fan")
    a = b.add_node("a", cost=1.0)
    bb = b.add_node("b", cost=1.0)
    c = b.add_node("c", cost=1.0, inputs=[a, bb], edge_costs=[5.0, 5.0])
    b.add_node("d", cost=1.0, inputs=[a], edge_costs=[5.0])
    g = b.build()
    cluster = make_cluster("uniform", 2)
    device = [0, 0, 1, 1]
    trace = simulate(g, cluster, device, semantics="wc")
    # a [0,1], b [1,2]; a->1 [1,6], b->1 waits for the link [6,11]; d reuses a's copy [6,7];
    # c [11,12]: with d assigned before c the estimate is the simulation
    state = run(g, cluster, device, order=[0, 1, 3, 2])
    assert state.start[3] == 6 and state.start[c] == 11
    assert np.count_nonzero(~np.isnan(state.arrival)) == 2
    np.testing.assert_array_equal(state.start, trace.start)
    # assigned in the other order, d queues behind c on device 1 (the documented estimate)
    late = run(g, cluster, device, order=[0, 1, 2, 3])
    assert late.start[c] == 11 and late.start[3] == 12
    est = run(g, cluster, device, estimate="est")
    assert est.start[c] == 7  # est: transfers overlap, no link


@pytest.mark.parametrize("seed", range(3))
def test_invariants_on_a_random_episode(seed):
    g = random_dag(60, width=6, seed=seed)
    cluster = make_cluster("p100x4")
    rng = np.random.default_rng(seed)
    state = ListScheduleState(g, CostModel(g, cluster), "wc")
    device = np.full(g.num_nodes, -1)
    sent: dict[tuple[int, int], float] = {}
    link_before = state.link_free.copy()
    while not state.done:
        v = int(rng.choice(state.candidates()))
        d = int(rng.integers(4))
        arrival_before = state.arrival.copy()
        est = state.est(v)
        # a query changes nothing
        np.testing.assert_array_equal(state.link_free, link_before)
        np.testing.assert_array_equal(state.arrival, arrival_before, strict=True)
        state.assign(v, d)
        device[v] = d
        assert state.start[v] == est[d]
        assert np.all(state.link_free >= link_before)  # link free times never go back
        link_before = state.link_free.copy()
        # an arrival, once set, is never changed: one transfer per tensor and device
        for (u, e), t in sent.items():
            assert state.arrival[u, e] == t
        for u, e in zip(*np.nonzero(~np.isnan(state.arrival))):
            sent.setdefault((int(u), int(e)), float(state.arrival[u, e]))
    # exactly the (tensor, device) pairs the simulator sends
    trace = simulate(g, cluster, device, semantics="wc")
    assert len(sent) == trace.num_transfers
    for u, e in sent:
        assert e != device[u] and any(device[w] == e for w in g.successors(u))


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 10_000), st.integers(0, 40))
def test_compiled_and_python_twins_agree(seed, steps):
    g = random_dag(50, width=5, seed=seed % 7)
    cluster = make_cluster("v100x8")
    rng = np.random.default_rng(seed)
    state = ListScheduleState(g, CostModel(g, cluster), "wc")
    for _ in range(steps):
        if state.done:
            break
        state.assign(int(rng.choice(state.candidates())), int(rng.integers(8)))
    if state.done:
        return
    v = int(rng.choice(state.candidates()))
    for d in range(8):
        args = [
            v,
            d,
            PredArrays(g.pred_ptr, g.pred_idx, g.pred_eid, g.is_input),
            WcState(
                state.device,
                state.finish,
                state.arrival.copy(),
                state.link_free.copy(),
                np.ascontiguousarray(cluster.routes),
            ),
            EdgeCosts(
                state.cost.edge_fixed,
                state.cost.edge_bytes,
                state.cost.latency,
                state.cost.inv_bandwidth,
            ),
        ]
        fast = _wc_ready(*args, False)
        slow = _wc_ready.py_func(*args, False)
        assert fast == slow


def test_timing_follows_the_semantics():
    assert estimate_for("wc") == "wc"
    assert estimate_for("paper") == "est" and estimate_for(None) == "est"
    with pytest.raises(PlacementError, match="semantics 'nope'"):
        estimate_for("nope")
    g = build_from_spec("chainmm:matrices=3,scale=0.001")
    cluster = make_cluster("p100x4")
    wc = place("cp", g, cluster, seed=0, semantics="wc")
    assert wc.meta["estimate"] == "wc"
    assert place("cp", g, cluster, seed=0, semantics="paper").meta["estimate"] == "est"
    assert place("cp", g, cluster, seed=0, semantics="wc", estimate="est").meta["estimate"] == "est"


def test_environment_takes_the_timing_of_its_semantics():
    g = build_from_spec("chainmm:matrices=3,scale=0.001")
    assert PlacementEnv(g, "p100x4", semantics="wc").episode.estimate == "wc"
    assert PlacementEnv(g, "p100x4").episode.estimate == "est"
    assert PlacementEnv(g, "p100x4", semantics="wc", estimate="est").episode.estimate == "est"


def test_policies_resolve_auto_by_semantics_and_old_checkpoints_keep_est():
    cfg = PolicyConfig(hidden=8, head_hidden=8, mp_steps=1)
    assert cfg.estimate == "auto"
    assert make_policy(cfg, 4, semantics="wc").config.estimate == "wc"
    assert make_policy(cfg, 4, semantics="paper").config.estimate == "est"
    assert make_policy(cfg, 4).config.estimate == "est"
    assert (
        make_policy(cfg.replace(estimate="additive"), 4, semantics="wc").config.estimate
        == "additive"
    )
    stored = {k: v for k, v in cfg.to_dict().items() if k != "estimate"}
    assert PolicyConfig.from_dict(stored).estimate == "est"  # written before timings by semantics
    shipped, _ = load_policy(Path(__file__).parents[1] / "data/checkpoints/doppler/llama_layer.pt")
    assert shipped.config.estimate == "est"  # trained (on wc) with the est model
