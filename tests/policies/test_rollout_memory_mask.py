"""PLC's memory mask in the rollouts: devices without room for the selected node are never
chosen where some device has room, and the mask changes nothing where it does not bind."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from doppler_lab.hardware.cluster import make_cluster
from doppler_lab.placers import place
from doppler_lab.policies.checkpoint import make_policy
from doppler_lab.policies.context import GraphContext
from doppler_lab.policies.policy_config import PolicyConfig
from doppler_lab.policies.rollout import GREEDY, SAMPLE, Rollout
from doppler_lab.timing.memory import static_peak_bound, tensor_bytes
from doppler_lab.timing.sim import SEMANTICS, Simulator

SMALL = dict(hidden=16, head_hidden=24, mp_steps=2, num_bases=4)


def _bound(graph, device, d):
    b = static_peak_bound(graph, np.where(graph.is_input, -1, device))
    return np.pad(b, (0, d - b.size))


def _rollout(pol, ctx, k, mode, seed=3):
    with torch.no_grad():
        r = Rollout(pol, ctx, pol.encode(ctx), k, np.random.default_rng(seed), mode, mode)
        return r.run_placements(), r


@pytest.mark.parametrize("kind", ["dual", "placeto", "gdp"])
@pytest.mark.parametrize("mode", ["greedy", "sample"])
def test_episodes_keep_to_the_caps(small_graph, kind, mode):
    total = float(tensor_bytes(small_graph).sum())
    # binds: the whole graph's simulated peak on one device (0.58 of its tensors) exceeds it
    cap = 0.5 * total
    cluster = make_cluster("uniform", 4).with_memory(cap)
    ctx = GraphContext(small_graph, cluster, "doppler9", "est")
    pol = make_policy(PolicyConfig(kind=kind, estimate="est", **SMALL), 4, seed=1)
    placements, r = _rollout(
        pol, ctx, 1 if mode == "greedy" else 5, GREEDY if mode == "greedy" else SAMPLE
    )
    assert r._mem is not None and not r.fused  # masked rollouts run stepped
    for p in placements:
        assert np.all(_bound(small_graph, p.device, 4) <= cap)
    # without caps, some episode of the same draws goes over: the mask did bind
    free_ctx = GraphContext(small_graph, cluster.with_memory(None), "doppler9", "est")
    free, _ = _rollout(pol, free_ctx, len(placements), GREEDY if mode == "greedy" else SAMPLE)
    assert any(np.any(_bound(small_graph, p.device, 4) > cap) for p in free)


@pytest.mark.parametrize("mode", ["greedy", "sample"])
def test_the_mask_changes_nothing_where_it_does_not_bind(small_graph, mode):
    free_cluster = make_cluster("uniform", 4)
    total = float(tensor_bytes(small_graph).sum())
    pol = make_policy(PolicyConfig(estimate="est", **SMALL), 4, seed=2)
    act = GREEDY if mode == "greedy" else SAMPLE
    k = 1 if mode == "greedy" else 6
    free, r0 = _rollout(pol, GraphContext(small_graph, free_cluster, "doppler9", "est"), k, act)
    assert r0._mem is None
    peak = max(_bound(small_graph, p.device, 4).max() for p in free)
    # a cap every free episode meets, below the whole graph's simulated peak on one device
    # (0.58 of its tensors: above it the guard is inactive, nothing masked)
    cap = max(peak, 0.5 * total)
    ctx = GraphContext(small_graph, free_cluster.with_memory(cap), "doppler9", "est")
    masked, r1 = _rollout(pol, ctx, k, act)
    assert (r1._mem is not None) == (cap < 0.58 * total)  # masked where the guard is active
    for p, q in zip(free, masked, strict=True):
        np.testing.assert_array_equal(p.device, q.device)


def test_doppler_placer_fits_a_graph_that_needs_every_device(small_graph):
    total = float(tensor_bytes(small_graph).sum())
    cap = 0.4 * total
    cluster = make_cluster("p100x4").with_memory(cap)
    p = place("doppler", small_graph, cluster, seed=0, samples=2, partitions=1)
    for s in SEMANTICS:
        assert np.all(Simulator(small_graph, cluster, s).run(p).peak_memory_bytes <= cap)
