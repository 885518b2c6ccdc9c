"""The ``doppler11`` memory headroom: the feature is the running guard's headroom in stepped and
compiled rollouts, 1 where no cap binds, and a ``doppler10`` policy widened to it (zero weights
on the new column) places exactly as before, with and without caps."""

from __future__ import annotations

import numpy as np
import pytest
from rollout_helpers import run_rollout

from doppler_lab.hardware.cluster import make_cluster
from doppler_lab.placers import get_placer
from doppler_lab.placers.placer_base import make_rng
from doppler_lab.policies.checkpoint import make_policy, widen_checkpoint
from doppler_lab.policies.context import GraphContext
from doppler_lab.policies.features import MEMORY_HEADROOM, get_layout
from doppler_lab.policies.policy_config import PolicyConfig
from doppler_lab.policies.pretrained import resolve_checkpoint
from doppler_lab.policies.rollout import GREEDY, SAMPLE
from doppler_lab.timing.fit import MemoryGuard
from doppler_lab.timing.memory import tensor_bytes

SMALL = dict(hidden=16, head_hidden=24, mp_steps=2, num_bases=4)


def _capped(graph, share=0.5, d=4):
    # binds: the whole graph's simulated peak on one device (0.58 of its tensors) exceeds it
    cap = share * float(tensor_bytes(graph).sum())
    return make_cluster("uniform", d).with_memory(cap)


def test_the_layout_extends_doppler10():
    wide, old = get_layout("doppler11"), get_layout("doppler10")
    assert wide.device[: old.device_dim] == old.device
    assert wide.device[MEMORY_HEADROOM] == "memory_headroom"


@pytest.mark.parametrize("mode", ["greedy", "sample"])
def test_features_are_the_guards_headroom(small_graph, mode):
    cluster = _capped(small_graph)
    ctx = GraphContext(small_graph, cluster, "doppler11", "est")
    pol = make_policy(PolicyConfig(layout="doppler11", estimate="est", **SMALL), 4, seed=1)
    k = 1 if mode == "greedy" else 4
    r = run_rollout(pol, ctx, k, GREEDY if mode == "greedy" else SAMPLE)
    assert r._mem is not None and r._headroom
    nodes = ctx.features.nodes  # local -> global
    seen = set()
    for e in range(k):
        guard = MemoryGuard(small_graph, cluster, "replay", check=False)
        for t in range(r.num_steps):
            v = int(nodes[r.nodes[e, t]])
            want = guard.headroom(v)
            np.testing.assert_allclose(r.feats[e, t, :, MEMORY_HEADROOM], want, rtol=1e-6)
            seen.update(np.round(want, 3).tolist())
            guard.assign(v, int(r.devices[e, t]))
    assert len(seen) > 2 and min(seen) < 1.0  # the feature moved: the caps bound


def test_stepped_and_compiled_rollouts_agree(small_graph):
    cluster = _capped(small_graph)
    ctx = GraphContext(small_graph, cluster, "doppler11", "est")
    pol = make_policy(PolicyConfig(layout="doppler11", estimate="est", **SMALL), 4, seed=2)
    a = run_rollout(pol, ctx, 4, SAMPLE, compiled=True)
    b = run_rollout(pol, ctx, 4, SAMPLE, compiled=False)
    assert a.batched and not b.batched
    np.testing.assert_array_equal(a.devices, b.devices)
    np.testing.assert_array_equal(a.nodes, b.nodes)
    np.testing.assert_allclose(a.feats, b.feats, rtol=1e-6, atol=1e-7)


def test_no_cap_means_headroom_one(small_graph):
    ctx = GraphContext(small_graph, make_cluster("uniform", 4), "doppler11", "est")
    pol = make_policy(PolicyConfig(layout="doppler11", estimate="est", **SMALL), 4, seed=1)
    r = run_rollout(pol, ctx, 2, SAMPLE)
    assert r._mem is None
    assert np.all(r.feats[..., MEMORY_HEADROOM] == 1.0)


@pytest.mark.parametrize("capped", [False, True])
def test_widened_general_policy_places_as_before(small_graph, tmp_path, capped):
    """``doppler/general`` (doppler10) widened to doppler11: the new column enters through zero
    weights, so greedy and sampled rollouts choose the same devices with or without caps."""
    ckpt = resolve_checkpoint("doppler/general")
    wide = widen_checkpoint(ckpt, "doppler11", tmp_path / "wide.pt")
    cluster = _capped(small_graph) if capped else make_cluster("p100x4")
    opts = dict(samples=3, partitions=0, clustering=False)
    for seed in (0, 1):
        a = get_placer("doppler", checkpoint=ckpt, **opts).place(
            small_graph, cluster, make_rng(seed)
        )
        b = get_placer("doppler", checkpoint=wide, **opts).place(
            small_graph, cluster, make_rng(seed)
        )
        np.testing.assert_array_equal(a.device, b.device)


def test_the_default_doppler_placer_runs_the_memory_policy_where_a_cap_binds(small_graph):
    """``--placer doppler`` without a checkpoint: ``doppler/general-memory`` where a memory cap
    can bind, ``doppler/general`` elsewhere (placing as that checkpoint does); a checkpoint
    given is used everywhere."""
    general = resolve_checkpoint("doppler/general")
    memory = resolve_checkpoint("doppler/general-memory")
    opts = dict(samples=2, partitions=0, clustering=False)
    placer = get_placer("doppler", **opts)
    free, capped = make_cluster("p100x4"), _capped(small_graph)
    assert placer.checkpoint_for(small_graph, free) == general
    assert placer.checkpoint_for(small_graph, capped) == memory
    a = placer.place(small_graph, free, make_rng(0))
    b = get_placer("doppler", checkpoint=general, **opts).place(small_graph, free, make_rng(0))
    np.testing.assert_array_equal(a.device, b.device)
    assert a.meta["checkpoint"] == str(general)
    c = placer.place(small_graph, capped, make_rng(0))
    assert c.meta["checkpoint"] == str(memory)
    d = get_placer("doppler", checkpoint=memory, **opts).place(small_graph, capped, make_rng(0))
    np.testing.assert_array_equal(c.device, d.device)
    given = get_placer("doppler", checkpoint="doppler/general", **opts)
    assert given.checkpoint_for(small_graph, capped) == general
