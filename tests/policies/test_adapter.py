"""The per-instance adapter: a node x device bias on PLC's logits (DualPolicy.set_node_bias) and
its training (doppler_lab.search.adapter): rollouts and log-probabilities read the bias, the budget
is spent exactly, the best placement is never worse than the proposals and the settled greedy
rollout reproduces it; saving, loading and the errors."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from doppler_lab.house.errors import ConfigError
from doppler_lab.policies.checkpoint import make_policy
from doppler_lab.policies.context import GraphContext
from doppler_lab.policies.policy_config import PolicyConfig
from doppler_lab.policies.rollout import GREEDY, SAMPLE, Rollout, run_episodes
from doppler_lab.search.adapter import AdaptConfig, adapt, adapt_search, load_adapter
from doppler_lab.search.budget import SearchConfig
from doppler_lab.search.learned import best_of_rollouts
from doppler_lab.timing.sim import Simulator
from doppler_lab.workloads import build_from_spec

SMALL = dict(hidden=16, head_hidden=16, mp_steps=2, num_bases=4)


@pytest.fixture(scope="module")
def policy():
    return make_policy(PolicyConfig(kind="dual", **SMALL), 4, seed=3)


def _ctx(policy, graph, cluster):
    return GraphContext.for_policy(graph, cluster, policy.config, "paper")


def test_a_large_bias_decides_every_device(policy, small_graph, cluster4):
    ctx = _ctx(policy, small_graph, cluster4)
    n = ctx.num_nodes
    bias = torch.zeros((n, 4))
    want = np.arange(n) % 4
    bias[torch.arange(n), torch.as_tensor(want)] = 1e4
    policy.set_node_bias(bias)
    try:
        enc = policy.encode(ctx)
        # the compiled whole-rollout path steps instead when a bias is set
        got = Rollout(policy, ctx, enc, 3, np.random.default_rng(0), SAMPLE, SAMPLE)
        for p in got.run_placements():
            assert np.array_equal(p.device[ctx.features.nodes], want)
    finally:
        policy.set_node_bias(None)
    free = Rollout(policy, ctx, policy.encode(ctx), 1, np.random.default_rng(0), GREEDY, GREEDY)
    assert not np.array_equal(free.run_placements()[0].device[ctx.features.nodes], want)


def test_log_probs_read_the_bias(policy, small_graph, cluster4):
    ctx = _ctx(policy, small_graph, cluster4)
    enc = policy.encode(ctx)
    eps = run_episodes(policy, ctx, enc, 2, np.random.default_rng(1))
    plain = policy.log_probs(ctx, enc, eps).plc_logp.detach()
    bias = torch.zeros((ctx.num_nodes, 4), requires_grad=True)
    with torch.no_grad():
        bias[:, 0] = 2.0
    policy.set_node_bias(bias)
    try:
        terms = policy.log_probs(ctx, enc, eps)
        terms.plc_logp.sum().backward()
    finally:
        policy.set_node_bias(None)
    on0 = torch.as_tensor(eps.devices == 0)
    # a device's log-probability rises with its own bias and falls with the others'
    assert torch.all(terms.plc_logp.detach()[on0] > plain[on0])
    assert torch.all(terms.plc_logp.detach()[~on0] < plain[~on0])
    assert bias.grad is not None and float(bias.grad.abs().sum()) > 0


def test_set_node_bias_errors(policy, small_graph, cluster4):
    with pytest.raises(ConfigError, match=r"expected a 2-d \(nodes, devices\) float32"):
        policy.set_node_bias(torch.zeros(5))
    with pytest.raises(ConfigError, match="float32"):
        policy.set_node_bias(torch.zeros((5, 4), dtype=torch.float64))
    other = make_policy(PolicyConfig(kind="sel-only", **SMALL), 4, seed=0)
    with pytest.raises(ConfigError, match="no learned PLC"):
        other.set_node_bias(torch.zeros((5, 4)))
    ctx = _ctx(policy, small_graph, cluster4)
    for shape in ((ctx.num_nodes + 1, 4), (ctx.num_nodes, 3)):  # another graph, device count
        policy.set_node_bias(torch.zeros(shape))
        try:
            with pytest.raises(ConfigError, match="belongs to the graph it was trained on"):
                Rollout(
                    policy, ctx, policy.encode(ctx), 1, np.random.default_rng(0), GREEDY, GREEDY
                )
        finally:
            policy.set_node_bias(None)


def test_adapt_spends_the_budget_and_keeps_the_best(policy, small_graph, cluster4, tmp_path):
    cfg = AdaptConfig.from_dict(dict(episodes=40, batch=8, samples=4, partitions=2))
    out = adapt(policy, small_graph, cluster4, "paper", cfg, seed=5)
    assert out.calls == 40
    assert policy.node_bias is None  # the policy is left as it was
    sim = Simulator(small_graph, cluster4, "paper")
    assert sim.makespan(out.best) == pytest.approx(out.best_cost)
    assert out.best_cost <= out.start_cost <= out.rollout_cost
    assert out.start_cost == pytest.approx(min(out.rollout_cost, out.partition_cost))
    assert [r["cost_best"] for r in out.rows] == sorted(
        (r["cost_best"] for r in out.rows), reverse=True
    )
    assert out.rows[-1]["cost_best"] == out.best_cost
    # settled: the adapted policy's greedy rollout is the best placement
    assert out.settle_steps >= 0
    policy.set_node_bias(out.bias)
    try:
        res = best_of_rollouts(policy, small_graph, cluster4, 0, 0, "paper")
    finally:
        policy.set_node_bias(None)
    assert np.array_equal(res.placement.device, out.best.device)
    again = adapt(policy, small_graph, cluster4, "paper", cfg, seed=5)
    assert again.best_cost == out.best_cost and torch.equal(again.bias, out.bias)
    # the greedy evaluations after each update draw no random number: the same run
    tracked = adapt(policy, small_graph, cluster4, "paper", cfg, seed=5, track_greedy=True)
    assert torch.equal(tracked.bias, out.bias)
    assert all(r["greedy_cost"] >= tracked.best_cost for r in tracked.rows)
    # saved and loaded back onto the graph it belongs to
    path = out.save(tmp_path / "a.pt", small_graph, cluster4, "test")
    doc = load_adapter(path, policy, small_graph)
    try:
        assert doc["best_cost"] == out.best_cost and torch.equal(policy.node_bias, out.bias)
    finally:
        policy.set_node_bias(None)
    other = build_from_spec("chainmm:matrices=4,scale=0.001")
    with pytest.raises(ConfigError, match="expected the graph it is used on"):
        load_adapter(path, policy, other)
    (tmp_path / "x.pt").write_bytes(b"")
    torch.save({"format": "other"}, tmp_path / "x.pt")
    with pytest.raises(ConfigError, match="not an adapter table"):
        load_adapter(tmp_path / "x.pt", policy, small_graph)


@pytest.mark.parametrize(
    "field, value, match",
    [
        ("episodes", 0, "setting episodes=0; expected an integer >= 1"),
        ("batch", 1.5, "setting batch=1.5; expected an integer"),
        ("samples", -1, "setting samples=-1; expected an integer >= 0"),
        ("lr", 0.0, r"setting lr=0.0; expected a finite number > 0"),
        ("anchor_bias", -1.0, "setting anchor_bias=-1.0; expected a finite number >= 0"),
        (
            "anchor_bias",
            1e308,
            r"setting anchor_bias=1e\+308; expected a finite number >= 0 and <= 1000",
        ),
        ("temperature", float("nan"), "setting temperature=nan; expected a finite number"),
        ("reanchor", 1, "setting reanchor=1; expected true or false"),
        ("fewer_devices", "half", "setting fewer_devices='half'; expected true"),
        ("cluster_caps", 0.5, r"setting cluster_caps=0.5; expected a list of finite numbers > 0"),
        (
            "cluster_caps",
            [0.5, 0],
            r"setting cluster_caps=\[0.5, 0\]; expected a list of finite numbers > 0",
        ),
    ],
)
def test_adapt_config_errors(field, value, match):
    with pytest.raises(ConfigError, match=match):
        AdaptConfig.from_dict({field: value})


def test_adapt_errors(policy, small_graph, cluster4):
    with pytest.raises(ConfigError, match="do not cover the proposals"):
        adapt(
            policy,
            small_graph,
            cluster4,
            "paper",
            AdaptConfig.from_dict(dict(episodes=10, samples=16)),
        )
    other = make_policy(PolicyConfig(kind="sel-only", **SMALL), 4, seed=0)
    with pytest.raises(ConfigError, match="no learned PLC to bias"):
        adapt(other, small_graph, cluster4, "paper", AdaptConfig(episodes=30))


def test_the_adapt_search_strategy(policy, small_graph, cluster4):
    rng = np.random.default_rng(0)
    cfg = SearchConfig.from_dict(dict(partitions=2, fewer_devices=True))
    out = adapt_search(policy, small_graph, cluster4, 30, rng, "paper", cfg)
    assert out.calls == 30 and out.rollouts == 17
    assert out.cost <= min(out.rollout_cost, out.partition_cost)
    sim = Simulator(small_graph, cluster4, "paper")
    assert sim.makespan(out.placement) == pytest.approx(out.cost)
    assert out.placement.meta["source"] in ("greedy", "sample", "partition", "adapter")
    # a budget smaller than the default proposals: fewer samples, no partitions
    small = adapt_search(policy, small_graph, cluster4, 5, rng, "paper", cfg)
    assert small.calls == 5 and small.rollouts == 5


class _Interrupt(Exception):
    pass


@pytest.mark.parametrize("estimator", ["reinforce", "ppo"])
def test_an_interrupted_run_resumes_to_the_same_result(policy, small_graph, cluster4, tmp_path,
                                                       monkeypatch, estimator):  # fmt: skip
    import doppler_lab.search.adapter as mod

    cfg = AdaptConfig.from_dict(
        dict(episodes=70, batch=8, samples=4, partitions=2, cluster_caps=(), estimator=estimator)
    )
    whole = adapt(policy, small_graph, cluster4, "paper", cfg, seed=7)
    state = tmp_path / "run" / "state.pt"

    class Stops(Simulator):  # the third batch of the updates never comes back
        seen = 0

        def makespans(self, *args, **kwargs):
            Stops.seen += 1
            if Stops.seen == 4:
                raise _Interrupt
            return super().makespans(*args, **kwargs)

    monkeypatch.setattr(mod, "Simulator", Stops)
    with pytest.raises(_Interrupt):
        adapt(policy, small_graph, cluster4, "paper", cfg, seed=7, state=state)
    monkeypatch.setattr(mod, "Simulator", Simulator)
    assert policy.node_bias is None
    saved = torch.load(state, weights_only=True)
    # 1 + 4 samples + the (unbounded) clustering + 2 partitions, then 2 updates of 8
    assert saved["calls"] == 8 + 2 * 8 and len(saved["rows"]) == 2
    resumed = adapt(policy, small_graph, cluster4, "paper", cfg, seed=7, state=state)
    assert resumed.calls == whole.calls == 70
    assert resumed.rows == whole.rows
    assert torch.equal(resumed.bias, whole.bias)
    assert np.array_equal(resumed.best.device, whole.best.device)
    assert (resumed.best_cost, resumed.start_cost, resumed.source, resumed.settle_steps) == (
        whole.best_cost, whole.start_cost, whole.source, whole.settle_steps
    )  # fmt: skip
    # a finished run only settles again
    again = adapt(policy, small_graph, cluster4, "paper", cfg, seed=7, state=state)
    assert again.rows == whole.rows and torch.equal(again.bias, whole.bias)
    # the state of another run is refused, naming what differs
    with pytest.raises(ConfigError, match=r"written by another run \(seed 7, this run 8\)"):
        adapt(policy, small_graph, cluster4, "paper", cfg, seed=8, state=state)
    with pytest.raises(ConfigError, match="written by another run \\(config"):
        adapt(policy, small_graph, cluster4, "paper", AdaptConfig.from_dict(dict(episodes=71,
              batch=8, samples=4, partitions=2)), seed=7, state=state)  # fmt: skip
    (tmp_path / "bad.pt").write_bytes(b"torn")
    with pytest.raises(ConfigError, match="unreadable"):
        adapt(policy, small_graph, cluster4, "paper", cfg, seed=7, state=tmp_path / "bad.pt")


def test_a_table_is_refused_on_another_network_or_device_count(policy, small_graph, cluster4,
                                                                tmp_path):  # fmt: skip
    cfg = AdaptConfig.from_dict(dict(episodes=30, batch=8, samples=4, partitions=2))
    out = adapt(policy, small_graph, cluster4, "paper", cfg, seed=1)
    path = out.save(tmp_path / "a.pt", small_graph, cluster4, "test")
    with pytest.raises(ConfigError, match="trained for 4 devices, expected the cluster's 8"):
        load_adapter(path, policy, small_graph, 8)
    other = make_policy(PolicyConfig(kind="dual", **SMALL), 4, seed=4)
    with pytest.raises(ConfigError, match="trained on top of another network"):
        load_adapter(path, other, small_graph)
    assert other.node_bias is None
    with pytest.raises(ConfigError, match="no such file"):
        load_adapter(tmp_path / "none.pt", policy, small_graph)


def test_a_table_is_refused_on_another_graph_of_the_same_name_and_size(
    policy, small_graph, cluster4, tmp_path
):
    import dataclasses

    cfg = AdaptConfig.from_dict(dict(episodes=30, batch=8, samples=4, partitions=2))
    out = adapt(policy, small_graph, cluster4, "paper", cfg, seed=1)
    path = out.save(tmp_path / "a.pt", small_graph, cluster4, "test")
    names = list(small_graph.names)
    names[-1] = "elsewhere"
    twin = dataclasses.replace(small_graph, names=tuple(names))
    with pytest.raises(ConfigError, match="its node names or edges differ"):
        load_adapter(path, policy, twin)
    load_adapter(path, policy, small_graph)
    policy.set_node_bias(None)
