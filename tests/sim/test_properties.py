"""Simulator invariants on random DAGs (hypothesis)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from doppler_lab.hardware.cluster import make_cluster
from doppler_lab.ir.graph import KIND_CODE, DataflowGraph
from doppler_lab.timing.cost_model import CostModel
from doppler_lab.timing.sim import Simulator
from doppler_lab.timing.sim.reference import simulate_paper_simpy


@st.composite
def dags(draw, max_nodes=24):
    n = draw(st.integers(1, max_nodes))
    pairs = draw(st.sets(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)), max_size=3 * n))
    edges = sorted((min(a, b), max(a, b)) for a, b in pairs if a != b)
    edges = list(dict.fromkeys(edges))
    comp = np.array(draw(st.lists(st.integers(0, 4), min_size=n, max_size=n)), dtype=float)
    comm = np.array(draw(st.lists(st.integers(0, 4), min_size=n, max_size=n)), dtype=float)
    src = np.array([a for a, _ in edges], dtype=np.int64)
    dst = np.array([b for _, b in edges], dtype=np.int64)
    g = DataflowGraph(
        names=tuple(f"v{i}" for i in range(n)),
        kinds=np.full(n, KIND_CODE["compute"]),
        flops=comp,
        out_bytes=comm * 1e6,
        edge_src=src,
        edge_dst=dst,
        compute_cost=comp,
        edge_cost=comm[src] if draw(st.booleans()) else None,
    )
    d = draw(st.integers(1, 4))
    placement = np.array(draw(st.lists(st.integers(0, d - 1), min_size=n, max_size=n)))
    return g, d, placement


def link_overlaps(trace, cluster) -> list[tuple[int, int, int]]:
    """(resource, i, j) for transfers i, j that overlap on a shared link resource."""
    bad = []
    for r in range(cluster.num_links):
        uses = [
            k
            for k in range(trace.num_transfers)
            if r in cluster.routes[trace.transfer_src_device[k], trace.transfer_dst_device[k]]
        ]
        uses.sort(key=lambda k: trace.transfer_start[k])
        for i, j in zip(uses, uses[1:]):
            if trace.transfer_start[j] < trace.transfer_end[i] - 1e-9:
                bad.append((r, i, j))
    return bad


@settings(max_examples=120, deadline=None)
@given(
    dags(),
    st.sampled_from(["paper", "wc", "bsp"]),
    st.sampled_from(["uniform", "p100x4", "v100x8"]),
)
def test_invariants(case, semantics, cluster_name):
    g, d, placement = case
    cluster = (
        make_cluster(cluster_name, d) if cluster_name == "uniform" else make_cluster(cluster_name)
    )
    placement = placement % cluster.num_devices
    sim = Simulator(g, cluster, semantics)
    tr = sim.run(placement)
    assert tr.check(g) == []  # dependencies respected, no overlap on a device
    assert tr.makespan >= sim.lower_bound() * (1 - 1e-12)
    if semantics != "paper":
        assert link_overlaps(tr, cluster) == []
    again = sim.run(placement)
    np.testing.assert_array_equal(again.start, tr.start)
    assert sim.makespans([placement])[0] == tr.makespan


@settings(max_examples=60, deadline=None)
@given(dags(), st.integers(0, 2**31 - 1))
def test_noise_determinism(case, seed):
    g, d, placement = case
    sim = Simulator(g, make_cluster("uniform", d), "wc", noise=0.3)
    a, b = sim.run(placement, seed=seed), sim.run(placement, seed=seed)
    np.testing.assert_array_equal(a.start, b.start)
    np.testing.assert_array_equal(a.transfer_end, b.transfer_end)
    assert a.check(g) == []


@settings(max_examples=80, deadline=None)
@given(dags(max_nodes=16))
def test_paper_kernel_equals_simpy_reference(case):
    g, d, placement = case
    cluster = make_cluster("uniform", d)
    cost = CostModel(g, cluster)
    tr = Simulator(g, cluster, "paper", cost_model=cost).run(placement)
    m, start, end = simulate_paper_simpy(g, cost, placement)
    np.testing.assert_array_equal(tr.start, start)
    np.testing.assert_array_equal(tr.end, end)
