"""The compiled rollout of the plain modes is the per-episode loop, to the bit: same decisions,
candidate records, features, partial makespans, placements and random draws, for every estimate
model and feature layout, greedy and sampled at any temperature."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from doppler_lab.hardware.cluster import make_cluster
from doppler_lab.house.errors import ConfigError, PlacementError
from doppler_lab.io.documents import read_paper_graph
from doppler_lab.policies.checkpoint import make_policy
from doppler_lab.policies.context import GraphContext
from doppler_lab.policies.features import extend_device_features
from doppler_lab.policies.policy_config import PolicyConfig
from doppler_lab.policies.rollout import (
    GREEDY,
    SAMPLE,
    ActionMode,
    Rollout,
    RolloutOptions,
    greedy_and_samples,
    run_episodes,
)
from doppler_lab.timing.schedule import (
    ListScheduleState,
    ScheduleBatch,
    batch_assign,
    batch_device_features,
    batch_est,
)
from doppler_lab.workloads import build_from_spec, random_dag

from paper_graphs import paper_graph_path

SMALL = dict(hidden=16, head_hidden=16, mp_steps=2, num_bases=4)
MODES = {
    "greedy": (GREEDY, GREEDY),
    "sample": (SAMPLE, SAMPLE),
    "tempered": (ActionMode(temperature=0.6), ActionMode(temperature=1.7)),
    "zero-temperature": (ActionMode(temperature=0.0), ActionMode(temperature=0.0)),
    "mixed": (GREEDY, ActionMode(temperature=2.5)),
}


def _graph(name: str):
    if name == "chainmm":
        return build_from_spec("chainmm:matrices=3,scale=0.001")
    if name == "llama_block":
        return build_from_spec("llama_block:scale=tiny")
    if name == "random_dag":
        return random_dag(num_nodes=40, width=6, seed=3)  # integer costs: many ties
    return read_paper_graph(paper_graph_path(name))


def _cluster(devices: int):
    return make_cluster("p100x4") if devices == 4 else make_cluster("uniform", devices)


def _rollouts(pol, ctx, k, sel, plc, seed=7):
    """The compiled rollout and the per-episode loop, each with its generator afterwards."""
    out = []
    with torch.no_grad():
        enc = pol.encode(ctx)
        for compiled in (True, False):
            rng = np.random.default_rng(seed)
            Rollout.compiled_plain_modes = compiled
            try:
                r = Rollout(pol, ctx, enc, k, rng, sel, plc)
                assert r.batched == compiled
                out.append((r.run(), rng))
            finally:
                Rollout.compiled_plain_modes = True
    return out


def _assert_same(fast, slow):
    (a, rng_a), (b, rng_b) = fast, slow
    for name in ("nodes", "devices", "partial", "cand_ptr", "cand_idx"):
        x, y = getattr(a, name), getattr(b, name)
        assert (x is None) == (y is None), name
        if x is not None:
            np.testing.assert_array_equal(x, y, err_msg=name)
    np.testing.assert_allclose(a.dev_feats, b.dev_feats, rtol=1e-5, atol=1e-6)
    assert a.sel_teacher is None and a.plc_teacher is None
    for p, q in zip(a.placements, b.placements, strict=True):
        np.testing.assert_array_equal(p.device, q.device)
        np.testing.assert_array_equal(p.priority, q.priority)
        assert p.meta == q.meta
    assert rng_a.random() == rng_b.random()  # the same number of draws


@pytest.mark.parametrize("mode", sorted(MODES))
@pytest.mark.parametrize("estimate", ["est", "additive", "wc"])
@pytest.mark.parametrize("layout", ["doppler5", "doppler9"])
def test_compiled_rollout_is_the_loop(small_graph, layout, estimate, mode):
    ctx = GraphContext(small_graph, _cluster(4), layout, estimate)
    pol = make_policy(PolicyConfig(layout=layout, estimate=estimate, **SMALL), 4, seed=3)
    sel, plc = MODES[mode]
    _assert_same(*_rollouts(pol, ctx, 1 if mode == "greedy" else 4, sel, plc))


@pytest.mark.parametrize(
    ("graph", "devices", "estimate", "layout"),
    [
        ("random_dag", 2, "wc", "doppler9"),
        ("random_dag", 8, "est", "doppler5"),
        ("random_dag", 8, "paper", "doppler9"),
        ("llama_block", 8, "wc", "doppler9"),
        ("llama_block", 2, "est", "doppler5"),
        ("chain_mm_112nodes", 4, "paper", "doppler5"),
        ("chain_mm_112nodes", 8, "wc", "doppler9"),
    ],
)
def test_compiled_rollout_on_more_graphs_and_device_counts(graph, devices, estimate, layout):
    g = _graph(graph)
    ctx = GraphContext(g, _cluster(devices), layout, estimate)
    pol = make_policy(PolicyConfig(layout=layout, estimate=estimate, **SMALL), devices, seed=5)
    _assert_same(*_rollouts(pol, ctx, 3, *MODES["tempered"], seed=11))
    _assert_same(*_rollouts(pol, ctx, 1, *MODES["greedy"]))


def test_topological_selection_is_compiled_too(small_graph):
    ctx = GraphContext(small_graph, _cluster(2), "doppler9", "wc")
    pol = make_policy(PolicyConfig(kind="placeto", estimate="wc", **SMALL), 2, seed=1)
    _assert_same(*_rollouts(pol, ctx, 3, *MODES["sample"]))


def test_log_probs_of_the_compiled_record_are_those_of_the_loop(small_graph):
    ctx = GraphContext(small_graph, _cluster(4), "doppler9", "wc")
    pol = make_policy(PolicyConfig(estimate="wc", **SMALL), 4, seed=3)
    (fast, _), (slow, _) = _rollouts(pol, ctx, 3, *MODES["tempered"])
    with torch.no_grad():
        enc = pol.encode(ctx)
        a = pol.log_probs(ctx, enc, fast, (0.6, 1.7))
        b = pol.log_probs(ctx, enc, slow, (0.6, 1.7))
    for x, y in zip(a, b, strict=True):
        assert (x is None) == (y is None)
        if x is not None:
            torch.testing.assert_close(x, y)


def test_which_modes_are_compiled(small_graph):
    ctx = GraphContext(small_graph, _cluster(4), "doppler9")
    dual = make_policy(PolicyConfig(**SMALL), 4, seed=0)
    sel_only = make_policy(PolicyConfig(kind="sel-only", **SMALL), 4, seed=0)
    with torch.no_grad():
        enc, enc_sel = dual.encode(ctx), sel_only.encode(ctx)

    def batched(pol, e, sel=SAMPLE, plc=SAMPLE, **kw):
        options = RolloutOptions(**kw)
        return Rollout(pol, ctx, e, 2, np.random.default_rng(0), sel, plc, options).batched

    assert batched(dual, enc) and batched(dual, enc, GREEDY, ActionMode(temperature=0.3))
    assert not batched(dual, enc, ActionMode(epsilon=0.1))
    assert not batched(dual, enc, SAMPLE, ActionMode(teacher=0.5))
    assert not batched(dual, enc, record_teacher=True)
    assert not batched(dual, enc, anchor=np.zeros(small_graph.num_nodes, dtype=np.int64))
    assert not batched(sel_only, enc_sel)  # PLC is the Critical Path rule


def _placements_and_draws(episodes_list, rng):
    pls = [p for e in episodes_list for p in e.placements]
    return [(p.device, p.priority) for p in pls], rng.random()


@pytest.mark.parametrize("compiled", [True, False])
@pytest.mark.parametrize("mode", ["sample", "tempered"])
@pytest.mark.parametrize(
    ("estimate", "layout", "devices"), [("wc", "doppler9", 4), ("est", "doppler5", 8)]
)
def test_a_greedy_lead_is_the_greedy_rollout_and_the_samples_to_the_bit(
    small_graph, compiled, mode, estimate, layout, devices
):
    """One rollout whose first episode is greedy gives the greedy rollout and the sampled ones
    of two rollouts, placements and random draws alike (the greedy episode draws nothing)."""
    ctx = GraphContext(small_graph, _cluster(devices), layout, estimate)
    pol = make_policy(PolicyConfig(layout=layout, estimate=estimate, **SMALL), devices, seed=4)
    sel, plc = MODES[mode]
    Rollout.compiled_plain_modes = compiled
    try:
        with torch.no_grad():
            enc = pol.encode(ctx)
            rng = np.random.default_rng(9)
            two = [run_episodes(pol, ctx, enc, 1, rng, GREEDY, GREEDY)]
            two.append(run_episodes(pol, ctx, enc, 5, rng, sel, plc))
            ref = _placements_and_draws(two, rng)
            rng = np.random.default_rng(9)
            one = run_episodes(pol, ctx, enc, 6, rng, sel, plc, RolloutOptions(greedy_lead=1))
            got = _placements_and_draws([one], rng)
    finally:
        Rollout.compiled_plain_modes = True
    assert got[1] == ref[1]
    for (d, p), (d_ref, p_ref) in zip(got[0], ref[0], strict=True):
        np.testing.assert_array_equal(d, d_ref)
        np.testing.assert_array_equal(p, p_ref)


@pytest.mark.parametrize("kind", ["dual", "plc-only"])
def test_greedy_and_samples_is_the_two_rollouts(small_graph, kind):
    """The protocol's candidates: one shared rollout for the dual policy, two for a policy
    whose selection draws (the Critical Path rule); the same placements either way."""
    ctx = GraphContext(small_graph, _cluster(4), "doppler9", "wc")
    pol = make_policy(PolicyConfig(kind=kind, estimate="wc", **SMALL), 4, seed=6)
    with torch.no_grad():
        enc = pol.encode(ctx)
        rng = np.random.default_rng(2)
        two = [run_episodes(pol, ctx, enc, 1, rng, GREEDY, GREEDY)]
        two.append(run_episodes(pol, ctx, enc, 4, rng, SAMPLE, SAMPLE))
        ref = [p.device for e in two for p in e.placements]
        got = greedy_and_samples(pol, ctx, enc, 4, np.random.default_rng(2))
        assert len(greedy_and_samples(pol, ctx, enc, 0, np.random.default_rng(2))) == 1
    for d, d_ref in zip([p.device for p in got], ref, strict=True):
        np.testing.assert_array_equal(d, d_ref)
    with pytest.raises(ConfigError, match="greedy_lead"):
        Rollout(pol, ctx, enc, 2, np.random.default_rng(0), options=RolloutOptions(greedy_lead=3))


def test_stepping_one_decision_at_a_time_keeps_the_episodes_live(small_graph):
    ctx = GraphContext(small_graph, _cluster(4), "doppler9", "wc")
    pol = make_policy(PolicyConfig(estimate="wc", **SMALL), 4, seed=3)
    with torch.no_grad():
        r = Rollout(pol, ctx, pol.encode(ctx), 1, np.random.default_rng(0), GREEDY, GREEDY)
        assert r.batched
        while not r.done:
            ep = r.episodes[0]
            cand = ep.candidates()
            r.step()
            v, d = int(r.selected[0]), int(r.devices[0, r.t - 1])
            assert v in cand and ep.device[v] == d  # the arrays are live
            assert r.episodes[0].order[-1] == v  # the order is brought up to date
    record = r.episodes_record()
    assert r.episodes[0].done
    with pytest.raises(PlacementError, match="done"):
        r.step()
    np.testing.assert_array_equal(record.placements[0].device, r.episodes[0].placement().device)


@pytest.mark.parametrize("estimate", ["est", "additive", "wc"])
def test_a_schedule_batch_steps_like_its_states(estimate):
    g = random_dag(num_nodes=30, width=5, seed=1)
    cost = GraphContext(g, _cluster(4), "doppler5", estimate).cost
    batch = ScheduleBatch([ListScheduleState(g, cost, estimate) for _ in range(3)])
    refs = [ListScheduleState(g, cost, estimate) for _ in range(3)]
    rng = np.random.default_rng(0)
    est, feats = np.empty(4), np.empty((4, 5))
    while not refs[0].done:
        for k, ref in enumerate(refs):
            v = int(rng.choice(ref.candidates()))
            d = int(rng.integers(4))
            batch_est(batch.record, batch.arrays, batch.estimate, k, v, est)
            np.testing.assert_array_equal(est, ref.est(v))
            batch_device_features(batch.record, batch.arrays, k, v, est, feats)
            np.testing.assert_array_equal(feats, ref.device_features(v))
            batch_assign(batch.record, batch.arrays, batch.estimate, k, v, d, est)
            ref.assign(v, d)
            state = batch.states[k]
            np.testing.assert_array_equal(state.candidates(), ref.candidates())
            for name in ("device", "start", "finish", "load", "dev_free", "link_free"):
                np.testing.assert_array_equal(getattr(state, name), getattr(ref, name))
            assert state.order == ref.order
    assert all(s.done for s in batch.states)


def test_a_schedule_batch_takes_fresh_states_of_one_problem(small_graph):
    cost = GraphContext(small_graph, _cluster(4), "doppler5").cost
    used = ListScheduleState(small_graph, cost)
    used.assign(int(used.candidates()[0]), 0)
    with pytest.raises(PlacementError, match="fresh states"):
        ScheduleBatch([used])
    with pytest.raises(PlacementError, match="estimate"):
        ScheduleBatch(
            [ListScheduleState(small_graph, cost), ListScheduleState(small_graph, cost, "wc")]
        )
    with pytest.raises(PlacementError, match="at least one"):
        ScheduleBatch([])


@pytest.mark.parametrize("devices", [1, 3, 8, 9, 17, 130, 300])
def test_pred_share_adds_as_numpy_does(devices):
    """The share of a node's predecessors' compute (a compiled column) divides by the total as
    ``ndarray.sum`` adds it (pairwise, 8 partial sums from 8 values on)."""
    rng = np.random.default_rng(devices)
    out = np.zeros((devices, 9))
    out[:, 1] = rng.random(devices) * 10.0 ** rng.uniform(-6, 6, devices)
    out[:, 4] = rng.random(devices)
    g = build_from_spec("chainmm:matrices=2,scale=0.001")
    record = (g.pred_ptr, g.pred_idx, g.pred_eid, g.is_input, g.succ_ptr, g.succ_idx)
    record += (np.zeros(g.num_edges), np.zeros(g.num_edges), np.zeros((1, 1)), np.zeros((1, 1)))
    # a node whose predecessors are all inputs: nothing to wait for, no co-producer placed
    v = next(
        int(v)
        for v in g.compute_nodes
        if g.is_input[g.pred_idx[g.pred_ptr[v] : g.pred_ptr[v + 1]]].all()
    )
    none = np.zeros(0, dtype=np.int64)
    extra = (np.zeros(g.num_edges), none, none, none, np.zeros(0), none)
    extend_device_features(record, extra, v, np.full(g.num_nodes, -1), out)
    np.testing.assert_array_equal(out[:, 6], out[:, 1] / out[:, 1].sum())
    np.testing.assert_array_equal(out[:, 7], out[:, 4] <= out[:, 4].min() * (1 + 1e-9))
