"""Contiguous stages in topological order, balanced by compute within each device's memory: the
split of the ``pipeline`` placer (:mod:`doppler_lab.placers.pipeline_placer`) and of the memory
fallback (:func:`doppler_lab.placers.repair.fit_devices`).

How pipeline-parallel splitters choose their split points (GPipe's and PipeDream's
partitioners, Megatron's uniform layer split with a memory check): the ops, in topological
order, are cut into at most D contiguous stages, stage i on device i, so that the largest
stage's compute (on its device) is smallest while every stage's memory fits its device. A
stage's memory is the static bound of :mod:`doppler_lab.timing.memory` on its device: its ops'
outputs, the stored inputs they read and one copy of every tensor received from an earlier
stage.

For a bottleneck T, filling each stage greedily (as many ops as keep its compute within T and
its memory within the cap) uses the fewest stages, because a stage's compute and memory only
grow as it takes more ops; the smallest T for which D stages suffice is found by bisection.
On a graph without sizes (or with room to spare) it is the classic linear partition by
compute. With one forward pass and no micro-batches the stages run one after another, so the
placement is what fits rather than what is fast; it is the baseline for models that do not fit
on one device.
"""

from __future__ import annotations

import numpy as np

from ..ir.graph import DataflowGraph
from ..timing.memory import tensor_bytes

#: bisection of the bottleneck stops at this relative width
_RTOL = 1e-9


class StageSplitter:
    """The greedy stage fill of one graph on one cluster (see the module docstring)."""

    def __init__(self, graph: DataflowGraph, compute: np.ndarray, caps: np.ndarray):
        self.graph = graph
        topo = graph.topo_order
        self.order = [int(v) for v in topo[~graph.is_input[topo]]]
        self.compute = np.asarray(compute, dtype=np.float64)
        self.caps = caps
        self.size = tensor_bytes(graph)
        self.is_input = graph.is_input
        self.preds = {v: [int(u) for u in np.unique(graph.predecessors(v))] for v in self.order}

    def split(self, bottleneck: float) -> np.ndarray | None:
        """``(N,)`` stage (device) per node with every stage within ``bottleneck`` and its cap,
        or None when D stages do not suffice."""
        ndev = self.caps.size
        dev = np.full(self.graph.num_nodes, -1, dtype=np.int64)
        size, is_input, caps = self.size, self.is_input, self.caps
        s, work, mem, held, empty = 0, 0.0, 0.0, set(), True
        for v in self.order:
            while True:
                add = float(size[v])
                for u in self.preds[v]:
                    if (is_input[u] or dev[u] != s) and u not in held:
                        add += float(size[u])
                c = float(self.compute[v, s])
                if work + c <= bottleneck and mem + add <= caps[s]:
                    break
                if empty:  # v alone does not fit this device: try the next one
                    s += 1
                else:
                    s, work, mem, held, empty = s + 1, 0.0, 0.0, set(), True
                if s == ndev:
                    return None
            for u in self.preds[v]:
                if is_input[u] or dev[u] != s:
                    held.add(u)
            dev[v] = s
            work, mem, empty = work + c, mem + add, False
        return dev

    def best(self) -> tuple[np.ndarray, float] | None:
        """The split of the smallest bottleneck (bisection), or None when memory alone rules
        out D stages."""
        if self.split(np.inf) is None:
            return None
        # no stage's compute exceeds the sum over ops of their slowest compute: a split exists
        hi = float(self.compute[self.order].max(axis=1).sum()) * (1 + 1e-9) if self.order else 0.0
        dev, lo = self.split(hi), 0.0
        assert dev is not None
        while hi - lo > _RTOL * hi:
            mid = 0.5 * (lo + hi)
            got = self.split(mid)
            if got is None:
                lo = mid
            else:
                hi, dev = mid, got
        return dev, hi


__all__ = ["StageSplitter"]
