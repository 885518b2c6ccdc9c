"""The Critical Path teacher (DOPPLER.md; Kwok and Ahmad 1999 style list scheduling).

Each step of an :class:`~doppler_lab.timing.episode.Episode`:

- SEL: among the candidates (unassigned nodes whose predecessors are all assigned) pick one with
  the largest b-level, ties at random. B-levels come from the cost model: mean compute plus mean
  transfer along the longest path to a sink (on the paper's graphs exactly the released
  ``cp_utils`` values: compute + the node's communication cost when it has successors);
- PLC: put it on a device with the smallest earliest start time (device feature 5), ties at
  random; the state's estimate (``est``, the released ``additive`` model, or ``wc``: link
  contention and one transfer per tensor and device) then fixes its start and finish.

:class:`CriticalPathTeacher` applies these rules to any episode state (:meth:`~CriticalPathTeacher.decide`
takes one whole decision), so Stage I can label the states a policy visits;
:class:`CriticalPathPlacer` runs a whole episode and records every decision.
:class:`ReleasedCriticalPathPlacer` reproduces the released baseline's indexing bug: it draws k
uniformly from the tie list's length and returns ``legal[k]``, the k-th node of the released
code's candidate list (not the k-th tied node); for comparison only.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar, NamedTuple

import numpy as np

from ..hardware.cluster import Cluster
from ..house.errors import ConfigError
from ..ir.graph import DataflowGraph
from ..ir.placement import Placement
from ..timing.cost_model import CostModel
from ..timing.episode import Episode
from ..timing.fit import MemoryGuard
from ..timing.schedule import ESTIMATES, Estimate, ListScheduleState, estimate_for, estimate_name
from ..timing.sim import SEMANTICS
from .placer_base import Schedule, ScheduleToPlacement, check_choice, make_schedule, ties
from .repair import fit_schedule


class CPDecision(NamedTuple):
    """One step of a Critical Path episode (times in raw units).

    Attributes:
        step: 0-based step index.
        candidates: the candidate node ids at this step.
        b_level: b-level of each candidate.
        node_ties: candidates with the largest b-level (the teacher's equivalent choices).
        node: the node chosen.
        est: ``(D,)`` earliest start time of ``node`` on each device.
        device_ties: devices with the smallest earliest start.
        device: the device chosen.
    """

    step: int
    candidates: np.ndarray
    b_level: np.ndarray
    node_ties: np.ndarray
    node: int
    est: np.ndarray
    device_ties: np.ndarray
    device: int


@dataclass(frozen=True, eq=False)
class CPRun:
    """A Critical Path episode: the schedule and the decision trace."""

    schedule: Schedule
    decisions: list[CPDecision]

    @property
    def placement(self) -> Placement:
        return self.schedule.placement


class CriticalPathTeacher:
    """The CP rules on any episode state of ``graph`` (labels for imitation, the explorer).

    Args:
        graph: the graph.
        cost_model: its costs; b-levels are ``cost_model.b_level()``.
        tie_rtol: relative tolerance under which two b-levels (or two start times) tie.
    """

    def __init__(self, graph: DataflowGraph, cost_model: CostModel, tie_rtol: float = 1e-9):
        self.graph = graph
        self.cost = cost_model
        self.tie_rtol = tie_rtol
        self.b_level = cost_model.b_level()

    def node_choices(self, candidates: np.ndarray) -> np.ndarray:
        """The candidates with the largest b-level."""
        cand = np.asarray(candidates, dtype=np.int64)
        return cand[ties(self.b_level[cand], "max", self.tie_rtol)]

    def device_choices(self, est: np.ndarray) -> np.ndarray:
        """The devices with the smallest earliest start time."""
        return ties(est, "min", self.tie_rtol)

    def decide(
        self,
        state: ListScheduleState,
        rng: np.random.Generator,
        candidates: np.ndarray | None = None,
        released: bool = False,
        room: Callable[[int], np.ndarray | None] | None = None,
    ) -> CPDecision:
        """One whole CP decision on ``state`` (not applied): SEL, then PLC, ties drawn from
        ``rng`` in that order.

        Args:
            state: the episode.
            rng: draws the ties.
            candidates: the candidate list (default: ``state.candidates()``, ascending).
            released: the released SEL bug: draw k in ``range(len(ties))`` and take the k-th
                *candidate* (see :class:`ReleasedCriticalPathPlacer`).
            room: ``room(v)``: the devices with memory for ``v`` (``(D,)`` bool; None: every
                one); PLC chooses among them
                (:meth:`~doppler_lab.timing.fit.MemoryGuard.allowed`).
        """
        cand = state.candidates() if candidates is None else np.asarray(candidates, np.int64)
        node_ties = self.node_choices(cand)
        if released:
            v = int(cand[int(rng.integers(len(node_ties)))])
        else:
            v = int(rng.choice(node_ties))
        est = state.est(v)
        ok = None if room is None else room(v)
        dev_ties = self.device_choices(est if ok is None else np.where(ok, est, np.inf))
        d = int(rng.choice(dev_ties))
        return CPDecision(
            state.num_assigned, cand, self.b_level[cand], node_ties, v, est, dev_ties, d
        )


def _episode(
    graph: DataflowGraph,
    cluster: Cluster,
    rng: np.random.Generator,
    estimate: Estimate,
    tie_rtol: float,
    placer: str,
    released: bool,
) -> CPRun:
    """One CP episode; ``released`` reproduces the released candidate list and its bug."""
    cost = CostModel(graph, cluster)
    teacher = CriticalPathTeacher(graph, cost, tie_rtol)
    mem = MemoryGuard(graph, cluster, placer)
    state = Episode(graph, cost, estimate, mem)  # keeps the guard in step
    room = state.allowed if mem.active else None
    legal = [int(v) for v in state.candidates()]  # the released code's candidate list
    decisions: list[CPDecision] = []
    while not state.done:
        dec = teacher.decide(
            state, rng, np.array(legal, dtype=np.int64) if released else None, released, room
        )
        decisions.append(dec)
        v = dec.node
        state.assign(v, dec.device, dec.est)
        if released:
            legal.remove(v)
            legal += [
                int(w)
                for w in graph.successors(v)
                if state.is_candidate(int(w)) and int(w) not in legal
            ]
    sched = make_schedule(
        graph,
        state.device,
        state.start,
        state.finish,
        placer,
        estimate,
        state.order,
        {"estimate": estimate},
    )
    return CPRun(fit_schedule(graph, cluster, sched, placer, cost), decisions)


def check_cp_options(
    name: str, semantics: str | None, estimate: str | None, tie_rtol: float
) -> None:
    """Check the options a CP-rule placer shares (None: not given)."""
    if semantics is not None:
        check_choice(name, "semantics", semantics, SEMANTICS)
    if estimate is not None:
        check_choice(name, "estimate", estimate, ESTIMATES)
    if not (np.isfinite(tie_rtol) and 0 <= tie_rtol < 1):
        raise ConfigError(f"placer {name!r}: tie_rtol = {tie_rtol!r}, expected 0 <= x < 1")


@dataclass(frozen=True)
class CriticalPathPlacer(ScheduleToPlacement):
    """The Critical Path teacher as a placer (SEL = max b-level, PLC = min earliest start).

    Attributes:
        estimate: ``est`` (earliest-start estimate), ``additive`` (the released model: a node
            starts when the compute already on its device is done) or ``wc`` (``est`` with link
            contention and one transfer per tensor and device); None (default): the model of
            ``semantics`` (:func:`~doppler_lab.timing.schedule.estimate_for`; ``est`` without one).
        tie_rtol: relative tolerance for ties.
        semantics: the simulator semantics the placement is for (picks the default estimate).
    """

    estimate: Estimate | None = None
    tie_rtol: float = 1e-9
    semantics: str | None = None
    name: ClassVar[str] = "cp"
    released: ClassVar[bool] = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "estimate", estimate_name(self.estimate))  # "paper": "additive"
        check_cp_options(self.name, self.semantics, self.estimate, self.tie_rtol)

    def run(self, graph: DataflowGraph, cluster: Cluster, rng: np.random.Generator) -> CPRun:
        """One episode with its decision trace."""
        return _episode(graph, cluster, rng, self.model, self.tie_rtol, self.name, self.released)

    @property
    def model(self) -> Estimate:
        """The estimate the episode runs (``estimate``, or the one of ``semantics``)."""
        return self.estimate if self.estimate is not None else estimate_for(self.semantics)

    def schedule(
        self, graph: DataflowGraph, cluster: Cluster, rng: np.random.Generator
    ) -> Schedule:
        return self.run(graph, cluster, rng).schedule


@dataclass(frozen=True)
class ReleasedCriticalPathPlacer(CriticalPathPlacer):
    """The released CP baseline, bug included (comparison only).

    The candidate list keeps the released order: source nodes by id, then each newly ready
    successor appended (in edge order) when its last predecessor is assigned, the chosen node
    removed. SEL draws k uniformly in ``range(len(ties))`` and returns ``legal[k]``.

    Attributes:
        estimate: ``additive`` (the released model, default), ``est`` or ``wc``.
        tie_rtol: relative tolerance for ties.
    """

    estimate: Estimate | None = "additive"
    name: ClassVar[str] = "cp-released"
    released: ClassVar[bool] = True
