"""Stage II on more devices: a policy trained at temperature 1 but sampled hotter drifts towards
its own flatter samples every update (self-imitation and the policy gradient's baseline term
both pull log pi_1 towards pi_T). On the 8-GPU paper block Stage II's PLC went to uniform
(entropy ln 8 by update 4, with the fresh-Adam jolt that ``lr_warmup`` now damps) and never
came back, so scratch training stayed at the Critical Path level. The losses are now those of
the distribution that sampled the actions."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from doppler_lab.hardware.cluster import make_cluster
from doppler_lab.policies.checkpoint import make_policy
from doppler_lab.policies.context import GraphContext
from doppler_lab.policies.policy_config import PolicyConfig
from doppler_lab.policies.rollout import ActionMode, Rollout
from doppler_lab.train.loop import Trainer
from doppler_lab.train.train_config import preset

SMALL = PolicyConfig(hidden=16, head_hidden=16, mp_steps=2)


def _sharpened(num_devices: int, seed: int = 0):
    """A small dual policy whose PLC is confident (a trained policy's, not a fresh one's)."""
    pol = make_policy(SMALL, num_devices, seed)
    with torch.no_grad():
        pol.plc.out.weight.mul_(40.0)
    return pol


@pytest.mark.parametrize("num_devices", [4, 8])
def test_log_probs_are_those_of_the_sampling_distribution(small_graph, num_devices):
    ctx = GraphContext(small_graph, make_cluster("uniform", num_devices), "doppler9")
    pol = _sharpened(num_devices)
    sel_t, plc_t = 0.7, 1.5
    with torch.no_grad():
        enc = pol.encode(ctx)
    r = Rollout(
        pol,
        ctx,
        enc,
        3,
        np.random.default_rng(0),
        ActionMode(temperature=sel_t),
        ActionMode(temperature=plc_t),
    )
    sampled = []
    while not r.done:
        r.step()
        z = torch.log_softmax(torch.as_tensor(r.logits, dtype=torch.float64) / plc_t, -1)
        sampled.append(z[torch.arange(3), torch.as_tensor(r.devices[:, r.t - 1])])
    ep = r.episodes_record()
    with torch.no_grad():
        terms = pol.log_probs(ctx, enc, ep, (sel_t, plc_t))
        untempered = pol.log_probs(ctx, enc, ep)
    torch.testing.assert_close(
        terms.plc_logp.double(), torch.stack(sampled, 1), atol=1e-4, rtol=1e-4
    )
    # SEL: the softmax over each step's candidates of the static scores / temperature
    scores = torch.as_tensor(r.sel_scores, dtype=torch.float64) / sel_t
    chosen = ep.nodes.reshape(-1)
    want = []
    for i in range(chosen.size):
        cand = ep.cand_idx[ep.cand_ptr[i] : ep.cand_ptr[i + 1]]
        z = torch.log_softmax(scores[torch.as_tensor(cand)], 0)
        want.append(z[int(np.flatnonzero(cand == chosen[i])[0])])
    torch.testing.assert_close(
        terms.sel_logp.double().reshape(-1), torch.stack(want), atol=1e-4, rtol=1e-4
    )
    # temperature 1 is a different distribution: the gap the old losses ignored
    assert (terms.plc_logp - untempered.plc_logp).abs().max() > 0.1


@pytest.mark.parametrize("num_devices", [4, 8])
def test_trainer_losses_use_the_sampling_temperatures(small_graph, num_devices):
    """Every log-probability the Trainer differentiates (policy gradient, self-imitation) is
    taken at the temperatures the update's episodes were sampled at (here changing over the
    stage); at temperature 1 the policy drifted towards its own hotter samples."""
    pol = make_policy(SMALL, num_devices, 0)
    seen = []
    recompute = pol.log_probs

    def spy(ctx, enc, episodes, temperature=(1.0, 1.0)):
        seen.append(temperature)
        return recompute(ctx, enc, episodes, temperature)

    pol.log_probs = spy
    cfg = preset(
        "sim",
        episodes=8,
        episodes_per_update=4,
        sel_temperature=0.8,
        plc_temperature=1.5,
        plc_temperature_end=1.1,
        sil_coef=1.0,
        tempered_loss=True,
    )
    Trainer(cfg, [small_graph], make_cluster("uniform", num_devices), pol, progress=False).run()
    # each update: the elites so far (self-imitation), then the batch; PLC's 1.5 -> 1.3
    want = [(0.8, 1.5), (0.8, 1.5), (0.8, 1.3), (0.8, 1.3)]
    assert [pytest.approx(t) for t in seen] == want


@pytest.mark.parametrize(("name", "want"), [("sim", 1.5), ("released-sim", 1.0)])
def test_stage_two_presets_learn_at_the_temperature_they_sample(small_graph, name, want):
    """The ``sim`` preset samples PLC at 1.5 and, by default, learns from those log-probabilities
    (trained at 1, the 8-GPU block stayed at the CP level: 311 against 220 from scratch); the
    released preset keeps the released losses."""
    pol = make_policy(SMALL, 4, 0)
    seen = []
    recompute = pol.log_probs

    def spy(ctx, enc, episodes, temperature=(1.0, 1.0)):
        seen.append(temperature[1])
        return recompute(ctx, enc, episodes, temperature)

    pol.log_probs = spy
    cfg = preset(name, episodes=8, episodes_per_update=4, plc_temperature=1.5)
    Trainer(cfg, [small_graph], make_cluster("uniform", 4), pol, progress=False).run()
    assert seen and all(t == pytest.approx(want) for t in seen)
