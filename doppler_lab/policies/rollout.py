"""Rollouts: K episodes of a policy on one graph, stepped together, without autograd.

Each episode owns a :class:`~doppler_lab.schedule.ListScheduleState`. At step t every episode
selects a node (learned static SEL scores over its candidates, the Critical Path rule, or the
t-th node of a topological order) and then the policy scores the D devices of all K selected
nodes in one batched call. Exploration per decision: with probability ``teacher`` take the
Critical Path choice, else with probability ``epsilon`` a uniform one, else the policy's
(``greedy``: its argmax; otherwise a sample from its softmax).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from ..errors import ConfigError
from .base import Episodes, PlacementPolicy
from .context import GraphContext


@dataclass(frozen=True)
class ActionMode:
    """How one half of the policy (SEL or PLC) acts during a rollout.

    Attributes:
        greedy: take the argmax of the policy instead of a sample.
        epsilon: probability of a uniform random action.
        teacher: probability of the Critical Path rule's action (DAgger-style mixing).
        temperature: sampling temperature (scores are divided by it; 0 acts greedily).
        perturb: with ``greedy``, ``epsilon`` is the probability of a sample from the policy
            (instead of a uniform action): episodes that follow the argmax except at a few
            steps, neighbours of the greedy rollout.
    """

    greedy: bool = False
    epsilon: float = 0.0
    teacher: float = 0.0
    temperature: float = 1.0
    perturb: bool = False

    def __post_init__(self) -> None:
        for name in ("epsilon", "teacher"):
            v = getattr(self, name)
            if not (0.0 <= v <= 1.0):
                raise ConfigError(f"action mode {name} = {v!r}, expected a probability in [0, 1]")
        if not self.temperature >= 0:
            raise ConfigError(f"action mode temperature = {self.temperature!r}, expected >= 0")


GREEDY = ActionMode(greedy=True)
SAMPLE = ActionMode()


def _choose(logits: np.ndarray, rng: np.random.Generator, mode: ActionMode) -> int:
    """An index into ``logits`` by ``mode`` (teacher mixing is handled by the caller)."""
    explore = mode.epsilon > 0.0 and rng.random() < mode.epsilon
    if explore and not mode.perturb:
        return int(rng.integers(logits.shape[0]))
    if (mode.greedy and not explore) or mode.temperature == 0.0:
        return int(np.argmax(logits))
    z = logits if mode.temperature == 1.0 else logits / mode.temperature
    p = np.exp(z - z.max())
    c = np.cumsum(p)
    return int(min(np.searchsorted(c, rng.random() * c[-1], side="right"), c.size - 1))


def run_episodes(
    policy: PlacementPolicy,
    ctx: GraphContext,
    enc: object,
    num_episodes: int,
    rng: np.random.Generator,
    sel: ActionMode = SAMPLE,
    plc: ActionMode = SAMPLE,
    record_teacher: bool = False,
    anchor: np.ndarray | None = None,
) -> Episodes:
    """Roll out ``num_episodes`` episodes of ``policy`` on ``ctx``'s graph.

    Args:
        policy: the policy.
        ctx: the prepared graph.
        enc: ``policy.encode(ctx)`` (computed once, shared by all episodes).
        num_episodes: K.
        rng: the only source of randomness.
        sel, plc: how each learned half acts.
        record_teacher: record the Critical Path choices at every visited state (Stage I).
        anchor: ``(N,)`` a device per node that replaces the Critical Path rule as PLC's teacher
            (for mixing and labels): exploration around a known placement (learned PLC only).

    Returns:
        The recorded :class:`Episodes`.
    """
    k_eps = num_episodes
    t_steps = ctx.num_nodes
    ndev = ctx.num_devices
    fdim = ctx.layout.device_dim
    local = ctx.features.local
    teacher = ctx.teacher
    states = [ctx.new_state() for _ in range(k_eps)]
    nodes = np.empty((k_eps, t_steps), dtype=np.int64)
    devices = np.empty((k_eps, t_steps), dtype=np.int64)
    feats = np.empty((k_eps, t_steps, ndev, fdim), dtype=np.float32)
    plc_teacher = np.zeros((k_eps, t_steps, ndev), dtype=bool) if record_teacher else None
    learned_sel = policy.sel_mode == "learned"
    scores = policy.sel_scores(enc) if learned_sel else None
    cand_chunks: list[np.ndarray] = []
    teach_chunks: list[np.ndarray] = []
    counts = np.zeros(k_eps * t_steps, dtype=np.int64) if learned_sel else None
    pstate = policy.plc_begin(ctx, enc, k_eps) if policy.plc_mode == "learned" else None
    partial = np.zeros((k_eps, t_steps))
    span = np.zeros(k_eps)
    scale = ctx.graph.time_scale
    vs = np.empty(k_eps, dtype=np.int64)
    ests = [np.empty(0)] * k_eps
    raw = np.empty((k_eps, ndev, fdim))
    for t in range(t_steps):
        for k, st in enumerate(states):
            if policy.sel_mode == "topo":
                v = int(ctx.topo_global[t])
            else:
                cand = st.candidates()
                if learned_sel:
                    assert scores is not None and counts is not None
                    loc = local[cand]
                    ties = teacher.node_choices(cand) if record_teacher or sel.teacher else None
                    if sel.teacher and rng.random() < sel.teacher:
                        v = int(rng.choice(ties))
                    else:
                        v = int(cand[_choose(scores[loc], rng, sel)])
                    cand_chunks.append(loc)
                    counts[k * t_steps + t] = loc.size
                    if record_teacher:
                        teach_chunks.append(np.isin(cand, ties))
                else:
                    v = int(rng.choice(teacher.node_choices(cand)))
            vs[k] = v
            ests[k] = st.est(v)
            raw[k] = ctx.raw_device_features(st, v, ests[k])
        norm = ctx.normalize(raw)
        feats[:, t] = norm
        loc_v = local[vs]
        nodes[:, t] = loc_v
        logits = None
        if pstate is not None:
            with torch.no_grad():
                logits = policy.plc_logits(ctx, enc, pstate, loc_v, norm)
        for k, st in enumerate(states):
            d_ties = None
            if anchor is not None and logits is not None:
                d_ties = anchor[vs[k] : vs[k] + 1]
            elif record_teacher or plc.teacher or logits is None:
                d_ties = teacher.device_choices(ests[k])
            if logits is None or (plc.teacher and rng.random() < plc.teacher):
                assert d_ties is not None
                d = int(rng.choice(d_ties))
            else:
                d = _choose(logits[k], rng, plc)
            if plc_teacher is not None and d_ties is not None:
                plc_teacher[k, t, d_ties] = True
            devices[k, t] = d
            partial[k, t] = span[k]
            st.assign(vs[k], d, ests[k])
            span[k] = max(span[k], st.finish[vs[k]] * scale)
        if pstate is not None:
            policy.plc_observe(pstate, loc_v, devices[:, t])
    cand_ptr = cand_idx = sel_teacher = None
    if learned_sel:
        assert counts is not None
        # chunks were appended step-major (chunk t K + k); reorder to episode-major (k T + t)
        idx = (np.arange(t_steps)[None, :] * k_eps + np.arange(k_eps)[:, None]).reshape(-1)
        cand_idx = np.concatenate([cand_chunks[i] for i in idx])
        cand_ptr = np.concatenate([[0], np.cumsum(counts)])
        if record_teacher:
            sel_teacher = np.concatenate([teach_chunks[i] for i in idx])
    placer = policy.kind
    placements = [st.placement(placer) for st in states]
    return Episodes(
        nodes, devices, feats, cand_ptr, cand_idx, sel_teacher, plc_teacher, placements, partial
    )
