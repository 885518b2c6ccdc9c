"""Rollouts: K episodes of a policy on one graph, stepped together, without autograd.

A :class:`Rollout` steps K :class:`~doppler_lab.episode.Episode` objects in lockstep (the
explorer steps one greedy episode the same way, one decision at a time). At step t every episode
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

from ..errors import ConfigError, PlacementError
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


class Rollout:
    """K episodes of ``policy`` on ``ctx``'s graph, one SEL + PLC decision each per :meth:`step`.

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

    Attributes:
        episodes: the K episodes.
        t: steps taken.
        sel_scores: ``(n,)`` the learned SEL score of each node (local ids; None unless SEL is
            learned).
        selected: ``(K,)`` the node (global id) each episode selected at the last step.
        ests: the earliest start times of those nodes, ``(D,)`` each.
        logits: ``(K, D)`` PLC's logits at the last step (None unless PLC is learned).

    Run it with :meth:`run` (or :meth:`step` until :attr:`done`, then :meth:`episodes_record`).
    """

    def __init__(
        self,
        policy: PlacementPolicy,
        ctx: GraphContext,
        enc: object,
        num_episodes: int,
        rng: np.random.Generator,
        sel: ActionMode = SAMPLE,
        plc: ActionMode = SAMPLE,
        record_teacher: bool = False,
        anchor: np.ndarray | None = None,
    ):
        k_eps, t_steps = num_episodes, ctx.num_nodes
        ndev, fdim = ctx.num_devices, ctx.layout.device_dim
        self.policy, self.ctx, self.enc, self.rng = policy, ctx, enc, rng
        self.sel, self.plc = sel, plc
        self.record_teacher, self.anchor = record_teacher, anchor
        self.num_episodes, self.num_steps = k_eps, t_steps
        self.episodes = [ctx.new_episode() for _ in range(k_eps)]
        self.t = 0
        self.nodes = np.empty((k_eps, t_steps), dtype=np.int64)
        self.devices = np.empty((k_eps, t_steps), dtype=np.int64)
        self.feats = np.empty((k_eps, t_steps, ndev, fdim), dtype=np.float32)
        self.plc_teacher = np.zeros((k_eps, t_steps, ndev), dtype=bool) if record_teacher else None
        self.learned_sel = policy.sel_mode == "learned"
        self.sel_scores = policy.sel_scores(enc) if self.learned_sel else None
        self._cand_chunks: list[np.ndarray] = []
        self._teach_chunks: list[np.ndarray] = []
        self._counts = np.zeros(k_eps * t_steps, dtype=np.int64) if self.learned_sel else None
        self._pstate = policy.plc_begin(ctx, enc, k_eps) if policy.plc_mode == "learned" else None
        self.partial = np.zeros((k_eps, t_steps))
        self._span = np.zeros(k_eps)
        self.selected = np.empty(k_eps, dtype=np.int64)
        self.ests = [np.empty(0)] * k_eps
        self._raw = np.empty((k_eps, ndev, fdim))
        self.logits: np.ndarray | None = None

    @property
    def done(self) -> bool:
        """Every episode has placed every compute node."""
        return self.t >= self.num_steps

    def step(self) -> None:
        """One SEL decision in every episode, then one batched PLC call for all of them."""
        t, rng, ctx, policy = self.t, self.rng, self.ctx, self.policy
        sel, plc, record_teacher = self.sel, self.plc, self.record_teacher
        teacher, local = ctx.teacher, ctx.features.local
        t_steps, scores, counts = self.num_steps, self.sel_scores, self._counts
        vs, ests, raw = self.selected, self.ests, self._raw
        for k, st in enumerate(self.episodes):
            if policy.sel_mode == "topo":
                v = int(ctx.topo_global[t])
            else:
                cand = st.candidates()
                if scores is not None:
                    assert counts is not None
                    loc = local[cand]
                    ties = teacher.node_choices(cand) if record_teacher or sel.teacher else None
                    if sel.teacher and rng.random() < sel.teacher:
                        v = int(rng.choice(ties))
                    else:
                        v = int(cand[_choose(scores[loc], rng, sel)])
                    self._cand_chunks.append(loc)
                    counts[k * t_steps + t] = loc.size
                    if record_teacher:
                        self._teach_chunks.append(np.isin(cand, ties))
                else:
                    v = int(rng.choice(teacher.node_choices(cand)))
            vs[k] = v
            ests[k] = st.est(v)
            raw[k] = ctx.raw_device_features(st, v, ests[k])
        norm = ctx.normalize(raw)
        self.feats[:, t] = norm
        loc_v = local[vs]
        self.nodes[:, t] = loc_v
        logits = None
        pstate = self._pstate
        if pstate is not None:
            with torch.no_grad():
                logits = policy.plc_logits(ctx, self.enc, pstate, loc_v, norm)
        self.logits = logits
        anchor, plc_teacher, devices = self.anchor, self.plc_teacher, self.devices
        span, scale = self._span, ctx.graph.time_scale
        for k, st in enumerate(self.episodes):
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
            self.partial[k, t] = span[k]
            st.assign(vs[k], d, ests[k])
            span[k] = max(span[k], st.finish[vs[k]] * scale)
        if pstate is not None:
            policy.plc_observe(pstate, loc_v, devices[:, t])
        self.t += 1

    def episodes_record(self) -> Episodes:
        """The finished episodes as :class:`Episodes` (for the log-probability recompute)."""
        if not self.done:
            raise PlacementError(f"the rollout is at step {self.t} of {self.num_steps}")
        k_eps, t_steps = self.num_episodes, self.num_steps
        cand_ptr = cand_idx = sel_teacher = None
        if self.learned_sel:
            assert self._counts is not None
            # chunks were appended step-major (chunk t K + k); reorder to episode-major (k T + t)
            idx = (np.arange(t_steps)[None, :] * k_eps + np.arange(k_eps)[:, None]).reshape(-1)
            cand_idx = np.concatenate([self._cand_chunks[i] for i in idx])
            cand_ptr = np.concatenate([[0], np.cumsum(self._counts)])
            if self.record_teacher:
                sel_teacher = np.concatenate([self._teach_chunks[i] for i in idx])
        placer = self.policy.kind
        placements = [ep.placement(placer) for ep in self.episodes]
        return Episodes(
            self.nodes,
            self.devices,
            self.feats,
            cand_ptr,
            cand_idx,
            sel_teacher,
            self.plc_teacher,
            placements,
            self.partial,
        )

    def run(self) -> Episodes:
        """Step to the end and return the record."""
        while not self.done:
            self.step()
        return self.episodes_record()


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
    """Roll out ``num_episodes`` episodes of ``policy`` on ``ctx``'s graph (a whole
    :class:`Rollout`; the arguments are its own).

    Returns:
        The recorded :class:`Episodes`.
    """
    return Rollout(policy, ctx, enc, num_episodes, rng, sel, plc, record_teacher, anchor).run()
