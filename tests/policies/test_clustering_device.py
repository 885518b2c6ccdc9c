"""The ``doppler12`` clustering device: the feature marks the clustering placer's device of the
node being placed in every engine, a ``doppler10`` policy widened to it places as before, and
Stage I's ``clustering`` labels are that placer's devices (a policy trained on them with a weight
on the feature reproduces its placement)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from rollout_helpers import run_rollout

from doppler_lab.hardware.cluster import make_cluster
from doppler_lab.placers import get_placer
from doppler_lab.placers.clustering import PlacementRuleLabeller, clustering_devices
from doppler_lab.placers.placer_base import make_rng
from doppler_lab.policies.checkpoint import make_policy, widen_checkpoint
from doppler_lab.policies.context import GraphContext
from doppler_lab.policies.features import get_layout, hint_devices
from doppler_lab.policies.policy_config import PolicyConfig
from doppler_lab.policies.pretrained import resolve_checkpoint
from doppler_lab.policies.rollout import GREEDY, SAMPLE
from doppler_lab.timing.cost_model import CostModel
from doppler_lab.train.loop import Trainer
from doppler_lab.train.train_config import preset

SMALL = dict(hidden=16, head_hidden=24, mp_steps=2, num_bases=4)
COLUMN = 11


def test_the_layout_extends_doppler11():
    wide, old = get_layout("doppler12"), get_layout("doppler11")
    assert wide.device[: old.device_dim] == old.device
    assert wide.device[COLUMN] == "clustering_device"


def test_hinted_devices_are_the_hint_the_features_carry(small_graph):
    """``GraphContext.hinted_devices``: the hinted heuristic's device per node, the features'
    ``heuristic`` column (``features.extra[5]``); None without a hint (the column is then -1
    everywhere) and with a layout that reads no hint (no column)."""
    cluster = make_cluster("p100x4")
    ctx = GraphContext(small_graph, cluster, "doppler12", "est", hint=True)
    got = ctx.hinted_devices
    assert got is not None and got.dtype == np.int64 and got.shape == (small_graph.num_nodes,)
    np.testing.assert_array_equal(got, ctx.features.extra[5])
    np.testing.assert_array_equal(got, hint_devices(small_graph, ctx.cost, True))
    assert (got[small_graph.compute_nodes] >= 0).all()
    free = GraphContext(small_graph, cluster, "doppler12", "est", hint=False)
    assert (free.features.extra[5] == -1).all() and free.hinted_devices is None
    assert ctx.with_hint(None).hinted_devices is None
    np.testing.assert_array_equal(free.with_hint(True).hinted_devices, got)
    old = GraphContext(small_graph, cluster, "doppler11", "est", hint=True)
    assert old.hint == "clustering" and old.features.extra[5].size == 0
    assert old.hinted_devices is None


@pytest.mark.parametrize("compiled", [True, False])
def test_the_feature_marks_the_clustering_device(small_graph, compiled):
    cluster = make_cluster("p100x4")
    want, _ = clustering_devices(small_graph, CostModel(small_graph, cluster))
    assert np.unique(want[~small_graph.is_input]).size > 1  # it marks more than one device
    ctx = GraphContext(small_graph, cluster, "doppler12", "est")
    pol = make_policy(PolicyConfig(layout="doppler12", estimate="est", **SMALL), 4, seed=1)
    r = run_rollout(pol, ctx, 3, SAMPLE, compiled=compiled)
    assert r.batched == compiled
    nodes = ctx.features.nodes  # local -> global
    for e in range(3):
        for t in range(r.num_steps):
            v = int(nodes[r.nodes[e, t]])
            onehot = np.zeros(4, dtype=np.float32)
            onehot[want[v]] = 1.0
            np.testing.assert_array_equal(r.feats[e, t, :, COLUMN], onehot)


def test_stepped_and_compiled_rollouts_agree(small_graph):
    ctx = GraphContext(small_graph, make_cluster("p100x4"), "doppler12", "est")
    pol = make_policy(PolicyConfig(layout="doppler12", estimate="est", **SMALL), 4, seed=2)
    a = run_rollout(pol, ctx, 4, SAMPLE, compiled=True)
    b = run_rollout(pol, ctx, 4, SAMPLE, compiled=False)
    np.testing.assert_array_equal(a.devices, b.devices)
    np.testing.assert_array_equal(a.nodes, b.nodes)
    np.testing.assert_allclose(a.feats, b.feats, rtol=1e-6, atol=1e-7)


def test_a_weight_on_the_feature_copies_the_clustering(small_graph):
    """A policy that scores a device by the feature alone places greedily as the clustering
    does: the feature names the device it should."""
    cluster = make_cluster("p100x4")
    want, _ = clustering_devices(small_graph, CostModel(small_graph, cluster))
    ctx = GraphContext(small_graph, cluster, "doppler12", "est")
    pol = make_policy(PolicyConfig(layout="doppler12", estimate="est", **SMALL), 4, seed=1)
    with torch.no_grad():
        lin = pol.plc.dev_lin
        lin.weight.zero_()
        lin.bias.zero_()
        lin.weight[:, COLUMN] = 50.0  # every hidden unit reads the feature
    r = run_rollout(pol, ctx, 1, GREEDY)
    got = np.full(small_graph.num_nodes, -1)
    got[ctx.features.nodes[r.nodes[0]]] = r.devices[0]
    comp = ~small_graph.is_input
    assert np.mean(got[comp] == want[comp]) > 0.9


def test_widened_general_policy_places_as_before(small_graph, tmp_path):
    """``doppler/general`` (doppler10) widened to doppler12: both new columns enter through
    zero weights, so greedy and sampled rollouts choose the same devices."""
    ckpt = resolve_checkpoint("doppler/general")
    wide = widen_checkpoint(ckpt, "doppler12", tmp_path / "wide.pt")
    opts = dict(samples=3, partitions=0, clustering=False)
    for seed in (0, 1):
        a = get_placer("doppler", checkpoint=ckpt, **opts).place(
            small_graph, make_cluster("p100x4"), make_rng(seed)
        )
        b = get_placer("doppler", checkpoint=wide, **opts).place(
            small_graph, make_cluster("p100x4"), make_rng(seed)
        )
        np.testing.assert_array_equal(a.device, b.device)


def test_stage_one_imitates_the_clustering(small_graph):
    cluster = make_cluster("p100x4")
    want, _ = clustering_devices(small_graph, CostModel(small_graph, cluster))
    lab = PlacementRuleLabeller(want)
    for v in np.flatnonzero(~small_graph.is_input)[:5]:
        assert lab(None, int(v), np.zeros(4), np.random.default_rng(0)).tolist() == [want[v]]
    cfg = preset(
        "imitation",
        episodes=96,
        episodes_per_update=4,
        plc_labels="clustering",
        semantics="wc",
        lr=0.01,
    )
    pcfg = PolicyConfig(layout="doppler12", estimate="est", **SMALL)
    tr = Trainer(cfg, [small_graph], cluster, pcfg, progress=False)
    res = tr.run()
    assert isinstance(tr.labellers[0], PlacementRuleLabeller) and tr.labellers[0].calls > 0
    np.testing.assert_array_equal(tr.labellers[0].device, want)
    prob = [r["imitation/plc_teacher_prob"] for r in res.rows]
    # the labels' probability rises from chance (1/4; 0.24 -> 0.36 in 24 updates here, 1.0 after
    # 120 updates of the shipped recipe's Stage I from a trained policy)
    assert np.mean(prob[-3:]) > np.mean(prob[:3]) + 0.05


def test_without_the_hint_the_feature_is_zero(small_graph):
    ctx = GraphContext(small_graph, make_cluster("p100x4"), "doppler12", "est", hint=False)
    assert not ctx.hint
    pol = make_policy(PolicyConfig(layout="doppler12", estimate="est", **SMALL), 4, seed=1)
    r = run_rollout(pol, ctx, 2, SAMPLE)
    assert np.all(r.feats[..., COLUMN] == 0.0)
    assert np.any(r.feats[..., COLUMN - 2] != 0.0)  # the cluster share is still read


def test_the_placer_draws_half_its_samples_without_the_hint(small_graph):
    from doppler_lab.search.proposals import policy_candidates, rollout_candidates

    pol = make_policy(PolicyConfig(layout="doppler12", estimate="est", **SMALL), 4, seed=1)
    cluster = make_cluster("p100x4")
    cands = policy_candidates(pol, small_graph, cluster, 16, np.random.default_rng(0))
    assert len(cands) == 17
    free = [p.meta.get("clustering_hint") is False for p in cands]
    assert free == [False] * 9 + [True] * 8  # greedy + 8 hinted samples, then 8 without
    labels = [c.label for c in rollout_candidates(cands)]
    assert labels[0] == "greedy rollout" and labels[8] == "sample 8"
    assert labels[9] == "greedy rollout without the clustering hint"
    assert labels[16] == "sample 7 without the clustering hint"
    # a policy of another layout draws every sample with its own features, as before
    old = make_policy(PolicyConfig(layout="doppler11", estimate="est", **SMALL), 4, seed=1)
    cands = policy_candidates(old, small_graph, cluster, 16, np.random.default_rng(0))
    assert len(cands) == 17 and not any("clustering_hint" in p.meta for p in cands)


def test_hint_free_training_needs_the_layout_and_one_hint_per_graph(small_graph, tmp_path):
    from doppler_lab.house.errors import ConfigError
    from doppler_lab.train.general_policy import GeneralRecipe, train_general

    cfg = preset("imitation", episodes=4, episodes_per_update=4, semantics="wc")
    pcfg = PolicyConfig(layout="doppler12", estimate="est", **SMALL)
    with pytest.raises(ConfigError, match="1 hints for 2 graphs"):
        Trainer(cfg, [small_graph] * 2, make_cluster("p100x4"), pcfg, progress=False, hints=[1])
    tr = Trainer(cfg, [small_graph] * 2, make_cluster("p100x4"), pcfg, progress=False, hints=[1, 0])
    assert [c.hint for c in tr.contexts] == ["clustering", None]
    with pytest.raises(ConfigError, match="expected doppler12"):
        train_general(tmp_path, GeneralRecipe(tasks=2, layout="doppler10", hint_free=True))
