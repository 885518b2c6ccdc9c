"""Placeto's incremental evaluation (doppler_lab.policies.placeto): a rollout step recomputes
only the rows its changes reach, and the log-probability recompute computes each node's
embedding once per version. Both must equal the dense computation, every row of every step
(``Placeto._logits``), which is checked in float64 where the two differ only by rounding: the
rollout's logits at each step, the recompute's log-probabilities and its gradients."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch.nn import functional as F

from doppler_lab.hardware.cluster import make_cluster
from doppler_lab.policies.checkpoint import make_policy
from doppler_lab.policies.context import GraphContext
from doppler_lab.policies.policy_base import Episodes
from doppler_lab.policies.policy_config import PolicyConfig
from doppler_lab.policies.rollout import GREEDY, SAMPLE, run_episodes
from doppler_lab.policies.tensors import as_tensor
from doppler_lab.workloads import build_from_spec

GRAPHS = ("chainmm:matrices=3,scale=0.001", "random_dag:num_nodes=60,width=8,seed=5")


@pytest.fixture(params=GRAPHS)
def setup(request):
    """A Placeto policy in float64 (its static features too) on a graph with branches."""
    graph = build_from_spec(request.param)
    cluster = make_cluster("uniform", 3)
    pol = make_policy(PolicyConfig(kind="placeto", placeto_steps=3), 3, seed=4).double()
    ctx = GraphContext.for_policy(graph, cluster, pol.config, "paper")
    ctx.x = ctx.x.double()
    enc = pol.encode(ctx)
    enc.groups = enc.groups.double()
    return pol, ctx, enc


def _dense_step(pol, ctx, enc, dyn: np.ndarray, nodes: np.ndarray) -> np.ndarray:
    """The dense reference of one rollout step (current flags set on ``dyn``'s copy)."""
    dyn = dyn.copy()
    dyn[np.arange(nodes.size), nodes, pol.num_devices] = 1.0
    x = torch.cat([pol._static(ctx, nodes.size), as_tensor(dyn).double()], -1)
    return pol._logits(ctx, enc, x, as_tensor(nodes)).numpy()


def test_rollout_steps_equal_the_dense_computation(setup):
    pol, ctx, enc = setup
    k, n, d = 5, ctx.num_nodes, pol.num_devices
    rng = np.random.default_rng(0)
    st = pol.plc_begin(ctx, enc, k)
    worst = 0.0
    with torch.no_grad():
        for t in range(n):
            nodes = np.full(k, enc.topo[t])
            got = pol.plc_logits(ctx, enc, st, nodes, None)
            again = pol.plc_logits(ctx, enc, st, nodes, None)  # nothing changed: same answer
            want = _dense_step(pol, ctx, enc, st.dyn, nodes)
            assert np.array_equal(got, again)
            worst = max(worst, float(np.abs(got - want).max()))
            pol.plc_observe(st, nodes, rng.integers(d, size=k))
    assert worst < 1e-12
    assert st.dyn[:, :, d + 1].all()  # every node placed, none left current
    assert not st.dyn[:, :, d].any()


def test_rollout_steps_in_another_order_still_equal_it(setup):
    """The tables follow whatever changed, not an assumed order (nodes differ by episode)."""
    pol, ctx, enc = setup
    k, n, d = 3, ctx.num_nodes, pol.num_devices
    rng = np.random.default_rng(1)
    orders = np.stack([rng.permutation(n) for _ in range(k)])
    st = pol.plc_begin(ctx, enc, k)
    with torch.no_grad():
        for t in range(n):
            nodes = orders[:, t]
            got = pol.plc_logits(ctx, enc, st, nodes, None)
            np.testing.assert_allclose(got, _dense_step(pol, ctx, enc, st.dyn, nodes), atol=1e-12)
            pol.plc_observe(st, nodes, rng.integers(d, size=k))


def _dense_log_probs(pol, ctx, enc, ep: Episodes) -> torch.Tensor:
    """The old recompute: every step's graph, every row."""
    k, t = ep.num_episodes, ep.num_steps
    n, d = ctx.num_nodes, pol.num_devices
    steps = torch.arange(t)
    pos = as_tensor(enc.pos)
    placed = (pos.unsqueeze(0) < steps.unsqueeze(1)).double()
    current = (pos.unsqueeze(0) == steps.unsqueeze(1)).double()
    out = []
    for e in range(k):
        dev = torch.zeros(n, dtype=torch.int64)
        dev[as_tensor(ep.nodes[e]).long()] = as_tensor(ep.devices[e]).long()
        onehot = F.one_hot(dev, d).double().unsqueeze(0) * placed.unsqueeze(-1)
        x = torch.cat(
            [pol._static(ctx, t), onehot, current.unsqueeze(-1), placed.unsqueeze(-1)], -1
        )
        out.append(pol._logits(ctx, enc, x, as_tensor(ep.nodes[e])))
    logp = torch.log_softmax(torch.stack(out), -1)
    return logp.gather(-1, as_tensor(ep.devices).long().unsqueeze(-1)).squeeze(-1)


def _grads(pol, loss: torch.Tensor) -> dict[str, torch.Tensor]:
    pol.zero_grad()
    loss.backward()
    return {name: p.grad.clone() for name, p in pol.named_parameters()}


def test_the_recompute_and_its_gradients_equal_the_dense_computation(setup):
    pol, ctx, enc = setup
    with torch.no_grad():
        ep = run_episodes(pol, ctx, enc, 4, np.random.default_rng(2), SAMPLE, SAMPLE)
    assert (ep.nodes == enc.topo[None, :]).all()  # the incremental path is the one taken
    terms = pol.log_probs(ctx, enc, ep)
    want = _dense_log_probs(pol, ctx, enc, ep)
    torch.testing.assert_close(terms.plc_logp, want, atol=1e-12, rtol=0)
    got_g = _grads(pol, terms.plc_logp.sum())
    want_g = _grads(pol, want.sum())
    for name in want_g:
        torch.testing.assert_close(got_g[name], want_g[name], atol=1e-10, rtol=1e-9)
    assert any(g.abs().sum() > 0 for g in got_g.values())


def test_the_rollout_and_the_recompute_agree_in_float32():
    """The float32 path a training run takes: greedy picks are the most likely in the
    recompute, and the rollout's logits reproduce the recompute's."""
    graph = build_from_spec("random_dag:num_nodes=80,width=10,seed=2")
    pol = make_policy(PolicyConfig(kind="placeto"), 4, seed=1)
    ctx = GraphContext.for_policy(graph, make_cluster("uniform", 4), pol.config, "paper")
    with torch.no_grad():
        enc = pol.encode(ctx)
        ep = run_episodes(pol, ctx, enc, 2, np.random.default_rng(0), GREEDY, GREEDY)
        terms = pol.log_probs(ctx, enc, ep)
    assert (terms.plc_logp >= np.log(1 / 4) - 1e-5).all()
    assert terms.plc_logp.shape == (2, ctx.num_nodes)


def test_the_dense_mode_gives_the_same_rollouts_and_terms():
    """``incremental = False`` (every row at every step, as page 10 times the published
    computation) places and scores the same, to float32 rounding."""
    graph = build_from_spec("random_dag:num_nodes=50,width=6,seed=9")
    pol = make_policy(PolicyConfig(kind="placeto"), 3, seed=2)
    ctx = GraphContext.for_policy(graph, make_cluster("uniform", 3), pol.config, "paper")
    out = {}
    for inc in (True, False):
        pol.incremental = inc
        assert pol.eval_chunk == (None if inc else 2)
        with torch.no_grad():
            enc = pol.encode(ctx)
            ep = run_episodes(pol, ctx, enc, 3, np.random.default_rng(5), SAMPLE, SAMPLE)
            out[inc] = (ep.devices, pol.log_probs(ctx, enc, ep).plc_logp)
    assert np.array_equal(out[True][0], out[False][0])
    torch.testing.assert_close(out[True][1], out[False][1], atol=1e-5, rtol=1e-5)
