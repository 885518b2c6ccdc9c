"""The critical path of a trace: transfer lanes and the backward walk from the op that ends last.

:func:`critical_path` is drawn by :mod:`doppler_lab.viz.gantt` and steers the budget search of
:mod:`doppler_lab.search.budget` (moves of the ops on it); it needs neither plotly nor torch.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ..house.errors import GraphError
from .graph import DataflowGraph
from .trace import Trace

_PAIR_LANE = 1 << 40  # transfer lane keys: link resource ids, then _PAIR_LANE + directed pair


class PathStep(NamedTuple):
    """One record on a critical path.

    Attributes:
        record: ``"op"`` or ``"transfer"``.
        index: node id of an op, or index of a transfer in the trace's transfer arrays.
        name: op name, or ``"producer -> consumer"`` for a transfer.
        lane: the Gantt lane it is drawn in (``device 2``, ``link pcie0 out``, ``link 0->1``).
        start, end: its times.
    """

    record: str
    index: int
    name: str
    lane: str
    start: float
    end: float


# -- lanes ------------------------------------------------------------------------------------
def device_lane(device: int) -> str:
    """Lane label of a device."""
    return f"device {device}"


def transfer_lanes(trace: Trace) -> tuple[np.ndarray, list[str]]:
    """Lane of each transfer and the ordered list of transfer lanes in use.

    A transfer is drawn on its link resource when ``trace.transfer_link`` names one, else on the
    lane of its directed device pair.

    Returns:
        ``(lane_index, labels)``: ``lane_index[k]`` indexes ``labels`` for transfer ``k``.
    """
    t = trace.num_transfers
    if t == 0:
        return np.zeros(0, dtype=np.int64), []
    link = trace.transfer_link
    d = max(trace.num_devices, 1)
    pair = trace.transfer_src_device * d + trace.transfer_dst_device
    # named resources first (by id), then device pairs (by (src, dst))
    key = np.where(link >= 0, link, _PAIR_LANE + pair)
    uniq, lane_index = np.unique(key, return_inverse=True)
    labels = []
    for k in uniq.tolist():
        if k < _PAIR_LANE:
            name = trace.link_names[k] if k < len(trace.link_names) else str(k)
        else:
            name = f"{(k - _PAIR_LANE) // d}->{(k - _PAIR_LANE) % d}"
        labels.append(f"link {name}")
    return lane_index.astype(np.int64), labels


def transfer_name(trace: Trace, k: int) -> str:
    return f"{trace.names[int(trace.transfer_src[k])]} -> {trace.names[int(trace.transfer_dst[k])]}"


def check_trace_graph(trace: Trace, graph: DataflowGraph | None) -> None:
    if graph is None:
        return
    if graph.num_nodes != len(trace.names):
        raise GraphError(
            f"trace of graph {trace.graph_name!r} has {len(trace.names)} nodes but graph "
            f"{graph.name!r} has {graph.num_nodes}; expected the graph the trace ran"
        )
    if graph.names != trace.names:
        v = next(i for i, (a, b) in enumerate(zip(graph.names, trace.names)) if a != b)
        raise GraphError(
            f"node {v} is {trace.names[v]!r} in the trace but {graph.names[v]!r} in graph "
            f"{graph.name!r}; expected the graph the trace ran"
        )


# -- critical path ----------------------------------------------------------------------------
class _PathIndex:
    """Lookups for walking a trace backwards: records are ops ``0..N-1``, transfers ``N..``."""

    def __init__(self, trace: Trace, graph: DataflowGraph | None):
        self.trace, self.graph = trace, graph
        n, t = len(trace.names), trace.num_transfers
        self.n = n
        self.start = np.concatenate([trace.start, trace.transfer_start])
        self.end = np.concatenate([trace.end, trace.transfer_end])
        self.ran = np.flatnonzero(
            (trace.device >= 0) & np.isfinite(trace.start) & np.isfinite(trace.end)
        )
        self.t_lane, self.t_labels = transfer_lanes(trace)
        # the record that ran just before on the same device / transfer lane
        self.prev = np.full(n + t, -1, dtype=np.int64)
        ops = self.ran[
            np.lexsort((trace.end[self.ran], trace.start[self.ran], trace.device[self.ran]))
        ]
        same = trace.device[ops[1:]] == trace.device[ops[:-1]]
        self.prev[ops[1:][same]] = ops[:-1][same]
        if t:
            tr = np.lexsort((trace.transfer_end, trace.transfer_start, self.t_lane))
            same = self.t_lane[tr[1:]] == self.t_lane[tr[:-1]]
            self.prev[n + tr[1:][same]] = n + tr[:-1][same]
        # arrivals of a producer's tensor: per (producer, consumer), and earliest per (producer, device)
        self.by_edge: dict[tuple[int, int], int] = {}
        self.by_device: dict[tuple[int, int], int] = {}
        self.into: dict[int, list[int]] = {}
        for k in np.argsort(trace.transfer_end, kind="stable").tolist():
            u, w = int(trace.transfer_src[k]), int(trace.transfer_dst[k])
            self.by_edge.setdefault((u, w), n + k)
            self.by_device.setdefault((u, int(trace.transfer_dst_device[k])), n + k)
            self.into.setdefault(w, []).append(n + k)
        finite = np.flatnonzero(np.isfinite(self.end))
        self.by_end = finite[np.argsort(self.end[finite], kind="stable")]
        self.sorted_end = self.end[self.by_end]

    def devices(self, r: int) -> tuple[int, ...]:
        tr = self.trace
        if r < self.n:
            return (int(tr.device[r]),)
        k = r - self.n
        return (int(tr.transfer_src_device[k]), int(tr.transfer_dst_device[k]))

    def data_inputs(self, r: int) -> list[int]:
        """Records whose arrival an op or transfer waited for (producers, incoming transfers)."""
        tr, g = self.trace, self.graph
        if r >= self.n:
            return [int(tr.transfer_src[r - self.n])]
        if g is None:
            return list(self.into.get(r, ()))
        d = int(tr.device[r])
        out = []
        for u in g.predecessors(r).tolist():
            if g.is_input[u]:
                continue
            if int(tr.device[u]) == d:
                out.append(u)
            else:
                k = self.by_edge.get((u, r), self.by_device.get((u, d)))
                if k is not None:
                    out.append(k)
        return out

    def ended_at(self, s: float, tol: float, r: int) -> int | None:
        """Any record ending within ``tol`` of ``s``, preferring ones that share a device with ``r``."""
        lo = np.searchsorted(self.sorted_end, s - tol, side="left")
        hi = np.searchsorted(self.sorted_end, s + tol, side="right")
        if lo >= hi:
            return None
        mine = set(self.devices(r))
        best, best_rank = None, 3
        for c in self.by_end[lo:hi].tolist():
            if c == r:
                continue
            shared = bool(mine.intersection(self.devices(c)))
            rank = 0 if shared and (c >= self.n) == (r >= self.n) else (1 if shared else 2)
            if rank < best_rank:
                best, best_rank = c, rank
        return best

    def cause(self, r: int, tol: float) -> int | None:
        """The record that determined when ``r`` started (None: it started unprompted)."""
        s = self.start[r]
        data = self.data_inputs(r)
        latest = max(data, key=lambda c: self.end[c]) if data else -1
        if latest >= 0 and abs(self.end[latest] - s) <= tol:
            return latest
        p = int(self.prev[r])
        if p >= 0 and abs(self.end[p] - s) <= tol:
            return p
        c = self.ended_at(s, tol, r)
        if c is not None:
            return c
        # measured traces: a gap of dispatch overhead; follow the latest related record
        near = [x for x in (latest, p) if x >= 0 and self.end[x] <= s + tol]
        return max(near, key=lambda x: self.end[x]) if near else None

    def step(self, r: int) -> PathStep:
        tr = self.trace
        if r < self.n:
            return PathStep(
                "op",
                r,
                tr.names[r],
                device_lane(int(tr.device[r])),
                float(self.start[r]),
                float(self.end[r]),
            )
        k = r - self.n
        lane = self.t_labels[int(self.t_lane[k])]
        return PathStep(
            "transfer", k, transfer_name(tr, k), lane, float(self.start[r]), float(self.end[r])
        )


def critical_path(
    trace: Trace, graph: DataflowGraph | None = None, rtol: float = 1e-9
) -> list[PathStep]:
    """The chain of ops and transfers that determined the makespan, earliest first.

    Walks back from the op that ends last. Each step goes to whatever determined the current
    record's start: for an op, the local producer or incoming transfer that arrived last, or else
    the op that ran just before on the same device and ended at that instant; for a transfer,
    its producer, or else the transfer before it on the same lane. Where none of those ended at
    the start (barriers in ``bsp``, an unrecorded shared link port), any record ending at that
    instant is taken, preferring one on the same device. In measured traces, where dispatch
    overhead leaves gaps, the latest related record is taken. The walk stops at a record that
    starts at time 0 or has nothing before it.

    Args:
        trace: the execution.
        graph: the graph it ran; without it local producers are unknown and the walk relies on
            device order and transfers.
        rtol: two instants are equal when they differ by at most ``rtol * makespan``.

    Returns:
        :class:`PathStep` records in time order; empty for a trace in which nothing ran.
    """
    check_trace_graph(trace, graph)
    idx = _PathIndex(trace, graph)
    if idx.ran.size == 0:
        return []
    tol = rtol * trace.makespan
    cur = int(idx.ran[np.argmax(trace.end[idx.ran])])
    chain, seen = [cur], {cur}
    while idx.start[cur] > tol:
        nxt = idx.cause(cur, tol)
        if nxt is None or nxt in seen:
            break
        chain.append(nxt)
        seen.add(nxt)
        cur = nxt
    return [idx.step(r) for r in reversed(chain)]
