"""The memory model over a run: bytes resident per device over time, and their peak.

Applies to any :class:`~doppler_lab.ir.trace.Trace` (every semantics, or a measured run's
times): a stored input is resident on every device that reads it for the whole run; an op's
output from its start until its last consumer on its device ends and its last transfer out
ends (an output nothing consumes stays to the end); a received copy from its transfer's start
until its last consumer there ends. Sizes: :func:`doppler_lab.timing.memory.tensor_bytes`.

Events at the same instant are ordered: transfer starts first, then each device's ops in their
execution order (an op's start before its end, so an op's output and its inputs are resident
together even for an op that takes no time), transfer ends last. The sweep is compiled
(``_kernels.memory_sweep``) and runs after a simulation, from its trace's arrays; makespan-only
calls never pay for it. ``reference.memory_peaks_reference`` is its plain-Python twin.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ...ir.graph import DataflowGraph
from ...ir.trace import Trace
from ..memory import tensor_bytes
from . import _kernels as K


class MemoryProfile(NamedTuple):
    """Resident bytes of one run.

    Attributes:
        peak: ``(D,)`` the most bytes on each device at once.
        base: ``(D,)`` the stored inputs read on each device (resident throughout).
        times, levels: per device, a step function: ``levels[d][i]`` bytes from ``times[d][i]``
            on (the first point is ``(0, base[d])``; an instant with several events keeps its
            last level, so a peak inside one instant shows in ``peak`` only).
    """

    peak: np.ndarray
    base: np.ndarray
    times: tuple[np.ndarray, ...]
    levels: tuple[np.ndarray, ...]


class MemoryModel:
    """A graph prepared for memory sweeps of many runs (sizes, successors, topological ranks).

    Args:
        graph: the graph.
        nbytes: sizes per node (default :func:`~doppler_lab.timing.memory.tensor_bytes`).
    """

    def __init__(self, graph: DataflowGraph, nbytes: np.ndarray | None = None):
        self.graph = graph
        size = tensor_bytes(graph) if nbytes is None else np.asarray(nbytes, dtype=np.float64)
        self.nbytes = np.ascontiguousarray(size, dtype=np.float64)
        self.has_bytes = bool((self.nbytes > 0).any())
        pos = np.empty(graph.num_nodes, dtype=np.int64)
        pos[graph.topo_order] = np.arange(graph.num_nodes)
        succ_ptr = np.ascontiguousarray(graph.succ_ptr, dtype=np.int64)
        succ_idx = np.ascontiguousarray(graph.succ_idx, dtype=np.int64)
        # the sweep's graph record, as the plain tuple it takes (see _kernels)
        self._graph = tuple(K.SweepGraph(pos, self.nbytes, succ_ptr, succ_idx))

    def sweep(
        self,
        device: np.ndarray,
        start: np.ndarray,
        end: np.ndarray,
        transfer_src: np.ndarray,
        transfer_dst_device: np.ndarray,
        transfer_start: np.ndarray,
        transfer_end: np.ndarray,
        num_devices: int,
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """The compiled sweep on a run's arrays (``device`` -1 for inputs): ``(peak, base,
        event device, event time, level after the event)``, events by device then time."""
        if not self.has_bytes:
            zero = np.zeros(num_devices)
            return zero, zero.copy(), np.zeros(0, np.int64), np.zeros(0), np.zeros(0)

        def c(a: np.ndarray, dtype: type) -> np.ndarray:
            return np.ascontiguousarray(a, dtype=dtype)

        times = K.NodeTimes(c(device, np.int64), c(start, np.float64), c(end, np.float64))
        transfers = K.TransferTimes(
            c(transfer_src, np.int64),
            c(transfer_dst_device, np.int64),
            c(transfer_start, np.float64),
            c(transfer_end, np.float64),
        )
        return K.memory_sweep(self._graph, tuple(times), tuple(transfers), int(num_devices))

    def _trace_sweep(self, trace: Trace):
        return self.sweep(
            trace.device,
            trace.start,
            trace.end,
            trace.transfer_src,
            trace.transfer_dst_device,
            trace.transfer_start,
            trace.transfer_end,
            trace.num_devices,
        )

    def peak(self, trace: Trace) -> np.ndarray:
        """``(D,)`` peak bytes per device of ``trace``."""
        return self._trace_sweep(trace)[0]

    def profile(self, trace: Trace) -> MemoryProfile:
        """Peak and timeline per device of ``trace``."""
        peak, base, ev_dev, ev_time, ev_level = self._trace_sweep(trace)
        times, levels = [], []
        for d in range(trace.num_devices):
            on = ev_dev == d
            t, lv = ev_time[on], ev_level[on]
            last = np.ones(t.size, dtype=bool)  # the last event of each instant
            last[:-1] = t[1:] != t[:-1]
            times.append(np.concatenate([[0.0], t[last]]))
            levels.append(np.concatenate([[base[d]], lv[last]]))
        return MemoryProfile(peak, base, tuple(times), tuple(levels))


def memory_profile(
    graph: DataflowGraph, trace: Trace, nbytes: np.ndarray | None = None
) -> MemoryProfile:
    """Peak and timeline of resident bytes per device of ``trace`` (a run of ``graph``)."""
    return MemoryModel(graph, nbytes).profile(trace)


def peak_memory(graph: DataflowGraph, trace: Trace, nbytes: np.ndarray | None = None) -> np.ndarray:
    """``(D,)`` peak resident bytes per device of ``trace`` (a run of ``graph``)."""
    return MemoryModel(graph, nbytes).peak(trace)


__all__ = ["MemoryModel", "MemoryProfile", "memory_profile", "peak_memory"]
