"""The rollout engines: one rule picks one (:func:`choose_engine`), each behind the same
interface; the kernels' named records keep the field order their builders write."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from doppler_lab.hardware.cluster import make_cluster
from doppler_lab.policies import numpy_blas
from doppler_lab.policies.checkpoint import make_policy
from doppler_lab.policies.context import GraphContext
from doppler_lab.policies.doppler import HeadWeights
from doppler_lab.policies.engines import (
    ENGINES,
    CompiledEngine,
    FusedEngine,
    PythonEngine,
    RolloutEngine,
    _member,
    acts_by_itself,
)
from doppler_lab.policies.features import FeatureArgs
from doppler_lab.policies.policy_config import PolicyConfig
from doppler_lab.policies.rollout import GREEDY, SAMPLE, ActionMode, Rollout, RolloutOptions
from doppler_lab.timing.memory import tensor_bytes
from doppler_lab.timing.schedule import (
    BatchArrays,
    ListScheduleState,
    ScheduleBatch,
    ScheduleRecord,
)

SMALL = dict(hidden=16, head_hidden=24, mp_steps=2, num_bases=4)


def _engine(pol, ctx, sel=SAMPLE, plc=SAMPLE, k=2, **options) -> str:
    with torch.no_grad():
        r = Rollout(pol, ctx, pol.encode(ctx), k, np.random.default_rng(0), sel, plc,
                    RolloutOptions(**options))  # fmt: skip
    assert isinstance(r.engine, RolloutEngine) and type(r.engine) is ENGINES[r.engine.name]
    assert r.batched == (r.engine.name != "python")
    return r.engine.name


def test_the_engines_share_one_interface():
    assert set(ENGINES) == {"python", "compiled", "fused"}
    assert issubclass(FusedEngine, CompiledEngine)
    for engine in (PythonEngine, CompiledEngine):
        for method in ("step", "candidate_record"):
            assert getattr(engine, method) is not getattr(RolloutEngine, method)


def test_one_rule_picks_the_engine(small_graph):
    ctx = GraphContext(small_graph, make_cluster("uniform", 4), "doppler9")
    dual = make_policy(PolicyConfig(**SMALL), 4, seed=0)
    fused_ok = numpy_blas.AVAILABLE  # the compiled head calls numpy's BLAS
    assert _engine(dual, ctx) == ("fused" if fused_ok else "compiled")
    assert _engine(dual, ctx, GREEDY, ActionMode(temperature=0.4)) == _engine(dual, ctx)
    # a decision not the policy's own, or a record the compiled steps do not keep: the loop
    assert _engine(dual, ctx, ActionMode(epsilon=0.1)) == "python"
    assert _engine(dual, ctx, SAMPLE, ActionMode(teacher=0.5)) == "python"
    assert _engine(dual, ctx, record_teacher=True) == "python"
    assert _engine(dual, ctx, anchor=np.zeros(small_graph.num_nodes, dtype=np.int64)) == "python"
    assert _engine(dual, ctx, k=0) == "python"
    sel_only = make_policy(PolicyConfig(kind="sel-only", **SMALL), 4, seed=0)
    assert not acts_by_itself(sel_only) and _engine(sel_only, ctx) == "python"
    Rollout.compiled_plain_modes = False
    try:
        assert _engine(dual, ctx) == "python"
    finally:
        Rollout.compiled_plain_modes = True
    # compiled steps, but no single fused call
    zscore = GraphContext(small_graph, make_cluster("uniform", 4), "doppler5")
    dual5 = make_policy(PolicyConfig(layout="doppler5", **SMALL), 4, seed=0)
    assert _engine(dual5, zscore) == "compiled"  # the zscore layout: normalised by numpy
    one = GraphContext(small_graph, make_cluster("uniform", 1), "doppler9")
    assert _engine(make_policy(PolicyConfig(**SMALL), 1, seed=0), one) == "compiled"
    # the graph's simulated one-device peak is 0.58 of its tensors: below it the guard binds
    cap = 0.5 * float(tensor_bytes(small_graph).sum())  # one device cannot hold the graph
    capped = GraphContext(small_graph, make_cluster("uniform", 4).with_memory(cap), "doppler9")
    assert _engine(dual, capped) == "compiled"  # the memory masks run between the steps
    roomy = 0.6 * float(tensor_bytes(small_graph).sum())  # fits one device by liveness
    fits = GraphContext(small_graph, make_cluster("uniform", 4).with_memory(roomy), "doppler9")
    assert _engine(dual, fits) == _engine(dual, ctx)  # nothing to mask: as without a cap
    dual.set_node_bias(torch.zeros(ctx.num_nodes, 4))
    try:
        assert _engine(dual, ctx) == "compiled"  # the compiled head knows no bias
    finally:
        dual.set_node_bias(None)


@pytest.mark.skipif(not numpy_blas.AVAILABLE, reason="no compiled PLC head here")
def test_only_the_fused_engine_fuses(small_graph):
    ctx = GraphContext(small_graph, make_cluster("uniform", 4), "doppler9")
    pol = make_policy(PolicyConfig(**SMALL), 4, seed=1)
    with torch.no_grad():
        enc = pol.encode(ctx)
        fused = Rollout(pol, ctx, enc, 3, np.random.default_rng(5))
        stepped = Rollout(pol, ctx, enc, 3, np.random.default_rng(5))
        a = fused.run_placements()
        stepped.step()  # a rollout already stepped runs its remaining steps
        b = stepped.run_placements()
    assert fused.fused and not stepped.fused
    assert fused.engine.name == stepped.engine.name == "fused"
    for p, q in zip(a, b, strict=True):  # the same placements either way
        np.testing.assert_array_equal(p.device, q.device)


def test_the_named_records_follow_their_builders(small_graph):
    ctx = GraphContext(small_graph, make_cluster("p100x4"), "doppler10", "wc")
    state = ListScheduleState(small_graph, ctx.cost, "wc")
    rec = ScheduleRecord(*state.record)
    assert rec.pred_ptr is small_graph.pred_ptr and rec.succ_idx is small_graph.succ_idx
    np.testing.assert_array_equal(rec.comp, ctx.cost.compute)
    np.testing.assert_array_equal(rec.inv_bw, ctx.cost.inv_bandwidth)
    np.testing.assert_array_equal(rec.routes, ctx.cluster.routes)
    batch = ScheduleBatch([ListScheduleState(small_graph, ctx.cost, "wc") for _ in range(2)])
    assert isinstance(batch.arrays, BatchArrays)
    first = batch.states[0].candidates()
    np.testing.assert_array_equal(batch.arrays.cand[1, : batch.arrays.ncand[1]], first)
    assert batch.arrays.arrival.shape == (2, small_graph.num_nodes, 4)
    extra = FeatureArgs(*ctx.features.extra)
    np.testing.assert_array_equal(extra.edge_cost, ctx.cost.mean_edge_cost)
    assert extra.cluster_of.shape == (small_graph.num_nodes,)  # doppler10 reads clusters
    pol = make_policy(PolicyConfig(layout="doppler10", **SMALL), 4, seed=0)
    with torch.no_grad():
        weights = pol.plc_begin(ctx, pol.encode(ctx), 1).kernel_weights
    if weights is not None:
        w = HeadWeights(*weights)
        assert w.dev_w_t.shape[1] == ctx.layout.device_dim
        assert w.w_dev.shape[0] == w.dev_w_t.shape[0] and w.out_w.shape == (w.w_dev.shape[1],)


@pytest.mark.parametrize("n, m", [(0, 0), (5, 0), (0, 3), (7, 3), (40, 40), (300, 200)])
def test_the_python_engines_membership_is_numpys_isin(n, m):
    """The teacher record's membership test (pairwise below a size, ``np.isin`` above it) gives
    ``np.isin``'s answer on both sides of the switch."""
    rng = np.random.default_rng(n * 1000 + m)
    values = rng.integers(0, 50, n).astype(np.int64)
    of = rng.integers(0, 50, m).astype(np.int64)
    got = _member(values, of)
    assert got.dtype == np.bool_ and np.array_equal(got, np.isin(values, of))
