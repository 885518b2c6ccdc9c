"""HEFT and CPOP (Topcuoglu, Hariri and Wu, "Performance-effective and low-complexity task
scheduling for heterogeneous computing", IEEE TPDS 2002).

Both work on heterogeneous machines: compute cost per (node, device) and transfer time per
(edge, device pair) come from the :class:`~doppler_lab.timing.cost_model.CostModel` (explicit per-device
costs and explicit edge costs included). Ranks use mean costs: the upward rank is the cost
model's b-level (mean compute + mean transfer to a sink), the downward rank its t-level.

- HEFT: nodes by decreasing upward rank; each goes to the device that gives it the earliest
  finish time, with insertion into idle gaps of a device's timeline.
- CPOP: priority = upward + downward rank; the nodes on the critical path (priority equal to
  the entry node's) all go to the one device that runs them fastest in total; the others, taken
  ready-first by priority, to their earliest-finish device (insertion-based as well).

Both choose among the devices with memory for the node
(:class:`~doppler_lab.timing.fit.MemoryGuard`; a critical-path node whose device is
full goes to its earliest-finish device with room).

Ties (equal ranks, equal finish times) go to the earlier node in topological order and the
lower device id.

When a node's inputs are ready on each device comes from the timing wing
(:class:`~doppler_lab.timing.schedule.InputReady`); the busy intervals are this module's own
(the schedule state appends to a device's timeline, HEFT inserts into its gaps), and CPOP's
ready list is a Python ``heapq`` (the timing wing's heap, :mod:`doppler_lab.timing.heaps`, serves
compiled loops).
"""

from __future__ import annotations

import heapq
from bisect import bisect_left, bisect_right
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from ..hardware.cluster import Cluster
from ..ir.graph import DataflowGraph
from ..timing.cost_model import CostModel
from ..timing.fit import MemoryGuard
from ..timing.schedule import InputReady
from .placer_base import Schedule, ScheduleToPlacement, make_schedule

_RANK_DECIMALS = 9  # ranks equal to 9 significant digits tie (float sums of equal paths differ)


class InsertionTimeline:
    """Busy intervals per device; finds the earliest idle gap that fits a node.

    Args:
        graph: the graph.
        cost: its cost model.
    """

    def __init__(self, graph: DataflowGraph, cost: CostModel):
        self.graph = graph
        self.cost = cost
        d = cost.cluster.num_devices
        self.busy: list[list[tuple[float, float]]] = [[] for _ in range(d)]
        n = graph.num_nodes
        self.device = np.full(n, -1, dtype=np.int64)
        self.start = np.full(n, np.nan)
        self.finish = np.full(n, np.nan)
        self.order: list[int] = []
        self._ready = InputReady(graph, cost)

    def ready_times(self, v: int) -> np.ndarray:
        """When all inputs of ``v`` can be on each device, ``(D,)`` (predecessors must be
        placed)."""
        return self._ready(v, self.device, self.finish)

    def earliest_start(self, v: int, d: int, ready: float | None = None) -> float:
        """The earliest start of ``v`` on ``d``: the first gap after its ready time there
        (``ready``; default: :meth:`ready_times`) that fits."""
        if ready is None:
            ready = float(self.ready_times(v)[d])
        dur = float(self.cost.compute[v, d])
        t = ready
        slots = self.busy[d]
        # the slots do not overlap, so their finishes are sorted: skip those over by ``ready``
        # at once (a linear scan made HEFT quadratic: minutes on a 100,000-op chain)
        for i in range(bisect_right(slots, t, key=_finish), len(slots)):
            s, f = slots[i]
            if f <= t:
                continue
            if s - t >= dur:
                return t
            t = max(t, f)
        return t

    def assign(self, v: int, d: int, start: float) -> None:
        fin = start + float(self.cost.compute[v, d])
        slots = self.busy[d]
        slots.insert(bisect_left(slots, (start, fin)), (start, fin))
        self.device[v] = d
        self.start[v] = start
        self.finish[v] = fin
        self.order.append(v)

    def best_device(self, v: int, devices: range | list[int]) -> tuple[int, float]:
        """The device of earliest finish (ties: lowest id) and the start there."""
        best: tuple[float, int, float] | None = None
        ready = self.ready_times(v)
        for d in devices:
            s = self.earliest_start(v, d, float(ready[d]))
            f = s + float(self.cost.compute[v, d])
            if best is None or f < best[0]:
                best = (f, d, s)
        assert best is not None
        return best[1], best[2]

    def schedule(self, placer: str, meta: dict | None = None) -> Schedule:
        return make_schedule(
            self.graph, self.device, self.start, self.finish, placer, "insertion", self.order, meta
        )


def _finish(slot: tuple[float, float]) -> float:
    return slot[1]


def _rounded(x: np.ndarray) -> np.ndarray:
    scale = float(np.max(np.abs(x))) or 1.0
    return np.round(x / scale, _RANK_DECIMALS)


def _topo_index(graph: DataflowGraph) -> np.ndarray:
    pos = np.empty(graph.num_nodes, dtype=np.int64)
    pos[graph.topo_order] = np.arange(graph.num_nodes)
    return pos


def heft_order(graph: DataflowGraph, cost: CostModel) -> np.ndarray:
    """Compute nodes by decreasing upward rank (ties: topological order)."""
    rank = _rounded(cost.b_level())
    comp = graph.compute_nodes
    return comp[np.lexsort((_topo_index(graph)[comp], -rank[comp]))]


def cpop_critical_path(graph: DataflowGraph, cost: CostModel) -> tuple[np.ndarray, np.ndarray]:
    """CPOP priorities (upward + downward rank) and the critical-path nodes, entry to exit."""
    prio = cost.b_level() + cost.t_level()
    key = _rounded(prio)
    comp = graph.compute_nodes
    top = key[comp].max()
    topo = _topo_index(graph)
    # an entry node on the critical path (ties: earliest in topological order)
    entries = [int(v) for v in comp if key[v] == top and not _compute_preds(graph, int(v))]
    v = min(entries, key=lambda x: topo[x])
    path = [v]
    while True:
        nxt = [int(w) for w in graph.successors(v) if key[w] == top]
        if not nxt:
            break
        v = min(nxt, key=lambda x: topo[x])
        path.append(v)
    return prio, np.array(path, dtype=np.int64)


def _compute_preds(graph: DataflowGraph, v: int) -> bool:
    return bool(np.any(~graph.is_input[graph.predecessors(v)]))


def _with_room(mem: MemoryGuard, v: int, devices: range) -> range | list[int]:
    """The devices with memory for ``v`` (all of them when every one or none has room)."""
    room = mem.allowed(v)
    return devices if room is None else [d for d in devices if room[d]]


@dataclass(frozen=True)
class HeftPlacer(ScheduleToPlacement):
    """HEFT: upward-rank order, earliest-finish device with insertion."""

    name: ClassVar[str] = "heft"

    def schedule(
        self, graph: DataflowGraph, cluster: Cluster, rng: np.random.Generator
    ) -> Schedule:
        cost = CostModel(graph, cluster)
        tl = InsertionTimeline(graph, cost)
        mem = MemoryGuard(graph, cluster, self.name)
        devices = range(cluster.num_devices)
        for v in heft_order(graph, cost):
            d, s = tl.best_device(int(v), _with_room(mem, int(v), devices))
            mem.assign(int(v), d)
            tl.assign(int(v), d, s)
        return tl.schedule(self.name)  # fitted by the registry


@dataclass(frozen=True)
class CpopPlacer(ScheduleToPlacement):
    """CPOP: critical-path nodes on the device fastest for them, the rest by earliest finish."""

    name: ClassVar[str] = "cpop"

    def schedule(
        self, graph: DataflowGraph, cluster: Cluster, rng: np.random.Generator
    ) -> Schedule:
        cost = CostModel(graph, cluster)
        prio, path = cpop_critical_path(graph, cost)
        cp_device = int(np.argmin(cost.compute[path].sum(axis=0)))
        on_path = np.zeros(graph.num_nodes, dtype=bool)
        on_path[path] = True
        key = _rounded(prio)
        topo = _topo_index(graph)
        waiting = np.bincount(
            graph.edge_dst[~graph.is_input[graph.edge_src]], minlength=graph.num_nodes
        )
        heap = [(-key[v], topo[v], int(v)) for v in graph.compute_nodes if waiting[v] == 0]
        heapq.heapify(heap)
        tl = InsertionTimeline(graph, cost)
        mem = MemoryGuard(graph, cluster, self.name)
        devices = range(cluster.num_devices)
        while heap:
            _, _, v = heapq.heappop(heap)
            room = mem.allowed(v)
            if on_path[v] and (room is None or room[cp_device]):
                mem.assign(v, cp_device)
                tl.assign(v, cp_device, tl.earliest_start(v, cp_device))
            else:
                d, s = tl.best_device(v, _with_room(mem, v, devices))
                mem.assign(v, d)
                tl.assign(v, d, s)
            for w in graph.successors(v):
                waiting[w] -= 1
                if waiting[w] == 0:
                    heapq.heappush(heap, (-key[w], topo[w], int(w)))
        sched = tl.schedule(
            self.name, {"critical_path": path.tolist(), "critical_path_device": cp_device}
        )
        return sched  # fitted by the registry
