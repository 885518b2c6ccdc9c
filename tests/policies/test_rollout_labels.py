"""Stage I with the rollout over CP as PLC's teacher: the labels at the visited states."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from doppler_lab.house.errors import ConfigError
from doppler_lab.placers.cp_rollout import RolloutLabeller, rollout_device_choices
from doppler_lab.policies.checkpoint import make_policy
from doppler_lab.policies.context import GraphContext
from doppler_lab.policies.policy_config import PolicyConfig
from doppler_lab.policies.rollout import SAMPLE, ActionMode, RolloutOptions, run_episodes
from doppler_lab.timing.sim import Simulator
from doppler_lab.train import Trainer, preset


@pytest.fixture(scope="module")
def ctx(small_graph, cluster4):
    return GraphContext(small_graph, cluster4, "doppler9")


def _labels_by_replay(ctx, ep, k, sim):
    """The rollout rule's devices at each state of episode ``k``, by replaying it."""
    st = ctx.new_episode()
    b = ctx.teacher.b_level
    out = np.zeros((ctx.num_nodes, ctx.num_devices), dtype=bool)
    for t in range(ctx.num_nodes):
        v = int(ctx.features.nodes[ep.nodes[k, t]])
        est = st.est(v)
        out[t, rollout_device_choices(st, v, est, b, sim)[0]] = True
        st.assign(v, int(ep.devices[k, t]), est)
    return out


@pytest.mark.parametrize("teacher", [0.0, 1.0])
def test_labels_are_the_rollout_rule_at_the_visited_states(ctx, small_graph, cluster4, teacher):
    sim = Simulator(small_graph, cluster4, "wc")
    lab = RolloutLabeller(sim, ctx.teacher.b_level)
    pol = make_policy(PolicyConfig(hidden=16, head_hidden=16, mp_steps=2), 4, seed=3)
    with torch.no_grad():
        enc = pol.encode(ctx)
        mode = ActionMode(teacher=teacher) if teacher else SAMPLE
        labelled = RolloutOptions(record_teacher=True, plc_labeller=lab)
        ep = run_episodes(pol, ctx, enc, 2, np.random.default_rng(0), mode, mode, labelled)
    for k in range(2):
        np.testing.assert_array_equal(ep.plc_teacher[k], _labels_by_replay(ctx, ep, k, sim))
    if teacher:  # mixing takes the labelled devices
        took = ep.plc_teacher[np.arange(2)[:, None], np.arange(ctx.num_nodes), ep.devices]
        assert took.all()
    assert lab.calls == 2 * ctx.num_nodes * ctx.num_devices


def test_unlabelled_states_mark_every_device(ctx, small_graph, cluster4):
    lab = RolloutLabeller(Simulator(small_graph, cluster4, "wc"), ctx.teacher.b_level, 0.3)
    pol = make_policy(PolicyConfig(hidden=16, head_hidden=16, mp_steps=2), 4, seed=3)
    with torch.no_grad():
        enc = pol.encode(ctx)
        labelled = RolloutOptions(record_teacher=True, plc_labeller=lab)
        ep = run_episodes(pol, ctx, enc, 4, np.random.default_rng(1), SAMPLE, SAMPLE, labelled)
    every = ep.plc_teacher.all(-1)
    labelled = (~every).sum()
    # the labelled share is near 0.3 (a state the rule cannot tell apart is all-true too)
    assert 0 < labelled < 0.6 * every.size
    assert lab.calls == ctx.num_devices * (lab.calls // ctx.num_devices)
    assert lab.calls // ctx.num_devices >= labelled
    with pytest.raises(ConfigError, match="fraction"):
        RolloutLabeller(lab.sim, lab.b_level, 0.0)


def test_stage_one_trains_on_rollout_labels(small_graph, cluster4):
    cfg = preset(
        "imitation",
        episodes=8,
        episodes_per_update=4,
        plc_labels="cp-rollout",
        label_fraction=0.5,
        semantics="wc",
    )
    tr = Trainer(
        cfg,
        [small_graph],
        cluster4,
        PolicyConfig(hidden=16, head_hidden=16, mp_steps=2),
        progress=False,
    )
    res = tr.run()
    assert tr.labellers[0] is not None and tr.labellers[0].calls > 0
    assert np.isfinite([r["imitation/plc_teacher_prob"] for r in res.rows]).all()
    with pytest.raises(ConfigError, match="plc_labels"):
        preset("imitation", plc_labels="heft")
    with pytest.raises(ConfigError, match="label_fraction"):
        preset("imitation", label_fraction=1.5)
