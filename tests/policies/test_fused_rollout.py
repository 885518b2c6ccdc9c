"""The inference rollout (:meth:`Rollout.run_placements`: one compiled call with numpy's own BLAS
for the PLC head) gives the stepped rollout's placements to the bit, with the same draws."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from doppler_lab.hardware.cluster import make_cluster
from doppler_lab.policies import numpy_blas
from doppler_lab.policies.batched import sel_logits
from doppler_lab.policies.checkpoint import make_policy
from doppler_lab.policies.context import GraphContext
from doppler_lab.policies.doppler import PlcHeadNumpy, head_logits
from doppler_lab.policies.policy_config import PolicyConfig
from doppler_lab.policies.rollout import GREEDY, SAMPLE, ActionMode, Rollout, RolloutOptions
from doppler_lab.workloads import random_dag

needs_blas = pytest.mark.skipif(
    not numpy_blas.AVAILABLE, reason="numpy's BLAS is not callable from compiled code here"
)
SMALL = dict(hidden=16, head_hidden=24, mp_steps=2, num_bases=4)
MODES = {
    "greedy": (GREEDY, GREEDY, 0),
    "sample": (SAMPLE, SAMPLE, 0),
    "greedy-lead": (SAMPLE, SAMPLE, 1),
    "tempered": (ActionMode(temperature=0.6), ActionMode(temperature=1.7), 2),
    "zero-temperature": (ActionMode(temperature=0.0), ActionMode(temperature=0.0), 0),
    "mixed": (GREEDY, ActionMode(temperature=2.5), 0),
}


def _cluster(devices: int):
    return make_cluster("p100x4") if devices == 4 else make_cluster("uniform", devices)


def _both(pol, ctx, k, sel, plc, lead, seed=7):
    """(placements, next draw, fused) of the inference rollout, then of the stepped one."""
    out = []
    with torch.no_grad():
        enc = pol.encode(ctx)
        for fast in (True, False):
            rng = np.random.default_rng(seed)
            r = Rollout(pol, ctx, enc, k, rng, sel, plc, RolloutOptions(greedy_lead=lead))
            placements = r.run_placements() if fast else r.run().placements
            out.append((placements, rng.random(), r.fused))
    return out


def _assert_same(fast, slow):
    assert fast[1] == slow[1]  # the same number of draws
    for p, q in zip(fast[0], slow[0], strict=True):
        np.testing.assert_array_equal(p.device, q.device)
        np.testing.assert_array_equal(p.priority, q.priority)
        assert p.meta == q.meta


@needs_blas
@pytest.mark.parametrize("mode", sorted(MODES))
@pytest.mark.parametrize("estimate", ["est", "additive", "wc"])
def test_inference_rollout_is_the_stepped_rollout(small_graph, estimate, mode):
    ctx = GraphContext(small_graph, _cluster(4), "doppler9", estimate)
    pol = make_policy(PolicyConfig(estimate=estimate, **SMALL), 4, seed=3)
    sel, plc, lead = MODES[mode]
    fast, slow = _both(pol, ctx, 1 if mode == "greedy" else 4, sel, plc, lead)
    assert fast[2]
    _assert_same(fast, slow)


@needs_blas
@pytest.mark.parametrize("mode", ["greedy", "tempered"])
def test_inference_rollout_reads_the_cluster_share_as_the_steps_do(small_graph, mode):
    """``doppler10`` (the cluster share column) in the compiled rollout and in the steps."""
    ctx = GraphContext(small_graph, _cluster(4), "doppler10", "wc")
    pol = make_policy(PolicyConfig(layout="doppler10", estimate="wc", **SMALL), 4, seed=3)
    sel, plc, lead = MODES[mode]
    fast, slow = _both(pol, ctx, 1 if mode == "greedy" else 4, sel, plc, lead)
    assert fast[2]
    _assert_same(fast, slow)


@needs_blas
@pytest.mark.parametrize(
    ("devices", "kind", "norm"),
    [(2, "dual", "smooth"), (8, "plc-only", "zscore"), (3, "dual", "zscore")],
)
@pytest.mark.parametrize("table_limit", [0, 1024])  # SEL's exponentials per step, or a table
def test_inference_rollout_on_other_device_counts_and_kinds(
    devices, kind, norm, table_limit, monkeypatch
):
    monkeypatch.setattr(Rollout, "sel_table_limit", table_limit)
    g = random_dag(num_nodes=50, width=7, seed=4)
    ctx = GraphContext(g, _cluster(devices), "doppler9", "wc")
    cfg = PolicyConfig(kind=kind, estimate="wc", placed_norm=norm, **SMALL)
    pol = make_policy(cfg, devices, seed=5)
    fast, slow = _both(pol, ctx, 5, *MODES["tempered"], seed=11)
    assert fast[2] == (kind == "dual")  # plc-only selects by the Critical Path rule: stepped
    _assert_same(fast, slow)


@pytest.mark.parametrize("spread", [4.0, 400.0])  # 400: table entries the steps never read overflow
@pytest.mark.parametrize("temperature", [1.0, 0.6, 1.7, 3.1])
def test_sel_weights_from_the_table_are_numpys_exponentials(temperature, spread):
    rng = np.random.default_rng(int(temperature * 10))
    n, k = 60, 5
    scores = (rng.standard_normal(n) * spread).astype(np.float32)
    scores[7] = scores[3]  # a tie for the largest score in some candidate sets
    local = rng.permutation(n)
    cand = np.stack([np.sort(rng.choice(n, n // 2, replace=False)) for _ in range(k)])
    ncand = rng.integers(1, n // 2, k)
    t = np.float32(temperature)
    z = scores / t
    with np.errstate(over="ignore"):
        table = np.exp(z[:, None] - z[None, :])
    exps, weights = np.empty(k * n, np.float32), np.empty(k * n, np.float32)
    ptr, ptr2 = np.zeros(k, np.int64), np.zeros(k, np.int64)
    m = sel_logits(scores, local, cand, ncand, t, exps, ptr, np.zeros((0, 0), np.float32))
    assert sel_logits(scores, local, cand, ncand, t, weights, ptr2, table) == m
    np.testing.assert_array_equal(ptr, ptr2)
    np.testing.assert_array_equal(weights[:m], np.exp(exps[:m]))
    assert np.isfinite(weights[:m]).all()


@pytest.mark.parametrize("why", ["doppler5", "no numpy BLAS"])
def test_inference_rollout_falls_back_to_the_steps(small_graph, why, monkeypatch):
    """``doppler5`` normalises device features in numpy, and without numpy's BLAS there is no
    compiled head: no fused call, the same placements."""
    layout = "doppler5" if why == "doppler5" else "doppler9"
    if why == "no numpy BLAS":
        monkeypatch.setattr(numpy_blas, "AVAILABLE", False)
    ctx = GraphContext(small_graph, _cluster(4), layout, "est")
    pol = make_policy(PolicyConfig(layout=layout, estimate="est", **SMALL), 4, seed=2)
    fast, slow = _both(pol, ctx, 3, SAMPLE, SAMPLE, 1)
    assert not fast[2]
    _assert_same(fast, slow)


@needs_blas
@pytest.mark.parametrize("shape", [(1, 2), (17, 8), (5, 3)])
def test_compiled_head_and_products_are_numpys(shape):
    k, d = shape
    pol = make_policy(PolicyConfig(hidden=32, head_hidden=16, placed_norm="smooth"), d, seed=1)
    head = PlcHeadNumpy(pol.plc)
    rng = np.random.default_rng(0)
    feats = (rng.standard_normal((k, d, 9)) * rng.exponential(3, (k, d, 9))).astype(np.float32)
    placed = rng.standard_normal((k, d, 32)).astype(np.float32)
    node_term = rng.standard_normal((40, 16)).astype(np.float32)
    rows = rng.integers(0, 40, k)
    scratch = (np.empty((k, d, 32), np.float32), np.empty_like(placed))
    scratch += (np.empty((k, d, 16), np.float32), np.empty((k, d, 16), np.float32))
    out = np.empty((k, d), np.float32)
    head_logits(head.kernel_weights(), node_term, rows, feats, placed, scratch, out)
    np.testing.assert_array_equal(out, head.logits(node_term, rows, feats, placed))
    prod = np.empty((k, d, 16), np.float32)
    numpy_blas.stack_matmul(placed, head.w_placed, prod)
    np.testing.assert_array_equal(prod, placed @ head.w_placed)
    prod = np.empty((k, d, 32), np.float32)
    numpy_blas.stack_matmul(feats, head.dev_w.T, prod, True)
    np.testing.assert_array_equal(prod, feats @ head.dev_w)
    vec = np.empty((k, d), np.float32)
    numpy_blas.stack_matvec(placed, placed[0, 0].copy(), vec)
    np.testing.assert_array_equal(vec, placed @ placed[0, 0].copy())
