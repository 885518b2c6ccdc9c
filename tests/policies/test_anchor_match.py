"""Anchor labels follow each episode's own device names (devices of one kind are
interchangeable)."""

from __future__ import annotations

import numpy as np
import torch

from doppler_lab.hardware.cluster import make_cluster
from doppler_lab.policies.checkpoint import make_policy
from doppler_lab.policies.context import GraphContext
from doppler_lab.policies.policy_config import PolicyConfig
from doppler_lab.policies.rollout import (
    SAMPLE,
    ActionMode,
    AnchorMatch,
    RolloutOptions,
    run_episodes,
)
from doppler_lab.workloads import random_dag

SMALL = dict(hidden=16, head_hidden=16, mp_steps=2, num_bases=4)


def test_the_match_is_the_identity_until_an_episode_swaps_roles():
    m = AnchorMatch(2, 3)
    for a in range(3):
        assert m.label(0, a).tolist() == [a]
        m.observe(0, a, a)
    # episode 1 puts the anchor's device-0 nodes on device 2, twice
    m.observe(1, 0, 2)
    m.observe(1, 0, 2)
    assert m.label(1, 0).tolist() == [2]
    assert m.label(1, 2).tolist() != [2]  # a permutation: device 2 plays one part only
    assert sorted(m.perm[1].tolist()) == [0, 1, 2]
    # episode 0 is untouched
    assert m.perm[0].tolist() == [0, 1, 2]
    # a single stray node does not outweigh two that agree
    m.observe(1, 1, 2)
    assert m.label(1, 0).tolist() == [2]


def _rollout(anchor, plc, seed=0):
    g = random_dag(num_nodes=30, width=5, seed=2)
    ctx = GraphContext(g, make_cluster("uniform", 4), "doppler9", "wc")
    pol = make_policy(PolicyConfig(**SMALL), 4, seed=0)
    with torch.no_grad():
        enc = pol.encode(ctx)
    following = RolloutOptions(record_teacher=True, anchor=anchor(g))
    return g, run_episodes(pol, ctx, enc, 3, np.random.default_rng(seed), SAMPLE, plc, following)


def test_an_episode_that_follows_the_anchor_places_every_node_on_its_device():
    def anchor(g):
        return np.random.default_rng(5).integers(0, 4, g.num_nodes)

    g, eps = _rollout(anchor, ActionMode(teacher=1.0))
    want = anchor(g)
    for p in eps.placements:
        compute = ~g.is_input
        np.testing.assert_array_equal(p.device[compute], want[compute])
    # the labels are the anchor's devices at every step
    assert eps.plc_teacher is not None
    labels = eps.plc_teacher.argmax(-1)
    np.testing.assert_array_equal(labels, eps.devices)


def test_each_label_is_the_anchor_device_under_the_match_of_the_steps_before():
    """Replaying an episode's own choices through a fresh match gives its labels."""

    def anchor(g):
        return np.random.default_rng(5).integers(0, 4, g.num_nodes)

    g, eps = _rollout(anchor, ActionMode(teacher=0.5), seed=3)
    want = anchor(g)
    ctx = GraphContext(g, make_cluster("uniform", 4), "doppler9", "wc")
    assert eps.plc_teacher is not None
    swapped = 0
    for k in range(eps.num_episodes):
        m = AnchorMatch(1, 4)
        assert (eps.plc_teacher[k].sum(-1) == 1).all()  # one label per step
        for t, local in enumerate(eps.nodes[k]):
            a = int(want[ctx.features.nodes[local]])
            assert eps.plc_teacher[k, t].argmax() == m.label(0, a)[0]
            swapped += int(m.label(0, a)[0] != a)
            m.observe(0, a, int(eps.devices[k, t]))
    assert swapped > 0  # the policy's own choices moved the match somewhere
