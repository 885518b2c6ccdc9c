"""Rollouts: K episodes of a policy on one graph, stepped together, without autograd.

A :class:`Rollout` steps K :class:`~doppler_lab.timing.episode.Episode` objects in lockstep (the
explorer steps one greedy episode the same way, one decision at a time). At step t every episode
selects a node (learned static SEL scores over its candidates, the Critical Path rule, or the
t-th node of a topological order) and then the policy scores the D devices of all K selected
nodes in one batched call. Exploration per decision: with probability ``teacher`` take the
Critical Path choice, else with probability ``epsilon`` a uniform one, else the policy's
(``greedy``: its argmax; otherwise a sample from its softmax).

In the plain modes (no teacher, no uniform draws, no teacher records, no anchor; a learned PLC
with learned or topological SEL) the K episodes live in one
:class:`~doppler_lab.timing.schedule.ScheduleBatch` and a step runs compiled
(:mod:`doppler_lab.policies.batched`): the same decisions, records and random draws as the
per-episode loop, which stays for the other modes.

Memory: where a device's cap can bind (:class:`~doppler_lab.timing.fit.MemoryGuard`),
each episode keeps its running static bound and PLC chooses among the devices with memory for
the selected node: its logits are ``-inf`` on the others (the teacher's and a uniform choice
skip them too) and the rollout runs stepped, not fused; a ``doppler11`` policy reads each
device's memory headroom from that bound (:meth:`~doppler_lab.timing.fit.MemoryGuard.headroom`).
Elsewhere nothing changes, to the bit.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
from scipy.optimize import linear_sum_assignment

from ..house.errors import ConfigError, PlacementError
from ..ir.placement import Placement
from ..timing.episode import Episode
from ..timing.fit import MemoryGuard
from ..timing.schedule import ScheduleBatch
from .batched import GREEDY as KIND_GREEDY
from .batched import SAMPLE as KIND_SAMPLE
from .batched import TOPO as KIND_TOPO
from .batched import (
    PlaceOut,
    PlainRun,
    SelArrays,
    SelectOut,
    StepBatch,
    place_step,
    run_plain,
    sel_logits,
    select_step,
    softmax_exponents,
)
from .context import GraphContext
from .doppler import PlacedSums
from .features import MEMORY_HEADROOM
from .policy_base import Episodes, PlacementPolicy


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

    @property
    def plain(self) -> bool:
        """Every decision is the policy's own (no teacher, no uniform or perturbing draws)."""
        return self.epsilon == 0.0 and self.teacher == 0.0

    @property
    def samples(self) -> bool:
        """A plain decision is a draw from the softmax (not the argmax)."""
        return not self.greedy and self.temperature != 0.0


GREEDY = ActionMode(greedy=True)
SAMPLE = ActionMode()


def _choose(logits: np.ndarray, rng: np.random.Generator, mode: ActionMode) -> int:
    """An index into ``logits`` by ``mode`` (teacher mixing is handled by the caller)."""
    explore = mode.epsilon > 0.0 and rng.random() < mode.epsilon
    if explore and not mode.perturb:
        ok = np.isfinite(logits)  # -inf: a device without memory for the node
        if not ok.all():
            allowed = np.flatnonzero(ok)
            return int(allowed[rng.integers(allowed.size)])
        return int(rng.integers(logits.shape[0]))
    if (mode.greedy and not explore) or mode.temperature == 0.0:
        return int(np.argmax(logits))
    z = logits if mode.temperature == 1.0 else logits / mode.temperature
    p = np.exp(z - z.max())
    c = np.cumsum(p)
    return int(min(np.searchsorted(c, rng.random() * c[-1], side="right"), c.size - 1))


class AnchorMatch:
    """Which device of each episode plays the part of each device of an anchor placement.

    Per episode, a count of the nodes the anchor put on device ``a`` that the episode put on
    device ``d``; the match is the device permutation that agrees with the most of them (the
    identity while the episode follows the anchor, and among equal matches). Labels follow it,
    so an episode that swapped two devices' roles early is not told to undo that node by node.

    Args:
        num_episodes: K.
        num_devices: D.
    """

    def __init__(self, num_episodes: int, num_devices: int):
        self.counts = np.zeros((num_episodes, num_devices, num_devices))
        self.perm = np.tile(np.arange(num_devices, dtype=np.int64), (num_episodes, 1))
        # prefer the identity among equal matches
        self._bias = 1e-6 * np.eye(num_devices)

    def label(self, k: int, anchor_device: int) -> np.ndarray:
        """Episode ``k``'s device for a node the anchor put on ``anchor_device``, ``(1,)``."""
        return self.perm[k, anchor_device : anchor_device + 1]

    def observe(self, k: int, anchor_device: int, device: int) -> None:
        """Episode ``k`` put a node of ``anchor_device`` on ``device``; rematch if it left the
        match."""
        self.counts[k, anchor_device, device] += 1.0
        if self.perm[k, anchor_device] != device:
            rows, cols = linear_sum_assignment(self.counts[k] + self._bias, maximize=True)
            self.perm[k, rows] = cols


@dataclass(frozen=True)
class RolloutOptions:
    """What a :class:`Rollout` records and follows besides its action modes.

    Attributes:
        record_teacher: record the Critical Path choices at every visited state (Stage I).
        anchor: ``(N,)`` a device per node that replaces the Critical Path rule as PLC's teacher
            (for mixing and labels): exploration around a known placement (learned PLC only).
            Its device names are matched to each episode's as the episode goes
            (:class:`AnchorMatch`): devices of one kind are interchangeable, so after an
            episode put the anchor's device-0 nodes on device 2, the label of the next such node
            is 2.
        greedy_lead: the first ``greedy_lead`` episodes act by :data:`GREEDY` (SEL and PLC),
            whatever ``sel`` and ``plc`` say (see :func:`greedy_and_samples`).
        plc_labeller: with ``record_teacher``, PLC's labels (and the teacher's action of PLC
            mixing) come from ``plc_labeller(state, node, est, rng)`` instead of the Critical
            Path rule, e.g. :class:`~doppler_lab.placers.cp_rollout.RolloutLabeller`; where it
            returns None the state gets no PLC label (every device marked) and mixing takes
            the CP rule's device.
    """

    record_teacher: bool = False
    anchor: np.ndarray | None = None
    greedy_lead: int = 0
    plc_labeller: Callable[..., np.ndarray | None] | None = None


#: a rollout that records nothing and follows no anchor
PLAIN = RolloutOptions()


class Rollout:
    """K episodes of ``policy`` on ``ctx``'s graph, one SEL + PLC decision each per :meth:`step`.

    Args:
        policy: the policy.
        ctx: the prepared graph.
        enc: ``policy.encode(ctx)`` (computed once, shared by all episodes).
        num_episodes: K.
        rng: the only source of randomness.
        sel, plc: how each learned half acts.
        options: teacher records, an anchor, a greedy lead, a PLC labeller
            (:class:`RolloutOptions`; default :data:`PLAIN`).

    Attributes:
        episodes: the K episodes.
        t: steps taken.
        sel_scores: ``(n,)`` the learned SEL score of each node (local ids; None unless SEL is
            learned).
        selected: ``(K,)`` the node (global id) each episode selected at the last step.
        ests: the earliest start times of those nodes, ``(D,)`` each.
        logits: ``(K, D)`` PLC's logits at the last step (None unless PLC is learned).
        batched: the steps run compiled (see the module docstring).
        fused: :meth:`run_placements` ran the whole rollout as one compiled call.

    Run it with :meth:`run` (or :meth:`step` until :attr:`done`, then :meth:`episodes_record`).
    """

    #: run the plain modes compiled (False: always the per-episode loop, the reference)
    compiled_plain_modes: bool = True
    #: :meth:`run_placements` reads sampled SEL weights from a table of every pair of nodes
    #: (numpy's exponentials, computed once) on graphs of at most this many compute nodes
    sel_table_limit: int = 1024

    def __init__(
        self,
        policy: PlacementPolicy,
        ctx: GraphContext,
        enc: object,
        num_episodes: int,
        rng: np.random.Generator,
        sel: ActionMode = SAMPLE,
        plc: ActionMode = SAMPLE,
        options: RolloutOptions = PLAIN,
    ):
        record_teacher, anchor = options.record_teacher, options.anchor
        greedy_lead, plc_labeller = options.greedy_lead, options.plc_labeller
        if not 0 <= greedy_lead <= num_episodes:
            raise ConfigError(
                f"greedy_lead = {greedy_lead!r}, expected 0..{num_episodes} (the episodes)"
            )
        k_eps, t_steps = num_episodes, ctx.num_nodes
        ndev, fdim = ctx.num_devices, ctx.layout.device_dim
        self.policy, self.ctx, self.enc, self.rng = policy, ctx, enc, rng
        self.sel, self.plc = sel, plc
        self.record_teacher, self.anchor = record_teacher, anchor
        self.greedy_lead = greedy_lead
        self.plc_labeller = plc_labeller if record_teacher else None
        self.num_episodes, self.num_steps = k_eps, t_steps
        self._episodes: list[Episode] = [ctx.new_episode() for _ in range(k_eps)]
        self.t = 0
        self.nodes = np.empty((k_eps, t_steps), dtype=np.int64)
        self.devices = np.empty((k_eps, t_steps), dtype=np.int64)
        self.feats = np.empty((k_eps, t_steps, ndev, fdim), dtype=np.float32)
        self.plc_teacher = np.zeros((k_eps, t_steps, ndev), dtype=bool) if record_teacher else None
        self._match = None if anchor is None else AnchorMatch(k_eps, ndev)
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
        self.batched = (
            self.compiled_plain_modes
            and sel.plain
            and plc.plain
            and not record_teacher
            and anchor is None
            and k_eps > 0
            and policy.plc_mode == "learned"
            and policy.sel_mode in ("learned", "topo")
            and fdim in (5, 9, 10, 11)
        )
        self.fused = False
        # devices without memory for the node are masked (PLC's logits -inf, the teacher's
        # starts inf): one running static bound per episode, only where a cap can bind
        guard = MemoryGuard(ctx.graph, ctx.cluster, policy.kind, check=False)
        self._mem = [guard.blank() for _ in range(k_eps)] if guard.active else None
        # doppler11 reads each device's memory headroom from the guard (1 where none binds)
        self._headroom = self._mem is not None and fdim > MEMORY_HEADROOM
        if self.batched:
            self._begin_batched()

    @property
    def episodes(self) -> list[Episode]:
        """The K episodes (up to date after every step)."""
        return self._batch.states if self.batched else self._episodes  # type: ignore[return-value]

    @property
    def done(self) -> bool:
        """Every episode has placed every compute node."""
        return self.t >= self.num_steps

    def step(self) -> None:
        """One SEL decision in every episode, then one batched PLC call for all of them.

        Raises:
            PlacementError: the rollout is already :attr:`done`.
        """
        if self.done:
            raise PlacementError(f"the rollout is done (all {self.num_steps} steps taken)")
        if self.batched:
            self._step_batched()
            return
        t, rng, ctx, policy = self.t, self.rng, self.ctx, self.policy
        record_teacher = self.record_teacher
        teacher, local = ctx.teacher, ctx.features.local
        t_steps, scores, counts = self.num_steps, self.sel_scores, self._counts
        vs, ests, raw = self.selected, self.ests, self._raw
        lead = self.greedy_lead
        for k, st in enumerate(self._episodes):
            sel = GREEDY if k < lead else self.sel
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
            if self._headroom:
                raw[k, :, MEMORY_HEADROOM] = self._mem[k].headroom(v)  # type: ignore[index]
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
        labeller, every = self.plc_labeller, np.arange(ctx.num_devices)
        mem = self._mem
        for k, st in enumerate(self._episodes):
            plc = GREEDY if k < lead else self.plc
            d_ties = label = None
            room = None if mem is None else mem[k].allowed(int(vs[k]))
            if anchor is not None and logits is not None:
                d_ties = self._match.label(k, int(anchor[vs[k]]))  # type: ignore[union-attr]
            elif record_teacher or plc.teacher or logits is None:
                est_k = ests[k] if room is None else np.where(room, ests[k], np.inf)
                d_ties = teacher.device_choices(est_k)
                if labeller is not None:
                    label = labeller(st, int(vs[k]), ests[k], rng)
                    d_ties, label = (d_ties, every) if label is None else (label, label)
            if logits is None or (plc.teacher and rng.random() < plc.teacher):
                assert d_ties is not None
                d = int(rng.choice(d_ties))
            else:
                row = logits[k] if room is None else np.where(room, logits[k], -np.inf)
                d = _choose(row, rng, plc)
            if plc_teacher is not None and d_ties is not None:
                plc_teacher[k, t, d_ties if label is None else label] = True
            devices[k, t] = d
            if anchor is not None:
                self._match.observe(k, int(anchor[vs[k]]), d)  # type: ignore[union-attr]
            self.partial[k, t] = span[k]
            if mem is not None:
                mem[k].assign(int(vs[k]), d)
            st.assign(vs[k], d, ests[k])
            span[k] = max(span[k], st.finish[vs[k]] * scale)
        if pstate is not None:
            policy.plc_observe(pstate, loc_v, devices[:, t])
        self.t += 1

    def _begin_batched(self) -> None:
        """The K episodes in one schedule batch, and the buffers of the compiled steps."""
        k_eps, ctx = self.num_episodes, self.ctx
        self._batch = batch = ScheduleBatch(self._episodes)  # type: ignore[arg-type]
        self.ests = np.empty((k_eps, ctx.num_devices))
        scores = self.sel_scores
        if scores is None:  # topological SEL: no scores, no candidates recorded
            scores = np.zeros(0, np.float32)
            self._sel_kind = KIND_TOPO
        else:
            self._sel_kind = KIND_SAMPLE if self.sel.samples else KIND_GREEDY
        self._sel = SelArrays(scores, ctx.features.local, ctx.topo_global)
        bound = k_eps * max(self.num_steps, 1)  # candidates of one step, at most
        self._sel_buf = np.empty(bound, scores.dtype)
        self._sel_ptr = np.zeros(k_eps, dtype=np.int64)
        self._sel_temperature = scores.dtype.type(self.sel.temperature)
        self._no_table = np.zeros((0, 0), scores.dtype)  # sel_logits writes the exponents
        self._no_draws = np.zeros(0)
        self._no_draw = (self._sel_buf[:0], self._sel_ptr, self._no_draws)  # a SelDraws
        self._cand_rec = np.empty(2 * bound, dtype=np.int64)
        self._cand_pos = 0
        self._cand_counts = np.zeros((k_eps, self.num_steps), dtype=np.int64)
        ndev, fdim = ctx.num_devices, ctx.layout.device_dim
        # the scaled layout is normalised inside the compiled step (the same kernel)
        scaled = ctx.layout.device_norm == "scaled"
        self._time_unit = float(ctx.features.time_unit) if scaled else 0.0
        self._norm = np.empty((k_eps, ndev, fdim), dtype=np.float32)
        # the compiled steps' records, as the plain tuples they take (see batched)
        self._args = tuple(
            StepBatch(batch.record, batch.arrays, batch.estimate, ctx.features.extra)
        )
        self._sel_args = tuple(self._sel)
        self._select_out = self._select_outputs()
        self._place_out = tuple(PlaceOut(self.devices, self.partial, self._span))
        self._sel_draws, self._plc_draws = np.zeros(k_eps), np.zeros(k_eps)

    def _uniforms(self, out: np.ndarray) -> np.ndarray:
        """A uniform per episode into ``out``, drawn in episode order as the loop draws them;
        the greedy lead draws none (its entries stay 0)."""
        self.rng.random(out=out[self.greedy_lead :])
        return out

    def _select_outputs(self) -> tuple[np.ndarray, ...]:
        out = (self.selected, self.nodes, self.ests, self._raw, self._norm, self._cand_rec)
        return tuple(SelectOut(*out, self._cand_counts))

    def _step_batched(self) -> None:
        """:meth:`step` in the plain modes, compiled (same decisions, records and draws)."""
        t, ctx, policy, batch = self.t, self.ctx, self.policy, self._batch
        draw = self._no_draw
        if self._sel_kind == KIND_SAMPLE:
            u = self._uniforms(self._sel_draws)
            buf, ptr = self._sel_buf, self._sel_ptr
            cand, ncand = batch.arrays[10:12]
            scores, local, temperature = self._sel.scores, self._sel.local, self._sel_temperature
            m = sel_logits(scores, local, cand, ncand, temperature, buf, ptr, self._no_table)
            draw = (np.exp(buf[:m]), ptr, u)  # a SelDraws
        if self._cand_rec.size - self._cand_pos < self._sel_buf.size:
            self._cand_rec = np.concatenate([self._cand_rec, np.empty_like(self._cand_rec)])
            self._select_out = self._select_outputs()
        norm, mode = self._norm, (self._sel_kind, self.greedy_lead)
        self._cand_pos = select_step(
            t, mode, self._args, self._sel_args, draw, self._select_out, self._cand_pos,
            self._time_unit,
        )  # fmt: skip
        if self._headroom:
            for k, guard in enumerate(self._mem):  # type: ignore[arg-type]
                room = guard.headroom(int(self.selected[k]))
                self._raw[k, :, MEMORY_HEADROOM] = room
                norm[k, :, MEMORY_HEADROOM] = room  # unit-free: the scaled norm copies it
        if not self._time_unit:
            norm = ctx.normalize(self._raw)
        self.feats[:, t] = norm
        loc_v = self.nodes[:, t].copy()
        with torch.no_grad() if torch.is_grad_enabled() else contextlib.nullcontext():
            logits = policy.plc_logits(ctx, self.enc, self._pstate, loc_v, norm)
        if self._mem is not None:
            logits = self._mask(logits)
        self.logits = logits
        kind, scores, u = KIND_GREEDY, logits, self._no_draws
        if self.plc.samples:
            u = self._uniforms(self._plc_draws)
            # numpy's exp of z - max z (z = logits / temperature), as the loop computes them
            scores = np.empty_like(logits)
            softmax_exponents(logits, logits.dtype.type(self.plc.temperature), scores)
            kind = KIND_SAMPLE
            np.exp(scores, out=scores)
        place_step(
            t, (kind, self.greedy_lead), self._args, self.selected, self.ests,
            (logits, scores, u), self._place_out, ctx.graph.time_scale,
        )  # fmt: skip
        if self._mem is not None:
            for k, guard in enumerate(self._mem):
                guard.assign(int(self.selected[k]), int(self.devices[k, t]))
        policy.plc_observe(self._pstate, loc_v, self.devices[:, t])
        self.t += 1

    def _mask(self, logits: np.ndarray) -> np.ndarray:
        """``logits`` with ``-inf`` on each episode's devices without memory for its selected
        node (where some device has room)."""
        out = logits
        for k, guard in enumerate(self._mem or ()):
            room = guard.allowed(int(self.selected[k]))
            if room is not None:
                if out is logits:
                    out = np.array(logits, copy=True)
                out[k, ~room] = -np.inf
        return out

    def _candidate_record(self) -> tuple[np.ndarray, np.ndarray]:
        """The batched steps' candidate record, episode-major: ``(cand_ptr, cand_idx)``."""
        counts = self._cand_counts  # (K, T); the record is step-major (chunk t K + k)
        step_major = counts.T.reshape(-1)
        start = (np.cumsum(step_major) - step_major).reshape(counts.shape[::-1]).T.reshape(-1)
        flat = counts.reshape(-1)
        ends = np.cumsum(flat)
        take = np.repeat(start - (ends - flat), flat) + np.arange(ends[-1] if flat.size else 0)
        return np.concatenate([[0], ends]), self._cand_rec[take]

    def episodes_record(self) -> Episodes:
        """The finished episodes as :class:`Episodes` (for the log-probability recompute)."""
        if not self.done:
            raise PlacementError(f"the rollout is at step {self.t} of {self.num_steps}")
        k_eps, t_steps = self.num_episodes, self.num_steps
        cand_ptr = cand_idx = sel_teacher = None
        if self.learned_sel and self.batched:
            cand_ptr, cand_idx = self._candidate_record()
        elif self.learned_sel:
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

    def run_placements(self) -> list[Placement]:
        """Step to the end and return the episodes' placements: those of :meth:`run`, to the
        bit, with the same random draws. In the plain modes of a policy with a compiled PLC
        head (:class:`~doppler_lab.policies.doppler.PlacedSums` with kernel weights, the
        ``scaled`` device features, 2 devices or more) the whole rollout is one compiled call
        that keeps no record (:func:`~doppler_lab.policies.batched.run_plain`; afterwards
        only :attr:`episodes` and :attr:`devices` are filled); otherwise it is :meth:`run`."""
        pstate = self._pstate
        if not (
            self.batched
            and self._mem is None  # memory masks: the stepped rollout
            and self.t == 0
            and self._time_unit > 0
            and self.ctx.num_devices >= 2
            and isinstance(pstate, PlacedSums)
            and pstate.kernel_weights is not None
        ):
            return self.run().placements
        sel_kind = self._sel_kind
        plc_kind = KIND_SAMPLE if self.plc.samples else KIND_GREEDY
        sampling = self.num_episodes - self.greedy_lead
        per_step = sampling * ((sel_kind == KIND_SAMPLE) + (plc_kind == KIND_SAMPLE))
        # one draw per sampling episode and sampling half, step after step: the stepped order
        uniforms = self.rng.random((self.num_steps, per_step))
        run = PlainRun(
            sel_kind,
            plc_kind,
            self.greedy_lead,
            self._sel_temperature,
            np.float32(self.plc.temperature),
            self._time_unit,
        )
        table = self._no_table
        if sel_kind == KIND_SAMPLE and self._sel.scores.size <= self.sel_table_limit:
            z = self._sel.scores / self._sel_temperature  # as sel_logits divides
            if not np.isnan(z).any():
                # numpy's exp(z_i - z_j) of every pair, once: the weights of every step (the
                # steps read z_i - z_j <= 0 only, j the best candidate; the others may overflow)
                with np.errstate(over="ignore"):
                    table = np.exp(z[:, None] - z[None, :])
        head = (pstate.kernel_weights, pstate.node_term, pstate.emb, pstate.sums)
        run_plain(tuple(run), self._args, self._sel_args, table, uniforms, head, self.devices)
        self.t, self.fused = self.num_steps, True
        return [ep.placement(self.policy.kind) for ep in self.episodes]

    def run(self) -> Episodes:
        """Step to the end and return the record."""
        with torch.no_grad():
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
    options: RolloutOptions = PLAIN,
) -> Episodes:
    """Roll out ``num_episodes`` episodes of ``policy`` on ``ctx``'s graph (a whole
    :class:`Rollout`; the arguments are its own).

    Returns:
        The recorded :class:`Episodes`.
    """
    return Rollout(policy, ctx, enc, num_episodes, rng, sel, plc, options).run()


def greedy_and_samples(
    policy: PlacementPolicy,
    ctx: GraphContext,
    enc: object,
    samples: int,
    rng: np.random.Generator,
) -> list[Placement]:
    """The placements of the greedy rollout (:data:`GREEDY`), then of ``samples`` sampled ones
    (SEL at temperature 1, PLC at the policy's
    :attr:`~doppler_lab.policies.policy_base.PlacementPolicy.sample_temperature`).

    They come from one rollout of ``1 + samples`` episodes whose first is greedy when that is
    the two rollouts to the bit: the greedy episode draws no random number (learned or
    topological SEL, learned PLC) and the policy is
    :attr:`~doppler_lab.policies.policy_base.PlacementPolicy.batch_invariant`; else from two.
    """
    t = float(getattr(policy, "sample_temperature", 1.0))
    plc = SAMPLE if t == 1.0 else ActionMode(temperature=t)
    if (
        samples > 0
        and policy.batch_invariant
        and policy.sel_mode in ("learned", "topo")
        and policy.plc_mode == "learned"
    ):
        lead = RolloutOptions(greedy_lead=1)
        return Rollout(policy, ctx, enc, 1 + samples, rng, SAMPLE, plc, lead).run_placements()
    cands = Rollout(policy, ctx, enc, 1, rng, GREEDY, GREEDY).run_placements()
    if samples > 0:
        cands += Rollout(policy, ctx, enc, samples, rng, SAMPLE, plc).run_placements()
    return cands
