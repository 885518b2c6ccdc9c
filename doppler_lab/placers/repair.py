"""Repairs of placements over the memory caps, and the one fit the registry applies.

:func:`fit_placement` (and :func:`fit_schedule` for a placer's schedule) is applied by the
registry (:mod:`doppler_lab.placers.registry`) to whatever a placer returns: a placement whose
static bound fits, or whose simulated peak fits under every semantics
(:func:`~doppler_lab.timing.fit.simulated_fit`), is returned as it is; otherwise it is repaired
(:func:`repair`: ops moved off the over-full devices, the move that leaves the least excess
first), else replaced by a placement packed by memory alone (:func:`pack`) or the contiguous
stages of the ``pipeline`` placer (:mod:`doppler_lab.placers.stage_split`; where no split keeps
within the static bound, the split balanced by compute alone when its simulated peak fits),
else the placer raises one line that says the least memory the graph needs
(:func:`~doppler_lab.timing.fit.no_fit_error`). ``meta["memory_fit"]`` says which, when it is
not the static bound. The caps, the guard and the capped simulators are timing concepts
(:mod:`doppler_lab.timing.fit`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..hardware.cluster import Cluster
from ..house.errors import PlacementError
from ..ir.graph import DataflowGraph
from ..ir.placement import Placement
from ..timing.fit import (
    Footprint,
    caps_bind,
    check_floor,
    fits,
    no_fit_error,
    simulated_fit,
    static_bounds,
)
from ..timing.memory import format_bytes, memory_caps
from .stage_split import StageSplitter


# -- repair and the final check --------------------------------------------------------------
def repair(
    graph: DataflowGraph, device: np.ndarray, caps: np.ndarray, max_moves: int | None = None
) -> np.ndarray | None:
    """``device`` with ops moved off over-full devices until every static bound fits, or None.

    Each move takes an op off a device over its cap to another device: the move that leaves the
    least excess in all (bytes over the caps), then the one that adds the fewest bytes in all
    (an op whose inputs are already there), then the lowest op and device ids. Every move
    lowers the excess, so it ends.
    """
    fp = Footprint.of(graph, device, caps.size)
    comp = graph.compute_nodes
    limit = comp.size * caps.size if max_moves is None else max_moves
    for _ in range(int(limit)):
        over = np.maximum(fp.used - caps, 0.0)
        total = float(over.sum())
        if total <= 0:
            out = np.asarray(device, dtype=np.int64).copy()
            out[comp] = fp.device[comp]
            return out
        best: tuple[float, float, int, int] | None = None
        for v in comp[over[fp.device[comp]] > 0]:
            a = int(fp.device[v])
            for b in range(caps.size):
                if b == a:
                    continue
                da, db = fp.move_delta(int(v), b)
                after = (
                    total
                    - over[a]
                    - over[b]
                    + max(fp.used[a] + da - caps[a], 0.0)
                    + max(fp.used[b] + db - caps[b], 0.0)
                )
                if after >= total:
                    continue
                key = (after, da + db, int(v), b)
                if best is None or key < best:
                    best = key
        if best is None:
            return None
        fp.move(best[2], best[3])
    return None


def pack(graph: DataflowGraph, caps: np.ndarray) -> np.ndarray | None:
    """A placement by memory alone, or None: ops in topological order, each on the device with
    room where it adds the fewest bytes (ties: the most room left), then :func:`repair`."""
    fp = Footprint(graph, caps.size)
    order = graph.topo_order[~graph.is_input[graph.topo_order]]
    for v in order:
        after = fp.used + fp.need(int(v))
        room = after <= caps
        if room.any():
            left = np.where(room, caps - after, -np.inf)
            d = int(np.lexsort((-left, np.where(room, after - fp.used, np.inf)))[0])
        else:
            d = int(np.argmin(after - caps))
        fp.assign(int(v), d)
    dev = np.zeros(graph.num_nodes, dtype=np.int64)
    dev[order] = fp.device[order]
    if bool(fits(fp.used, caps)):
        return dev
    return repair(graph, dev, caps)


#: the memory baselines a learned placer judges as proposals where a graph does not fit on one
#: device (:func:`doppler_lab.search.proposals.memory_candidates`): Baechi's m-ETF (placer
#: ``etf``) and m-SCT, and the ``pipeline`` stages
MEMORY_BASELINE_PLACERS: tuple[str, ...] = ("etf", "m-sct", "pipeline")


def fit_devices(
    graph: DataflowGraph,
    cluster: Cluster,
    device: np.ndarray,
    placer: str,
    cap: Any = "device",
    fix: bool = True,
) -> tuple[np.ndarray, str | None]:
    """``device`` when it fits the caps, else its repair or the ``pipeline`` placer's stages
    (memory first; where no split keeps within the static bound, the split balanced by compute
    alone when its simulated peak fits), with how it fits: None (its static bound, or no cap
    can bind), ``"simulated"`` (its simulated peak under every semantics, the static bound does
    not), ``"repaired"``, ``"packed"`` (:func:`pack`) or ``"pipeline"`` (the devices returned
    are another placement).

    Raises:
        PlacementError: nothing found fits (:func:`no_fit_error`), or ``device`` does not and
            ``fix`` is False (the devices over their caps, by how much).
    """
    caps = memory_caps(cluster, cap)
    if not caps_bind(graph, caps):
        return device, None
    dev = np.asarray(device, dtype=np.int64)
    if bool(fits(static_bounds(graph, dev[None, :], caps.size)[0], caps)):
        return device, None
    if simulated_fit(graph, cluster, dev, caps):
        return device, "simulated"
    check_floor(graph, caps, placer)
    if not fix:
        bound = static_bounds(graph, dev[None, :], caps.size)[0]
        over = np.flatnonzero(bound > caps)
        what = ", ".join(
            f"device {d} would hold up to {format_bytes(float(bound[d]))} of "
            f"{format_bytes(float(caps[d]))}"
            for d in over
        )
        raise PlacementError(f"placer {placer!r}: {graph.name!r} does not fit: {what}")
    fixed = repair(graph, dev, caps)
    if fixed is not None:
        return fixed, "repaired"
    fixed = pack(graph, caps)
    if fixed is not None:
        return fixed, "packed"
    stages = memory_stages(graph, cluster, caps)
    if stages is not None:
        return stages, "pipeline"
    raise no_fit_error(graph, caps, placer)


def fit_placement(
    graph: DataflowGraph, cluster: Cluster, placement: Placement, placer: str, cap: Any = "device"
) -> Placement:
    """``placement`` when it fits the caps (:func:`fit_devices`), else the fixed one; where
    the static bound did not fit, ``meta["memory_fit"]`` says how it fits (``simulated``,
    ``repaired``, ``packed``, ``pipeline``); the priority is kept."""
    dev, how = fit_devices(graph, cluster, placement.device, placer, cap)
    if how is None:
        return placement
    meta = {**placement.meta, "memory_fit": how}
    if how == "simulated":
        return Placement(placement.device, placement.priority, placement.placer, meta)
    return Placement(dev, placement.priority, placement.placer, meta).with_inputs_filled(graph)


def fit_schedule(graph: DataflowGraph, cluster: Cluster, schedule: Any, placer: str, cost: Any,
                 cap: Any = "device") -> Any:  # fmt: skip
    """A :class:`~doppler_lab.placers.placer_base.Schedule` that fits the caps: ``schedule``
    itself, or the list schedule of the fixed placement in the schedule's order."""
    from .placer_base import list_schedule

    dev, how = fit_devices(graph, cluster, schedule.placement.device, placer, cap)
    if how is None:
        return schedule
    if how == "simulated":
        return schedule.with_meta(memory_fit=how)
    meta = {**schedule.meta, "memory_fit": how}
    prio = schedule.placement.priority
    order = None
    if prio is not None:
        comp = graph.compute_nodes
        order = comp[np.argsort(prio[comp], kind="stable")]
    try:
        return list_schedule(graph, cost, dev, order, placer=placer, meta=meta)
    except PlacementError:  # an order that is not topological for the list schedule
        return list_schedule(graph, cost, dev, None, placer=placer, meta=meta)


def pipeline_split(
    graph: DataflowGraph, cluster: Cluster, caps: np.ndarray, compute: np.ndarray | None = None
) -> tuple[np.ndarray, float] | None:
    """The ``pipeline`` placer's split under ``caps``: ``(N,)`` stage (device) per node (-1:
    inputs) and its bottleneck (:meth:`StageSplitter.best`), or None when none fits.

    Where no split keeps every stage within its static bound, which holds every activation
    for the whole run, the split balanced by compute alone is taken when its simulated peak
    fits ``caps`` (:func:`simulated_fit`: a model whose
    activations, not its weights, overflow one device). ``compute``: the cost model's
    ``(N, D)`` compute times (built from ``cluster`` when None).
    """
    if compute is None:
        from ..timing.cost_model import CostModel

        compute = CostModel(graph, cluster).compute
    got = StageSplitter(graph, compute, caps).best()
    if got is None and not np.all(np.isinf(caps)):  # without a cap: the same split again
        got = StageSplitter(graph, compute, np.full(caps.size, np.inf)).best()
        if got is not None and not simulated_fit(graph, cluster, got[0].clip(0), caps):
            got = None
    return got


def memory_stages(graph: DataflowGraph, cluster: Cluster, caps: np.ndarray) -> np.ndarray | None:
    """``(N,)`` the ``pipeline`` placer's devices under ``caps`` (:func:`pipeline_split`;
    inputs on their first consumer's device), or None when contiguous stages cannot fit."""
    got = pipeline_split(graph, cluster, caps)
    if got is None:
        return None
    return Placement(got[0].clip(0), None, "pipeline").with_inputs_filled(graph).device


__all__ = [
    "MEMORY_BASELINE_PLACERS",
    "fit_devices",
    "fit_placement",
    "fit_schedule",
    "memory_stages",
    "pack",
    "pipeline_split",
    "repair",
]
