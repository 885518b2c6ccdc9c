"""Memory-aware list schedulers after Baechi (Jeon et al., SoCC 2020): ``etf`` (m-ETF),
``m-topo`` and ``m-sct``.

Memory: every placer respects the devices' memory (:mod:`doppler_lab.timing.fit`: the
static bound of :mod:`doppler_lab.timing.memory`, the outputs of the ops on a device, the
stored inputs they read and one copy of every tensor received there). The cap is the option
``memory_cap``: ``"device"`` (default: each device's ``memory_bytes`` less its runtime
reserve), bytes (one value for all devices or a list per device) or None (no cap). Where the
whole model fits one device by its simulated peak (liveness: an output lives until its last
consumer ends, not the whole run), no cap binds while they build
(:attr:`~doppler_lab.timing.fit.MemoryGuard.active`): memory is no reason to split it, and the
final check judges the result by its simulated peak.

- ``etf`` (m-ETF): at every step, the (ready node, device) pair with the earliest start time
  among devices with room for the node; ties go to the larger b-level, then the lower ids. Times
  follow the shared earliest-start model (:class:`~doppler_lab.timing.schedule.ListScheduleState`).
- ``m-topo``: nodes in topological order fill device 0 up to its share of the graph's memory
  (Baechi's count: outputs and the input tensors read, total / D, at most the cap), then
  device 1, and so on, skipping a device without room. Its schedule is the earliest-start list
  schedule of that placement in topological order.
- ``m-sct``: Baechi's m-SCT, ETF with Hanen and Munier's favourite children (small
  communication times). A linear program (the relaxation of the delay model in which each op
  keeps at most one child, and each op has at most one parent, on its own device: edge
  variables ``x`` in [0, 1], 0 meaning no transfer) gives the favourite child of each op
  (``x < 1/2``); then the ETF loop runs with one rule more: a device whose last op has a
  favourite child not yet placed is kept for that child, other ops may take it only when they
  are urgent (ready on every device by the time they would start there). Mean compute and
  mean transfer times define the LP, solved by HiGHS (``scipy.optimize.linprog``).

A cap no placement can meet (one node alone needs more than any device holds, or the stored
inputs more than all devices together) raises :class:`PlacementError` up front; a greedy pass
that finds no device with room goes on and its placement is repaired at the end by the fit
the registry applies to every placer's schedule
(:func:`~doppler_lab.placers.repair.fit_schedule`), or the placer says that nothing fits.
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
from ..timing.fit import MemoryGuard, static_bounds
from ..timing.memory import memory_caps
from ..timing.schedule import InputReady, ListScheduleState
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


class _ShareTracker:
    """Baechi's memory count for m-TOPO's shares: a node adds its output and the input tensors
    it reads that are not yet on the device."""

    def __init__(self, graph: DataflowGraph, num_devices: int):
        self.graph = graph
        self._resident = np.zeros((graph.num_nodes, num_devices), dtype=bool)

    def need(self, v: int, d: int) -> float:
        g = self.graph
        preds = g.predecessors(v)
        ins = preds[g.is_input[preds]]
        return float(g.out_bytes[v] + g.out_bytes[ins[~self._resident[ins, d]]].sum())

    def add(self, v: int, d: int) -> None:
        g = self.graph
        preds = g.predecessors(v)
        self._resident[preds[g.is_input[preds]], d] = True


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
    if isinstance(cap, str):  # each device's memory less its runtime reserve
        return memory_caps(cluster)
    arr = np.asarray(cap, dtype=np.float64)
    if arr.ndim == 0:
        return np.full(d, float(arr))
    if arr.shape != (d,):
        raise ConfigError(f"placer {placer!r}: memory_cap has {arr.size} entries for {d} devices")
    return arr.copy()


def one_device_schedule(
    graph: DataflowGraph, cost: CostModel, caps: np.ndarray, placer: str, meta: dict
) -> Schedule:
    """The list schedule (topological order, ``est``) of every op on the device with the most
    memory, with ``meta``."""
    dev = np.full(graph.num_nodes, int(np.argmax(caps)), dtype=np.int64)
    return list_schedule(graph, cost, dev, placer=placer, meta=dict(meta))


@dataclass(frozen=True)
class _MemoryCapped(ScheduleToPlacement):
    memory_cap: MemoryCap = "device"
    name: ClassVar[str] = ""

    def __post_init__(self) -> None:
        check_cap(self.name, self.memory_cap)

    def guard(self, graph: DataflowGraph, cluster: Cluster) -> MemoryGuard:
        """The caps of this run (``memory_cap`` on ``cluster``) and their running bound."""
        return MemoryGuard(
            graph, cluster, self.name, resolve_cap(self.memory_cap, cluster, self.name)
        )

    def finish(
        self,
        graph: DataflowGraph,
        cluster: Cluster,
        cost: CostModel,
        sched: Schedule,
        mem: MemoryGuard | None = None,
    ) -> Schedule:
        """``sched`` with its static bound per device in ``meta["memory_used"]`` (the registry
        fits it to the caps, :class:`~doppler_lab.placers.registry.FittedPlacer`). Where a cap
        binds but the model fits one device by its simulated peak (``mem``), the whole graph
        on the device with the most memory when its list schedule is shorter: memory is no
        reason to split, and the placer's own estimate says whether speed is."""
        if mem is not None and mem.binds and not mem.active:
            whole = one_device_schedule(graph, cost, mem.caps, self.name, sched.meta)
            if whole.makespan < sched.makespan:
                sched = whole
        used = static_bounds(graph, sched.placement.device[None, :], cluster.num_devices)[0]
        return sched.with_meta(memory_used=used.tolist())


@dataclass(frozen=True)
class EtfPlacer(_MemoryCapped):
    """Earliest task first within the memory caps (Baechi m-ETF).

    Attributes:
        memory_cap: ``"device"`` (the cluster's), bytes per device (scalar, list) or None.
    """

    name: ClassVar[str] = "etf"

    def schedule(
        self, graph: DataflowGraph, cluster: Cluster, rng: np.random.Generator
    ) -> Schedule:
        cost = CostModel(graph, cluster)
        mem = self.guard(graph, cluster)
        state = ListScheduleState(graph, cost, "est", mem)  # keeps the guard in step
        blevel = cost.b_level()
        d_all = np.arange(cluster.num_devices)
        while not state.done:
            best: tuple[float, float, int, int] | None = None
            best_est = None
            stuck: tuple[float, float, int, int] | None = None  # ignoring memory
            stuck_est = None
            for v in state.candidates():
                v = int(v)
                est = state.est(v)
                room = mem.room(v)
                ok = d_all if room is None else d_all[room]
                if len(ok) == 0:
                    d = int(np.argmin(est))
                    key = (float(est[d]), -float(blevel[v]), v, d)
                    if stuck is None or key < stuck:
                        stuck, stuck_est = key, est
                    continue
                d = int(min(ok, key=lambda x: est[x]))
                key = (float(est[d]), -float(blevel[v]), v, d)
                if best is None or key < best:
                    best, best_est = key, est
            if best is None:  # no device has room for any candidate: repaired at the end
                best, best_est = stuck, stuck_est
            assert best is not None
            _, _, v, d = best
            state.assign(v, d, best_est)
        sched = make_schedule(
            graph, state.device, state.start, state.finish, self.name, "est", state.order
        )
        return self.finish(graph, cluster, cost, sched, mem)


@dataclass(frozen=True)
class TopoPlacer(_MemoryCapped):
    """Topological fill of devices by memory share (Baechi m-TOPO).

    Attributes:
        memory_cap: ``"device"`` (the cluster's), bytes per device (scalar, list) or None.
    """

    name: ClassVar[str] = "m-topo"

    def schedule(
        self, graph: DataflowGraph, cluster: Cluster, rng: np.random.Generator
    ) -> Schedule:
        cost = CostModel(graph, cluster)
        mem = self.guard(graph, cluster)
        shares = _ShareTracker(graph, cluster.num_devices)
        ndev = cluster.num_devices
        total = float(device_memory(graph, np.zeros(graph.num_nodes, dtype=np.int64), 1)[0])
        # with no byte sizes at all, balance compute instead
        weight = graph.out_bytes if total > 0 else cost.mean_compute
        caps = mem.caps if mem.active else np.full(ndev, np.inf)
        share = np.minimum(caps, (total if total > 0 else float(weight.sum())) / ndev)
        live = 1.0  # the share of Baechi's count that is live at once
        if mem.binds and not mem.active:  # the model fits one device by its simulated peak:
            live = mem.live_share()  # shares of the liveness-aware count, within the caps
            share = np.minimum(mem.caps, live * total / ndev)
        device = np.zeros(graph.num_nodes, dtype=np.int64)
        filled = np.zeros(ndev)
        d = 0
        for v in graph.topo_order:
            v = int(v)
            if graph.is_input[v]:
                continue
            room = mem.room(v)
            while True:
                w = live * shares.need(v, d) if total > 0 else float(weight[v])
                over = filled[d] > 0 and filled[d] + w > share[d] * (1 + 1e-12)
                fits_here = room is None or bool(room[d])
                if d == ndev - 1 or not (over or not fits_here):
                    break
                d += 1
            target = d
            if room is not None and not room[d]:  # the last device is full: an earlier one
                has = np.flatnonzero(room)
                target = int(has[0]) if has.size else d  # none: repaired at the end
            shares.add(v, target)
            mem.assign(v, target)
            filled[target] += w
            device[v] = target
        return self.finish(
            graph, cluster, cost, list_schedule(graph, cost, device, placer=self.name), mem
        )


def favourite_children(graph: DataflowGraph, cost: CostModel) -> tuple[np.ndarray, float]:
    """``(N,)`` the favourite child of each op (-1: none) by the SCT linear program (module
    docstring), and the LP's relaxed makespan (raw units)."""
    from scipy.optimize import linprog
    from scipy.sparse import coo_matrix

    g = graph
    n = g.num_nodes
    comp = np.flatnonzero(~g.is_input)
    live = np.flatnonzero(~g.is_input[g.edge_src] & ~g.is_input[g.edge_dst])
    fav = np.full(n, -1, dtype=np.int64)
    if comp.size == 0:
        return fav, 0.0
    src, dst = g.edge_src[live], g.edge_dst[live]
    m, k = live.size, comp.size
    col = np.full(n, -1, dtype=np.int64)
    col[comp] = m + np.arange(k)  # s_v; x_e are 0..m-1; w is m + k
    w = m + k
    p = np.asarray(cost.mean_compute, dtype=np.float64)
    c = np.asarray(cost.mean_edge_cost, dtype=np.float64)[live]
    rows, cols, vals, rhs = [], [], [], []
    r = 0
    # precedence: s_u - s_v + c_e x_e <= -p_u
    e = np.arange(m)
    rows += [r + e, r + e, r + e]
    cols += [col[src], col[dst], e]
    vals += [np.ones(m), -np.ones(m), c]
    rhs.append(-p[src])
    r += m
    # at most one favourite child per op and one favourite parent per op: -sum x <= 1 - deg
    for key in (src, dst):
        nodes, inv, deg = np.unique(key, return_inverse=True, return_counts=True)
        rows.append(r + inv)
        cols.append(e)
        vals.append(-np.ones(m))
        rhs.append(1.0 - deg)
        r += nodes.size
    # every op ends by the makespan: s_v - w <= -p_v
    rows += [r + np.arange(k), r + np.arange(k)]
    cols += [col[comp], np.full(k, w)]
    vals += [np.ones(k), -np.ones(k)]
    rhs.append(-p[comp])
    r += k
    a_ub = coo_matrix(
        (np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))), shape=(r, w + 1)
    ).tocsr()
    objective = np.zeros(w + 1)
    objective[w] = 1.0
    bounds = [(0.0, 1.0)] * m + [(0.0, None)] * (k + 1)
    res = linprog(objective, A_ub=a_ub, b_ub=np.concatenate(rhs), bounds=bounds, method="highs")
    if res.status != 0:
        raise PlacementError(f"placer 'm-sct': the favourite-child LP failed ({res.message})")
    x = np.asarray(res.x[:m])
    best = np.full(n, np.inf)
    taken = np.full(n, np.inf)  # the x of each op's favourite parent edge
    for i in np.argsort(x, kind="stable"):
        if x[i] >= 0.5:
            break
        u, v = int(src[i]), int(dst[i])
        if best[u] == np.inf and taken[v] == np.inf:
            fav[u], best[u], taken[v] = v, x[i], x[i]
    return fav, float(res.x[w])


@dataclass(frozen=True)
class SctPlacer(_MemoryCapped):
    """Small communication times with memory caps (Baechi m-SCT): ETF with favourite children
    from a linear program (module docstring).

    Attributes:
        memory_cap: ``"device"`` (the cluster's), bytes per device (scalar, list) or None.
    """

    name: ClassVar[str] = "m-sct"

    def schedule(
        self, graph: DataflowGraph, cluster: Cluster, rng: np.random.Generator
    ) -> Schedule:
        cost = CostModel(graph, cluster)
        mem = self.guard(graph, cluster)
        fav, lp_makespan = favourite_children(graph, cost)
        state = ListScheduleState(graph, cost, "est", mem)  # keeps the guard in step
        ready = InputReady(graph, cost)
        blevel = cost.b_level()
        ndev = cluster.num_devices
        last = np.full(ndev, -1, dtype=np.int64)
        Key = tuple[float, int, float, int, int]
        while not state.done:
            kept = [
                int(fav[u]) if u >= 0 and fav[u] >= 0 and state.device[fav[u]] < 0 else -1
                for u in last
            ]
            strict: Key | None = None  # within the caps and the kept devices
            loose: Key | None = None  # within the caps
            free: Key | None = None  # ignoring memory (repaired at the end)
            ests: dict[int, np.ndarray] = {}
            for v in state.candidates():
                v = int(v)
                est = ests[v] = state.est(v)
                room = mem.room(v)
                urgent = float(ready(v, state.device, state.finish).max())
                for d in range(ndev):
                    key = (float(est[d]), int(kept[d] != v), -float(blevel[v]), v, d)
                    free = key if free is None or key < free else free
                    if room is not None and not room[d]:
                        continue
                    loose = key if loose is None or key < loose else loose
                    if kept[d] in (-1, v) or est[d] >= urgent:
                        strict = key if strict is None or key < strict else strict
            pick = strict or loose or free
            assert pick is not None
            v, d = pick[3], pick[4]
            state.assign(v, d, ests[v])
            last[d] = v
        sched = make_schedule(
            graph, state.device, state.start, state.finish, self.name, "est", state.order,
            {"favourite_children": int((fav >= 0).sum()),
             "lp_makespan": lp_makespan * graph.time_scale},
        )  # fmt: skip
        return self.finish(graph, cluster, cost, sched, mem)
