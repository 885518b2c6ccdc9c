"""Memory caps in every placer: the running static bound, masks, repair, the final check, the
one-line error, m-SCT, pipeline stages and the exact placer with memory constraints."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from doppler_lab.hardware.cluster import make_cluster
from doppler_lab.house.errors import PlacementError
from doppler_lab.ir.graph import KIND_CODE, DataflowGraph, GraphBuilder
from doppler_lab.placers import get_placer, list_schedule, place
from doppler_lab.placers.baechi import favourite_children
from doppler_lab.placers.repair import fit_placement, repair
from doppler_lab.placers.stage_split import StageSplitter
from doppler_lab.timing.cost_model import CostModel
from doppler_lab.timing.fit import Footprint, MemoryGuard, capped, static_bounds
from doppler_lab.timing.memory import static_peak_bound
from doppler_lab.timing.sim import SEMANTICS, Simulator
from doppler_lab.workloads import build

from placer_helpers import _topological_orders, small_dag

#: the placers of the property test (cheap options; exact is tested on its own)
CAPPED = {
    "random": {},
    "round-robin": {},
    "cp": {},
    "heft": {},
    "cpop": {},
    "etf": {},
    "m-topo": {},
    "m-sct": {},
    "pipeline": {},
    "clustering": {},
    "partition": {"tries": 2},
    "local-search": {"budget": 12},
    "enumerative": {"budget": 12},
    "cp-rollout": {},
}


def peaks(graph, cluster, device) -> np.ndarray:
    """The largest simulated peak per device over the semantics."""
    return np.max(
        [Simulator(graph, cluster, s).run(device).peak_memory_bytes for s in SEMANTICS], axis=0
    )


def bound_of(graph, device, num_devices) -> np.ndarray:
    b = static_peak_bound(graph, np.where(graph.is_input, -1, device))
    return np.pad(b, (0, num_devices - b.size))


@st.composite
def capped_cases(draw, max_nodes=14):
    """A random DAG with stored inputs, sizes (some 0) and a cap per device between the
    largest op's need and the whole graph."""
    n = draw(st.integers(2, max_nodes))
    k = draw(st.integers(0, min(3, n - 1)))
    pairs = draw(st.sets(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)), max_size=2 * n))
    edges = sorted({(min(a, b), max(a, b)) for a, b in pairs if a != b and max(a, b) >= k})
    kinds = np.full(n, KIND_CODE["compute"])
    kinds[:k] = KIND_CODE["input"]
    comp = np.array(draw(st.lists(st.integers(1, 9), min_size=n, max_size=n)), dtype=float)
    size = np.array(draw(st.lists(st.integers(0, 9), min_size=n, max_size=n)), dtype=float)
    g = DataflowGraph(
        names=tuple(f"v{i}" for i in range(n)),
        kinds=kinds,
        flops=comp * 1e9,
        out_bytes=size * 1e6,
        edge_src=np.array([a for a, _ in edges], dtype=np.int64),
        edge_dst=np.array([b for _, b in edges], dtype=np.int64),
    )
    d = draw(st.integers(1, 4))
    total = float(size.sum()) * 1e6
    cap = draw(st.floats(0.05, 1.0)) * total
    return g, d, max(cap, 1.0)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(capped_cases(), st.sampled_from(sorted(CAPPED)))
def test_every_placer_fits_or_says_why_not_in_one_line(case, name):
    g, d, cap = case
    cluster = make_cluster("uniform", d).with_memory(cap)
    try:
        p = place(name, g, cluster, seed=0, **CAPPED[name])
    except PlacementError as exc:
        msg = str(exc)
        assert "\n" not in msg and msg.startswith(f"placer {name!r}: ")
        assert "fit" in msg
        event("no placement fits")
        return
    caps = np.full(d, cap)
    event(f"placed: {p.meta.get('memory_fit', 'static bound')}")
    peak = peaks(g, cluster, p.device)
    assert np.all(peak <= caps), (name, peak, caps, p.meta.get("memory_fit"))
    # the placers' static estimate is an upper bound of the simulated peak they return
    assert np.all(bound_of(g, p.device, d) >= peak * (1 - 1e-12))
    if p.meta.get("memory_fit") != "simulated":
        assert np.all(bound_of(g, p.device, d) <= caps)


@settings(max_examples=40, deadline=None)
@given(capped_cases(), st.integers(0, 2**31 - 1))
def test_footprint_is_the_static_bound_op_by_op(case, seed):
    g, d, _ = case
    rng = np.random.default_rng(seed)
    dev = rng.integers(0, d, g.num_nodes)
    fp = Footprint(g, d)
    for v in rng.permutation(g.compute_nodes):  # any order, not only topological
        need = fp.need(int(v))
        before = fp.used.copy()
        fp.assign(int(v), int(dev[v]))
        if not (fp.count[v] > 0).any():  # no consumer placed yet: only its device grows
            np.testing.assert_allclose(fp.used - before, need * (np.arange(d) == dev[v]))
        np.testing.assert_allclose(fp.used, bound_of(g, np.where(fp.device >= 0, fp.device, -1), d))
    full = bound_of(g, dev, d)
    np.testing.assert_allclose(fp.used, full)
    np.testing.assert_allclose(Footprint.of(g, dev, d).used, full)
    np.testing.assert_allclose(static_bounds(g, dev[None, :], d)[0], full)
    for v in rng.choice(g.compute_nodes, size=min(10, g.compute_nodes.size)):
        b = int(rng.integers(d))
        da, db = fp.move_delta(int(v), b)
        a, before = int(fp.device[v]), fp.used.copy()
        fp.move(int(v), b)
        if a != b:
            assert fp.used[a] - before[a] == pytest.approx(da)
            assert fp.used[b] - before[b] == pytest.approx(db)
        dev[v] = b
        np.testing.assert_allclose(fp.used, bound_of(g, dev, d))
    # a device has room when its bound stays within its cap (topological order: the op's
    # consumers are not placed, only its device grows)
    caps = np.full(d, 0.5 * float(full.sum()) + 1)
    fp = Footprint(g, d)
    for v in g.topo_order[~g.is_input[g.topo_order]]:
        room = fp.room(int(v), caps)
        np.testing.assert_array_equal(room, fp.used + fp.need(int(v)) <= caps)
        fp.assign(int(v), int(np.argmax(room)) if room.any() else 0)


def _chain(name: str = "weights", layers: int = 8, weight: float = 10.0, activation: float = 1.0):
    """A chain of ``layers`` matmuls, each reading a weight of ``weight`` bytes and making an
    activation of ``activation`` bytes (the input: 1 byte)."""
    b = GraphBuilder(name)
    x = b.add_node("x", kind="input", out_bytes=1.0)
    for i in range(layers):
        w = b.add_node(f"w{i}", kind="input", out_bytes=weight)
        x = b.add_node(
            f"mm{i}", inputs=[x, w], cost=2.0, out_bytes=activation, edge_costs=[1.0, 0.0]
        )
    return b.build()


def _llama_like():
    """Eight layers of a weight-heavy chain: 8 weights of 10 bytes, activations of 1."""
    return _chain()


@pytest.mark.parametrize("name", sorted(CAPPED))
def test_a_model_that_fits_only_when_split(name):
    g = _llama_like()  # 81 bytes of weights, 4 devices of 30: no device holds more than 2
    c = make_cluster("uniform", 4).with_memory(30.0)
    p = place(name, g, c, seed=0, **CAPPED[name])
    assert np.all(peaks(g, c, p.device) <= 30.0)
    if name == "cp":  # unconstrained, the chain stays on one device
        free = place(name, g, c.with_memory(None), seed=0)
        assert np.unique(free.device[g.compute_nodes]).size == 1


def test_nothing_fits_is_one_line_with_the_least_memory():
    g = _llama_like()
    small = make_cluster("uniform", 4).with_memory(10.0)  # each op needs 11 bytes
    with pytest.raises(PlacementError) as exc:
        place("cp", g, small)
    assert str(exc.value) == (
        "placer 'cp': no placement of 'weights' fits 4 x 10 B; op 'mm0' alone needs 12 B"
    )
    few = make_cluster("uniform", 2).with_memory(20.0)  # 81 bytes of weights, 40 in all
    with pytest.raises(PlacementError, match=r"fits 2 x 20 B; its stored inputs .weights. alone"):
        place("heft", g, few)


def test_unconstrained_graphs_place_as_without_caps():
    g = build("chainmm")  # 6.7 GB in all: no cap of p100x4 (16 GB) can bind
    c = make_cluster("p100x4")
    assert not MemoryGuard(g, c, "cp").active
    sim = Simulator(g, c)
    assert capped(sim) is sim
    for name in ("cp", "heft", "etf", "m-topo", "clustering"):
        a = place(name, g, c, seed=1)
        b = place(name, g, c.with_memory(None), seed=1)
        np.testing.assert_array_equal(a.device, b.device)
        assert "memory_fit" not in a.meta


def test_capped_simulator_rejects_over_cap_moves():
    g = _llama_like()
    c = make_cluster("uniform", 4).with_memory(30.0)
    sim = capped(Simulator(g, c))
    one = np.zeros(g.num_nodes, dtype=np.int64)
    split = np.repeat(np.arange(4), 2)
    spread = one.copy()
    spread[g.compute_nodes] = split
    costs = sim.makespans(np.stack([one, spread]))
    assert math.isinf(costs[0]) and math.isfinite(costs[1])
    assert math.isinf(sim.makespan(one))


@settings(max_examples=60, deadline=None)
@given(capped_cases(), st.integers(0, 2**31 - 1))
def test_the_capped_judge_accepts_what_the_final_check_accepts(case, seed):
    """A placement over the static bound whose simulated peak fits under every semantics is
    accepted by the final check as ``simulated``: the judge of the searches agrees (else the
    proposals and the budget search throw away placements the placer would have returned)."""
    from doppler_lab.placers.repair import fit_devices

    g, d, cap = case
    cluster = make_cluster("uniform", d).with_memory(cap)
    sim = capped(Simulator(g, cluster))
    if not hasattr(sim, "fits"):
        return  # no cap can bind
    rows = np.random.default_rng(seed).integers(0, d, size=(6, g.num_nodes))
    judged = sim.fits(rows)
    for row, ok in zip(rows, judged):
        try:
            _, how = fit_devices(g, cluster, row, "judge", fix=False)
            accepted = how in (None, "simulated")
        except PlacementError:
            accepted = False
        event(f"accepted={accepted}")
        assert ok == accepted
        assert np.isfinite(sim.makespan(row)) == accepted
    np.testing.assert_array_equal(sim.fits(rows), judged)  # the cache answers the same


def test_repair_moves_ops_off_the_full_device():
    g = _llama_like()
    caps = np.full(4, 30.0)
    fixed = repair(g, np.zeros(g.num_nodes, dtype=np.int64), caps)
    assert fixed is not None and np.all(bound_of(g, fixed, 4) <= caps)
    c = make_cluster("uniform", 4).with_memory(30.0)
    p = fit_placement(g, c, get_placer("single").place(g, c.with_memory(None), None), "x")
    assert p.meta["memory_fit"] in ("repaired", "pipeline")
    assert np.all(peaks(g, c, p.device) <= 30.0)


def test_single_raises_when_the_graph_does_not_fit_one_device():
    g = _llama_like()
    c = make_cluster("uniform", 4).with_memory(30.0)
    with pytest.raises(PlacementError, match="placer 'single': 'weights' does not fit: device 0"):
        place("single", g, c)


# -- pipeline ----------------------------------------------------------------------------
def test_pipeline_stages_are_contiguous_and_fit():
    g = _llama_like()
    c = make_cluster("uniform", 4).with_memory(30.0)
    p = place("pipeline", g, c)
    comp = g.topo_order[~g.is_input[g.topo_order]]
    assert np.all(np.diff(p.device[comp]) >= 0)
    assert np.all(bound_of(g, p.device, 4) <= 30.0)
    assert p.device[comp].tolist() == [0, 0, 1, 1, 2, 2, 3, 3]  # 2 ops of 2 each per stage
    assert p.meta["stages"] == 4 and p.meta["bottleneck"] == pytest.approx(4.0)


@pytest.mark.parametrize("seed", range(4))
def test_pipeline_bottleneck_is_the_least_over_contiguous_splits(seed):
    g = small_dag(9, seed, edge_prob=0.3, inputs=2)
    c = make_cluster("uniform", 3)
    cost = CostModel(g, c)
    comp = [int(v) for v in g.topo_order if not g.is_input[v]]
    caps = 0.45 * static_peak_bound(g, np.zeros(g.num_nodes, dtype=int))[0]
    best = math.inf
    for cuts in itertools.combinations_with_replacement(range(len(comp) + 1), 2):
        dev = np.zeros(g.num_nodes, dtype=np.int64)
        bounds = [0, *cuts, len(comp)]
        work = []
        for s in range(3):
            ops = comp[bounds[s] : bounds[s + 1]]
            dev[ops] = s
            work.append(cost.compute[ops, s].sum())
        if np.all(bound_of(g, dev, 3) <= caps):
            best = min(best, max(work))
    capped_c = c.with_memory(caps)
    try:
        p = get_placer("pipeline").place(g, capped_c, np.random.default_rng(0))
    except PlacementError:
        assert math.isinf(best)
        return
    if math.isinf(best):  # no split within the static bound: the compute-balanced one fits
        assert p.meta["memory_fit"] == "simulated"
        assert np.all(np.diff(p.device[comp]) >= 0)
        assert np.all(peaks(g, capped_c, p.device) <= caps)
        return
    assert p.meta["bottleneck"] == pytest.approx(best * g.time_scale, rel=1e-6)


def _activation_heavy():
    """A chain whose activations, not its weights, overflow a device: 4 weights of 1 byte,
    activations of 10 bytes, each freed once its consumer ends."""
    return _chain("activations", layers=4, weight=1.0, activation=10.0)


def test_pipeline_takes_the_balanced_split_when_only_the_simulated_peak_fits():
    g = _activation_heavy()  # static bound: 45 bytes; simulated peak of 2 stages: 23 and 22
    c = make_cluster("uniform", 2).with_memory(24.0)
    assert StageSplitter(g, CostModel(g, c).compute, np.full(2, 24.0)).best() is None
    p = place("pipeline", g, c)
    comp = g.topo_order[~g.is_input[g.topo_order]]
    assert p.device[comp].tolist() == [0, 0, 1, 1] and p.meta["memory_fit"] == "simulated"
    assert np.all(peaks(g, c, p.device) <= 24.0)
    # every placer's last resort is the same split (here: one device holds 45 > 24 at once)
    q = fit_placement(g, c, get_placer("single").place(g, c.with_memory(None), None), "x")
    assert q.meta["memory_fit"] in ("pipeline", "repaired", "packed")
    assert np.all(peaks(g, c, q.device) <= 24.0)
    with pytest.raises(PlacementError, match=r"the static bound\); try more memory$"):
        place("pipeline", g, make_cluster("uniform", 2).with_memory(21.5))


# -- m-SCT -------------------------------------------------------------------------------
def test_sct_favourite_children_keep_a_chain_together():
    b = GraphBuilder("chain")
    prev = None
    for i in range(6):
        prev = b.add_node(
            f"c{i}",
            cost=1.0,
            out_bytes=1.0,
            inputs=[] if prev is None else [prev],
            edge_costs=None if prev is None else [5.0],
        )
    g = b.build()
    c = make_cluster("uniform", 3)
    fav, lp = favourite_children(g, CostModel(g, c))
    assert fav[:5].tolist() == [1, 2, 3, 4, 5] and fav[5] == -1
    assert lp == pytest.approx(6.0)
    s = get_placer("m-sct").schedule(g, c, np.random.default_rng(0))
    assert np.unique(s.placement.device).size == 1 and s.makespan == pytest.approx(6.0)


def test_sct_fork_keeps_one_favourite_per_op():
    g = small_dag(20, 3, inputs=2)
    c = make_cluster("uniform", 3)
    cost = CostModel(g, c)
    fav, _ = favourite_children(g, cost)
    kids = fav[fav >= 0]
    assert kids.size == np.unique(kids).size  # one favourite parent per op
    for u in np.flatnonzero(fav >= 0):
        assert fav[u] in g.successors(int(u))
    s = get_placer("m-sct").schedule(g, c, np.random.default_rng(0))
    order = s.order()
    pos = np.empty(g.num_nodes, dtype=int)
    pos[order] = np.arange(order.size)
    for u, v in zip(g.edge_src, g.edge_dst):
        if not g.is_input[u]:
            assert s.start[v] >= s.finish[u] - 1e-9


# -- exact -------------------------------------------------------------------------------
def _brute_force_with_memory(g, c, cap):
    cost = CostModel(g, c)
    comp = [int(v) for v in g.compute_nodes]
    index = {v: i for i, v in enumerate(comp)}
    preds = [[index[int(u)] for u in g.predecessors(v) if not g.is_input[u]] for v in comp]
    orders = [[comp[i] for i in o] for o in _topological_orders(len(comp), preds)]
    best = math.inf
    for assign in itertools.product(range(c.num_devices), repeat=len(comp)):
        dev = np.zeros(g.num_nodes, dtype=np.int64)
        dev[comp] = assign
        if np.any(bound_of(g, dev, c.num_devices) > cap):
            continue
        for order in orders:
            best = min(best, list_schedule(g, cost, dev, order).makespan)
    return best


@pytest.mark.parametrize("seed", range(3))
def test_exact_with_memory_is_optimal_among_placements_that_fit(seed):
    g = small_dag(5, seed, edge_prob=0.5, inputs=1)
    c = make_cluster("uniform", 2)
    total = static_peak_bound(g, np.zeros(g.num_nodes, dtype=int))[0]
    free = get_placer("exact", workers=1).schedule(g, c, np.random.default_rng(0))
    for share in (0.6, 0.7, 0.8):
        cap = share * total
        best = _brute_force_with_memory(g, c, cap)
        exact = get_placer("exact", workers=1)
        if math.isinf(best):  # proven: nothing within the static bound
            with pytest.raises(PlacementError, match="no placement of .* fits"):
                exact.schedule(g, c.with_memory(cap), np.random.default_rng(0))
            continue
        s = exact.schedule(g, c.with_memory(cap), np.random.default_rng(0))
        assert np.all(bound_of(g, s.placement.device, 2) <= cap)
        assert s.meta["optimal"] is True
        assert s.makespan == pytest.approx(best) and s.makespan >= free.makespan - 1e-9


def test_place_command_memory_cap_reaches_the_placer(capsys, tmp_path):
    import json

    from doppler_lab.cli import main
    from doppler_lab.io.documents import save_graph

    path = tmp_path / "w.json"
    save_graph(_llama_like(), path)
    argv = ["place", str(path), "--devices", "4", "--placer", "cp", "--json"]
    assert main([*argv, "--memory-cap", "30"]) == 0
    r = json.loads(capsys.readouterr().out)
    assert r["feasible"] is True and r["memory_bytes"] == [30.0] * 4
    assert max(r["peak_memory_bytes"]) <= 30.0
    assert main([*argv, "--memory-cap", "10"]) == 2
    err = capsys.readouterr().err
    assert "no placement of 'weights' fits 4 x 10 B" in err and err.count("\n") <= 2
