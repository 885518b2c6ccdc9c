"""The budget search of the learned placers: calls counted and within the budget, never worse
than the rollouts, deterministic by seed; option checks; doppler's default checkpoint."""

from __future__ import annotations

import numpy as np
import pytest

from doppler_lab.hardware.cluster import make_cluster
from doppler_lab.house.errors import CheckpointError, ConfigError
from doppler_lab.ir.graph import GraphBuilder, cost_graph
from doppler_lab.placers import get_placer, place
from doppler_lab.placers.local_search import (
    ClusterMoves,
    IlsOptions,
    MoveScan,
    critical_ops,
    iterated_search,
)
from doppler_lab.policies.checkpoint import make_policy, save_checkpoint
from doppler_lab.policies.policy_config import PolicyConfig
from doppler_lab.policies.pretrained import GENERAL_CHECKPOINT
from doppler_lab.search.budget import (
    CP_ROLLOUT_SHARE,
    SearchConfig,
    cp_rollout_calls,
    default_samples,
    device_preferences,
    fewer_device_counts,
    policy_candidates,
    policy_search,
    proposal_order,
)
from doppler_lab.search.learned import (
    PARTITION_PROPOSALS,
    PLACER_SEARCHES,
    DopplerPlacer,
    best_of_rollouts,
)
from doppler_lab.search.proposals import ProposalSet
from doppler_lab.timing.cost_model import CostModel
from doppler_lab.timing.sim import Simulator

SMALL = dict(hidden=16, head_hidden=16, mp_steps=2, num_bases=4)


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    pol = make_policy(PolicyConfig(kind="dual", **SMALL), 4, seed=3)
    return save_checkpoint(tmp_path_factory.mktemp("search") / "p.pt", pol, {"note": "test"})


@pytest.fixture
def counted(monkeypatch):
    """Counts the placements every Simulator.makespans, .makespan and .run call simulates."""
    calls = [0]
    real, real_run, real_one = Simulator.makespans, Simulator.run, Simulator.makespan

    inside = [False]  # makespans of one placement calls makespan: count it once

    def makespans(self, placements, *args, **kw):
        calls[0] += len(placements)
        inside[0] = True
        try:
            return real(self, placements, *args, **kw)
        finally:
            inside[0] = False

    def run(self, placement, *args, **kw):
        calls[0] += 1
        return real_run(self, placement, *args, **kw)

    def makespan(self, placement, *args, **kw):
        calls[0] += not inside[0]
        return real_one(self, placement, *args, **kw)

    monkeypatch.setattr(Simulator, "makespans", makespans)
    monkeypatch.setattr(Simulator, "run", run)
    monkeypatch.setattr(Simulator, "makespan", makespan)
    return calls


def _samples(strategy: str, budget: int) -> int:
    """The sampled rollouts a budget search judges first (``adapt``: the adapter's own 16)."""
    return min(16, budget - 1) if strategy == "adapt" else default_samples(budget)


@pytest.mark.parametrize(
    ("strategy", "budget"),
    list(zip(PLACER_SEARCHES, [60, 1, 23, 37, 41, 300, 50], strict=True)),
)
def test_budget_is_respected_and_counted(small_graph, cluster4, ckpt, counted, strategy, budget):
    p = place(
        "doppler", small_graph, cluster4, seed=0, checkpoint=ckpt, budget=budget, search=strategy
    )
    assert counted[0] == p.meta["sim_calls"] == budget
    assert p.meta["samples"] == _samples(strategy, budget)


@pytest.mark.parametrize("strategy", PLACER_SEARCHES)
def test_never_worse_than_the_rollouts_and_deterministic(small_graph, cluster4, ckpt, strategy):
    kw = dict(seed=4, checkpoint=ckpt, budget=40, search=strategy, semantics="wc")
    a = place("doppler", small_graph, cluster4, **kw)
    b = place("doppler", small_graph, cluster4, **kw)
    np.testing.assert_array_equal(a.device, b.device)
    sim = Simulator(small_graph, cluster4, "wc")
    assert sim.makespan(a) == pytest.approx(a.meta["best_cost"])
    # the same seed draws the same rollouts as the protocol with that many samples
    pol = DopplerPlacer(ckpt).policy(4)
    res = best_of_rollouts(
        pol, small_graph, cluster4, _samples(strategy, 40), np.random.default_rng(4), "wc"
    )
    assert a.meta["rollout_cost"] == pytest.approx(res.best_cost)
    assert a.meta["greedy_cost"] == pytest.approx(res.greedy_cost)
    assert a.meta["best_cost"] <= res.best_cost


def test_ils_cp_starts_from_the_cp_rollout_when_it_fits(small_graph, cluster4, ckpt, counted):
    from doppler_lab.placers.cp_rollout import CPRolloutPlacer

    need = cp_rollout_calls(small_graph, 4)
    fits = int(2 * need / CP_ROLLOUT_SHARE)  # the rollouts take a quarter: half of the rest fits
    kw = dict(seed=1, checkpoint=ckpt, semantics="wc")
    a = place("doppler", small_graph, cluster4, budget=fits, search="ils-cp", **kw)
    assert counted[0] == a.meta["sim_calls"] <= fits
    sim = Simulator(small_graph, cluster4, "wc")
    cp = CPRolloutPlacer(semantics="wc").place(small_graph, cluster4, np.random.default_rng(0))
    assert sim.makespan(a) == pytest.approx(a.meta["best_cost"])
    assert a.meta["best_cost"] <= min(sim.makespan(cp), a.meta["rollout_cost"]) + 1e-12
    # too small a budget for the rollout over CP: exactly ils
    small = need  # the rollouts leave 3/4 of it, and half of that is short of need
    b = place("doppler", small_graph, cluster4, budget=small, search="ils-cp", **kw)
    c = place("doppler", small_graph, cluster4, budget=small, search="ils", **kw)
    np.testing.assert_array_equal(b.device, c.device)
    assert b.meta["sim_calls"] == c.meta["sim_calls"]


def test_explicit_samples_and_no_budget_protocol(small_graph, cluster4, ckpt, counted):
    p = place("doppler", small_graph, cluster4, seed=0, checkpoint=ckpt, budget=30, samples=5)
    assert p.meta["samples"] == 5 and counted[0] == 30
    counted[0] = 0
    q = place(
        "doppler", small_graph, cluster4, seed=0, checkpoint=ckpt, partitions=0, clustering=False
    )
    assert q.meta["samples"] == 16 and q.meta["sim_calls"] == 17 == counted[0]
    assert "budget" not in q.meta and q.meta["source"] in ("greedy", "sample")


def test_heuristic_proposals_join_the_protocol(small_graph, cluster4, ckpt, counted):
    q = place("doppler", small_graph, cluster4, seed=0, checkpoint=ckpt)
    # the clustering, then the partitions that differ from it
    k = q.meta["partitions"]
    assert 0 <= k <= PARTITION_PROPOSALS and q.meta["sim_calls"] == 18 + k == counted[0]
    sim = Simulator(small_graph, cluster4, "paper")
    assert q.meta["clustering_cost"] == sim.makespan(place("clustering", small_graph, cluster4))
    best = q.meta["best_cost"]
    costs = [q.meta["rollout_cost"], q.meta["clustering_cost"], q.meta["partition_cost"]]
    assert best == np.nanmin(costs)
    assert sim.makespan(q) == pytest.approx(best, rel=1e-12)
    if best < q.meta["rollout_cost"]:
        assert q.meta["source"] in ("clustering", "partition")
    alone = place(
        "doppler", small_graph, cluster4, seed=0, checkpoint=ckpt, partitions=0, clustering=False
    )
    assert alone.meta["best_cost"] == q.meta["rollout_cost"]  # the same rollouts
    assert np.isnan(alone.meta["clustering_cost"]) and np.isnan(alone.meta["partition_cost"])
    no_parts = place("doppler", small_graph, cluster4, seed=0, checkpoint=ckpt, partitions=0)
    assert no_parts.meta["sim_calls"] == 18 and no_parts.meta["partitions"] == 0
    assert no_parts.meta["clustering_cost"] == q.meta["clustering_cost"]
    with pytest.raises(ConfigError, match="option partitions"):
        get_placer("doppler", checkpoint=ckpt, partitions=-1)
    with pytest.raises(ConfigError, match="option clustering"):
        get_placer("doppler", checkpoint=ckpt, clustering="yes")


def test_budget_search_judges_proposals_within_the_budget(small_graph, cluster4, ckpt, counted):
    p = place("doppler", small_graph, cluster4, seed=0, checkpoint=ckpt, budget=30, samples=5)
    assert counted[0] == 30 and np.isfinite(p.meta["clustering_cost"])
    heuristics = np.nanmin([p.meta["clustering_cost"], p.meta["partition_cost"]])
    assert p.meta["best_cost"] <= min(p.meta["rollout_cost"], heuristics)
    counted[0] = 0
    # the rollouts leave room for the clustering only, and the search for no local move
    p = place("doppler", small_graph, cluster4, seed=0, checkpoint=ckpt, budget=7, samples=5)
    assert counted[0] == 7 and np.isfinite(p.meta["clustering_cost"])
    assert np.isnan(p.meta["partition_cost"])
    counted[0] = 0
    # ... for one partition, without the clustering
    p = place("doppler", small_graph, cluster4, seed=0, checkpoint=ckpt, budget=7, samples=5,
              clustering=False)  # fmt: skip
    assert counted[0] == 7 and np.isfinite(p.meta["partition_cost"])
    assert np.isnan(p.meta["clustering_cost"])
    counted[0] = 0
    p = place("doppler", small_graph, cluster4, seed=0, checkpoint=ckpt, budget=6, samples=5)
    assert counted[0] == 6 and np.isnan(p.meta["partition_cost"])
    assert np.isnan(p.meta["clustering_cost"])


@pytest.mark.parametrize("bad", [0, -1, "x", True, 2.5])
def test_bad_budget(ckpt, bad):
    with pytest.raises(ConfigError, match="option budget"):
        get_placer("doppler", checkpoint=ckpt, budget=bad)


def test_bad_search_and_noise_with_budget(ckpt):
    with pytest.raises(ConfigError, match="search = 'beam'"):
        get_placer("doppler", checkpoint=ckpt, budget=10, search="beam")
    with pytest.raises(ConfigError, match="noise"):
        get_placer("doppler", checkpoint=ckpt, budget=10, noise=0.1)


def test_progress_bar_counts_calls(small_graph, cluster4, ckpt, capsys):
    place("doppler", small_graph, cluster4, seed=0, checkpoint=ckpt, budget=40, progress=True)
    assert "doppler chainmm" in capsys.readouterr().err

    class Bar:
        n = 0

        def update(self, k):
            self.n += k

    bar = Bar()
    pol = DopplerPlacer(ckpt).policy(4)
    out = policy_search(pol, small_graph, cluster4, 40, np.random.default_rng(0), bar=bar)
    assert bar.n == out.calls == 40


def test_move_scan_tries_every_move_once_per_pass():
    movable, ndev = np.array([1, 3, 4, 6]), 3
    scan = MoveScan(movable, ndev, swap_prob=0.0)
    dev = np.array([0, 1, 2, 0, 1, 2, 0])
    rng = np.random.default_rng(0)
    rows = np.concatenate([scan(dev, k, rng) for k in (3, 1, 4)])  # one pass: 4 nodes x 2
    changed = rows != dev
    assert (changed.sum(axis=1) == 1).all() and not changed[:, [0, 2, 5]].any()
    moves = {(int(v), int(r[v])) for r, v in zip(rows, changed.argmax(axis=1))}
    assert moves == {(v, d) for v in movable for d in range(ndev) if d != dev[v]}
    assert len(scan(dev, 5, rng)) == 5  # the next pass, reshuffled
    swaps = MoveScan(movable, ndev, swap_prob=1.0)(dev, 20, rng)
    diff = swaps != dev
    assert set(diff.sum(axis=1)) == {1, 2}  # a move where the partner shares the device
    for r in swaps[diff.sum(axis=1) == 2]:  # a swap: the two nodes trade devices
        a, b = np.flatnonzero(r != dev)
        assert r[a] == dev[b] and r[b] == dev[a]


def two_heavy_ops():
    """Two heavy independent ops on device 0 (the critical path) and 40 light ones elsewhere."""
    b = GraphBuilder("two-heavy")
    b.add_node("a", cost=10.0)
    b.add_node("b", cost=10.0)
    for i in range(40):
        b.add_node(f"x{i}", cost=0.1)
    start = np.array([0, 0, *(1 + np.arange(40) % 3)])
    return Simulator(b.build(), make_cluster("uniform", 4), "paper"), start


def test_ils_moves_the_critical_path_first():
    sim, start = two_heavy_ops()
    ops, makespan = critical_ops(sim, start)
    assert ops.tolist() == [0, 1] and makespan == 20.0
    # 126 single-node moves; the path's call and its 6 moves find the halving
    found = iterated_search(
        sim, start, 20.0, 7, np.random.default_rng(0), IlsOptions(swap_prob=0.0)
    )
    assert found.calls == 7 and found.cost < 12.0
    assert sim.makespan(found.device) == found.cost


def test_ils_kicks_and_keeps_its_budget():
    sim, start = two_heavy_ops()
    bar = type("Bar", (), {"n": 0, "update": lambda self, k: setattr(self, "n", self.n + k)})()
    found = iterated_search(sim, start, 20.0, 400, np.random.default_rng(1), calls_used=5, bar=bar)
    assert found.calls == 400 and bar.n == 395
    assert found.cost == pytest.approx(sim.makespan(found.device)) and found.cost <= 10.0 + 1.4
    one = Simulator(sim.graph, make_cluster("uniform", 1), "paper")
    same = iterated_search(one, np.zeros(42, dtype=np.int64), 24.0, 50, np.random.default_rng(0))
    assert same.calls == 0 and same.cost == 24.0


def test_device_preferences_mix_frequencies_with_uniform():
    prefs = device_preferences(np.array([[0, 1], [0, 2]]), 4, mix=0.4)
    np.testing.assert_allclose(prefs.sum(axis=1), 1.0)
    np.testing.assert_allclose(prefs[0], [0.6 + 0.1, 0.1, 0.1, 0.1])
    np.testing.assert_allclose(prefs[1], [0.1, 0.4, 0.4, 0.1])


def test_doppler_defaults_to_the_general_checkpoint(tmp_path, monkeypatch):
    assert GENERAL_CHECKPOINT == "doppler/general"
    assert DopplerPlacer.default_checkpoint == GENERAL_CHECKPOINT
    (tmp_path / "doppler").mkdir()
    pol = make_policy(PolicyConfig(kind="dual", **SMALL), 4, seed=3)
    path = save_checkpoint(tmp_path / "doppler" / "general.pt", pol, {})
    monkeypatch.setenv("DOPPLER_LAB_CHECKPOINTS", str(tmp_path))
    assert DopplerPlacer().checkpoint.resolve() == path.resolve()
    monkeypatch.setattr(DopplerPlacer, "default_checkpoint", "doppler/not-there")
    with pytest.raises(CheckpointError, match="general policy 'doppler/not-there'.*not shipped"):
        get_placer("doppler")
    with pytest.raises(ConfigError, match="'placeto' needs a checkpoint"):
        get_placer("placeto")


def test_fewer_device_counts():
    assert fewer_device_counts(8, True) == (4, 2)
    assert fewer_device_counts(4, True) == (2,) == fewer_device_counts(3, True)
    assert fewer_device_counts(2, True) == () == fewer_device_counts(8, False)
    assert fewer_device_counts(8, None) == ()
    assert fewer_device_counts(4, [3, 1, 3, 6]) == (3, 1)  # no repeats, none of 4 or more
    for bad in ("two", [0], [True], 2, [2.5]):
        with pytest.raises(ConfigError, match="fewer_devices"):
            fewer_device_counts(4, bad)


def test_rollouts_on_fewer_devices_replace_the_last_samples(small_graph, cluster4):
    pol = make_policy(PolicyConfig(kind="dual", **SMALL), 4, seed=3)
    rng = np.random.default_rng(0)
    cands = policy_candidates(pol, small_graph, cluster4, 5, rng, fewer_devices=(2, 1))
    assert len(cands) == 6
    assert ["devices_used" in c.meta for c in cands] == [False] * 4 + [True] * 2
    compute = small_graph.compute_nodes
    for cand, k in zip(cands[4:], (2, 1), strict=True):
        assert cand.meta["devices_used"] == k and cand.device[compute].max() < k
    # as many as there are samples; the greedy rollout stays
    one = policy_candidates(pol, small_graph, cluster4, 1, rng, fewer_devices=(2, 1))
    assert [c.meta.get("devices_used") for c in one] == [None, 2]
    fewer = ProposalSet(samples=0, fewer_devices=(2,))
    alone = best_of_rollouts(pol, small_graph, cluster4, seed=0, proposals=fewer)
    assert alone.costs.size == 1 and alone.source == "greedy"


def test_doppler_judges_its_rollouts_on_fewer_devices(ckpt, counted):
    # a chain whose every transfer costs far more than its compute: one device is best
    b = GraphBuilder("heavy-chain")
    for i in range(12):
        b.add_node(
            f"n{i}", cost=1.0, inputs=[i - 1] if i else [], edge_costs=[100.0] if i else None
        )
    graph, cluster = b.build(), make_cluster("uniform", 4)
    sim = Simulator(graph, cluster, "paper")
    one_device = sim.makespan(np.zeros(graph.num_nodes, dtype=np.int64))
    counted[0] = 0
    kw = dict(seed=0, checkpoint=ckpt, partitions=0, clustering=False)
    q = place("doppler", graph, cluster, fewer_devices=[1], **kw)
    assert q.meta["sim_calls"] == 17 == counted[0]  # in place of a sample
    assert q.meta["best_cost"] <= one_device * (1 + 1e-12)
    if q.meta["source"].startswith("greedy on"):
        assert q.meta["source"] == "greedy on 1 device" and q.device.max() == 0
    assert place("doppler", graph, cluster, **kw).meta["sim_calls"] == 17  # the default: 2
    with pytest.raises(ConfigError, match="option fewer_devices"):
        get_placer("doppler", checkpoint=ckpt, fewer_devices="half")
    with pytest.raises(ConfigError, match="with an adapter"):
        get_placer("doppler", checkpoint=ckpt, fewer_devices=True, adapter="a.pt")
    assert get_placer("doppler", checkpoint=ckpt, adapter="a.pt").proposals.fewer_devices is False
    assert get_placer("doppler", checkpoint=ckpt).proposals.fewer_devices is True


def fan_in(kind: str = "compute"):
    """Four producers (compute 1) each sending a tensor that takes 10 to move to one consumer
    (compute 0.1); node 0 is of ``kind``."""
    b = GraphBuilder("fan-in")
    a = [b.add_node(f"a{i}", kind=kind if i == 0 else "compute", cost=1.0) for i in range(4)]
    b.add_node("z", cost=0.1, inputs=a, edge_costs=[10.0] * 4)
    return b.build()


def test_cluster_moves_gather_a_fan_in():
    graph = fan_in()
    sim = Simulator(graph, make_cluster("uniform", 4), "paper")
    spread = np.array([0, 1, 2, 3, 0])
    path, makespan = critical_ops(sim, spread)
    assert makespan == pytest.approx(11.1)
    # no single-node move shortens it: three transfers of 10 remain
    for v in range(4):
        for d in range(4):
            moved = spread.copy()
            moved[v] = d
            assert sim.makespan(moved) >= makespan - 1e-9
    rows = ClusterMoves(graph, 4)(spread, path)
    got = {tuple(r) for r in rows}
    # around the path (producer 1 and the consumer): the consumer pulls its producers, producer 1
    # pushes the consumer to itself, and gathers the consumer's whole fan-in
    assert got == {(0, 0, 0, 0, 0), (0, 1, 2, 3, 1), (1, 1, 1, 1, 1)}
    assert min(sim.makespan(r) for r in rows) == pytest.approx(4.1)  # all four on one device


def test_cluster_moves_move_a_chain_whole_and_never_an_input():
    b = GraphBuilder("chain")
    r = b.add_node("r", cost=1.0)
    x0 = b.add_node("x0", cost=1.0, inputs=[r])
    x1 = b.add_node("x1", cost=1.0, inputs=[x0])
    x2 = b.add_node("x2", cost=1.0, inputs=[x1])
    y = b.add_node("y", cost=1.0, inputs=[r])
    b.add_node("q", cost=1.0, inputs=[x2, y])
    graph = b.build()
    moves = ClusterMoves(graph, 4)
    # r feeds two ops and q has two inputs: the chain is x0 -> x1 -> x2, nothing else
    assert [c.tolist() for c in moves.chains] == [[x0, x1, x2]]
    dev = np.array([1, 0, 0, 0, 2, 3])
    rows = moves(dev, np.array([x1]))
    assert sorted(map(tuple, rows)) == [(1, k, k, k, 2, 3) for k in (1, 2, 3)]
    # the chain once; x0 pulls r; x2 pushes q, and gathers q's fan-in (y and q) on its device
    got = {tuple(row) for row in moves(dev, np.array([x0, x1, x2]))}
    assert got == {(1, k, k, k, 2, 3) for k in (1, 2, 3)} | {
        (0, 0, 0, 0, 2, 3), (1, 0, 0, 0, 2, 0), (1, 0, 0, 0, 0, 0)
    }  # fmt: skip
    # an input never moves: gathering the fan-in leaves node 0 where it is
    graph = fan_in(kind="input")
    assert 0 not in graph.compute_nodes
    spread = np.array([0, 1, 2, 3, 1])
    for row in ClusterMoves(graph, 4)(spread, np.arange(5)):
        assert row[0] == 0 and not np.array_equal(row, spread)


def test_ils_cluster_moves_reach_what_single_moves_cannot():
    graph = fan_in()
    sim = Simulator(graph, make_cluster("uniform", 4), "paper")
    spread = np.array([0, 1, 2, 3, 0])
    for seed in range(3):
        rng = np.random.default_rng(seed)
        found = iterated_search(sim, spread, 11.1, 5, rng)
        assert found.calls == 5 and found.cost == pytest.approx(4.1)
        assert sim.makespan(found.device) == pytest.approx(found.cost)
        alone = iterated_search(sim, spread, 11.1, 30, rng, IlsOptions(cluster_moves=False))
        assert alone.cost == pytest.approx(11.1)  # a plateau for single-node moves


def test_doppler_cluster_moves_option(small_graph, cluster4, ckpt):
    kw = dict(seed=2, checkpoint=ckpt, budget=60, semantics="wc")
    off = place("doppler", small_graph, cluster4, cluster_moves=False, **kw)
    pol = DopplerPlacer(ckpt).policy(4)
    cfg = SearchConfig.from_dict(dict(partitions=PARTITION_PROPOSALS, fewer_devices=(2,),
                                      cluster_moves=False, clustering=True))  # fmt: skip
    out = policy_search(pol, small_graph, cluster4, 60, np.random.default_rng(2), "wc", cfg)
    np.testing.assert_array_equal(off.device, out.placement.device)
    on = place("doppler", small_graph, cluster4, **kw)
    assert on.meta["sim_calls"] == off.meta["sim_calls"] == 60
    assert get_placer("doppler", checkpoint=ckpt).cluster_moves is True
    with pytest.raises(ConfigError, match="option cluster_moves"):
        get_placer("doppler", checkpoint=ckpt, cluster_moves="sometimes")


def test_equal_makespans_go_to_the_proposal_that_cuts_less():
    # a chain 3 -> 0 -> 1 -> 2 whose transfers cost 0, 5 and 1
    g = cost_graph(
        np.ones(4), np.array([5.0, 1.0, 0.0, 0.0]), np.array([0, 1, 3]), np.array([1, 2, 0])
    )
    cost = CostModel(g, make_cluster("uniform", 2))
    devices = np.array(
        [
            [0, 0, 1, 1],  # cuts 1 -> 2 (1) and 3 -> 0 (free)
            [0, 1, 1, 0],  # cuts 0 -> 1 (5)
            [0, 0, 0, 1],  # cuts 3 -> 0 only (free)
            [1, 1, 1, 0],  # the same, a later index
        ]
    )
    assert proposal_order(np.array([3.0, 3.0, 3.0, 3.0]), devices, g, cost).tolist() == [
        2, 3, 0, 1
    ]  # fmt: skip
    # the makespan first
    assert proposal_order(np.array([4.0, 2.0, 3.0, 3.0]), devices, g, cost).tolist() == [
        1, 2, 3, 0
    ]  # fmt: skip


def test_the_clustering_proposal_is_left_out_of_big_graphs(
    small_graph, cluster4, ckpt, counted, monkeypatch
):
    import doppler_lab.search.proposals as search

    monkeypatch.setattr(search, "CLUSTERING_MAX_OPS", small_graph.compute_nodes.size - 1)
    kw = dict(seed=0, checkpoint=ckpt, partitions=1)
    q = place("doppler", small_graph, cluster4, **kw)
    assert np.isnan(q.meta["clustering_cost"]) and q.meta["partitions"] == 1
    assert q.meta["sim_calls"] == 18 == counted[0]
    counted[0] = 0
    # a budget: the room goes to the partition
    p = place("doppler", small_graph, cluster4, budget=7, samples=5, **kw)
    assert counted[0] == 7 and np.isfinite(p.meta["partition_cost"])
    assert np.isnan(p.meta["clustering_cost"])
