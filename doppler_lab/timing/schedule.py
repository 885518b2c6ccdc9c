"""Incremental list scheduling: the state of a DOPPLER episode and the Critical Path teacher's
estimate, in one place.

A :class:`ListScheduleState` assigns the compute nodes of a graph one at a time, in any
topological order, to devices, and keeps an internal estimate of each node's start and finish.
Three estimates:

- ``"est"``: a node assigned to device d starts at its earliest start time there,
  ``max(d free, max over preds u of finish(u) + transfer(u -> d))`` (transfer 0 when u is on
  d), and d is busy until it finishes (appended to d's timeline, no insertion into gaps);
- ``"additive"``: the released DOPPLER code's additive model: a node assigned to d starts when all
  compute already assigned to d is done (its load), ``finish = start + compute``. The earliest
  start time *feature* is still ``max(d free, max over preds finish(u) + transfer)``, computed
  from those additive times;
- ``"wc"``: ``est`` with the transfers of the ``wc`` simulator semantics: a tensor goes once to
  each consuming device (a second consumer there reuses its arrival), and each transfer occupies
  every link resource on its route (``cluster.routes``) for ``transfer_time``; it starts at
  ``max(producer finish, each of those resources free)`` and the resources stay busy until it
  arrives. When a node is assigned, the transfers of its inputs that are not yet on its device
  are issued in (producer finish, producer id) order, the order the simulator issues them.

The ``wc`` model is an estimate: an episode assigns nodes in its own topological order, which
need not be the order the simulator runs them, and both the device timelines and the link
resources are appended to (a transfer issued later in the episode never fills an earlier gap on a
link, and a node never starts before the last one assigned to its device). It is exact when
the assignment order is the execution order and every device runs its nodes as soon as they are
ready (e.g. a chain). :func:`estimate_for` picks the model that matches a simulator semantics.
Measured against ``simulate(..., semantics="wc")`` (p100x4; llama_block, llama_layer, moe_layer;
24 episodes each): on CP episodes the final estimate is 9-15% below the simulated makespan
(``est``: 23-34% below); on uniformly random choices (node among the candidates, device) it is
27-39% above (``est``: 1-18% below), the price of appending to links in assignment order. CP
with the ``wc`` model places 2-15% better than with ``est`` on the five wc workloads.

The DOPPLER device features of a node v (DOPPLER.md), per device d: (1) compute already on d;
(2) compute of v's predecessors on d; (3) earliest start among them; (4) latest finish among
them; (5) earliest start of v on d. Input nodes are never assigned (resident everywhere).
"""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING, Literal, NamedTuple

import numpy as np
from numba import njit

from ..hardware.rules import reserve_route, transfer_time
from ..house.errors import PlacementError
from ..ir.graph import DataflowGraph
from ..ir.placement import Placement
from .cost_model import CostModel

if TYPE_CHECKING:  # the guard lives beside the simulator (no import at run time)
    from .fit import MemoryGuard

Estimate = Literal["est", "additive", "wc"]
ESTIMATES: tuple[str, ...] = ("est", "additive", "wc")
NUM_DEVICE_FEATURES = 5
# the estimate that describes each simulator semantics (paper keeps ``est``, the default
# every placer and policy had before ``wc`` existed: its results stay bit-identical)
_ESTIMATE_OF_SEMANTICS: dict[str, Estimate] = {"paper": "est", "wc": "wc", "bsp": "est"}


#: earlier names of estimates, still read (stored policy configs, ``-o timing=paper``)
LEGACY_ESTIMATES: dict[str, str] = {"paper": "additive"}


def estimate_name(value: str | None) -> str | None:
    """``value`` with an earlier name of an estimate replaced by today's (``paper``: ``additive``)."""
    return LEGACY_ESTIMATES.get(value, value) if isinstance(value, str) else value


def estimate_for(semantics: str | None) -> Estimate:
    """The estimate matching simulator ``semantics`` (``None``: ``est``).

    Raises:
        PlacementError: an unknown semantics.
    """
    if semantics is None:
        return "est"
    if semantics not in _ESTIMATE_OF_SEMANTICS:
        raise PlacementError(
            f"unknown semantics {semantics!r}; expected one of {tuple(_ESTIMATE_OF_SEMANTICS)}"
        )
    return _ESTIMATE_OF_SEMANTICS[semantics]


class PredArrays(NamedTuple):
    """A graph's in-edges as the compiled estimates read them (CSR by consumer)."""

    ptr: np.ndarray  # (N + 1,) offsets of each node's in-edges
    idx: np.ndarray  # producer of each in-edge
    eid: np.ndarray  # edge id of each in-edge
    is_input: np.ndarray  # (N,) resident inputs: never sent


class EdgeCosts(NamedTuple):
    """What a transfer costs (raw units): :func:`doppler_lab.hardware.rules.transfer_time`'s terms."""

    fixed: np.ndarray  # (E,) explicit cost of each edge
    nbytes: np.ndarray  # (E,) bytes of each edge
    lat: np.ndarray  # (D, D) latency
    inv_bw: np.ndarray  # (D, D) time per byte


class WcState(NamedTuple):
    """The part of a state the ``wc`` estimate reads and (when it commits) writes."""

    device: np.ndarray  # (N,) device of each assigned node (-1: not yet)
    finish: np.ndarray  # (N,) finish of each assigned node
    arrival: np.ndarray  # (N, D) arrival of tensor u on device d (NaN: not sent there)
    link_free: np.ndarray  # (L,) when each link resource is next free
    routes: np.ndarray  # (D, D, 2) link resources of each ordered pair (-1: none)


class ScheduleRecord(NamedTuple):
    """A graph and its costs on a cluster as the compiled batch steps read them (raw units).

    Built once per state (:attr:`ListScheduleState.record`) and passed to compiled code as a
    plain tuple in this field order, named again on entry (:func:`graph_parts`).
    """

    pred_ptr: np.ndarray  # (N + 1,) offsets of each node's in-edges (PredArrays' four fields)
    pred_idx: np.ndarray  # producer of each in-edge
    pred_eid: np.ndarray  # edge id of each in-edge
    is_input: np.ndarray  # (N,) resident inputs: never sent
    succ_ptr: np.ndarray  # (N + 1,) offsets of each node's out-edges
    succ_idx: np.ndarray  # consumer of each out-edge
    fixed: np.ndarray  # (E,) explicit cost of each edge (EdgeCosts' four fields)
    nbytes: np.ndarray  # (E,) bytes of each edge
    lat: np.ndarray  # (D, D) latency
    inv_bw: np.ndarray  # (D, D) time per byte
    comp: np.ndarray  # (N, D) compute time of each node on each device
    routes: np.ndarray  # (D, D, 2) link resources of each ordered pair (-1: none)


class BatchArrays(NamedTuple):
    """The K states of a :class:`ScheduleBatch`, stacked ``(K, ...)``."""

    device: np.ndarray  # (K, N) device of each assigned node (-1: not yet)
    start: np.ndarray  # (K, N)
    finish: np.ndarray  # (K, N)
    comp_on: np.ndarray  # (K, N) compute of each assigned node on its device
    load: np.ndarray  # (K, D) compute assigned to each device
    dev_free: np.ndarray  # (K, D) when each device is next free
    link_free: np.ndarray  # (K, L) when each link resource is next free (wc)
    arrival: np.ndarray  # (K, N, D) arrival of tensor u on device d (wc; NaN: not sent there)
    waiting: np.ndarray  # (K, N) compute predecessors each node still waits for
    frontier: np.ndarray  # (K, N) the candidates, as a mask
    cand: np.ndarray  # (K, N) each state's candidates, ascending, in cand[k, :ncand[k]]
    ncand: np.ndarray  # (K,) their number
    order: np.ndarray  # (K, T) each state's assignment order, in order[k, :count[k]]
    count: np.ndarray  # (K,) the nodes assigned


@njit(inline="always")
def graph_parts(record):  # pragma: no cover - compiled
    """A :class:`ScheduleRecord`'s in-edges (:class:`PredArrays`), out-edges (``succ_ptr``,
    ``succ_idx``) and transfer costs (:class:`EdgeCosts`), from its first ten fields (a record
    that stops there, as the extended device features' do, serves too)."""
    pred_ptr, pred_idx, pred_eid, is_input, succ_ptr, succ_idx, fixed, nbytes, lat, inv_bw = record[
        :10
    ]
    preds = PredArrays(pred_ptr, pred_idx, pred_eid, is_input)
    return preds, succ_ptr, succ_idx, EdgeCosts(fixed, nbytes, lat, inv_bw)


class Timeline(NamedTuple):
    """The part of a state the device features read."""

    device: np.ndarray  # (N,) device of each assigned node (-1: not yet)
    start: np.ndarray  # (N,) start of each assigned node
    finish: np.ndarray  # (N,) finish of each assigned node
    comp_on: np.ndarray  # (N,) compute of each assigned node on its device
    load: np.ndarray  # (D,) compute assigned to each device


# The compiled functions write arrays into an ``out`` argument instead of returning new ones: an
# array-returning function that is first loaded from numba's cache as the callee of another one
# cannot return arrays to Python afterwards (numba fails with "'descr' is NULL").
@njit(cache=True)
def _est(v, preds, device, finish, dev_free, edges, out):  # pragma: no cover
    pred_ptr, pred_idx, pred_eid, is_input = preds
    fixed, nbytes, lat, inv_bw = edges
    ndev = dev_free.shape[0]
    out[:] = dev_free
    for k in range(pred_ptr[v], pred_ptr[v + 1]):
        u = pred_idx[k]
        if is_input[u]:
            continue
        a = device[u]
        e = pred_eid[k]
        for d in range(ndev):
            t = finish[u]
            if d != a:
                t += transfer_time(fixed[e], lat[a, d], nbytes[e], inv_bw[a, d])
            if t > out[d]:
                out[d] = t


@njit(cache=True)
def _wc_ready(v, d, preds, st, edges, commit):  # pragma: no cover - compiled (Python twin tested)
    """When every input of ``v`` is on device ``d`` under the ``wc`` model.

    Inputs already on ``d`` (same device, or an earlier transfer of the tensor to ``d``) count at
    their arrival; the others are sent in (producer finish, producer id) order, each from
    ``max(producer finish, its route's resources free)``. With ``commit`` those transfers are
    recorded: ``arrival[u, d]`` set and ``link_free`` advanced; otherwise both stay untouched.
    """
    pred_ptr, pred_idx, pred_eid, is_input = preds
    device, finish, arrival, link_free, routes = st
    fixed, nbytes, lat, inv_bw = edges
    lo, hi = pred_ptr[v], pred_ptr[v + 1]
    slots = np.empty(hi - lo, np.int64)
    m = 0
    ready = 0.0
    for k in range(lo, hi):
        u = pred_idx[k]
        if is_input[u]:
            continue
        if device[u] == d:
            t = finish[u]
        elif arrival[u, d] == arrival[u, d]:  # already sent there: reuse it
            t = arrival[u, d]
        else:
            dup = False  # a tensor read twice by v is sent once
            for j in range(m):
                if pred_idx[slots[j]] == u:
                    dup = True
                    break
            if not dup:
                slots[m] = k
                m += 1
            continue
        if t > ready:
            ready = t
    for i in range(1, m):  # issue order: (producer finish, producer id)
        k = slots[i]
        u = pred_idx[k]
        j = i
        while j > 0:
            w = pred_idx[slots[j - 1]]
            if finish[w] > finish[u] or (finish[w] == finish[u] and w > u):
                slots[j] = slots[j - 1]
                j -= 1
            else:
                break
        slots[j] = k
    free = link_free if commit else link_free.copy()
    for i in range(m):
        k = slots[i]
        u = pred_idx[k]
        a = device[u]
        e = pred_eid[k]
        dur = transfer_time(fixed[e], lat[a, d], nbytes[e], inv_bw[a, d])
        _, f = reserve_route(free, routes[a, d, 0], routes[a, d, 1], finish[u], dur)
        if commit:
            arrival[u, d] = f
        if f > ready:
            ready = f
    return ready


@njit(cache=True)
def _wc_est(v, preds, st, edges, dev_free, out):  # pragma: no cover - compiled
    """Start of ``v`` on every device under the ``wc`` model into ``out`` ``(D,)``; nothing is
    recorded."""
    for d in range(out.shape[0]):
        ready = _wc_ready(v, d, preds, st, edges, False)
        out[d] = max(dev_free[d], ready)


@njit(cache=True)
def _features(v, preds, timeline, est, out):  # pragma: no cover - compiled
    """The five device features of ``v`` (the module docstring) into ``out`` ``(D, 5)``
    (``preds``: :class:`PredArrays`; ``timeline``: :class:`Timeline`; ``est``: ``v``'s
    earliest starts)."""
    pred_ptr, pred_idx, _, is_input = preds
    device, start, finish, comp_on, load = timeline
    ndev = load.shape[0]
    for d in range(ndev):
        out[d, 0] = load[d]
        out[d, 1] = 0.0
        out[d, 2] = np.inf
        out[d, 3] = 0.0
        out[d, 4] = est[d]
    for k in range(pred_ptr[v], pred_ptr[v + 1]):
        u = pred_idx[k]
        if is_input[u]:
            continue
        d = device[u]
        out[d, 1] += comp_on[u]
        if start[u] < out[d, 2]:
            out[d, 2] = start[u]
        if finish[u] > out[d, 3]:
            out[d, 3] = finish[u]
    for d in range(ndev):
        if out[d, 2] == np.inf:
            out[d, 2] = 0.0


ESTIMATE_CODES: dict[str, int] = {"est": 0, "additive": 1, "wc": 2}
"""The estimates as the integers the compiled batch steps take."""


@njit(cache=True)
def batch_est(record, arrays, estimate, k, v, out):  # pragma: no cover - compiled
    """Earliest start of ``v`` on each device in state ``k`` of a :class:`ScheduleBatch`
    (:meth:`ListScheduleState.est`), written to ``out`` ``(D,)``.

    Args:
        record: :class:`ScheduleRecord` (:attr:`ListScheduleState.record`).
        arrays: :class:`BatchArrays` (:attr:`ScheduleBatch.arrays`).
        estimate: :data:`ESTIMATE_CODES` of the estimate.
    """
    preds, _, _, edges = graph_parts(record)
    rec, b = ScheduleRecord(*record), BatchArrays(*arrays)
    if estimate == 2:
        st = WcState(b.device[k], b.finish[k], b.arrival[k], b.link_free[k], rec.routes)
        _wc_est(v, preds, st, edges, b.dev_free[k], out)
    else:
        _est(v, preds, b.device[k], b.finish[k], b.dev_free[k], edges, out)


@njit(cache=True)
def batch_device_features(record, arrays, k, v, est, out):  # pragma: no cover - compiled
    """The five DOPPLER device features of ``v`` in state ``k`` of a :class:`ScheduleBatch`
    (:meth:`ListScheduleState.device_features`), written to columns 0-4 of ``out`` ``(D, F)``."""
    preds = graph_parts(record)[0]
    b = BatchArrays(*arrays)
    row = Timeline(b.device[k], b.start[k], b.finish[k], b.comp_on[k], b.load[k])
    _features(v, preds, row, est, out)


@njit(cache=True)
def batch_assign(record, arrays, estimate, k, v, d, est):  # pragma: no cover - compiled
    """Put candidate ``v`` on device ``d`` in state ``k`` of a :class:`ScheduleBatch`
    (:meth:`ListScheduleState.assign`, unchecked; ``est``: ``v``'s earliest starts)."""
    preds, succ_ptr, succ_idx, edges = graph_parts(record)
    rec, b = ScheduleRecord(*record), BatchArrays(*arrays)
    c = rec.comp[v, d]
    if estimate == 0:
        s = est[d]
    elif estimate == 2:
        st = WcState(b.device[k], b.finish[k], b.arrival[k], b.link_free[k], rec.routes)
        s = max(b.dev_free[k, d], _wc_ready(v, d, preds, st, edges, True))
    else:
        s = b.load[k, d]
    b.device[k, v] = d
    b.start[k, v] = s
    b.finish[k, v] = s + c
    b.comp_on[k, v] = c
    b.load[k, d] += c
    b.dev_free[k, d] = s + c
    b.order[k, b.count[k]] = v
    b.count[k] += 1
    b.frontier[k, v] = False
    row = b.cand[k]
    m = b.ncand[k]
    i = 0
    while row[i] != v:  # v is a candidate
        i += 1
    for j in range(i, m - 1):
        row[j] = row[j + 1]
    m -= 1
    waiting = b.waiting
    for j in range(succ_ptr[v], succ_ptr[v + 1]):
        w = succ_idx[j]
        waiting[k, w] -= 1
        if waiting[k, w] == 0:
            b.frontier[k, w] = True
            i = m  # keep the candidates ascending
            while i > 0 and row[i - 1] > w:
                row[i] = row[i - 1]
                i -= 1
            row[i] = w
            m += 1
    b.ncand[k] = m


class InputReady:
    """When all inputs of a node can be on each device: the ``est`` model's earliest start with
    every device free (``max over preds u of finish(u) + transfer(u -> d)``, 0 without
    predecessors), the clock that HEFT's insertion timeline searches its gaps from
    (:mod:`doppler_lab.placers.heft`).

    Args:
        graph: the graph.
        cost_model: its costs on a cluster (raw units).
    """

    def __init__(self, graph: DataflowGraph, cost_model: CostModel):
        self._preds = PredArrays(graph.pred_ptr, graph.pred_idx, graph.pred_eid, graph.is_input)
        self._free = np.zeros(cost_model.cluster.num_devices)
        self._edge_costs = EdgeCosts(
            *(
                np.ascontiguousarray(a)
                for a in (
                    cost_model.edge_fixed,
                    cost_model.edge_bytes,
                    cost_model.latency,
                    cost_model.inv_bandwidth,
                )
            )
        )

    def __call__(self, v: int, device: np.ndarray, finish: np.ndarray) -> np.ndarray:
        """``(D,)`` for node ``v`` whose compute predecessors are placed (``device``, ``finish``:
        ``(N,)`` int64 and float64)."""
        out = np.empty(self._free.shape[0])
        _est(v, self._preds, device, finish, self._free, self._edge_costs, out)
        return out


class ListScheduleState:
    """Assign compute nodes one by one; track start/finish estimates and the frontier.

    Args:
        graph: the graph.
        cost_model: its costs on a cluster (raw units).
        estimate: ``"est"``, ``"additive"`` or ``"wc"`` (see the module docstring).
        guard: the memory caps of the run (:class:`~doppler_lab.timing.fit.MemoryGuard`),
            kept in step with every :meth:`assign`; :meth:`room` asks it (None: no caps).

    Attributes:
        link_free: ``(L,)`` when each link resource of the cluster is next free (``wc``; stays 0
            under the other models).
        arrival: ``(N, D)`` when tensor u arrived on device d through a transfer (``wc``; NaN:
            not sent there).

    Example:
        >>> from doppler_lab.io import read_paper_graph  # doctest: +SKIP
        >>> state = ListScheduleState(graph, CostModel(graph, cluster))  # doctest: +SKIP
        >>> while not state.done:  # doctest: +SKIP
        ...     v = state.candidates()[0]
        ...     state.assign(v, int(np.argmin(state.est(v))))
    """

    def __init__(
        self,
        graph: DataflowGraph,
        cost_model: CostModel,
        estimate: Estimate = "est",
        guard: MemoryGuard | None = None,
    ):
        estimate = estimate_name(estimate)  # type: ignore[assignment]
        if estimate not in ESTIMATES:
            raise PlacementError(f"unknown estimate {estimate!r}; expected one of {ESTIMATES}")
        self.guard = guard
        self.graph = graph
        self.cost = cost_model
        self.estimate = estimate
        self.num_devices = cost_model.cluster.num_devices
        self._pred_ptr = graph.pred_ptr
        self._pred_idx = graph.pred_idx
        self._pred_eid = graph.pred_eid
        self._is_input = graph.is_input
        self._fixed = np.ascontiguousarray(cost_model.edge_fixed)
        self._bytes = np.ascontiguousarray(cost_model.edge_bytes)
        self._lat = np.ascontiguousarray(cost_model.latency)
        self._inv_bw = np.ascontiguousarray(cost_model.inv_bandwidth)
        self._comp = cost_model.compute
        # the arguments the compiled estimate functions share
        self._preds = PredArrays(self._pred_ptr, self._pred_idx, self._pred_eid, self._is_input)
        self._edge_costs = EdgeCosts(self._fixed, self._bytes, self._lat, self._inv_bw)
        cluster = cost_model.cluster
        self._routes = np.ascontiguousarray(cluster.routes, dtype=np.int64)
        self._num_links = max(int(cluster.num_links), 1)
        #: the graph and cost arrays of the compiled batch steps (:class:`ScheduleBatch`)
        #: (a plain tuple in :class:`ScheduleRecord`'s field order: numba types it in C)
        self.record = tuple(
            ScheduleRecord(
                *self._preds,
                graph.succ_ptr,
                graph.succ_idx,
                *self._edge_costs,
                np.ascontiguousarray(self._comp),
                self._routes,
            )
        )
        # compute predecessors each node still waits for
        self._waiting0 = np.bincount(
            graph.edge_dst[~graph.is_input[graph.edge_src]], minlength=graph.num_nodes
        ).astype(np.int64)
        self.reset()

    def reset(self) -> None:
        n, d = self.graph.num_nodes, self.num_devices
        self.device = np.full(n, -1, dtype=np.int64)
        self.start = np.full(n, np.nan)
        self.finish = np.full(n, np.nan)
        self.comp_on = np.zeros(n)  # compute time of each node on its device
        self.load = np.zeros(d)
        self.dev_free = np.zeros(d)
        self.link_free = np.zeros(self._num_links)
        self.arrival = np.full((n, d) if self.estimate == "wc" else (0, d), np.nan)
        self.order: list[int] = []
        self._waiting = self._waiting0.copy()
        self._frontier = np.zeros(n, dtype=bool)
        self._frontier[(self._waiting == 0) & ~self._is_input] = True
        self._remaining = int((~self._is_input).sum())

    def copy(self) -> ListScheduleState:
        """An independent copy of the state (the graph and cost arrays are shared, read-only)."""
        out = copy.copy(self)
        for name in ("device", "start", "finish", "comp_on", "load", "dev_free", "link_free"):
            setattr(out, name, getattr(self, name).copy())
        out.arrival = self.arrival.copy()
        out.order = list(self.order)
        out._waiting = self._waiting.copy()
        out._frontier = self._frontier.copy()
        if self.guard is not None:
            out.guard = self.guard.copy()
        return out

    # -- queries ---------------------------------------------------------------------------
    @property
    def done(self) -> bool:
        return self._remaining == 0

    @property
    def num_assigned(self) -> int:
        return len(self.order)

    def candidates(self) -> np.ndarray:
        """Unassigned compute nodes whose compute predecessors are all assigned (ascending)."""
        return np.flatnonzero(self._frontier)

    def is_candidate(self, v: int) -> bool:
        return bool(self._frontier[v])

    def est(self, v: int) -> np.ndarray:
        """Earliest start time of ``v`` on each device, ``(D,)``, raw units."""
        out = np.empty(self.num_devices)
        if self.estimate == "wc":
            st = WcState(self.device, self.finish, self.arrival, self.link_free, self._routes)
            _wc_est(v, self._preds, st, self._edge_costs, self.dev_free, out)
        else:
            _est(v, self._preds, self.device, self.finish, self.dev_free, self._edge_costs, out)
        return out

    def _wc_start(self, v: int, d: int, commit: bool) -> float:
        """Start of ``v`` on ``d`` under the ``wc`` model (``commit``: issue its transfers)."""
        st = WcState(self.device, self.finish, self.arrival, self.link_free, self._routes)
        ready = _wc_ready(v, d, self._preds, st, self._edge_costs, commit)
        return max(float(self.dev_free[d]), ready)

    def device_features(self, v: int, est: np.ndarray | None = None) -> np.ndarray:
        """The five DOPPLER device features of ``v``, ``(D, 5)``, raw units."""
        out = np.empty((self.num_devices, NUM_DEVICE_FEATURES))
        # a plain tuple in Timeline's field order: numba types it without Python's typeof
        timeline = (self.device, self.start, self.finish, self.comp_on, self.load)
        _features(v, self._preds, timeline, self.est(v) if est is None else est, out)
        return out

    def room(self, v: int) -> np.ndarray | None:
        """``(D,)`` devices with memory for ``v`` by the guard (None: every device)."""
        return None if self.guard is None else self.guard.room(v)

    def allowed(self, v: int) -> np.ndarray | None:
        """The guard's :meth:`~doppler_lab.timing.fit.MemoryGuard.allowed` (None: every
        device)."""
        return None if self.guard is None else self.guard.allowed(v)

    # -- transitions -------------------------------------------------------------------------
    def assign(self, v: int, d: int, est: np.ndarray | None = None) -> None:
        """Put candidate ``v`` on device ``d`` and update the timeline and frontier."""
        v, d = int(v), int(d)
        if not self._frontier[v]:
            why = (
                "already assigned"
                if self.device[v] >= 0
                else "not ready (a predecessor is unassigned)"
            )
            if self._is_input[v]:
                why = "an input (inputs are never assigned)"
            raise PlacementError(f"node {v} ({self.graph.names[v]!r}) cannot be assigned: {why}")
        if not 0 <= d < self.num_devices:
            raise PlacementError(f"device {d} is not in 0..{self.num_devices - 1}")
        c = float(self._comp[v, d])
        if self.estimate == "est":
            s = float((self.est(v) if est is None else est)[d])
        elif self.estimate == "wc":
            s = self._wc_start(v, d, True)
        else:
            s = float(self.load[d])
        self.device[v] = d
        self.start[v] = s
        self.finish[v] = s + c
        self.comp_on[v] = c
        self.load[d] += c
        self.dev_free[d] = s + c
        self.order.append(v)
        self._frontier[v] = False
        self._remaining -= 1
        if self.guard is not None:
            self.guard.assign(v, d)
        g = self.graph
        for w in g.succ_idx[g.succ_ptr[v] : g.succ_ptr[v + 1]]:
            self._waiting[w] -= 1
            if self._waiting[w] == 0:
                self._frontier[w] = True

    def placement(self, placer: str = "") -> Placement:
        """The assignment so far as a :class:`Placement` whose priority is the assignment order."""
        if not self.done:
            raise PlacementError(f"{self._remaining} compute nodes are still unassigned")
        priority = np.zeros(self.graph.num_nodes)
        priority[np.array(self.order, dtype=np.int64)] = np.arange(len(self.order))
        dev = self.device.copy()
        dev[self._is_input] = 0
        return Placement(dev, priority, placer, {"estimate": self.estimate}).with_inputs_filled(
            self.graph
        )

    @property
    def schedule_makespan(self) -> float:
        """The internal model's makespan (raw units)."""
        return float(np.nanmax(self.finish)) if self.order else 0.0


class ScheduleBatch:
    """K fresh list-schedule states of one graph (one cost model, one estimate) in stacked
    arrays, for compiled code that steps all of them at once (:func:`batch_est`,
    :func:`batch_device_features`, :func:`batch_assign`).

    The states keep working as themselves: their arrays become row views of the stacked ones,
    so what a compiled step writes is what each state reads. Their assignment order is brought
    up to date by :meth:`sync` (:attr:`states` calls it). A batched state must not be reset.

    Args:
        states: fresh states (nothing assigned yet) of one graph, cost model and estimate.

    Attributes:
        record: the graph and cost arrays (:attr:`ListScheduleState.record`).
        estimate: :data:`ESTIMATE_CODES` of the estimate.
        arrays: :class:`BatchArrays`: the states' arrays stacked ``(K, ...)``, each state's
            candidates ascending in ``cand[k, :ncand[k]]``, its assignment order in
            ``order[k, :count[k]]`` (compiled code takes ``tuple(arrays)``).

    Raises:
        PlacementError: no states, a state already stepped, or states of different problems.
    """

    def __init__(self, states: list[ListScheduleState]):
        if not states:
            raise PlacementError("a schedule batch needs at least one state")
        s0 = states[0]
        for s in states:
            if s.num_assigned or s.graph is not s0.graph or s.cost is not s0.cost:
                raise PlacementError(
                    "a schedule batch takes fresh states of one graph and cost model"
                )
            if s.estimate != s0.estimate:
                raise PlacementError(
                    f"estimate {s.estimate!r} in a batch of {s0.estimate!r} states"
                )
        self._states = list(states)
        self.record = s0.record
        self.estimate = ESTIMATE_CODES[s0.estimate]
        names = ("device", "start", "finish", "comp_on", "load", "dev_free", "link_free")
        names += ("arrival", "_waiting", "_frontier")
        stacked = [np.stack([getattr(s, a) for s in states]) for a in names]
        for k, s in enumerate(states):
            for a, arr in zip(names, stacked, strict=True):
                setattr(s, a, arr[k])
        n = s0.graph.num_nodes
        first = s0.candidates()
        cand = np.zeros((len(states), n), dtype=np.int64)
        cand[:, : first.size] = first
        ncand = np.full(len(states), first.size, dtype=np.int64)
        self._num_steps = s0.num_assigned + s0._remaining
        order = np.zeros((len(states), self._num_steps), dtype=np.int64)
        count = np.zeros(len(states), dtype=np.int64)
        self.arrays = BatchArrays(*stacked, cand, ncand, order, count)

    @property
    def states(self) -> list[ListScheduleState]:
        """The K states, up to date (:meth:`sync`)."""
        self.sync()
        return self._states

    def sync(self) -> None:
        """Bring each state's assignment order and remaining count up to date."""
        order, count = self.arrays.order, self.arrays.count
        for k, s in enumerate(self._states):
            c = int(count[k])
            if len(s.order) != c:
                s.order[:] = order[k, :c].tolist()
                s._remaining = self._num_steps - c
