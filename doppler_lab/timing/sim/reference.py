"""A straightforward SimPy implementation of the paper semantics (the released code's approach).

It exists as an independent check of the compiled kernel and as the baseline of
``doppler-lab bench sim``. One SimPy process per edge (wait for the producer, wait the transfer
time if the devices differ) and one per op (wait for all input processes, queue for the device,
compute). Processes are created edges first (by source node, then edge id) and then ops by id,
which fixes SimPy's tie order exactly as in the released simulator.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ...house.deps import require
from ...ir.graph import DataflowGraph
from ..cost_model import CostModel


def simulate_paper_simpy(
    graph: DataflowGraph, cost: CostModel, device: Sequence[int] | np.ndarray
) -> tuple[float, np.ndarray, np.ndarray]:
    """Simulate one placement; returns (makespan, start, end) in reported units."""
    simpy = require("simpy", "the simpy reference simulator")

    dev = np.asarray(device, dtype=np.int64)
    env = simpy.Environment()
    finished = [env.event() for _ in range(graph.num_nodes)]
    resources = {int(d): simpy.Resource(env, capacity=1) for d in np.unique(dev)}
    start = np.full(graph.num_nodes, np.nan)
    end = np.full(graph.num_nodes, np.nan)
    comp = cost.compute

    def transfer(u: int, e: int, delay: float):
        yield finished[u]
        yield env.timeout(delay)

    def operation(v: int, inputs: list):
        yield simpy.AllOf(env, inputs)
        with resources[int(dev[v])].request() as req:
            yield req
            start[v] = env.now
            yield env.timeout(comp[v, dev[v]])
            end[v] = env.now
        finished[v].succeed()

    inputs_of: list[list] = [[] for _ in range(graph.num_nodes)]
    for k in range(graph.num_edges):  # CSR slot order: by source, then edge id
        u = int(graph.succ_ptr.searchsorted(k, side="right") - 1)
        e = int(graph.succ_eid[k])
        v = int(graph.succ_idx[k])
        if graph.is_input[u]:
            continue
        delay = cost.transfer_time(e, int(dev[u]), int(dev[v]))
        inputs_of[v].append(env.process(transfer(u, e, delay)))
    for v in range(graph.num_nodes):
        if not graph.is_input[v]:
            env.process(operation(v, inputs_of[v]))
    env.run()
    scale = graph.time_scale
    return float(np.nanmax(end)) * scale, start * scale, end * scale


def memory_peaks_reference(
    graph: DataflowGraph, trace, nbytes: np.ndarray | None = None
) -> tuple[np.ndarray, list[tuple[int, tuple[float, int], tuple[float, int] | None, float]]]:
    """The memory model of :mod:`doppler_lab.timing.sim.footprint` in plain Python: the twin of the
    compiled ``memory_sweep``.

    Returns ``(peak per device, intervals)``; an interval is ``(device, alloc key, free key or
    None (resident to the end), bytes)``, a key ``(time, rank)``; stored inputs are intervals
    from ``(-inf, -1)`` with no end."""
    from ..memory import tensor_bytes

    size = tensor_bytes(graph) if nbytes is None else np.asarray(nbytes, dtype=np.float64)
    n, big = graph.num_nodes, 2 * graph.num_nodes + 4
    start, end, dev = trace.start, trace.end, trace.device
    ran = [v for v in range(n) if not np.isnan(start[v])]
    topo = {int(v): i for i, v in enumerate(graph.topo_order)}
    order = sorted(ran, key=lambda v: (start[v], end[v], topo[v]))
    rank = {v: i for i, v in enumerate(order)}
    sends: dict[int, list[int]] = {}
    for k in range(trace.num_transfers):
        sends.setdefault(int(trace.transfer_src[k]), []).append(k)
    intervals: list[tuple[int, tuple[float, int], tuple[float, int] | None, float]] = []
    for u in range(n):
        b = float(size[u])
        if b <= 0:
            continue
        readers = [int(w) for w in graph.successors(u) if not np.isnan(start[w])]
        if dev[u] < 0:
            for d in sorted({int(dev[w]) for w in readers}):
                intervals.append((d, (-np.inf, -1), None, b))
            continue
        if np.isnan(start[u]):
            continue
        a = int(dev[u])
        frees: dict[int, list[tuple[float, int]]] = {}
        firsts: dict[int, float] = {}
        for w in readers:
            frees.setdefault(int(dev[w]), []).append((float(end[w]), 3 + 2 * rank[w]))
        for k in sends.get(u, []):
            d = int(trace.transfer_dst_device[k])
            firsts[d] = min(firsts.get(d, np.inf), float(trace.transfer_start[k]))
            for dd in (a, d):
                frees.setdefault(dd, []).append((float(trace.transfer_end[k]), big))
        for d in sorted(set(frees) | {a}):
            if d == a:
                alloc = (float(start[u]), 2 + 2 * rank[u])
            elif d in firsts:
                alloc = (firsts[d], 0)
            else:
                continue
            free = max(frees[d]) if frees.get(d) else None
            if free is not None and not alloc < free:
                continue
            intervals.append((d, alloc, free, b))
    peak = np.zeros(trace.num_devices)
    for d in range(trace.num_devices):
        events = []
        for dd, alloc, free, b in intervals:
            if dd == d:
                events.append((alloc, b))
                if free is not None:
                    events.append((free, -b))
        level = 0.0
        for _, b in sorted(events, key=lambda e: e[0]):
            level += b
            peak[d] = max(peak[d], level)
    return peak, intervals
