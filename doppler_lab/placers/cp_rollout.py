"""Rollout over the Critical Path rules: one step of policy iteration with CP as the base policy.

Bertsekas' rollout algorithm with the deterministic CP heuristic as the base: each step takes
CP's node (largest b-level, the first of ties), tries it on every device, completes each of
those partial placements with deterministic CP (first of the ties everywhere), simulates the
D completions under ``semantics`` and keeps the device whose completion is shortest (CP's own
device among equal ones). It is *fortified*: the best completion seen so far is remembered and
returned when the final placement is not better, so the result is never worse than
deterministic CP (the first step's completion on CP's own device is deterministic CP).

Cost: N * D completions (compiled, as :class:`~doppler_lab.timing.schedule.ScheduleBatch` rows) and
N * D simulator calls for N compute nodes and D devices: 0.005-1.3 s per graph of 15-367 nodes on
2-8 devices on one core (``doppler-lab bench general``'s held-out set, where it is 0.859 of CP's
makespan in geometric mean against 0.863 for the best of 17 rollouts of
``doppler/general-v1``, the default then).
It is deterministic; :class:`RolloutLabeller` applies its rule at any episode state, the device
labels of the general policy's Stage I (``doppler-lab train-general --teacher cp-rollout``).

Memory: the completions ignore the caps; one over a cap simulates as ``inf``
(:func:`~doppler_lab.timing.fit.capped`), and each step's device is one with room for
the node.

Randomised tie-breaks in the completions made it worse than CP (the completions are then not
consistent from one step to the next), so every tie is broken by the lowest index.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np
from numba import njit

from ..hardware.cluster import Cluster
from ..house.errors import ConfigError
from ..house.progress import progress
from ..ir.graph import DataflowGraph
from ..ir.placement import Placement
from ..timing.cost_model import CostModel
from ..timing.fit import MemoryGuard, capped
from ..timing.schedule import (
    ESTIMATE_CODES,
    BatchArrays,
    Estimate,
    ListScheduleState,
    batch_assign,
    batch_est,
    estimate_for,
    estimate_name,
)
from ..timing.sim import Simulator
from .critical_path import CriticalPathTeacher, check_cp_options
from .placer_base import ties


@njit(cache=True)
def _complete_rows(record, arrays, estimate, b_level, tie_rtol, est):  # pragma: no cover - compiled
    """Finish every row of a stacked state by the deterministic CP rules (first of ties)."""
    b = BatchArrays(*arrays)
    cand, ncand = b.cand, b.ncand
    ndev = est.size
    for k in range(cand.shape[0]):
        while ncand[k] > 0:
            row, m = cand[k], ncand[k]
            best = -np.inf
            for i in range(m):
                best = max(best, b_level[row[i]])
            tol = tie_rtol * max(abs(best), 1e-300)
            v = row[0]
            for i in range(m):
                if b_level[row[i]] >= best - tol:
                    v = row[i]
                    break
            batch_est(record, arrays, estimate, k, v, est)
            lo = np.inf
            for d in range(ndev):
                lo = min(lo, est[d])
            tol = tie_rtol * max(abs(lo), 1e-300)
            dev = 0
            for d in range(ndev):
                if est[d] <= lo + tol:
                    dev = d
                    break
            batch_assign(record, arrays, estimate, k, v, dev, est)


def _stack(state: ListScheduleState, rows: int) -> BatchArrays:
    """``rows`` copies of ``state`` as the stacked arrays of a
    :class:`~doppler_lab.timing.schedule.ScheduleBatch` (for the compiled steps, which take
    ``tuple(arrays)``)."""
    names = ("device", "start", "finish", "comp_on", "load", "dev_free", "link_free")
    names += ("arrival", "_waiting", "_frontier")
    stacked = [np.repeat(getattr(state, a)[None], rows, axis=0) for a in names]
    n = state.graph.num_nodes
    first = state.candidates()
    cand = np.zeros((rows, n), dtype=np.int64)
    cand[:, : first.size] = first
    ncand = np.full(rows, first.size, dtype=np.int64)
    done = len(state.order)
    order = np.zeros((rows, done + state._remaining), dtype=np.int64)
    order[:, :done] = state.order
    count = np.full(rows, done, dtype=np.int64)
    return BatchArrays(*stacked, cand, ncand, order, count)


def device_completions(
    state: ListScheduleState,
    v: int,
    est: np.ndarray,
    b_level: np.ndarray,
    tie_rtol: float = 1e-9,
) -> tuple[np.ndarray, np.ndarray]:
    """Candidate ``v`` of ``state`` on each device in turn, each completed by deterministic CP
    (compiled): the completed device maps ``(D, N)`` (inputs -1) and their assignment orders
    ``(D, compute nodes)``. ``state`` is not changed."""
    ndev = state.num_devices
    batch = _stack(state, ndev)
    arrays = tuple(batch)
    estimate = ESTIMATE_CODES[state.estimate]
    for d in range(ndev):
        batch_assign(state.record, arrays, estimate, d, int(v), d, est)
    _complete_rows(state.record, arrays, estimate, b_level, float(tie_rtol), np.empty(ndev))
    return batch.device, batch.order


def rollout_device_choices(
    state: ListScheduleState,
    v: int,
    est: np.ndarray,
    b_level: np.ndarray,
    sim: Simulator,
    tie_rtol: float = 1e-9,
) -> tuple[np.ndarray, np.ndarray]:
    """The rollout rule's devices for candidate ``v`` (those whose CP completion simulates
    shortest, within ``tie_rtol``) and every device's completed makespan ``(D,)``."""
    spans = sim.makespans(device_completions(state, v, est, b_level, tie_rtol)[0])
    return ties(spans, "min", tie_rtol), spans


def cp_complete(state: ListScheduleState, teacher: CriticalPathTeacher) -> ListScheduleState:
    """Finish ``state`` in place by the deterministic CP rules (the first of ties); returns it."""
    while not state.done:
        v = int(teacher.node_choices(state.candidates())[0])
        est = state.est(v)
        state.assign(v, int(teacher.device_choices(est)[0]), est)
    return state


@dataclass(frozen=True)
class CPRolloutPlacer:
    """Rollout over deterministic CP: each CP node on the device whose CP completion simulates
    best under ``semantics`` (see the module docstring).

    Attributes:
        semantics: simulator semantics of the objective (``paper``, ``wc``, ``bsp``).
        estimate: the episode state's estimate (None: the one of ``semantics``).
        tie_rtol: relative tolerance of the CP rules' ties.
        progress: show a bar over the steps on stderr.
    """

    semantics: str = "paper"
    estimate: Estimate | None = None
    tie_rtol: float = 1e-9
    progress: bool = False
    name: ClassVar[str] = "cp-rollout"

    def __post_init__(self) -> None:
        object.__setattr__(self, "estimate", estimate_name(self.estimate))  # "paper": "additive"
        check_cp_options(self.name, self.semantics, self.estimate, self.tie_rtol)

    def place(self, graph: DataflowGraph, cluster: Cluster, rng: np.random.Generator) -> Placement:
        del rng  # deterministic
        from ..timing.episode import Episode

        estimate = self.estimate if self.estimate is not None else estimate_for(self.semantics)
        cost = CostModel(graph, cluster)
        teacher = CriticalPathTeacher(graph, cost, self.tie_rtol)
        # completions over a memory cap simulate as inf; PLC keeps to devices with room
        sim = capped(Simulator(graph, cluster, self.semantics))  # type: ignore[arg-type]
        mem = MemoryGuard(graph, cluster, self.name)
        state = Episode(graph, cost, estimate, mem)  # keeps the guard in step
        best_ms, best = np.inf, None
        calls = 0
        steps = int(graph.compute_nodes.size)
        b_level = teacher.b_level
        for _ in progress(
            range(steps), desc=f"{self.name} {graph.name}", enabled=self.progress, unit="step"
        ):
            v = int(teacher.node_choices(state.candidates())[0])
            est = state.est(v)
            done, orders = device_completions(state, v, est, b_level, self.tie_rtol)
            spans = sim.makespans(done)
            calls += spans.size
            k = int(np.argmin(spans))
            if spans[k] < best_ms:
                best_ms, best = float(spans[k]), (done[k].copy(), orders[k].copy())
            # CP's own device among the shortest: the trajectory stays CP's where CP is best
            room = mem.allowed(v)
            if room is None:
                base = int(teacher.device_choices(est)[0])
                shortest = ties(spans, "min", self.tie_rtol)
            else:
                base = int(teacher.device_choices(np.where(room, est, np.inf))[0])
                shortest = ties(np.where(room, spans, np.inf), "min", self.tie_rtol)
                shortest = shortest[room[shortest]]
            d = base if base in shortest else int(shortest[0])
            state.assign(v, d, est)
        final = state.placement(self.name)
        meta = {"estimate": estimate, "semantics": self.semantics, "sim_calls": calls}
        if best is None or sim.makespan(final) <= best_ms:
            out = Placement(final.device, final.priority, self.name, meta)
        else:
            dev, order = best
            dev[graph.is_input] = 0
            priority = np.zeros(graph.num_nodes)
            priority[order] = np.arange(order.size)
            out = Placement(dev, priority, self.name, meta).with_inputs_filled(graph)
        return out  # fitted by the registry


class RolloutLabeller:
    """PLC labels of the rollout rule at the states a policy visits (Stage I with
    ``plc_labels="cp-rollout"``): the devices whose deterministic CP completion simulates
    shortest under ``sim``.

    Args:
        sim: the simulator of the graph (its semantics are the objective).
        b_level: the CP teacher's b-levels of the graph.
        fraction: the share of states labelled (each drawn with this probability; the others
            get no PLC label).
        tie_rtol: relative tolerance of the ties.
    """

    def __init__(
        self, sim: Simulator, b_level: np.ndarray, fraction: float = 1.0, tie_rtol: float = 1e-9
    ):
        if not 0 < fraction <= 1:
            raise ConfigError(f"rollout labels: fraction = {fraction!r}, expected 0 < x <= 1")
        self.sim, self.b_level = sim, b_level
        self.fraction, self.tie_rtol = float(fraction), float(tie_rtol)
        self.calls = 0

    def __call__(
        self, state: ListScheduleState, v: int, est: np.ndarray, rng: np.random.Generator
    ) -> np.ndarray | None:
        """The label devices of candidate ``v`` in ``state``, or None when not labelled."""
        if self.fraction < 1 and rng.random() >= self.fraction:
            return None
        self.calls += state.num_devices
        return rollout_device_choices(state, v, est, self.b_level, self.sim, self.tie_rtol)[0]
