"""What every placer shares: the :class:`Placer` protocol, :class:`Schedule`, option checks, and
the delay-model list schedule of a given placement and order.

A placer is built with its options (``get_placer(name, **options)``) and called as
``placer.place(graph, cluster, rng) -> Placement``. List schedulers (``cp``, ``heft``, ``cpop``,
``etf``, ...) also offer ``placer.schedule(graph, cluster, rng) -> Schedule``: the start and
finish of every node under their own estimate and that schedule's makespan. The
``Placement`` they return carries the same makespan in ``meta["schedule_makespan"]``.

Units: a :class:`Schedule` is in reported time (the graph's raw cost units times
``graph.time_scale``), like simulator makespans.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import numpy as np

from ..hardware.cluster import Cluster
from ..house.errors import PlacementError
from ..house.limits import MAX_BUDGET, MAX_SECONDS
from ..house.settings import bad_setting
from ..house.validate import is_number
from ..ir.graph import DataflowGraph
from ..ir.placement import Placement
from ..timing.cost_model import CostModel
from ..timing.schedule import Estimate, ListScheduleState


@runtime_checkable
class Placer(Protocol):
    """Anything that places a graph on a cluster.

    Attributes:
        name: the registry name of the placer.
    """

    name: str

    def place(self, graph: DataflowGraph, cluster: Cluster, rng: np.random.Generator) -> Placement:
        """A device per node (and, where the placer has one, a priority order)."""
        ...


@runtime_checkable
class SchedulingPlacer(Placer, Protocol):
    """A placer that builds a schedule of its own (a list scheduler or the exact solver)."""

    def schedule(
        self, graph: DataflowGraph, cluster: Cluster, rng: np.random.Generator
    ) -> Schedule:
        """The placement with its own start and finish per node."""
        ...


class ScheduleToPlacement:
    """Mixin: ``place`` returns the placement of ``self.schedule``."""

    def place(self, graph: DataflowGraph, cluster: Cluster, rng: np.random.Generator) -> Placement:
        return self.schedule(graph, cluster, rng).placement  # type: ignore[attr-defined]


@dataclass(frozen=True, eq=False)
class Schedule:
    """A placement with the start and finish of every node under a placer's estimate.

    Attributes:
        placement: the placement (priority = the order in which nodes were scheduled).
        start: ``(N,)`` start per node, reported units; NaN for input nodes.
        finish: ``(N,)`` finish per node, reported units; NaN for input nodes.
        makespan: the latest finish, reported units.
        model: the estimate's name (``est``, ``additive``, ``insertion``, ``cp-sat``).
        meta: extra facts (solver status, bound, tie seeds).
    """

    placement: Placement
    start: np.ndarray
    finish: np.ndarray
    makespan: float
    model: str
    meta: dict[str, Any] = field(default_factory=dict)

    def with_meta(self, **meta: Any) -> Schedule:
        """A copy with ``meta`` added to its own and its placement's meta."""
        p = self.placement
        placement = Placement(p.device, p.priority, p.placer, {**p.meta, **meta})
        return Schedule(
            placement, self.start, self.finish, self.makespan, self.model, {**self.meta, **meta}
        )

    def order(self) -> np.ndarray:
        """Compute nodes by start time (ties: node id)."""
        nodes = np.flatnonzero(np.isfinite(self.start))
        return nodes[np.lexsort((nodes, self.start[nodes]))]


def make_schedule(
    graph: DataflowGraph,
    device: np.ndarray,
    start_raw: np.ndarray,
    finish_raw: np.ndarray,
    placer: str,
    model: str,
    order: Sequence[int] | np.ndarray | None = None,
    meta: dict[str, Any] | None = None,
) -> Schedule:
    """A :class:`Schedule` from raw-unit times; inputs get NaN times and their consumer's device.

    ``order`` (the scheduling order) becomes the placement's priority; default: by start time.
    """
    n = graph.num_nodes
    comp = graph.compute_nodes
    start = np.full(n, np.nan)
    finish = np.full(n, np.nan)
    start[comp] = np.asarray(start_raw, dtype=np.float64)[comp] * graph.time_scale
    finish[comp] = np.asarray(finish_raw, dtype=np.float64)[comp] * graph.time_scale
    if order is None:
        order = comp[np.lexsort((comp, start[comp]))]
    priority = np.zeros(n)
    priority[np.asarray(order, dtype=np.int64)] = np.arange(len(order))
    makespan = float(np.max(finish[comp])) if comp.size else 0.0
    info = dict(meta or {})
    dev = np.asarray(device, dtype=np.int64).copy()
    dev[graph.is_input] = 0
    placement = Placement(
        dev, priority, placer, {**info, "schedule_makespan": makespan, "schedule_model": model}
    ).with_inputs_filled(graph)
    return Schedule(placement, start, finish, makespan, model, info)


def list_schedule(
    graph: DataflowGraph,
    cost: CostModel,
    device: np.ndarray | Sequence[int],
    order: np.ndarray | Sequence[int] | None = None,
    estimate: Estimate = "est",
    placer: str = "",
    meta: dict[str, Any] | None = None,
) -> Schedule:
    """Time a given placement by list scheduling its nodes in ``order`` (the delay model).

    Each node starts at its earliest start on its device (``estimate="est"``: device free and
    inputs arrived; no insertion into gaps), so the result is the semi-active schedule of the
    per-device sequences that ``order`` implies. Default order: topological.
    """
    dev = np.asarray(device, dtype=np.int64)
    if dev.shape != (graph.num_nodes,):
        raise PlacementError(
            f"placement has {dev.size} entries, graph {graph.name!r} has {graph.num_nodes} nodes"
        )
    state = ListScheduleState(graph, cost, estimate)
    seq = graph.topo_order if order is None else np.asarray(order, dtype=np.int64)
    for v in seq:
        if not graph.is_input[v]:
            state.assign(int(v), int(dev[v]))
    if not state.done:
        raise PlacementError(
            f"order leaves {graph.num_nodes - state.num_assigned} nodes unscheduled"
        )
    return make_schedule(
        graph, state.device, state.start, state.finish, placer, estimate, state.order, meta
    )


# -- option checks -------------------------------------------------------------------------
def check_positive(
    placer: str,
    option: str,
    value: float | None,
    integer: bool = False,
    optional: bool = True,
    maximum: float | None = None,
) -> None:
    """Raise :class:`ConfigError` unless ``value`` is a positive (integer) number, or None when
    ``optional``, at most ``maximum`` (default: :data:`~doppler_lab.house.limits.MAX_SECONDS` for a
    time option, :data:`~doppler_lab.house.limits.MAX_BUDGET` for the others)."""
    if value is None and optional:
        return
    if maximum is None:
        maximum = MAX_SECONDS if "time" in option else MAX_BUDGET
    kind = "a positive integer" if integer else "a positive number"
    ok = is_number(value) and math.isfinite(_float(value)) and value > 0
    if integer:
        ok = ok and float(value).is_integer()
    if not ok:
        raise bad_setting(f"placer {placer!r}", option, value, kind, "option")
    if value > maximum:
        raise bad_setting(f"placer {placer!r}", option, value, f"{kind} <= {maximum:g}", "option")


def _float(value: object) -> float:
    try:
        return float(value)  # type: ignore[arg-type]
    except OverflowError:
        return math.inf


def check_choice(placer: str, option: str, value: str, choices: Sequence[str]) -> None:
    if value not in choices:
        raise bad_setting(
            f"placer {placer!r}", option, value, f"one of {', '.join(choices)}", "option"
        )


def make_rng(seed: int | np.random.Generator | None) -> np.random.Generator:
    """A generator from a seed (None: fresh entropy) or the generator itself."""
    if isinstance(seed, np.random.Generator):
        return seed
    return np.random.default_rng(seed)


def ties(values: np.ndarray, best: str = "max", rtol: float = 1e-9) -> np.ndarray:
    """Indices of ``values`` equal to their max (or min) within a relative tolerance."""
    v = np.asarray(values, dtype=np.float64)
    ref = v.max() if best == "max" else v.min()
    tol = rtol * max(abs(ref), 1e-300)
    hit = v >= ref - tol if best == "max" else v <= ref + tol
    # a hot path of every rollout: a vector's own nonzero(), np.flatnonzero's answer without its
    # wrappers
    return hit.nonzero()[0] if hit.ndim == 1 else np.flatnonzero(hit)
