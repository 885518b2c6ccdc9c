"""Rollouts: K episodes of a policy on one graph, stepped together, without autograd.

A :class:`Rollout` steps K :class:`~doppler_lab.timing.episode.Episode` objects in lockstep (the
explorer steps one greedy episode the same way, one decision at a time). At step t every episode
selects a node (learned static SEL scores over its candidates, the Critical Path rule, or the
t-th node of a topological order) and then the policy scores the D devices of all K selected
nodes in one batched call. Exploration per decision: with probability ``teacher`` take the
Critical Path choice, else with probability ``epsilon`` a uniform one, else the policy's
(``greedy``: its argmax; otherwise a sample from its softmax).

How the steps run is the rollout's engine (:mod:`doppler_lab.policies.engines`): the
per-episode loop, compiled steps over one schedule batch, or one fused compiled call, chosen
once when the rollout is made (:func:`~doppler_lab.policies.engines.choose_engine`, the one
rule) and equal to the bit.

Memory: where a device's cap can bind (:class:`~doppler_lab.timing.fit.MemoryGuard`),
each episode keeps its running static bound and PLC chooses among the devices with memory for
the selected node: its logits are ``-inf`` on the others (the teacher's and a uniform choice
skip them too) and the rollout runs stepped, not fused; a ``doppler11`` policy reads each
device's memory headroom from that bound (:meth:`~doppler_lab.timing.fit.MemoryGuard.headroom`).
Elsewhere nothing changes, to the bit.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from ..house.errors import ConfigError, PlacementError
from ..house.limits import check_memory
from ..ir.placement import Placement
from ..timing.episode import Episode
from ..timing.fit import MemoryGuard
from .actions import GREEDY, SAMPLE, ActionMode, AnchorMatch, choose_action
from .context import GraphContext
from .engines import ENGINES, RolloutEngine, acts_by_itself, choose_engine
from .features import MEMORY_HEADROOM
from .policy_base import Episodes, PlacementPolicy

__all__ = [
    "GREEDY",
    "PLAIN",
    "SAMPLE",
    "ActionMode",
    "AnchorMatch",
    "Rollout",
    "RolloutOptions",
    "choose_action",
    "greedy_and_samples",
    "run_episodes",
]


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
        raw: ``(K, D, F)`` their raw device features.
        logits: ``(K, D)`` PLC's logits at the last step (None unless PLC is learned).
        engine: how the steps run (:mod:`~doppler_lab.policies.engines`; its ``name``:
            ``"python"``, ``"compiled"`` or ``"fused"``).
        batched: the steps run compiled (the ``compiled`` or ``fused`` engine).
        fused: :meth:`run_placements` ran the whole rollout as one compiled call.

    Run it with :meth:`run` (or :meth:`step` until :attr:`done`, then :meth:`episodes_record`).
    """

    #: run the plain modes compiled (False: always the per-episode loop, the reference)
    compiled_plain_modes: bool = True
    #: the fused rollout reads sampled SEL weights from a table of every pair of nodes
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
        # every episode's steps are held at once: checked before they are allocated
        check_memory(
            k_eps * t_steps * (8.0 * 3 + ndev * (4.0 * fdim + 1)),
            f"{k_eps:,} rollouts of {t_steps:,} steps on {ndev} devices",
            ConfigError,
            "fewer rollouts at once (samples, episodes per update)",
        )
        self.policy, self.ctx, self.enc, self.rng = policy, ctx, enc, rng
        self.sel, self.plc = sel, plc
        self.record_teacher, self.anchor = record_teacher, anchor
        self.greedy_lead = greedy_lead
        self.plc_labeller = plc_labeller if record_teacher else None
        self.num_episodes, self.num_steps = k_eps, t_steps
        self.t = 0
        self.nodes = np.empty((k_eps, t_steps), dtype=np.int64)
        self.devices = np.empty((k_eps, t_steps), dtype=np.int64)
        self.feats = np.empty((k_eps, t_steps, ndev, fdim), dtype=np.float32)
        self.plc_teacher = np.zeros((k_eps, t_steps, ndev), dtype=bool) if record_teacher else None
        self.learned_sel = policy.sel_mode == "learned"
        self.sel_scores = policy.sel_scores(enc) if self.learned_sel else None
        self.pstate = policy.plc_begin(ctx, enc, k_eps) if policy.plc_mode == "learned" else None
        self.partial = np.zeros((k_eps, t_steps))
        self.span = np.zeros(k_eps)
        self.selected = np.empty(k_eps, dtype=np.int64)
        self.ests: list[np.ndarray] | np.ndarray = [np.empty(0)] * k_eps
        self.raw = np.empty((k_eps, ndev, fdim))
        self.logits: np.ndarray | None = None
        # devices without memory for the node are masked (PLC's logits -inf, the teacher's
        # starts inf): one running static bound per episode, only where a cap can bind
        guard = MemoryGuard(ctx.graph, ctx.cluster, policy.kind, check=False)
        self._mem = [guard.blank() for _ in range(k_eps)] if guard.active else None
        # doppler11 reads each device's memory headroom from the guard (1 where none binds)
        self._headroom = self._mem is not None and fdim > MEMORY_HEADROOM
        name = choose_engine(
            policy, ctx.layout, ndev, k_eps, sel, plc, options, self._mem is not None,
            self.pstate, self.compiled_plain_modes,
        )  # fmt: skip
        # fresh episodes, handed to the engine (a compiled one stacks their arrays)
        episodes: list[Episode] = [ctx.new_episode() for _ in range(k_eps)]
        self.engine: RolloutEngine = ENGINES[name](self, episodes)
        self.batched = name != "python"
        self.fused = False

    @property
    def guards(self) -> list | None:
        """Each episode's memory guard (None where no cap can bind)."""
        return self._mem

    @property
    def headroom(self) -> bool:
        """The policy reads each device's memory headroom from the guards (``doppler11``)."""
        return self._headroom

    @property
    def episodes(self) -> list[Episode]:
        """The K episodes (up to date after every step)."""
        return self.engine.episodes

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
        self.engine.step()
        self.t += 1

    def mask(self, logits: np.ndarray) -> np.ndarray:
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

    def episodes_record(self) -> Episodes:
        """The finished episodes as :class:`Episodes` (for the log-probability recompute)."""
        if not self.done:
            raise PlacementError(f"the rollout is at step {self.t} of {self.num_steps}")
        cand_ptr, cand_idx, sel_teacher = self.engine.candidate_record()
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
        bit, with the same random draws. With the ``fused`` engine (see
        :func:`~doppler_lab.policies.engines.choose_engine`) the whole rollout is one compiled
        call that keeps no record (afterwards only :attr:`episodes` and :attr:`devices` are
        filled); otherwise it is :meth:`run`."""
        return self.engine.run_placements()

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
    if samples > 0 and policy.batch_invariant and acts_by_itself(policy):
        lead = RolloutOptions(greedy_lead=1)
        return Rollout(policy, ctx, enc, 1 + samples, rng, SAMPLE, plc, lead).run_placements()
    cands = Rollout(policy, ctx, enc, 1, rng, GREEDY, GREEDY).run_placements()
    if samples > 0:
        cands += Rollout(policy, ctx, enc, samples, rng, SAMPLE, plc).run_placements()
    return cands
