"""Memory-aware list schedulers after Baechi (Jeon et al., SoCC 2020): ``etf`` and ``m-topo``.

Memory model: a node needs its output tensor (``out_bytes``) on its device, and the input
tensors it reads (input nodes' ``out_bytes``) are resident once on every device that reads
them. An optional per-device cap (``memory_cap``: bytes, one value for all devices, a list per
device, or ``"device"`` for each device's ``memory_bytes``) must hold on every device.

- ``etf`` (m-ETF): at every step, the (ready node, device) pair with the earliest start time
  among devices with room for the node; ties go to the larger b-level, then the lower ids. Times
  follow the shared earliest-start model (:class:`~doppler_lab.timing.schedule.ListScheduleState`).
- ``m-topo``: nodes in topological order fill device 0 up to its share of the graph's memory
  (total / D, at most the cap), then device 1, and so on. Its schedule is the earliest-start
  list schedule of that placement in topological order.

A cap no placement can meet (one node needs more than any device holds, or the graph needs
more than all devices together) raises :class:`PlacementError` up front; so does a greedy pass
that cannot fit a node (the message says so: another placement may still exist).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from ..hardware.cluster import Cluster
from ..house.errors import ConfigError, PlacementError
from ..ir.graph import DataflowGraph
from ..timing.cost_model import CostModel
from ..timing.schedule import ListScheduleState
from .placer_base import Schedule, ScheduleToPlacement, list_schedule, make_schedule

MemoryCap = float | Sequence[float] | str | None


def device_memory(graph: DataflowGraph, device: np.ndarray, num_devices: int) -> np.ndarray:
    """Bytes resident on each device under ``device`` (outputs + input tensors read there)."""
    dev = np.asarray(device, dtype=np.int64)
    used = np.zeros(num_devices)
    comp = graph.compute_nodes
    np.add.at(used, dev[comp], graph.out_bytes[comp])
    from_input = graph.is_input[graph.edge_src]
    pairs = {
        (int(u), int(dev[v]))
        for u, v in zip(graph.edge_src[from_input], graph.edge_dst[from_input])
    }
    for u, d in pairs:
        used[d] += graph.out_bytes[u]
    return used


class MemoryTracker:
    """Bytes in use per device while nodes are assigned one by one, against a cap.

    Args:
        graph: the graph.
        cluster: the cluster (for ``"device"`` caps).
        cap: the memory cap (see the module docstring); ``None``: unlimited.
        placer: the placer's name, for messages.
    """

    def __init__(self, graph: DataflowGraph, cluster: Cluster, cap: MemoryCap, placer: str):
        d = cluster.num_devices
        self.graph = graph
        self.placer = placer
        self.cap = resolve_cap(cap, cluster, placer)
        self.unlimited = cap is None
        self.used = np.zeros(d)
        self._resident = np.zeros((graph.num_nodes, d), dtype=bool)  # input tensor u on d
        if cap is not None:
            self._check_feasible()

    def need(self, v: int, d: int) -> float:
        """Bytes ``v`` adds to device ``d``."""
        g = self.graph
        preds = g.predecessors(v)
        ins = preds[g.is_input[preds]]
        return float(g.out_bytes[v] + g.out_bytes[ins[~self._resident[ins, d]]].sum())

    def fits(self, v: int, d: int) -> bool:
        return bool(self.used[d] + self.need(v, d) <= self.cap[d] * (1 + 1e-12))

    def add(self, v: int, d: int) -> None:
        g = self.graph
        self.used[d] += self.need(v, d)
        preds = g.predecessors(v)
        self._resident[preds[g.is_input[preds]], d] = True

    def _check_feasible(self) -> None:
        g = self.graph
        comp = g.compute_nodes
        biggest = self.cap.max()
        for v in comp:
            preds = g.predecessors(int(v))
            need = g.out_bytes[v] + g.out_bytes[preds[g.is_input[preds]]].sum()
            if need > biggest:
                raise PlacementError(
                    f"placer {self.placer!r}: node {g.names[v]!r} needs {need:.4g} bytes but the "
                    f"largest device memory cap is {biggest:.4g}; no placement meets the cap"
                )
        read = np.unique(g.edge_src[g.is_input[g.edge_src]])
        total = g.out_bytes[comp].sum() + g.out_bytes[read].sum()
        if total > self.cap.sum():
            raise PlacementError(
                f"placer {self.placer!r}: graph {g.name!r} needs at least {total:.4g} bytes but the "
                f"memory caps add up to {self.cap.sum():.4g}; no placement meets the cap"
            )

    def full(self, v: int) -> PlacementError:
        g = self.graph
        return PlacementError(
            f"placer {self.placer!r}: no device has room for node {g.names[v]!r} "
            f"(needs {self.need(v, 0):.4g} bytes; in use {self.used.round(1).tolist()}, caps "
            f"{self.cap.tolist()}); the greedy pass failed, another placer or a larger cap may work"
        )


def check_cap(placer: str, cap: MemoryCap) -> None:
    """Raise :class:`ConfigError` unless ``cap`` is None, ``"device"`` or positive bytes."""
    if cap is None or (isinstance(cap, str) and cap == "device"):
        return
    arr = None if isinstance(cap, str) else np.asarray(cap, dtype=np.float64)
    if (
        arr is None
        or arr.ndim > 1
        or arr.size == 0
        or not (np.all(np.isfinite(arr)) and np.all(arr > 0))
    ):
        raise ConfigError(
            f"placer {placer!r}: memory_cap = {cap!r}, expected positive bytes (one value or one "
            "per device) or 'device'"
        )


def resolve_cap(cap: MemoryCap, cluster: Cluster, placer: str) -> np.ndarray:
    """The cap as ``(D,)`` bytes (``inf`` when there is none)."""
    check_cap(placer, cap)
    d = cluster.num_devices
    if cap is None:
        return np.full(d, np.inf)
    if isinstance(cap, str):
        return np.array([dev.memory_bytes for dev in cluster.devices], dtype=np.float64)
    arr = np.asarray(cap, dtype=np.float64)
    if arr.ndim == 0:
        return np.full(d, float(arr))
    if arr.shape != (d,):
        raise ConfigError(f"placer {placer!r}: memory_cap has {arr.size} entries for {d} devices")
    return arr.copy()


@dataclass(frozen=True)
class _MemoryCapped(ScheduleToPlacement):
    memory_cap: MemoryCap = None
    name: ClassVar[str] = ""

    def __post_init__(self) -> None:
        check_cap(self.name, self.memory_cap)


@dataclass(frozen=True)
class EtfPlacer(_MemoryCapped):
    """Earliest task first with an optional memory cap (Baechi m-ETF).

    Attributes:
        memory_cap: bytes per device (scalar, list, ``"device"``) or None.
    """

    name: ClassVar[str] = "etf"

    def schedule(
        self, graph: DataflowGraph, cluster: Cluster, rng: np.random.Generator
    ) -> Schedule:
        cost = CostModel(graph, cluster)
        mem = MemoryTracker(graph, cluster, self.memory_cap, self.name)
        state = ListScheduleState(graph, cost, "est")
        blevel = cost.b_level()
        d_all = np.arange(cluster.num_devices)
        while not state.done:
            best: tuple[float, float, int, int] | None = None
            best_est = None
            for v in state.candidates():
                v = int(v)
                est = state.est(v)
                ok = d_all if mem.unlimited else [d for d in d_all if mem.fits(v, d)]
                if len(ok) == 0:
                    continue
                d = int(min(ok, key=lambda x: est[x]))
                key = (float(est[d]), -float(blevel[v]), v, d)
                if best is None or key < best:
                    best, best_est = key, est
            if best is None:
                raise mem.full(int(state.candidates()[0]))
            _, _, v, d = best
            mem.add(v, d)
            state.assign(v, d, best_est)
        return make_schedule(
            graph,
            state.device,
            state.start,
            state.finish,
            self.name,
            "est",
            state.order,
            {"memory_used": mem.used.tolist()},
        )


@dataclass(frozen=True)
class TopoPlacer(_MemoryCapped):
    """Topological fill of devices by memory share (Baechi m-TOPO).

    Attributes:
        memory_cap: bytes per device (scalar, list, ``"device"``) or None.
    """

    name: ClassVar[str] = "m-topo"

    def schedule(
        self, graph: DataflowGraph, cluster: Cluster, rng: np.random.Generator
    ) -> Schedule:
        cost = CostModel(graph, cluster)
        mem = MemoryTracker(graph, cluster, self.memory_cap, self.name)
        ndev = cluster.num_devices
        total = float(device_memory(graph, np.zeros(graph.num_nodes, dtype=np.int64), 1)[0])
        # with no byte sizes at all, balance compute instead
        weight = graph.out_bytes if total > 0 else cost.mean_compute
        share = np.minimum(mem.cap, (total if total > 0 else float(weight.sum())) / ndev)
        device = np.zeros(graph.num_nodes, dtype=np.int64)
        filled = np.zeros(ndev)
        d = 0
        for v in graph.topo_order:
            v = int(v)
            if graph.is_input[v]:
                continue
            while True:
                w = mem.need(v, d) if total > 0 else float(weight[v])
                over = filled[d] > 0 and filled[d] + w > share[d] * (1 + 1e-12)
                if d == ndev - 1 or not (over or not mem.fits(v, d)):
                    break
                d += 1
            target = d
            if not mem.fits(v, d):  # the last device is full: any earlier one with room
                room = [e for e in range(ndev) if mem.fits(v, e)]
                if not room:
                    raise mem.full(v)
                target = room[0]
            mem.add(v, target)
            filled[target] += w
            device[v] = target
        return list_schedule(
            graph, cost, device, placer=self.name, meta={"memory_used": mem.used.tolist()}
        )
