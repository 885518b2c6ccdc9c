"""An execution plan: what a backend needs to run one placement of a graph, precomputed.

The plan is backend-agnostic and holds no tensors: compiled op callables, operand lists,
dependency counts, same-device successors, the transfers each op's output needs (one copy per
consuming device), the devices each input must be materialised on, and per-buffer consumer
counts so a backend can free a tensor as soon as nothing on that device needs it any more.

Dependency rule (the simulator's ``wc`` semantics): an op is ready when every non-input
predecessor has either finished on the op's own device or been copied to it; inputs are
resident wherever they are consumed before the clock starts.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..house.errors import ConfigError, GraphError, PlacementError
from ..ir.graph import DataflowGraph
from ..ir.placement import Placement
from .torch_ops import compile_op, output_nodes

DISPATCH_RULES: tuple[str, ...] = ("fifo", "priority", "simulated")


@dataclass(frozen=True, eq=False)
class ExecutionPlan:
    """One placement of one executable graph, ready for a backend.

    Attributes:
        graph: the graph.
        num_devices: devices of the backend.
        device: ``(N,)`` device per node (-1 for inputs).
        priority: ``(N,)`` dispatch keys (smaller first) or ``None`` for FIFO by readiness.
        fns: compiled torch callable per node (``None`` for inputs).
        operands: operand node ids of each node, in operand order.
        preds: distinct non-input predecessors of each node (the buffers it consumes).
        need: number of arrivals before each node is ready (its distinct non-input preds).
        local_succ: successors of each node on its own device, ascending ids.
        sends: per node, ``((dst_device, consumers on dst), ...)``: one copy per remote device.
        input_devices: per input node, the devices that consume it.
        hold: ``(N, D)`` readers of each buffer: consumers on that device, plus one per send for
            the producer's own buffer. A backend frees a buffer when its count reaches 0; sinks
            have 0 readers and are kept.
        outputs: the graph's result nodes.
        initial: per device, the ops ready when the clock starts, ascending ids.
        schedule: for the ``simulated`` rule, the simulated run to replay
            (:class:`~doppler_lab.executor.replay.ReplaySchedule`), else ``None``.
    """

    graph: DataflowGraph
    num_devices: int
    device: np.ndarray
    priority: np.ndarray | None
    fns: tuple[Callable[..., Any] | None, ...]
    operands: tuple[tuple[int, ...], ...]
    preds: tuple[tuple[int, ...], ...]
    need: np.ndarray
    local_succ: tuple[tuple[int, ...], ...]
    sends: tuple[tuple[tuple[int, tuple[int, ...]], ...], ...]
    input_devices: dict[int, tuple[int, ...]]
    hold: np.ndarray
    outputs: np.ndarray
    initial: tuple[tuple[int, ...], ...]
    schedule: Any = None

    @property
    def num_nodes(self) -> int:
        return self.graph.num_nodes

    @property
    def num_ops(self) -> int:
        """Ops that run (every node but inputs)."""
        return int(self.graph.compute_nodes.size)

    @property
    def num_transfers(self) -> int:
        return sum(len(s) for s in self.sends)


def check_executable(graph: DataflowGraph) -> None:
    """Raise :class:`GraphError` unless every node of ``graph`` has an op spec."""
    if graph.is_executable:
        return
    specs = graph.specs or (None,) * graph.num_nodes
    missing = next(v for v, s in enumerate(specs) if s is None)
    raise GraphError(
        f"graph {graph.name!r} is not executable: node {graph.names[missing]!r} has no op spec "
        "(the executor needs a generated workload or a JSON graph with executable ops)"
    )


def make_plan(
    graph: DataflowGraph,
    placement: Placement | np.ndarray,
    num_devices: int,
    dispatch: str = "fifo",
    fns: tuple[Callable[..., Any] | None, ...] | None = None,
    schedule: Any = None,
) -> ExecutionPlan:
    """Precompute an :class:`ExecutionPlan`.

    Args:
        graph: an executable graph.
        placement: a device per node (input entries are ignored).
        num_devices: devices of the backend.
        dispatch: ``fifo`` (ready order, ties by node id), ``priority`` (the placement's
            priority, ties by node id) or ``simulated`` (``schedule``'s order, see
            :mod:`~doppler_lab.executor.replay`).
        fns: compiled callables to reuse (from an earlier plan of the same graph).
        schedule: the :class:`~doppler_lab.executor.replay.ReplaySchedule` that ``simulated``
            replays (checked against the placement).
    """
    check_executable(graph)
    if dispatch not in DISPATCH_RULES:
        raise ConfigError(f"unknown dispatch {dispatch!r}; expected one of {DISPATCH_RULES}")
    pl = placement if isinstance(placement, Placement) else Placement(np.asarray(placement))
    pl.validate(graph, num_devices)
    if dispatch == "priority" and pl.priority is None:
        raise PlacementError("dispatch='priority' needs a placement with a priority array")
    if (dispatch == "simulated") != (schedule is not None):
        raise ConfigError(
            "dispatch='simulated' needs the simulated run to replay (a ReplaySchedule)"
            if schedule is None
            else f"a ReplaySchedule is replayed by dispatch='simulated', not {dispatch!r}"
        )
    n, d = graph.num_nodes, num_devices
    is_input = graph.is_input
    device = pl.device.copy()
    device[is_input] = -1
    if fns is None:
        fns = compile_ops(graph)
    operands: list[tuple[int, ...]] = []
    preds: list[tuple[int, ...]] = []
    for v in range(n):
        spec = graph.specs[v]  # type: ignore[index]
        p = graph.predecessors(v)
        omap = spec.operand_map if spec.operand_map is not None else range(len(p))
        operands.append(tuple(int(p[i]) for i in omap))
        preds.append(tuple(sorted({int(u) for u in p if not is_input[u]})))
    need = np.array([len(p) for p in preds], dtype=np.int64)
    hold = np.zeros((n, d), dtype=np.int64)
    local_succ: list[tuple[int, ...]] = []
    sends: list[tuple[tuple[int, tuple[int, ...]], ...]] = []
    input_devices: dict[int, tuple[int, ...]] = {}
    for u in range(n):
        succ = sorted(int(w) for w in graph.successors(u))
        if is_input[u]:
            input_devices[u] = tuple(sorted({int(device[w]) for w in succ}))
            local_succ.append(())
            sends.append(())
            continue
        a = int(device[u])
        local = tuple(w for w in succ if device[w] == a)
        remote: dict[int, list[int]] = {}
        for w in succ:
            b = int(device[w])
            if b != a:
                remote.setdefault(b, []).append(w)
        local_succ.append(local)
        sends.append(tuple((b, tuple(ws)) for b, ws in sorted(remote.items())))
        hold[u, a] = len(local) + len(remote)
        for b, ws in remote.items():
            hold[u, b] = len(ws)
    initial = tuple(
        tuple(int(v) for v in graph.compute_nodes if need[v] == 0 and device[v] == k)
        for k in range(d)
    )
    priority = None if dispatch != "priority" else np.asarray(pl.priority, dtype=np.float64)
    plan = ExecutionPlan(
        graph=graph,
        num_devices=d,
        device=device,
        priority=priority,
        fns=fns,
        operands=tuple(operands),
        preds=tuple(preds),
        need=need,
        local_succ=tuple(local_succ),
        sends=tuple(sends),
        input_devices=input_devices,
        hold=hold,
        outputs=output_nodes(graph),
        initial=initial,
        schedule=schedule,
    )
    if schedule is not None:
        schedule.check(plan)
    return plan


def compile_ops(graph: DataflowGraph) -> tuple[Callable[..., Any] | None, ...]:
    """The torch callable of every node (``None`` for inputs)."""
    check_executable(graph)
    return tuple(
        None if spec.kind == "input" else compile_op(spec)  # type: ignore[union-attr]
        for spec in graph.specs  # type: ignore[union-attr]
    )


class ReadyQueues:
    """Per-device queues of ready ops, and the order in which ops became ready and launched.

    FIFO by readiness (ops made ready by one event are pushed in node-id order, so ties go to
    the smaller id, as in the ``wc`` simulator), or by ``(priority, node id)`` when the plan
    has a priority. Not thread-safe: backends call it under their own lock.
    """

    def __init__(self, plan: ExecutionPlan):
        n = plan.num_nodes
        self.fifo = plan.priority is None
        self._prio = None if self.fifo else plan.priority.tolist()  # type: ignore[union-attr]
        self.queues: list[Any] = [deque() if self.fifo else [] for _ in range(plan.num_devices)]
        self.ready_seq = [-1] * n
        self.dispatch_seq = [-1] * n
        self._n_ready = 0
        self._n_dispatched = 0
        for d in range(plan.num_devices):
            for v in plan.initial[d]:
                self.push(d, v)

    def push(self, d: int, v: int) -> None:
        """Op ``v`` on device ``d`` is ready."""
        self.ready_seq[v] = self._n_ready
        self._n_ready += 1
        if self.fifo:
            self.queues[d].append(v)
        else:
            heapq.heappush(self.queues[d], (self._prio[v], v))  # type: ignore[index]

    def pop(self, d: int) -> int:
        """The next op to launch on device ``d`` (its queue must not be empty)."""
        q = self.queues[d]
        v = q.popleft() if self.fifo else heapq.heappop(q)[1]
        self.dispatch_seq[v] = self._n_dispatched
        self._n_dispatched += 1
        return v
