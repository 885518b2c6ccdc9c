"""Exact placement and ordering under the delay model, with OR-tools CP-SAT.

The delay model: each device runs one node at a time (its compute cost on that device); a node
starts after each predecessor has finished, plus the transfer time of the edge when the two are
on different devices; transfers run in parallel (no contention). The solver chooses a device
and a start for every compute node and minimises the makespan.

Times must be integers: when every cost is an integer the model uses them divided by their
greatest common divisor (exact); otherwise it rounds them to ``horizon / resolution`` (the
result then is optimal for the rounded costs, and ``meta["rounded"]`` is True). The solution is
re-timed with the true costs by the earliest-start list schedule of its per-device sequences
(never longer than the solver's schedule), which is the :class:`Schedule` returned.

Identical devices are interchangeable, so the k-th node in topological order is restricted to
devices 0..k (symmetry breaking). A heuristic schedule (HEFT by default) is given to the solver
as a hint. Graphs with more than :data:`MAX_NODES_WITHOUT_TIME_LIMIT` compute nodes need a time
limit; with one, the best placement found is returned with the solver's proven lower bound and
the relative gap. A wall-clock limit with several workers is not reproducible run to run (the
solver's threads race); proven optima are.

Memory: when a device's cap can bind, the model keeps every device's static bound within it
(:func:`_memory_constraints`: outputs where their ops run, one copy of each tensor a device
reads from elsewhere; the bound of :mod:`doppler_lab.timing.memory`), and identical devices
are interchangeable only when their caps are equal too.
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from ..hardware.cluster import Cluster
from ..hardware.rules import transfer_times
from ..house.deps import require
from ..house.errors import ConfigError, PlacementError
from ..house.progress import timer
from ..ir.graph import DataflowGraph
from ..timing.cost_model import CostModel
from ..timing.fit import MemoryGuard, no_fit_error
from ..timing.memory import tensor_bytes
from .placer_base import Schedule, ScheduleToPlacement, check_positive, list_schedule

MAX_NODES_WITHOUT_TIME_LIMIT = 30


@dataclass(frozen=True)
class DelayModel:
    """The integer data of the CP-SAT model.

    Attributes:
        nodes: compute node ids, topological order.
        dur: ``(n, D)`` integer compute time per model node and device.
        edges: ``(m, 2)`` model-node indices (u, v) of compute-to-compute edges.
        delay: ``(m, D, D)`` integer transfer time per edge and device pair (0 on the diagonal).
        unit: raw cost units per integer step.
        rounded: whether costs were rounded (not all integers).
        identical: whether devices are interchangeable.
    """

    nodes: np.ndarray
    dur: np.ndarray
    edges: np.ndarray
    delay: np.ndarray
    unit: float
    rounded: bool
    identical: bool

    @property
    def horizon(self) -> int:
        return int(
            self.dur.max(axis=1).sum()
            + (self.delay.max(axis=(1, 2)).sum() if self.edges.size else 0)
        )


def delay_model(graph: DataflowGraph, cost: CostModel, resolution: int = 100_000) -> DelayModel:
    """Integer compute and transfer times of ``graph`` (see the module docstring)."""
    g = graph
    d = cost.cluster.num_devices
    comp = g.topo_order[~g.is_input[g.topo_order]]
    index = np.full(g.num_nodes, -1, dtype=np.int64)
    index[comp] = np.arange(comp.size)
    live = np.flatnonzero(~g.is_input[g.edge_src])
    edges = np.stack([index[g.edge_src[live]], index[g.edge_dst[live]]], axis=1).reshape(-1, 2)
    delay = transfer_times(
        cost.edge_fixed[live, None, None],
        cost.latency[None, :, :],
        cost.edge_bytes[live, None, None],
        cost.inv_bandwidth[None, :, :],
    )
    delay[:, np.arange(d), np.arange(d)] = 0.0
    dur = cost.compute[comp]
    values = np.concatenate([dur.ravel(), delay.ravel()])
    integral = bool(np.all(values == np.round(values))) and float(values.max(initial=0)) < 2.0**50
    if integral:
        ints = np.round(values).astype(np.int64)
        unit = float(np.gcd.reduce(ints[ints > 0])) if np.any(ints > 0) else 1.0
        rounded = False
    else:
        horizon = float(
            dur.max(axis=1).sum() + (delay.max(axis=(1, 2)).sum() if live.size else 0.0)
        )
        unit = horizon / resolution if horizon > 0 else 1.0
        rounded = True
    off = ~np.eye(d, dtype=bool)
    identical = bool(
        np.all(dur == dur[:, :1])
        and (not live.size or np.all(delay[:, off] == delay[:, off][:, :1]))
    )
    return DelayModel(
        comp,
        np.round(dur / unit).astype(np.int64),
        edges,
        np.round(delay / unit).astype(np.int64),
        unit,
        rounded,
        identical,
    )


def _hint(model: DelayModel, device: np.ndarray, order: np.ndarray) -> np.ndarray:
    """Integer starts of the append-mode list schedule of (device, order) in model units."""
    n, d = model.dur.shape
    start = np.zeros(n, dtype=np.int64)
    end = np.zeros(n, dtype=np.int64)
    free = np.zeros(d, dtype=np.int64)
    preds: list[list[int]] = [[] for _ in range(n)]
    for k, (_, v) in enumerate(model.edges):
        preds[v].append(k)
    for v in order:
        a = device[v]
        t = free[a]
        for k in preds[v]:
            u = model.edges[k, 0]
            t = max(t, end[u] + model.delay[k, device[u], a])
        start[v] = t
        end[v] = t + model.dur[v, a]
        free[a] = end[v]
    return start


@dataclass(frozen=True)
class ExactPlacer(ScheduleToPlacement):
    """CP-SAT placement + ordering under the delay model.

    Attributes:
        time_limit: seconds for the solver; required above
            :data:`MAX_NODES_WITHOUT_TIME_LIMIT` compute nodes.
        workers: solver threads (None: the machine's cores, at most 8).
        hint: placer whose schedule seeds the solver (``heft``, ``cpop``, ``etf``, ``cp``) or None.
        resolution: integer steps of the horizon when costs are not integers.
        symmetry: break the symmetry of identical devices.
        progress: show the solver's elapsed time against its time limit on stderr.
    """

    time_limit: float | None = None
    workers: int | None = None
    hint: str | None = "heft"
    resolution: int = 100_000
    symmetry: bool = True
    progress: bool = False
    name: ClassVar[str] = "exact"

    def __post_init__(self) -> None:
        check_positive(self.name, "time_limit", self.time_limit)
        check_positive(self.name, "workers", self.workers, integer=True)
        check_positive(self.name, "resolution", self.resolution, integer=True)
        if self.hint not in (None, "heft", "cpop", "etf", "cp", "m-topo"):
            raise ConfigError(
                f"placer {self.name!r}: hint = {self.hint!r}, expected heft, cpop, etf, cp, m-topo or None"
            )

    def schedule(
        self, graph: DataflowGraph, cluster: Cluster, rng: np.random.Generator
    ) -> Schedule:
        cp_model = require("ortools.sat.python.cp_model", "the 'exact' placer (CP-SAT)")

        n_comp = int(graph.compute_nodes.size)
        if self.time_limit is None and n_comp > MAX_NODES_WITHOUT_TIME_LIMIT:
            raise ConfigError(
                f"placer {self.name!r}: graph {graph.name!r} has {n_comp} compute nodes; without a "
                f"time limit only graphs up to {MAX_NODES_WITHOUT_TIME_LIMIT} are solved (they may "
                "take exponential time): pass time_limit (seconds, --time-limit)"
            )
        cost = CostModel(graph, cluster)
        mem = MemoryGuard(graph, cluster, self.name)
        m = delay_model(graph, cost, int(self.resolution))
        n, ndev = m.dur.shape
        # devices alike in speed, links and memory are interchangeable
        symmetric = (
            self.symmetry
            and m.identical
            and (not mem.active or bool(np.all(mem.caps == mem.caps[0])))
        )
        model, start, end, x, makespan = _timing_model(cp_model, m, symmetric)
        if mem.active:
            _memory_constraints(model, graph, m, x, mem.caps)
        model.AddMaxEquality(makespan, end)
        model.Minimize(makespan)
        hint_dev, hint_start = self._add_hint(
            model, graph, cluster, rng, m, mem, symmetric, start, x
        )
        solver = cp_model.CpSolver()
        if self.time_limit is not None:
            solver.parameters.max_time_in_seconds = float(self.time_limit)
        solver.parameters.num_workers = int(self.workers or min(8, os.cpu_count() or 1))
        solver.parameters.random_seed = int(rng.integers(0, 2**31 - 1))
        t0 = time.perf_counter()
        with timer(f"{self.name} {graph.name}", self.time_limit, enabled=self.progress):
            status = solver.Solve(model)
        wall = time.perf_counter() - t0
        found = status in (cp_model.OPTIMAL, cp_model.FEASIBLE)
        if found:
            dev_m = np.array(
                [next(d for d in range(ndev) if solver.Value(x[i][d])) for i in range(n)]
            )
            starts = np.array([solver.Value(start[i]) for i in range(n)])
        elif status == cp_model.INFEASIBLE and mem.active:  # proven: no static bound fits
            raise no_fit_error(graph, mem.caps, self.name)
        elif hint_dev is not None:
            dev_m, starts = hint_dev, hint_start
        else:
            raise ConfigError(
                f"placer {self.name!r}: CP-SAT found no placement of {graph.name!r} within "
                f"{self.time_limit} s and no hint was given; raise time_limit or set a hint"
            )
        device = np.zeros(graph.num_nodes, dtype=np.int64)
        device[m.nodes] = dev_m
        order = m.nodes[np.lexsort((np.arange(n), starts))]
        scale = m.unit * graph.time_scale
        bound = float(solver.BestObjectiveBound()) * scale if found else 0.0
        meta = {
            "optimal": bool(status == cp_model.OPTIMAL and not m.rounded),
            "status": solver.StatusName(status),
            "bound": bound,
            "solver_makespan": float(solver.ObjectiveValue()) * scale if found else math.nan,
            "solve_s": wall,
            "time_limit": self.time_limit,
            "rounded": m.rounded,
            "time_unit": m.unit,
            "hint": self.hint,
        }
        sched = list_schedule(graph, cost, device, order, placer=self.name, meta=meta)
        gap = (sched.makespan - bound) / sched.makespan if sched.makespan > 0 else 0.0
        return sched.with_meta(gap=max(gap, 0.0))  # fitted by the registry

    def _add_hint(
        self,
        model: Any,
        graph: DataflowGraph,
        cluster: Cluster,
        rng: np.random.Generator,
        m: DelayModel,
        mem: MemoryGuard,
        symmetric: bool,
        start: list,
        x: list,
    ) -> tuple[np.ndarray | None, np.ndarray | None]:
        """The hint heuristic's schedule as the solver's starting point; its devices and starts
        (None when no hint is set, or it found nothing within the caps)."""
        hint_dev = hint_start = hs = None
        if self.hint is not None:
            from .registry import get_placer

            hint = get_placer(self.hint)
            try:
                hs = hint.schedule(graph, cluster, rng)  # type: ignore[attr-defined]
            except PlacementError:
                if not mem.active:
                    raise
                hs = None  # the heuristic found nothing within the caps: the solver may
        if hs is not None:
            hint_dev = hs.placement.device[m.nodes]
            if symmetric:
                hint_dev = _relabel(hint_dev)
            pos = np.empty(graph.num_nodes, dtype=np.int64)
            pos[hs.order()] = np.arange(hs.order().size)
            order = np.argsort(pos[m.nodes], kind="stable")
            hint_start = _hint(m, hint_dev, order)
            n, ndev = m.dur.shape
            for i in range(n):
                model.AddHint(start[i], int(hint_start[i]))
                for d in range(ndev):
                    model.AddHint(x[i][d], int(hint_dev[i] == d))
        return hint_dev, hint_start


def _timing_model(
    cp_model: Any, m: DelayModel, symmetric: bool
) -> tuple[Any, list, list, list, Any]:
    """The CP-SAT model of the schedule without memory: one optional interval per op and device,
    no overlap on a device, each edge's delay when its ends are on different devices, the
    makespan to minimise; (model, start, end, x, makespan) with ``x[i][d]``: op i on device d."""
    n, ndev = m.dur.shape
    horizon = max(m.horizon, 1)
    model = cp_model.CpModel()
    start = [model.NewIntVar(0, horizon, f"s{i}") for i in range(n)]
    end = [model.NewIntVar(0, horizon, f"e{i}") for i in range(n)]
    x = [[model.NewBoolVar(f"x{i}_{d}") for d in range(ndev)] for i in range(n)]
    per_device: list[list] = [[] for _ in range(ndev)]
    for i in range(n):
        model.AddExactlyOne(x[i])
        for d in range(ndev):
            per_device[d].append(
                model.NewOptionalIntervalVar(
                    start[i], int(m.dur[i, d]), end[i], x[i][d], f"iv{i}_{d}"
                )
            )
        if symmetric:
            for d in range(i + 1, ndev):
                model.Add(x[i][d] == 0)
        # redundant, for propagation: duration bounds whatever the device
        model.Add(end[i] >= start[i] + int(m.dur[i].min()))
        model.Add(end[i] <= start[i] + int(m.dur[i].max()))
    makespan = model.NewIntVar(0, horizon, "makespan")
    for d in range(ndev):
        model.AddNoOverlap(per_device[d])
        # redundant: a device's load is at most the makespan (tightens the bound)
        model.Add(sum(int(m.dur[i, d]) * x[i][d] for i in range(n)) <= makespan)
    model.Add(
        sum(int(m.dur[i, d]) * x[i][d] for i in range(n) for d in range(ndev)) <= ndev * makespan
    )
    for k, (u, v) in enumerate(m.edges):
        model.Add(start[v] >= end[u])
        delay = m.delay[k]
        off = delay[~np.eye(ndev, dtype=bool)]
        if off.size and np.all(off == off[0]):
            if off[0] > 0:
                for d in range(ndev):
                    model.Add(start[v] >= end[u] + int(off[0])).OnlyEnforceIf(
                        [x[u][d], x[v][d].Not()]
                    )
        else:
            for a in range(ndev):
                for b in range(ndev):
                    if a != b and delay[a, b] > 0:
                        model.Add(start[v] >= end[u] + int(delay[a, b])).OnlyEnforceIf(
                            [x[u][a], x[v][b]]
                        )
    return model, start, end, x, makespan


def _memory_constraints(model, graph: DataflowGraph, m: DelayModel, x: list, caps: np.ndarray):
    """The static bound of every device within its cap: each op's output where it runs, and a
    copy of every tensor (stored input or another device's output) a device's ops read
    (``r[u, d] >= x[v, d] - x[u, d]`` for each consumer ``v`` of ``u``). Sizes in integer
    units: exact when they are integers, else rounded up (and caps down)."""
    size = tensor_bytes(graph)
    ndev = caps.size
    index = np.full(graph.num_nodes, -1, dtype=np.int64)
    index[m.nodes] = np.arange(m.nodes.size)
    finite = caps[np.isfinite(caps)]
    top = float(size.sum()) + float(finite.max(initial=0.0))
    exact = bool(np.all(size == np.round(size))) and top < 2.0**50
    if exact:
        ints = np.round(size).astype(np.int64)
        unit = float(np.gcd.reduce(ints[ints > 0])) if np.any(ints > 0) else 1.0
        units = ints // int(unit)
    else:
        unit = top / 2.0**40
        units = np.ceil(size / unit).astype(np.int64)
    src, dst = np.asarray(graph.edge_src), np.asarray(graph.edge_dst)
    live = ~graph.is_input[dst]
    pairs = np.unique(np.stack([src[live], dst[live]]), axis=1) if live.any() else np.zeros((2, 0))
    terms: list[list] = [[] for _ in range(ndev)]
    for i, v in enumerate(m.nodes):
        for d in range(ndev):
            terms[d].append(int(units[v]) * x[i][d])
    for u in np.unique(pairs[0]).astype(np.int64):
        if units[u] == 0:
            continue
        consumers = pairs[1][pairs[0] == u].astype(np.int64)
        for d in range(ndev):
            r = model.NewBoolVar(f"r{u}_{d}")
            for v in consumers:
                if graph.is_input[u]:
                    model.Add(r >= x[index[v]][d])
                else:
                    model.Add(r >= x[index[v]][d] - x[index[u]][d])
            terms[d].append(int(units[u]) * r)
    for d in range(ndev):
        if np.isfinite(caps[d]):
            model.Add(sum(terms[d]) <= int(np.floor(caps[d] / unit)))


def _relabel(device: np.ndarray) -> np.ndarray:
    """Rename devices in order of first use (keeps a hint valid under symmetry breaking)."""
    mapping: dict[int, int] = {}
    for d in device:
        mapping.setdefault(int(d), len(mapping))
    return np.array([mapping[int(d)] for d in device], dtype=np.int64)
