"""The rollout engines: three ways to step a :class:`~doppler_lab.policies.rollout.Rollout`,
side by side behind one interface, and the one rule that picks one (:func:`choose_engine`).

- :class:`PythonEngine` (``"python"``): the per-episode loop. Every mode: teacher mixing,
  uniform draws, teacher records, an anchor, the Critical Path rule for SEL or PLC, any device
  feature layout. The reference the others are tested against.
- :class:`CompiledEngine` (``"compiled"``): the plain modes (every decision the policy's own).
  The K episodes live in one :class:`~doppler_lab.timing.schedule.ScheduleBatch` and a step is
  two compiled calls around the policy's one batched PLC call
  (:func:`~doppler_lab.policies.batched.select_step`,
  :func:`~doppler_lab.policies.batched.place_step`).
- :class:`FusedEngine` (``"fused"``): the compiled engine whose :meth:`~RolloutEngine.run_placements`
  is one compiled call with the policy's compiled PLC head
  (:func:`~doppler_lab.policies.batched.run_plain`; it keeps no record).

All three take the same decisions, keep the same records and draw the same random numbers, to
the bit (``tests/policies/test_fast_rollout.py``, ``test_fused_rollout.py``). An engine holds
only what its way of stepping needs; the rollout holds what they share (the episodes, the
records, the modes, the memory guards).
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, ClassVar

import numpy as np
import torch

from ..ir.placement import Placement
from ..timing.episode import Episode
from ..timing.schedule import ScheduleBatch
from .actions import GREEDY, ActionMode, AnchorMatch, choose_action
from .batched import GREEDY as KIND_GREEDY
from .batched import SAMPLE as KIND_SAMPLE
from .batched import TOPO as KIND_TOPO
from .batched import (
    Mode,
    PlaceOut,
    PlainRun,
    PlcHead,
    PlcScores,
    SelArrays,
    SelDraws,
    SelectOut,
    StepBatch,
    place_step,
    run_plain,
    sel_logits,
    select_step,
    softmax_exponents,
)
from .doppler import PlacedSums
from .features import MEMORY_HEADROOM

if TYPE_CHECKING:
    from .features import FeatureLayout
    from .policy_base import PlacementPolicy
    from .rollout import Rollout, RolloutOptions

#: the device feature widths the compiled steps write (doppler5, doppler9 to doppler12)
COMPILED_DEVICE_DIMS = (5, 9, 10, 11, 12)


def acts_by_itself(policy: PlacementPolicy) -> bool:
    """Both halves of ``policy`` are its own (learned or topological SEL, learned PLC), not the
    Critical Path rule: a greedy episode then draws no random number, in every engine."""
    return policy.plc_mode == "learned" and policy.sel_mode in ("learned", "topo")


def choose_engine(
    policy: PlacementPolicy,
    layout: FeatureLayout,
    num_devices: int,
    num_episodes: int,
    sel: ActionMode,
    plc: ActionMode,
    options: RolloutOptions,
    memory_guarded: bool,
    pstate: object,
    compiled: bool = True,
) -> str:
    """The engine of a rollout, by one rule:

    1. ``"python"`` unless the compiled steps can take every decision: ``compiled`` (the
       class switch :attr:`~doppler_lab.policies.rollout.Rollout.compiled_plain_modes`), both
       halves plain (:attr:`~doppler_lab.policies.actions.ActionMode.plain`: no teacher
       mixing, no uniform draws), no teacher records, no anchor, at least one episode, a policy
       that acts by itself (:func:`acts_by_itself`) and a device feature width the compiled
       steps write (:data:`COMPILED_DEVICE_DIMS`).
    2. ``"compiled"`` unless a whole rollout can also run as one call: no memory guard (the
       masks are applied between the compiled steps), the ``scaled`` device features
       (normalised inside the kernels), 2 devices or more, and PLC's state a
       :class:`~doppler_lab.policies.doppler.PlacedSums` with the compiled head's weights
       (none under a node bias, or where numpy's BLAS is not callable from compiled code).
    3. Else ``"fused"``.

    Args:
        policy: the policy.
        layout: its device features' layout (of the rollout's graph context).
        num_devices: D.
        num_episodes: K.
        sel, plc: how each learned half acts.
        options: the rollout's :class:`~doppler_lab.policies.rollout.RolloutOptions`.
        memory_guarded: a device's memory cap can bind (the rollout keeps guards).
        pstate: ``policy.plc_begin(...)`` (None without a learned PLC).
        compiled: False: always ``"python"``.

    Returns:
        A key of :data:`ENGINES`.
    """
    if not (
        compiled
        and sel.plain
        and plc.plain
        and not options.record_teacher
        and options.anchor is None
        and num_episodes > 0
        and acts_by_itself(policy)
        and layout.device_dim in COMPILED_DEVICE_DIMS
    ):
        return "python"
    if (
        memory_guarded
        or layout.device_norm != "scaled"
        or num_devices < 2
        or not isinstance(pstate, PlacedSums)
        or pstate.kernel_weights is None
    ):
        return "compiled"
    return "fused"


class RolloutEngine:
    """How a rollout's steps run. One per rollout, made by it (``ENGINES[name](rollout)``).

    Args:
        rollout: the rollout it steps: the engine reads and writes the rollout's shared
            records (``nodes``, ``devices``, ``feats``, ``partial``, ``selected``, ``ests``,
            ``raw``, ``logits``) and leaves :attr:`~doppler_lab.policies.rollout.Rollout.t`
            to it.
        episodes: the K fresh episodes it steps.
    """

    name: ClassVar[str]

    def __init__(self, rollout: Rollout, episodes: list[Episode]):
        self.rollout = rollout
        self._episodes = episodes

    @property
    def episodes(self) -> list[Episode]:
        """The K episodes, up to date."""
        return self._episodes

    def step(self) -> None:
        """Step ``rollout.t``: one SEL decision in every episode, one batched PLC call."""
        raise NotImplementedError

    def candidate_record(self) -> tuple[np.ndarray | None, np.ndarray | None, np.ndarray | None]:
        """SEL's record of the finished rollout, episode-major: ``(cand_ptr, cand_idx,
        sel_teacher)`` (None where SEL is not learned, or records no teacher)."""
        raise NotImplementedError

    def run_placements(self) -> list[Placement]:
        """Step to the end and return the episodes' placements."""
        return self.rollout.run().placements


#: below this many pairs, :func:`_member` compares every pair (numpy's ``isin`` sorts, which costs
#: more than the comparison on a step's few candidates)
_PAIRWISE_MEMBER = 4096


def _member(values: np.ndarray, of: np.ndarray) -> np.ndarray:
    """``np.isin(values, of)``, by comparing every pair when the sets are small (a step's
    candidates and their ties): the same answer, without ``isin``'s fixed cost."""
    if values.size * of.size <= _PAIRWISE_MEMBER:
        return (values[:, None] == of[None, :]).any(axis=1)
    return np.isin(values, of)


class PythonEngine(RolloutEngine):
    """The per-episode loop (every mode; the reference)."""

    name = "python"

    def __init__(self, rollout: Rollout, episodes: list[Episode]):
        super().__init__(rollout, episodes)
        r = rollout
        k_eps, t_steps = r.num_episodes, r.num_steps
        self._cand_chunks: list[np.ndarray] = []
        self._teach_chunks: list[np.ndarray] = []
        self._counts = np.zeros(k_eps * t_steps, dtype=np.int64) if r.learned_sel else None
        self._match = None if r.anchor is None else AnchorMatch(k_eps, r.ctx.num_devices)
        r.ests = [np.empty(0)] * k_eps

    def step(self) -> None:
        r = self.rollout
        t = r.t
        for k, st in enumerate(self._episodes):
            v = self._select(k, st, t)
            r.selected[k] = v
            r.ests[k] = st.est(v)
            r.raw[k] = r.ctx.raw_device_features(st, v, r.ests[k])
            if r.headroom:
                r.raw[k, :, MEMORY_HEADROOM] = r.guards[k].headroom(v)  # type: ignore[index]
        norm = r.ctx.normalize(r.raw)
        r.feats[:, t] = norm
        loc_v = r.ctx.features.local[r.selected]
        r.nodes[:, t] = loc_v
        logits = None
        pstate = r.pstate
        if pstate is not None:
            with torch.no_grad():
                logits = r.policy.plc_logits(r.ctx, r.enc, pstate, loc_v, norm)
        r.logits = logits
        for k, st in enumerate(self._episodes):
            self._place(k, st, t, logits)
        if pstate is not None:
            r.policy.plc_observe(pstate, loc_v, r.devices[:, t])

    def _select(self, k: int, st: Episode, t: int) -> int:
        """Episode ``k``'s SEL choice at step ``t`` (global id), with its candidate record."""
        r = self.rollout
        if r.policy.sel_mode == "topo":
            return int(r.ctx.topo_global[t])
        teacher, rng = r.ctx.teacher, r.rng
        cand = st.candidates()
        if r.sel_scores is None:  # the Critical Path rule
            return int(rng.choice(teacher.node_choices(cand)))
        sel = GREEDY if k < r.greedy_lead else r.sel
        assert self._counts is not None
        loc = r.ctx.features.local[cand]
        ties = teacher.node_choices(cand) if r.record_teacher or sel.teacher else None
        if sel.teacher and rng.random() < sel.teacher:
            v = int(rng.choice(ties))
        else:
            v = int(cand[choose_action(r.sel_scores[loc], rng, sel)])
        self._cand_chunks.append(loc)
        self._counts[k * r.num_steps + t] = loc.size
        if r.record_teacher:
            self._teach_chunks.append(_member(cand, ties))
        return v

    def _place(self, k: int, st: Episode, t: int, logits: np.ndarray | None) -> None:
        """Episode ``k``'s PLC choice for its selected node at step ``t``, and its assignment."""
        r = self.rollout
        rng, v, est = r.rng, int(r.selected[k]), r.ests[k]
        plc = GREEDY if k < r.greedy_lead else r.plc
        mem = r.guards
        d_ties = label = None
        room = None if mem is None else mem[k].allowed(v)
        if r.anchor is not None and logits is not None:
            d_ties = self._match.label(k, int(r.anchor[v]))  # type: ignore[union-attr]
        elif r.record_teacher or plc.teacher or logits is None:
            est_k = est if room is None else np.where(room, est, np.inf)
            d_ties = r.ctx.teacher.device_choices(est_k)
            if r.plc_labeller is not None:
                label = r.plc_labeller(st, v, est, rng)
                every = np.arange(r.ctx.num_devices)
                d_ties, label = (d_ties, every) if label is None else (label, label)
        if logits is None or (plc.teacher and rng.random() < plc.teacher):
            assert d_ties is not None
            d = int(rng.choice(d_ties))
        else:
            row = logits[k] if room is None else np.where(room, logits[k], -np.inf)
            d = choose_action(row, rng, plc)
        if r.plc_teacher is not None and d_ties is not None:
            r.plc_teacher[k, t, d_ties if label is None else label] = True
        r.devices[k, t] = d
        if r.anchor is not None:
            self._match.observe(k, int(r.anchor[v]), d)  # type: ignore[union-attr]
        r.partial[k, t] = r.span[k]
        if mem is not None:
            mem[k].assign(v, d)
        st.assign(v, d, est)
        r.span[k] = max(r.span[k], st.finish[v] * r.ctx.graph.time_scale)

    def candidate_record(self) -> tuple[np.ndarray | None, np.ndarray | None, np.ndarray | None]:
        r = self.rollout
        if not r.learned_sel:
            return None, None, None
        assert self._counts is not None
        k_eps, t_steps = r.num_episodes, r.num_steps
        # chunks were appended step-major (chunk t K + k); reorder to episode-major (k T + t)
        idx = (np.arange(t_steps)[None, :] * k_eps + np.arange(k_eps)[:, None]).reshape(-1)
        cand_idx = np.concatenate([self._cand_chunks[i] for i in idx])
        cand_ptr = np.concatenate([[0], np.cumsum(self._counts)])
        sel_teacher = None
        if r.record_teacher:
            sel_teacher = np.concatenate([self._teach_chunks[i] for i in idx])
        return cand_ptr, cand_idx, sel_teacher


class CompiledEngine(RolloutEngine):
    """The plain modes, compiled: the K episodes in one schedule batch (same decisions, records
    and draws as :class:`PythonEngine`)."""

    name = "compiled"

    def __init__(self, rollout: Rollout, episodes: list[Episode]):
        super().__init__(rollout, episodes)
        r, ctx = rollout, rollout.ctx
        k_eps = r.num_episodes
        self.batch = batch = ScheduleBatch(episodes)  # type: ignore[arg-type]
        r.ests = np.empty((k_eps, ctx.num_devices))
        scores = r.sel_scores
        if scores is None:  # topological SEL: no scores, no candidates recorded
            scores = np.zeros(0, np.float32)
            self.sel_kind = KIND_TOPO
        else:
            self.sel_kind = KIND_SAMPLE if r.sel.samples else KIND_GREEDY
        self.sel = SelArrays(scores, ctx.features.local, ctx.topo_global)
        bound = k_eps * max(r.num_steps, 1)  # candidates of one step, at most
        self._sel_buf = np.empty(bound, scores.dtype)
        self._sel_ptr = np.zeros(k_eps, dtype=np.int64)
        self.sel_temperature = scores.dtype.type(r.sel.temperature)
        self.no_table = np.zeros((0, 0), scores.dtype)  # sel_logits writes the exponents
        self._no_draws = np.zeros(0)
        self._no_draw = tuple(SelDraws(self._sel_buf[:0], self._sel_ptr, self._no_draws))
        self._cand_rec = np.empty(2 * bound, dtype=np.int64)
        self._cand_pos = 0
        self._cand_counts = np.zeros((k_eps, r.num_steps), dtype=np.int64)
        ndev, fdim = ctx.num_devices, ctx.layout.device_dim
        # the scaled layout is normalised inside the compiled step (the same kernel)
        scaled = ctx.layout.device_norm == "scaled"
        self.time_unit = float(ctx.features.time_unit) if scaled else 0.0
        self._norm = np.empty((k_eps, ndev, fdim), dtype=np.float32)
        # the compiled steps' records, as the plain tuples they take (see batched)
        arrays = tuple(batch.arrays)
        self.args = tuple(StepBatch(batch.record, arrays, batch.estimate, ctx.features.extra))
        self.sel_args = tuple(self.sel)
        self._select_out = self._select_outputs()
        self._place_out = tuple(PlaceOut(r.devices, r.partial, r.span))
        self._sel_draws, self._plc_draws = np.zeros(k_eps), np.zeros(k_eps)

    @property
    def episodes(self) -> list[Episode]:
        return self.batch.states  # type: ignore[return-value]

    def _uniforms(self, out: np.ndarray) -> np.ndarray:
        """A uniform per episode into ``out``, drawn in episode order as the loop draws them;
        the greedy lead draws none (its entries stay 0)."""
        self.rollout.rng.random(out=out[self.rollout.greedy_lead :])
        return out

    def _select_outputs(self) -> tuple[np.ndarray, ...]:
        r = self.rollout
        out = (r.selected, r.nodes, r.ests, r.raw, self._norm, self._cand_rec)
        return tuple(SelectOut(*out, self._cand_counts))

    def step(self) -> None:
        r = self.rollout
        t, lead = r.t, r.greedy_lead
        norm = self._select(t)
        if r.headroom:
            for k, guard in enumerate(r.guards):  # type: ignore[arg-type]
                room = guard.headroom(int(r.selected[k]))
                r.raw[k, :, MEMORY_HEADROOM] = room
                norm[k, :, MEMORY_HEADROOM] = room  # unit-free: the scaled norm copies it
        if not self.time_unit:
            norm = r.ctx.normalize(r.raw)
        r.feats[:, t] = norm
        loc_v = r.nodes[:, t].copy()
        with torch.no_grad() if torch.is_grad_enabled() else contextlib.nullcontext():
            logits = r.policy.plc_logits(r.ctx, r.enc, r.pstate, loc_v, norm)
        if r.guards is not None:
            logits = r.mask(logits)
        r.logits = logits
        kind, scores, u = KIND_GREEDY, logits, self._no_draws
        if r.plc.samples:
            u = self._uniforms(self._plc_draws)
            # numpy's exp of z - max z (z = logits / temperature), as the loop computes them
            scores = np.empty_like(logits)
            softmax_exponents(logits, logits.dtype.type(r.plc.temperature), scores)
            kind = KIND_SAMPLE
            np.exp(scores, out=scores)
        mode, plc = tuple(Mode(kind, lead)), tuple(PlcScores(logits, scores, u))
        scale = r.ctx.graph.time_scale
        place_step(t, mode, self.args, r.selected, r.ests, plc, self._place_out, scale)
        if r.guards is not None:
            for k, guard in enumerate(r.guards):
                guard.assign(int(r.selected[k]), int(r.devices[k, t]))
        r.policy.plc_observe(r.pstate, loc_v, r.devices[:, t])

    def _select(self, t: int) -> np.ndarray:
        """SEL's choices of step ``t`` and their device features, compiled; returns the
        normalised features' buffer (written only for the ``scaled`` layout)."""
        r = self.rollout
        draw = self._no_draw
        if self.sel_kind == KIND_SAMPLE:
            u = self._uniforms(self._sel_draws)
            buf, ptr = self._sel_buf, self._sel_ptr
            cand, ncand = self.batch.arrays.cand, self.batch.arrays.ncand
            scores, local, temperature = self.sel.scores, self.sel.local, self.sel_temperature
            m = sel_logits(scores, local, cand, ncand, temperature, buf, ptr, self.no_table)
            draw = tuple(SelDraws(np.exp(buf[:m]), ptr, u))
        if self._cand_rec.size - self._cand_pos < self._sel_buf.size:
            self._cand_rec = np.concatenate([self._cand_rec, np.empty_like(self._cand_rec)])
            self._select_out = self._select_outputs()
        mode = tuple(Mode(self.sel_kind, r.greedy_lead))
        self._cand_pos = select_step(
            t, mode, self.args, self.sel_args, draw, self._select_out, self._cand_pos,
            self.time_unit,
        )  # fmt: skip
        return self._norm

    def candidate_record(self) -> tuple[np.ndarray | None, np.ndarray | None, np.ndarray | None]:
        if not self.rollout.learned_sel:
            return None, None, None
        counts = self._cand_counts  # (K, T); the record is step-major (chunk t K + k)
        step_major = counts.T.reshape(-1)
        start = (np.cumsum(step_major) - step_major).reshape(counts.shape[::-1]).T.reshape(-1)
        flat = counts.reshape(-1)
        ends = np.cumsum(flat)
        take = np.repeat(start - (ends - flat), flat) + np.arange(ends[-1] if flat.size else 0)
        return np.concatenate([[0], ends]), self._cand_rec[take], None


class FusedEngine(CompiledEngine):
    """:class:`CompiledEngine` whose whole rollout, from its first step, is one compiled call
    without a record (:func:`~doppler_lab.policies.batched.run_plain`; afterwards only
    :attr:`~RolloutEngine.episodes` and the rollout's ``devices`` are filled)."""

    name = "fused"

    def run_placements(self) -> list[Placement]:
        r = self.rollout
        if r.t > 0:  # stepped already: the rest steps too
            return super().run_placements()
        pstate = r.pstate
        assert isinstance(pstate, PlacedSums) and pstate.kernel_weights is not None
        sel_kind = self.sel_kind
        plc_kind = KIND_SAMPLE if r.plc.samples else KIND_GREEDY
        sampling = r.num_episodes - r.greedy_lead
        per_step = sampling * ((sel_kind == KIND_SAMPLE) + (plc_kind == KIND_SAMPLE))
        # one draw per sampling episode and sampling half, step after step: the stepped order
        uniforms = r.rng.random((r.num_steps, per_step))
        run = PlainRun(
            sel_kind,
            plc_kind,
            r.greedy_lead,
            self.sel_temperature,
            np.float32(r.plc.temperature),
            self.time_unit,
        )
        table = self._sel_table(sel_kind)
        head = PlcHead(pstate.kernel_weights, pstate.node_term, pstate.emb, pstate.sums)
        run_plain(tuple(run), self.args, self.sel_args, table, uniforms, tuple(head), r.devices)
        r.t, r.fused = r.num_steps, True
        return [ep.placement(r.policy.kind) for ep in self.episodes]

    def _sel_table(self, sel_kind: int) -> np.ndarray:
        """numpy's ``exp(z_i - z_j)`` of every pair of nodes' SEL scores over the temperature,
        once (the weights of every step: the steps read ``z_i - z_j <= 0`` only, j the best
        candidate; the others may overflow), on graphs of at most
        :attr:`~doppler_lab.policies.rollout.Rollout.sel_table_limit` compute nodes; else the
        empty table (the kernel exponentiates per step)."""
        scores = self.sel.scores
        if sel_kind != KIND_SAMPLE or scores.size > self.rollout.sel_table_limit:
            return self.no_table
        z = scores / self.sel_temperature  # as sel_logits divides
        if np.isnan(z).any():
            return self.no_table
        with np.errstate(over="ignore"):
            return np.exp(z[:, None] - z[None, :])


#: the engines by name (:func:`choose_engine` picks one)
ENGINES: dict[str, type[RolloutEngine]] = {
    e.name: e for e in (PythonEngine, CompiledEngine, FusedEngine)
}
