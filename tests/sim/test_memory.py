"""The memory model: peaks per device on every trace, against a brute-force timeline, the
Python twin, the static bound, and graphs without sizes."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from doppler_lab.hardware.cluster import make_cluster
from doppler_lab.io.documents import load_trace, save_trace
from doppler_lab.ir.graph import KIND_CODE, DataflowGraph, cost_graph
from doppler_lab.ir.placement import round_robin
from doppler_lab.ir.trace import Trace
from doppler_lab.timing.memory import has_sizes, static_peak_bound, tensor_bytes
from doppler_lab.timing.sim import Simulator
from doppler_lab.timing.sim.footprint import memory_profile, peak_memory
from doppler_lab.timing.sim.reference import memory_peaks_reference
from doppler_lab.workloads import build

from paper_graphs import paper_graph_path


@st.composite
def sized_dags(draw, max_nodes=20):
    """A random DAG with stored inputs (first ``k`` nodes), integer sizes (some 0), compute
    costs that may be 0 (ops that take no time), and a placement."""
    n = draw(st.integers(1, max_nodes))
    k = draw(st.integers(0, min(3, n - 1)))
    pairs = draw(st.sets(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)), max_size=3 * n))
    edges = sorted({(min(a, b), max(a, b)) for a, b in pairs if a != b and max(a, b) >= k})
    src = np.array([a for a, _ in edges], dtype=np.int64)
    dst = np.array([b for _, b in edges], dtype=np.int64)
    comp = np.array(draw(st.lists(st.integers(0, 4), min_size=n, max_size=n)), dtype=float)
    comp[:k] = 0
    size = np.array(draw(st.lists(st.integers(0, 9), min_size=n, max_size=n)), dtype=float)
    kinds = np.full(n, KIND_CODE["compute"])
    kinds[:k] = KIND_CODE["input"]
    g = DataflowGraph(
        names=tuple(f"v{i}" for i in range(n)),
        kinds=kinds,
        flops=comp * 1e9,
        out_bytes=size * 1e6,
        edge_src=src,
        edge_dst=dst,
        compute_cost=comp if draw(st.booleans()) else None,
    )
    d = draw(st.integers(1, 4))
    placement = np.array(draw(st.lists(st.integers(0, d - 1), min_size=n, max_size=n)))
    return g, d, placement


def brute_force_peak(graph: DataflowGraph, trace: Trace) -> np.ndarray:
    """The model's definition, evaluated at every allocation: resident bytes are the intervals
    with alloc <= point < free, keys (time, rank) ordered as the module says."""
    n, big = graph.num_nodes, 10**9
    size = tensor_bytes(graph)
    start, end, dev = trace.start, trace.end, trace.device
    topo = {int(v): i for i, v in enumerate(graph.topo_order)}
    ran = sorted(graph.compute_nodes.tolist(), key=lambda v: (start[v], end[v], topo[v]))
    rank = {v: i for i, v in enumerate(ran)}
    spans = []  # (device, alloc key, free key, bytes)
    for u in range(n):
        if size[u] == 0:
            continue
        succ = graph.successors(u).tolist()
        if graph.is_input[u]:
            for d in {int(dev[w]) for w in succ}:
                spans.append((d, (-np.inf, -1), (np.inf, 0), size[u]))
            continue
        a = int(dev[u])
        out = [k for k in range(trace.num_transfers) if trace.transfer_src[k] == u]
        frees = [(end[w], 3 + 2 * rank[w]) for w in succ if dev[w] == a]
        frees += [(trace.transfer_end[k], big) for k in out]
        spans.append((a, (start[u], 2 + 2 * rank[u]), max(frees, default=(np.inf, 0)), size[u]))
        for b in {int(trace.transfer_dst_device[k]) for k in out}:
            to_b = [k for k in out if trace.transfer_dst_device[k] == b]
            alloc = (min(trace.transfer_start[k] for k in to_b), 0)
            free = max(
                [(end[w], 3 + 2 * rank[w]) for w in succ if dev[w] == b]
                + [(trace.transfer_end[k], big) for k in to_b]
            )
            spans.append((b, alloc, free, size[u]))
    peak = np.zeros(trace.num_devices)
    for d in range(trace.num_devices):
        mine = [s for s in spans if s[0] == d]
        for _, point, _, _ in mine:
            here = sum(b for _, lo, hi, b in mine if lo <= point < hi)
            peak[d] = max(peak[d], here)
    return peak


def op_footprint(graph: DataflowGraph, trace: Trace) -> np.ndarray:
    """Per device, the largest output + distinct inputs of one op placed there."""
    size = tensor_bytes(graph)
    need = np.zeros(trace.num_devices)
    for v in graph.compute_nodes.tolist():
        total = size[v] + size[np.unique(graph.predecessors(v))].sum()
        d = int(trace.device[v])
        need[d] = max(need[d], total)
    return need


@settings(max_examples=150, deadline=None)
@given(
    sized_dags(), st.sampled_from(["paper", "wc", "bsp"]), st.sampled_from(["uniform", "p100x4"])
)
def test_peak_matches_brute_force_and_twin(case, semantics, cluster_name):
    g, d, placement = case
    cluster = make_cluster(cluster_name, d) if cluster_name == "uniform" else make_cluster("p100x4")
    placement = placement % cluster.num_devices
    tr = Simulator(g, cluster, semantics).run(placement)
    peak = tr.peak_memory_bytes
    assert peak is not None and peak.shape == (cluster.num_devices,)
    np.testing.assert_allclose(peak, brute_force_peak(g, tr), rtol=1e-12)
    np.testing.assert_allclose(peak, memory_peaks_reference(g, tr)[0], rtol=1e-12)
    np.testing.assert_allclose(peak, peak_memory(g, tr), rtol=1e-12)
    assert (peak >= op_footprint(g, tr) * (1 - 1e-12)).all()
    bound = static_peak_bound(g, placement)
    bound = np.pad(bound, (0, cluster.num_devices - bound.size))
    assert (bound >= peak * (1 - 1e-12)).all()


@settings(max_examples=60, deadline=None)
@given(sized_dags(), st.integers(0, 2**31 - 1))
def test_noisy_runs_keep_the_model(case, seed):
    g, d, placement = case
    tr = Simulator(g, make_cluster("uniform", d), "wc", noise=0.5).run(placement, seed=seed)
    np.testing.assert_allclose(tr.peak_memory_bytes, brute_force_peak(g, tr), rtol=1e-12)


def test_chain_on_one_device():
    """x (stored) -> a -> b -> c: at most two op outputs and x at once."""
    g = DataflowGraph(
        names=("x", "a", "b", "c"),
        kinds=np.array([KIND_CODE["input"]] + [KIND_CODE["compute"]] * 3),
        flops=np.array([0, 1, 1, 1.0]),
        out_bytes=np.array([100, 10, 20, 40.0]),
        edge_src=np.array([0, 1, 2]),
        edge_dst=np.array([1, 2, 3]),
        compute_cost=np.array([0, 1, 1, 1.0]),
    )
    tr = Simulator(g, make_cluster("uniform", 1), "wc").run(np.zeros(4, dtype=np.int64))
    assert tr.peak_memory_bytes.tolist() == [100 + 20 + 40]
    prof = memory_profile(g, tr)
    assert prof.base.tolist() == [100]
    assert prof.times[0].tolist() == [0, 0, 1, 2, 3]
    assert prof.levels[0].tolist() == [100, 110, 130, 160, 140]


def test_received_copy_and_sender_buffer():
    """a on device 0 feeds b on device 1: the copy is on 1 from the transfer's start."""
    g = DataflowGraph(
        names=("a", "b"),
        kinds=np.full(2, KIND_CODE["compute"]),
        flops=np.ones(2),
        out_bytes=np.array([8.0, 2.0]),
        edge_src=np.array([0]),
        edge_dst=np.array([1]),
        compute_cost=np.ones(2),
        edge_cost=np.array([5.0]),
    )
    tr = Simulator(g, make_cluster("uniform", 2), "paper").run(np.array([0, 1]))
    assert tr.peak_memory_bytes.tolist() == [8, 10]
    prof = memory_profile(g, tr)
    assert prof.times[0].tolist() == [0, 0, 6] and prof.levels[0].tolist() == [0, 8, 0]
    assert prof.times[1].tolist() == [0, 1, 6, 7] and prof.levels[1].tolist() == [0, 8, 10, 2]


def test_graphs_without_sizes_give_zero():
    g = cost_graph(np.array([3.0, 4, 5]), np.array([7.0, 1, 2]), np.array([0, 1]), np.array([1, 2]))
    assert not has_sizes(g)
    tr = Simulator(g, make_cluster("uniform", 2), "paper").run(np.array([0, 1, 0]))
    assert tr.peak_memory_bytes.tolist() == [0, 0]
    assert static_peak_bound(g, np.array([0, 1, 0])).tolist() == [0, 0]


def test_paper_files_have_no_sizes():
    from doppler_lab.io.documents import load_graph

    g = load_graph(paper_graph_path("chain_mm_112nodes"))
    assert not has_sizes(g)
    for semantics in ("paper", "wc", "bsp"):
        tr = Simulator(g, make_cluster("uniform", 4), semantics).run(round_robin(g, 4))
        assert tr.peak_memory_bytes.tolist() == [0, 0, 0, 0]


def test_workload_peaks_and_bound():
    g = build("llama_block", scale=0.1)
    pl = round_robin(g, 4)
    bound = static_peak_bound(g, pl.device)
    for semantics in ("paper", "wc", "bsp"):
        tr = Simulator(g, "p100x4", semantics).run(pl)
        assert (tr.peak_memory_bytes > 0).all()
        assert (tr.peak_memory_bytes <= bound).all()
        np.testing.assert_allclose(tr.peak_memory_bytes, memory_peaks_reference(g, tr)[0])


def test_partial_placement_bound_grows():
    g = build("chainmm", scale=0.1)
    dev = round_robin(g, 2).device.copy()
    comp = g.compute_nodes
    partial = dev.copy()
    partial[comp[comp.size // 2 :]] = -1
    lo, hi = static_peak_bound(g, partial), static_peak_bound(g, dev)
    assert (lo <= hi).all() and lo.sum() < hi.sum()


def test_trace_json_keeps_the_peak_and_reads_old_files(tmp_path):
    g = build("chainmm", scale=0.1)
    tr = Simulator(g, "p100x4", "wc").run(round_robin(g, 4))
    path = save_trace(tr, tmp_path / "t.json")
    back = load_trace(path)
    np.testing.assert_array_equal(back.peak_memory_bytes, tr.peak_memory_bytes)
    doc = json.loads(path.read_text())
    del doc["peak_memory_bytes"]
    path.write_text(json.dumps(doc))
    assert load_trace(path).peak_memory_bytes is None
    assert "peak_memory_bytes" not in Trace.from_dict(doc).to_dict()


def test_bad_peak_field_is_a_format_error(tmp_path):
    from doppler_lab.house.errors import FormatError

    g = build("chainmm", scale=0.1)
    doc = Simulator(g, "p100x4", "wc").run(round_robin(g, 4)).to_dict()
    doc["peak_memory_bytes"] = [1.0]
    path = tmp_path / "t.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(FormatError, match="peak_memory_bytes"):
        load_trace(path)


def test_makespan_calls_skip_the_sweep():
    g = build("chainmm", scale=0.1)
    sim = Simulator(g, "p100x4", "wc")
    sim.makespan(round_robin(g, 4))
    sim.makespans(np.stack([round_robin(g, 4).device] * 2))
    assert sim._memory is None
    sim.run(round_robin(g, 4))
    assert sim._memory is not None
