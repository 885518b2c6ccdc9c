"""Memory caps: the running static bound, the guard of a placement being built, the fit check.

Memory is a timing concept (:mod:`doppler_lab.timing.memory`: sizes, the static bound, caps;
:mod:`doppler_lab.timing.sim.footprint`: the simulated peak). What a placer counts while it
builds a placement is the static bound of :func:`~doppler_lab.timing.memory.static_peak_bound`:
on each device the stored inputs read there, the outputs of the ops placed there and one copy of
every tensor received there, an upper bound of the simulated peak under any semantics and order.
:class:`Footprint` keeps that bound while a placement is built op by op (``assign``) or changed
(``move``), and says which devices have room for an op (``room``); :class:`MemoryGuard` holds the
caps of one placer's run (each device's memory less its runtime reserve,
:func:`~doppler_lab.timing.memory.memory_caps`).

A placement fits when its static bound fits (the fast first test) or else its simulated peak
fits under every semantics (:func:`simulated_fit`, what the final check measures). Search
placers judge placements with :func:`capped` simulators, whose makespan of a placement over a
cap is ``inf``. The repairs of a placement that does not fit, and the one fit the registry
applies to whatever a placer returns, live with the placers
(:mod:`doppler_lab.placers.repair`).

A graph without byte sizes (:func:`~doppler_lab.timing.memory.has_sizes` is False: the paper's
cost-only files) is unconstrained, and so is a graph whose tensors all together fit on the
smallest device: then :class:`MemoryGuard` is inactive and every placer places exactly as it did
without caps.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..hardware.cluster import Cluster
from ..house.errors import PlacementError
from ..ir.graph import DataflowGraph
from ..ir.placement import Placement
from .memory import format_bytes, has_sizes, memory_caps, tensor_bytes


def _distinct_csr(keys: np.ndarray, vals: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """CSR of the distinct ``vals`` of each key in ``0..n-1`` (sorted)."""
    if keys.size:
        pairs = np.unique(np.stack([keys, vals]), axis=1)
        keys, vals = pairs[0], pairs[1]
    ptr = np.zeros(n + 1, dtype=np.int64)
    np.add.at(ptr, keys + 1, 1)
    return np.cumsum(ptr), np.ascontiguousarray(vals, dtype=np.int64)


class Footprint:
    """The static bound per device of a placement built op by op or changed op by op.

    Equal (up to float rounding) to :func:`~doppler_lab.timing.memory.static_peak_bound` of
    :attr:`device` at every moment: ops not placed yet (``-1``) count only through what the
    placed ones decide.

    Args:
        graph: the graph.
        num_devices: D.
        nbytes: sizes per node (default :func:`~doppler_lab.timing.memory.tensor_bytes`).

    Attributes:
        device: ``(N,)`` device of each placed compute op (-1: not placed; inputs stay -1).
        used: ``(D,)`` the bound per device.
    """

    def __init__(self, graph: DataflowGraph, num_devices: int, nbytes: np.ndarray | None = None):
        n = graph.num_nodes
        self.graph = graph
        self.num_devices = int(num_devices)
        self.size = np.asarray(tensor_bytes(graph) if nbytes is None else nbytes, dtype=np.float64)
        self.is_input = np.asarray(graph.is_input, dtype=bool)
        src, dst = np.asarray(graph.edge_src), np.asarray(graph.edge_dst)
        self.pred_ptr, self.pred_idx = _distinct_csr(dst, src, n)
        self.succ_ptr, self.succ_idx = _distinct_csr(src, dst, n)
        self.device = np.full(n, -1, dtype=np.int64)
        self.used = np.zeros(self.num_devices)
        self.count = np.zeros((n, self.num_devices), dtype=np.int32)  # consumers of u on d
        self._devs = np.arange(self.num_devices)
        # Python lists for the op-by-op steps (numpy's scalar indexing is slower)
        self._sizes = self.size.tolist()
        self._inputs = self.is_input.tolist()
        ptr = self.pred_ptr.tolist()
        idx = self.pred_idx.tolist()
        self._preds = [idx[ptr[v] : ptr[v + 1]] for v in range(n)]

    def blank(self) -> Footprint:
        """A footprint of the same graph with nothing placed (the graph's arrays shared)."""
        out = copy.copy(self)
        out.device = np.full(self.device.size, -1, dtype=np.int64)
        out.used = np.zeros(self.num_devices)
        out.count = np.zeros_like(self.count)
        return out

    def copy(self) -> Footprint:
        """An independent copy of the running bound (the graph's arrays shared)."""
        out = copy.copy(self)
        out.device = self.device.copy()
        out.used = self.used.copy()
        out.count = self.count.copy()
        return out

    @classmethod
    def of(
        cls,
        graph: DataflowGraph,
        device: np.ndarray | Sequence[int],
        num_devices: int,
        nbytes: np.ndarray | None = None,
    ) -> Footprint:
        """The footprint of a whole placement (inputs' entries ignored)."""
        fp = cls(graph, num_devices, nbytes)
        dev = np.asarray(device, dtype=np.int64).copy()
        dev[fp.is_input] = -1
        fp.device = dev
        placed = dev >= 0
        fp.used = np.bincount(dev[placed], weights=fp.size[placed], minlength=fp.num_devices)
        cons = np.repeat(np.arange(graph.num_nodes), np.diff(fp.pred_ptr))  # consumer per pair
        prod = fp.pred_idx
        on = placed[cons]
        np.add.at(fp.count, (prod[on], dev[cons[on]]), 1)
        held = fp.count > 0
        copy = held & (fp.is_input[:, None] | ((dev[:, None] >= 0) & (dev[:, None] != fp._devs)))
        fp.used = fp.used + (copy * fp.size[:, None]).sum(axis=0)
        return fp

    def preds(self, v: int) -> np.ndarray:
        return self.pred_idx[self.pred_ptr[v] : self.pred_ptr[v + 1]]

    def _copy_held(self, u: np.ndarray, d: int | np.ndarray) -> np.ndarray:
        """Whether tensor(s) ``u`` on device(s) ``d`` would be a received copy (not the op's
        own output, not an op not placed yet)."""
        du = self.device[u]
        return self.is_input[u] | ((du >= 0) & (du != d))

    def need(self, v: int) -> np.ndarray:
        """``(D,)`` the bytes device d gains when op ``v`` (not placed) goes there."""
        p = self.preds(v)
        extra = np.full(self.num_devices, self.size[v])
        if p.size:
            du = self.device[p][:, None]
            copy = self.is_input[p][:, None] | ((du >= 0) & (du != self._devs))
            new = copy & (self.count[p] == 0)
            extra += (new * self.size[p][:, None]).sum(axis=0)
        return extra

    def room(self, v: int, caps: np.ndarray) -> np.ndarray:
        """``(D,)`` whether op ``v`` (not placed) fits on each device: the bound stays within
        ``caps`` there (and on the devices of its placed consumers, which receive a copy)."""
        ok = self.used + self.need(v) <= caps
        held = self.count[v] > 0
        if held.any():  # consumers already placed: a copy of v on each of their devices
            over = held & (self.used + self.size[v] > caps)
            for d in range(self.num_devices):
                others = over.copy()
                others[d] = False
                ok[d] &= not others.any()
        return ok

    def assign(self, v: int, d: int) -> None:
        """Place op ``v`` (not placed yet) on device ``d``."""
        v, d = int(v), int(d)
        size, count, device, is_input = self._sizes, self.count, self.device, self._inputs
        add = size[v]
        for u in self._preds[v]:  # scalar steps: an op has few inputs
            du = device[u]
            if count[u, d] == 0 and (is_input[u] or (du >= 0 and du != d)):
                add += size[u]
            count[u, d] += 1
        self.used[d] += add
        if count[v].any():  # consumers placed before v: a copy on each of their other devices
            held = count[v] > 0
            held[d] = False
            self.used[held] += size[v]
        device[v] = d

    def move_delta(self, v: int, b: int) -> tuple[float, float]:
        """The change of the bound on ``v``'s device and on ``b`` if placed op ``v`` moved to
        ``b`` (every other device is unchanged)."""
        a = int(self.device[v])
        if a == b:
            return 0.0, 0.0
        s, sv = self.size, float(self.size[v])
        da, db = -sv, sv
        if self.count[v, a] > 0:
            da += sv  # its consumers on a now hold a copy
        if self.count[v, b] > 0:
            db -= sv  # the copy on b becomes the output itself
        p = self.preds(v)
        if p.size:
            lose = (self.count[p, a] == 1) & self._copy_held(p, a)
            gain = (self.count[p, b] == 0) & self._copy_held(p, b)
            da -= float(s[p][lose].sum())
            db += float(s[p][gain].sum())
        return da, db

    def move(self, v: int, b: int) -> None:
        """Move placed op ``v`` to device ``b``."""
        a = int(self.device[v])
        if a == b:
            return
        da, db = self.move_delta(v, b)
        self.used[a] += da
        self.used[b] += db
        p = self.preds(v)
        self.count[p, a] -= 1
        self.count[p, b] += 1
        self.device[v] = b


def static_bounds(graph: DataflowGraph, devices: np.ndarray, num_devices: int) -> np.ndarray:
    """``(K, D)`` the static bound of each row of ``devices`` ``(K, N)`` (every compute op
    placed; inputs' entries ignored): :func:`~doppler_lab.timing.memory.static_peak_bound`
    of many placements at once."""
    dev = np.atleast_2d(np.asarray(devices, dtype=np.int64))
    k, n = dev.shape
    d = int(num_devices)
    size = tensor_bytes(graph)
    comp = np.flatnonzero(~graph.is_input)
    rows = np.repeat(np.arange(k), comp.size)
    out = np.bincount(
        rows * d + dev[:, comp].reshape(-1), weights=np.tile(size[comp], k), minlength=k * d
    )
    src, dst = np.asarray(graph.edge_src), np.asarray(graph.edge_dst)
    live = ~graph.is_input[dst]
    src, dst = src[live], dst[live]
    ds, dd = dev[:, src], dev[:, dst]
    copy = graph.is_input[src][None, :] | (ds != dd)
    r, e = np.nonzero(copy)
    if r.size:
        key = np.unique((r * n + src[e]) * d + dd[r, e])
        tensor = (key // d) % n
        np.add.at(out, (key // (n * d)) * d + key % d, size[tensor])
    return out.reshape(k, d)


def fits(bound: np.ndarray, caps: np.ndarray) -> np.ndarray | bool:
    """Whether bounds (``(..., D)``) are within ``caps`` on every device."""
    return np.all(np.asarray(bound) <= caps, axis=-1)


def _can_bind(graph: DataflowGraph, size: np.ndarray, caps: np.ndarray) -> bool:
    """:func:`cap_can_bind` on the graph's ``size`` (:func:`tensor_bytes`) and ``caps``."""
    return bool(has_sizes(graph) and size.size and float(size.sum()) > float(caps.min()))


def caps_bind(graph: DataflowGraph, caps: np.ndarray) -> bool:
    """Whether ``caps`` (bytes per device) can bind on ``graph``: it has sizes and its tensors
    all together exceed the smallest cap (:attr:`MemoryGuard.binds`, without building one)."""
    return _can_bind(graph, tensor_bytes(graph), caps)


def cap_can_bind(graph: DataflowGraph, cluster: Cluster, cap: Any = "device") -> bool:
    """Whether a memory cap can bind (:attr:`MemoryGuard.active`, without building the guard):
    the graph has sizes and its tensors all together exceed the smallest cap."""
    return _can_bind(graph, tensor_bytes(graph), memory_caps(cluster, cap))


class MemoryGuard:
    """The caps of one placer's run on one graph and cluster, and the running bound.

    Args:
        graph: the graph.
        cluster: the cluster (its devices' ``memory_bytes``).
        placer: the placer's name (messages).
        cap: ``"device"`` (default: the cluster's caps), ``None`` (no cap), bytes or one per
            device (:func:`~doppler_lab.timing.memory.memory_caps`).
        check: raise :func:`no_fit_error` up front when no placement can fit (an op that alone
            needs more than the largest device, or more stored inputs than all devices hold).

    Attributes:
        caps: ``(D,)`` bytes per device (``inf``: none): each device's memory less its runtime
            reserve (:func:`~doppler_lab.timing.memory.memory_caps`).
        binds: whether a cap can bind by the static bound (:func:`cap_can_bind`): the graph
            has sizes and its tensors all together exceed the smallest cap. Where it cannot,
            every placement fits (the fast first test of the final check).
        active: whether the placer must keep to the caps while it builds a placement: a cap
            binds and the whole graph does not fit on the device with the most memory by its
            simulated peak (:func:`fits_one_device`; liveness, not every tensor for the whole
            run). Where the model fits one device, a placer has no reason of memory to split
            it: it places as without caps, and the final check (by the simulated peak) repairs
            what it splits over a cap. Inactive guards do nothing (placements stay as without
            caps, to the bit).
        footprint: the running bound (None when inactive).
    """

    def __init__(
        self,
        graph: DataflowGraph,
        cluster: Cluster,
        placer: str,
        cap: Any = "device",
        check: bool = True,
    ):
        self.graph = graph
        self._cluster = cluster
        self.placer = placer
        self.caps = memory_caps(cluster, cap)
        self.num_devices = cluster.num_devices
        size = tensor_bytes(graph)
        self.binds = _can_bind(graph, size, self.caps)
        self.active = self.binds and not _fits_one(graph, cluster, self.caps)
        self.footprint = Footprint(graph, self.num_devices, size) if self.active else None
        # an op's output and inputs: where the fullest device has room for them, every one has
        self._need = op_needs(graph, size) if self.active else None
        self._smallest = float(self.caps.min())
        if self.active and check:
            check_floor(graph, self.caps, placer)

    def live_share(self) -> float:
        """The share of the static bound live at once on one device: the whole graph's
        simulated peak (the largest over the semantics) on the device with the most memory
        over its static bound there (1 without sizes). A placer that reserves memory per op
        scales its sizes by it where the model fits one device (m-TOPO's shares)."""
        from .sim import SEMANTICS, Simulator

        d = int(np.argmax(self.caps))
        dev = np.full(self.graph.num_nodes, d, dtype=np.int64)
        bound = float(static_bounds(self.graph, dev[None, :], self.num_devices)[0, d])
        if bound <= 0:
            return 1.0
        peak = max(
            float(np.asarray(Simulator(self.graph, self._cluster, s).run(dev).peak_memory_bytes)[d])
            for s in SEMANTICS
        )
        return min(peak / bound, 1.0)

    def blank(self) -> MemoryGuard:
        """The same caps with nothing placed (one per episode of a rollout)."""
        out = copy.copy(self)
        out.footprint = None if self.footprint is None else self.footprint.blank()
        return out

    def copy(self) -> MemoryGuard:
        """An independent copy, with what is placed so far (the graph's arrays shared)."""
        out = copy.copy(self)
        out.footprint = None if self.footprint is None else self.footprint.copy()
        return out

    def room(self, v: int) -> np.ndarray | None:
        """``(D,)`` devices with room for op ``v`` (None when inactive: every device)."""
        if self.footprint is None:
            return None
        return self.footprint.room(int(v), self.caps)

    def allowed(self, v: int) -> np.ndarray | None:
        """Devices with room for ``v``, or None when every device has room or none has (a
        placer then chooses as without caps; the final check repairs)."""
        fp = self.footprint
        if fp is None:
            return None
        if fp.used.max() + self._need[v] <= self._smallest and not fp.count[v].any():
            return None  # every device has room (no consumer of v placed yet)
        ok = fp.room(int(v), self.caps)
        if ok.all() or not ok.any():
            return None
        return ok

    def headroom(self, v: int) -> np.ndarray:
        """``(D,)`` the share of each device's cap still free if op ``v`` (not placed) went
        there: ``(cap - bound - need) / cap`` clipped to [-1, 1] (the ``doppler11`` feature);
        1 where the cap is ``inf`` and everywhere when inactive."""
        fp = self.footprint
        if fp is None:
            return np.ones(self.num_devices)
        caps = self.caps
        finite = np.isfinite(caps) & (caps > 0)
        safe = np.where(finite, caps, 1.0)
        free = (safe - fp.used - fp.need(int(v))) / safe
        return np.where(finite, np.clip(free, -1.0, 1.0), 1.0)

    def assign(self, v: int, d: int) -> None:
        if self.footprint is not None:
            self.footprint.assign(int(v), int(d))

    @property
    def used(self) -> np.ndarray | None:
        return None if self.footprint is None else self.footprint.used.copy()


# -- the least memory a graph needs ----------------------------------------------------------
def op_needs(graph: DataflowGraph, nbytes: np.ndarray | None = None) -> np.ndarray:
    """``(N,)`` bytes each compute op needs on its device at once: its output and every
    distinct input (0 for inputs)."""
    size = tensor_bytes(graph) if nbytes is None else nbytes
    src, dst = np.asarray(graph.edge_src), np.asarray(graph.edge_dst)
    out = np.where(graph.is_input, 0.0, size)
    if src.size:
        pairs = np.unique(np.stack([dst, src]), axis=1)
        np.add.at(out, pairs[0], size[pairs[1]] * ~graph.is_input[pairs[0]])
    return out


def stored_bytes(graph: DataflowGraph, nbytes: np.ndarray | None = None) -> float:
    """Bytes of the stored inputs some op reads (each resident on at least one device for the
    whole run)."""
    size = tensor_bytes(graph) if nbytes is None else nbytes
    read = np.unique(np.asarray(graph.edge_src)[graph.is_input[graph.edge_src]])
    return float(size[read].sum())


def caps_text(caps: np.ndarray) -> str:
    """``4 x 16 GB`` (equal caps) or ``16 GB + 32 GB`` (decimal units)."""
    if np.all(caps == caps[0]):
        return f"{caps.size} x {format_bytes(float(caps[0]))}"
    return " + ".join(format_bytes(float(c)) for c in caps)


def _floor_reason(graph: DataflowGraph, caps: np.ndarray) -> str | None:
    """Why no placement can fit (a bound on the simulated peak), or None."""
    need = op_needs(graph)
    v = int(np.argmax(need)) if need.size else 0
    if need.size and need[v] > caps.max():
        return f"op {graph.names[v]!r} alone needs {format_bytes(float(need[v]))}"
    stored = stored_bytes(graph)
    if stored > caps.sum():
        return (
            f"its stored inputs (weights) alone need {format_bytes(stored)}, "
            f"{format_bytes(stored / caps.size)} per device"
        )
    return None


def check_floor(graph: DataflowGraph, caps: np.ndarray, placer: str) -> None:
    """Raise :func:`no_fit_error` when no placement of ``graph`` can fit ``caps``."""
    reason = _floor_reason(graph, caps)
    if reason is not None:
        raise PlacementError(
            f"placer {placer!r}: no placement of {graph.name!r} fits {caps_text(caps)}; {reason}"
        )


#: what :func:`no_fit_error` suggests, and where that would name the placer itself
_HINT = "the 'pipeline' placer or more memory"
_NO_FIT_HINT = {"pipeline": "more memory"}


def no_fit_error(graph: DataflowGraph, caps: np.ndarray, placer: str) -> PlacementError:
    """The one-line error of a placer that found nothing that fits: why none can, or the least
    memory it needs by the static bound (the largest op, all outputs and stored inputs)."""
    reason = _floor_reason(graph, caps)
    if reason is not None:
        return PlacementError(
            f"placer {placer!r}: no placement of {graph.name!r} fits {caps_text(caps)}; {reason}"
        )
    size = tensor_bytes(graph)
    total = float(size[~graph.is_input].sum()) + stored_bytes(graph)
    largest = float(op_needs(graph).max(initial=0.0))
    return PlacementError(
        f"placer {placer!r}: found no placement of {graph.name!r} that fits {caps_text(caps)}; "
        f"the largest op needs {format_bytes(largest)}, every output and stored input once "
        f"{format_bytes(total)} (the static bound); try {_NO_FIT_HINT.get(placer, _HINT)}"
    )


# -- search: capped simulators ---------------------------------------------------------------
class CappedSimulator:
    """A simulator whose makespans of placements over a cap are ``inf`` (by the static bound,
    or the simulated peak under its semantics when the bound does not fit). Everything else is
    the wrapped simulator's."""

    def __init__(self, sim: Any, caps: np.ndarray):
        self._sim = sim
        self.caps = caps
        self._simulated: dict[bytes, bool] = {}  # rows over the bound: simulated fit, by row

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sim, name)

    def _rows(self, placements: Any) -> np.ndarray:
        if isinstance(placements, Placement):
            return placements.device[None, :]
        if isinstance(placements, np.ndarray):
            return np.atleast_2d(placements)
        rows = [p.device if isinstance(p, Placement) else np.asarray(p) for p in placements]
        return np.stack(rows) if rows else np.zeros((0, self._sim.graph.num_nodes), np.int64)

    def fits(self, placements: Any) -> np.ndarray:
        """``(K,)`` whether each placement fits the caps: its static bound, or else its
        simulated peak under every semantics (what :func:`fit_devices` accepts as
        ``"simulated"``; cached per placement, the static bound being the quick test)."""
        rows = self._rows(placements)
        if not len(rows):
            return np.zeros(0, dtype=bool)
        ok = np.array(
            fits(static_bounds(self._sim.graph, rows, self.caps.size), self.caps), dtype=bool
        ).reshape(len(rows))
        for k in np.flatnonzero(~ok):
            row = np.ascontiguousarray(rows[k], dtype=np.int64)
            key = row.tobytes()
            if key not in self._simulated:
                if len(self._simulated) >= 256:  # a long search visits many: keep memory flat
                    self._simulated.clear()
                self._simulated[key] = simulated_fit(
                    self._sim.graph, self._sim.cluster, row, self.caps
                )
            ok[k] = self._simulated[key]
        return ok

    def makespans(self, placements: Any, *args: Any, **kw: Any) -> np.ndarray:
        out = np.asarray(self._sim.makespans(placements, *args, **kw), dtype=np.float64).copy()
        out[~self.fits(placements)] = np.inf
        return out

    def makespan(self, placement: Any, *args: Any, **kw: Any) -> float:
        span = self._sim.makespan(placement, *args, **kw)
        return float(span) if bool(self.fits(placement)[0]) else math.inf


def capped(sim: Any, cap: Any = "device") -> Any:
    """``sim`` judging placements over the caps of its cluster as ``inf``
    (:class:`CappedSimulator`), or ``sim`` itself when no cap can bind."""
    if isinstance(sim, CappedSimulator):
        return sim
    caps = memory_caps(sim.cluster, cap)
    return (
        CappedSimulator(sim, caps) if _can_bind(sim.graph, tensor_bytes(sim.graph), caps) else sim
    )


def over_cap(sim: Any, device: np.ndarray) -> bool:
    """Whether a capped simulator judges ``device`` over a cap (False for plain simulators)."""
    return isinstance(sim, CappedSimulator) and not bool(sim.fits(device[None, :])[0])


def simulated_fit(graph: DataflowGraph, cluster: Cluster, device: np.ndarray, caps) -> bool:
    """Whether placement ``device`` fits ``caps`` by its simulated peak under every semantics
    (the test of a placement whose static bound does not fit)."""
    from .sim import SEMANTICS, Simulator

    for semantics in SEMANTICS:
        trace = Simulator(graph, cluster, semantics).run(device)
        if trace.peak_memory_bytes is None or np.any(trace.peak_memory_bytes > caps):
            return False
    return True


def _fits_one(graph: DataflowGraph, cluster: Cluster, caps: np.ndarray) -> bool:
    """Whether the whole graph fits ``caps`` on the device with the most: its static bound
    (the fast first test), else its simulated peak under every semantics."""
    dev = np.full(graph.num_nodes, int(np.argmax(caps)), dtype=np.int64)
    if bool(fits(static_bounds(graph, dev[None, :], caps.size)[0], caps)):
        return True
    return simulated_fit(graph, cluster, dev, caps)


def fits_one_device(graph: DataflowGraph, cluster: Cluster, cap: Any = "device") -> bool:
    """Whether the whole graph fits on the device with the most memory (its static bound, or
    its simulated peak under every semantics, as the final check accepts a placement); True
    where no cap can bind. False: a model that must be split to run at all."""
    caps = memory_caps(cluster, cap)
    if not _can_bind(graph, tensor_bytes(graph), caps):
        return True
    return _fits_one(graph, cluster, caps)


__all__ = [
    "CappedSimulator",
    "Footprint",
    "MemoryGuard",
    "cap_can_bind",
    "capped",
    "caps_bind",
    "caps_text",
    "check_floor",
    "fits",
    "fits_one_device",
    "no_fit_error",
    "op_needs",
    "over_cap",
    "simulated_fit",
    "static_bounds",
    "stored_bytes",
]
