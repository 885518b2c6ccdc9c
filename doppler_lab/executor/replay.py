"""Replaying a simulated run: the ``simulated`` dispatch rule, which makes memory predictable.

A work-conserving run's peak memory depends on its schedule, and free-running CPU workers do not
repeat theirs: one placement of ``llama_block:scale=0.1`` on two workers measured 11.5-19.5 MB on
device 0 over four FIFO runs. The ``simulated`` rule runs a placement in the order of one
simulated run instead, so that the memory model's prediction is what the run holds.

A :class:`ReplaySchedule` is each device's *memory events* in the order the memory model
(:mod:`doppler_lab.timing.sim.footprint`) sweeps them: an op's start (its output is allocated),
its end (the operands it was the last reader of are dropped), a copy's start on its receiver
(the copy is allocated) and a copy's end on its sender (the sender's buffer may be dropped).
Events at one instant keep the sweep's order: copies in first, then the ops in their execution
order (start before end), copies out last.

The CPU backend plays it turn by turn (:class:`Turns`): each device has a turn counter over its
events. An op starts, and a copy starts, only when it is ready *and* its event is its device's
turn; the dropping events are bookkeeping, done when their op or copy has finished and their
turn has come (tensors are really released then). Ops become ready as soon as their operands
exist (that is physical, not turn-bound). So each device allocates and releases in the
simulated order, and its measured peak equals the simulated one up to ops whose real output
size differs from the graph's ``out_bytes``. The price: the run is no longer work-conserving
(a device whose next op in the replay is not ready waits, even if a later one is), so its
makespan can be longer than FIFO's when the cost model's order is wrong for this machine.

Deadlock freedom: every wait is for an event earlier in the simulated run (a device's earlier
event, or an operand produced earlier), and the events at one instant are ordered consistently
with the data flow (a copy starts no earlier than its producer ends; transfers take time), so
the earliest unplayed event can always be played.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..house.errors import PlacementError
from ..ir.graph import DataflowGraph
from ..ir.trace import Trace
from .plan import ExecutionPlan, ReadyQueues

START, COPY_IN, END, COPY_OUT = 0, 1, 2, 3
_KIND = {START: "start of op", COPY_IN: "copy in of", END: "end of op", COPY_OUT: "copy out of"}


@dataclass(frozen=True, eq=False)
class ReplaySchedule:
    """Each device's memory events in the order of one simulated run.

    Attributes:
        events: per device, ``(kind, node, other device)`` in play order: ``START``/``END`` of
            op ``node`` (other device -1), ``COPY_IN`` of ``node``'s copy from ``other``,
            ``COPY_OUT`` of ``node``'s copy to ``other``.
        trace: the simulated run (its ``peak_memory_bytes`` is the prediction).
    """

    events: tuple[tuple[tuple[int, int, int], ...], ...]
    trace: Trace

    @classmethod
    def from_trace(cls, graph: DataflowGraph, trace: Trace) -> ReplaySchedule:
        """The schedule of a simulated ``trace`` of ``graph`` (any semantics that records
        transfers; ``wc`` is what the executor's copies are)."""
        if trace.device.shape[0] != graph.num_nodes:
            raise PlacementError(
                f"trace {trace.graph_name!r} has {trace.device.shape[0]} nodes; graph "
                f"{graph.name!r} has {graph.num_nodes}"
            )
        comp = graph.compute_nodes
        if np.isnan(trace.start[comp]).any():
            v = int(comp[np.isnan(trace.start[comp])][0])
            raise PlacementError(
                f"trace {trace.graph_name!r} is partial: op {graph.names[v]!r} never ran"
            )
        pos = np.empty(graph.num_nodes, dtype=np.int64)
        pos[graph.topo_order] = np.arange(graph.num_nodes)
        # the sweep's execution rank: by start, then end, then topological position
        order = comp[np.lexsort((pos[comp], trace.end[comp], trace.start[comp]))]
        rank = np.zeros(graph.num_nodes, dtype=np.int64)
        rank[order] = np.arange(order.size)
        late = 2 * graph.num_nodes + 4
        keyed: list[list[tuple[float, int, int, tuple[int, int, int]]]] = [
            [] for _ in range(trace.num_devices)
        ]
        for v in order.tolist():
            d = int(trace.device[v])
            keyed[d].append((float(trace.start[v]), 2 + 2 * int(rank[v]), 0, (START, v, -1)))
            keyed[d].append((float(trace.end[v]), 3 + 2 * int(rank[v]), 0, (END, v, -1)))
        # one copy per (producer, receiving device): in at its first start, out at its last end
        first: dict[tuple[int, int], float] = {}
        last: dict[tuple[int, int], float] = {}
        for u, b, s, e in zip(
            trace.transfer_src.tolist(),
            trace.transfer_dst_device.tolist(),
            trace.transfer_start.tolist(),
            trace.transfer_end.tolist(),
            strict=True,
        ):
            key = (int(u), int(b))
            first[key] = min(first.get(key, s), s)
            last[key] = max(last.get(key, e), e)
        for (u, b), s in first.items():
            a = int(trace.device[u])
            keyed[b].append((s, 0, int(pos[u]), (COPY_IN, u, a)))
            keyed[a].append((last[(u, b)], late, int(pos[u]), (COPY_OUT, u, b)))
        events = tuple(tuple(ev for *_, ev in sorted(k)) for k in keyed)
        return cls(events, trace)

    def check(self, plan: ExecutionPlan) -> None:
        """Raise :class:`PlacementError` unless this schedule is of ``plan``'s placement: the
        same device per op and the same copies."""
        g = plan.graph
        tr = self.trace
        if len(self.events) != plan.num_devices:
            raise PlacementError(
                f"the simulated run has {len(self.events)} devices; the executor has "
                f"{plan.num_devices}"
            )
        comp = g.compute_nodes
        if tr.device.shape[0] != g.num_nodes:
            raise PlacementError(
                f"the simulated run is of a graph with {tr.device.shape[0]} nodes; "
                f"{g.name!r} has {g.num_nodes}"
            )
        differ = comp[tr.device[comp] != plan.device[comp]]
        if differ.size:
            v = int(differ[0])
            raise PlacementError(
                f"the simulated run puts op {g.names[v]!r} on device {int(tr.device[v])}; the "
                f"placement puts it on {int(plan.device[v])} (simulate the placement you execute)"
            )
        want = {(u, b) for u, s in enumerate(plan.sends) for b, _ in s}
        have = {(u, b) for d in self.events for k, u, b in d if k == COPY_OUT}
        if want != have:
            u, b = next(iter(sorted(want ^ have)))
            raise PlacementError(
                f"the simulated run {'lacks' if (u, b) in want else 'has an extra'} copy of "
                f"{g.names[u]!r} to device {b}"
            )

    def describe(self, d: int, i: int, graph: DataflowGraph) -> str:
        """Event ``i`` of device ``d``, in words (for stall and timeout messages)."""
        if i >= len(self.events[d]):
            return "nothing (all its events played)"
        kind, v, other = self.events[d][i]
        where = "" if other < 0 else f" {'from' if kind == COPY_IN else 'to'} device {other}"
        return f"{_KIND[kind]} {graph.names[v]!r}{where} (event {i + 1} of {len(self.events[d])})"


class Turns(ReadyQueues):
    """The ready ops of a replayed run and each device's turn in its :class:`ReplaySchedule`.

    A device's queue is true only when its turn is an op's start and that op is ready, so a
    worker that waits for work waits for its turn. Not thread-safe: the backend's lock guards
    it, as it guards :class:`~doppler_lab.executor.plan.ReadyQueues`.
    """

    def __init__(self, plan: ExecutionPlan, schedule: ReplaySchedule):
        schedule.check(plan)
        self.schedule = schedule
        self.events = schedule.events
        self.turn = [0] * plan.num_devices
        self.finished = bytearray(plan.num_nodes)  # op ended, its END not played yet
        self.copied: set[tuple[int, int]] = set()  # copy (node, receiver) ended
        self._ready = [set() for _ in range(plan.num_devices)]
        n = plan.num_nodes
        self.ready_seq = [-1] * n
        self.dispatch_seq = [-1] * n
        self._n_ready = 0
        self._n_dispatched = 0
        self.queues: list[Any] = [_OpTurn(self, d) for d in range(plan.num_devices)]
        for d in range(plan.num_devices):
            for v in plan.initial[d]:
                self.push(d, v)

    def head(self, d: int) -> tuple[int, int, int] | None:
        """Device ``d``'s event whose turn it is (``None`` when all are played)."""
        i = self.turn[d]
        ev = self.events[d]
        return ev[i] if i < len(ev) else None

    def push(self, d: int, v: int) -> None:
        self.ready_seq[v] = self._n_ready
        self._n_ready += 1
        self._ready[d].add(v)

    def pop(self, d: int) -> int:
        """Op ``v`` whose start is device ``d``'s turn (it must be ready); the turn moves on."""
        kind, v, _ = self.events[d][self.turn[d]]
        assert kind == START and v in self._ready[d]
        self._ready[d].discard(v)
        self.turn[d] += 1
        self.dispatch_seq[v] = self._n_dispatched
        self._n_dispatched += 1
        return v

    def copy_queue(self) -> _CopyTurns:
        """A copy lane's queue: true when one of its copies is ready and its receiver's turn."""
        return _CopyTurns(self)

    def due(self, d: int) -> Iterator[tuple[int, int, int]]:
        """Play device ``d``'s dropping events whose op or copy has ended, in turn order,
        yielding each for the backend to release its tensors; stops at an event still to
        happen or at a start (which its worker or lane takes)."""
        ev = self.events[d]
        while self.turn[d] < len(ev):
            e = ev[self.turn[d]]
            kind, v, other = e
            if kind == END:
                if not self.finished[v]:
                    return
            elif kind == COPY_OUT:
                if (v, other) not in self.copied:
                    return
            else:
                return
            self.turn[d] += 1
            yield e

    def waiting(self, graph: DataflowGraph) -> str:
        """What each device waits for, in words."""
        return "; ".join(
            f"device {d} waits for {self.schedule.describe(d, self.turn[d], graph)}"
            for d in range(len(self.events))
            if self.turn[d] < len(self.events[d])
        )


class _OpTurn:
    """Device ``d``'s queue in a replay (what a worker waits on and takes from)."""

    __slots__ = ("d", "turns")

    def __init__(self, turns: Turns, d: int):
        self.turns, self.d = turns, d

    def __bool__(self) -> bool:
        h = self.turns.head(self.d)
        return h is not None and h[0] == START and h[1] in self.turns._ready[self.d]


class _CopyTurns:
    """A copy lane's queue in a replay: copies whose producer has ended, served when their
    receiver's turn is their ``COPY_IN`` (``popleft`` takes that one, whatever its place)."""

    __slots__ = ("items", "turns")

    def __init__(self, turns: Turns):
        self.turns = turns
        self.items: deque[tuple[int, int, int, tuple[int, ...]]] = deque()

    def append(self, item: tuple[int, int, int, tuple[int, ...]]) -> None:
        self.items.append(item)

    def _due(self) -> int:
        for i, (u, a, b, _) in enumerate(self.items):
            h = self.turns.head(b)
            if h is not None and h[0] == COPY_IN and h[1] == u and h[2] == a:
                return i
        return -1

    def __bool__(self) -> bool:
        return self._due() >= 0

    def popleft(self) -> tuple[int, int, int, tuple[int, ...]]:
        i = self._due()
        item = self.items[i]
        del self.items[i]
        self.turns.turn[item[2]] += 1
        return item


def simulated_schedule(
    graph: DataflowGraph, cluster: Any, placement: Any, cost_model: Any = None
) -> ReplaySchedule:
    """Simulate ``placement`` (``wc`` semantics, FIFO, the cluster's roofline or ``cost_model``)
    and return the run's :class:`ReplaySchedule`."""
    from ..timing.sim import Simulator

    trace = Simulator(graph, cluster, "wc", cost_model=cost_model).run(placement)
    return ReplaySchedule.from_trace(graph, trace)


__all__ = [
    "COPY_IN",
    "COPY_OUT",
    "END",
    "START",
    "ReplaySchedule",
    "Turns",
    "simulated_schedule",
]
