"""The placer registry: names mapped to ``"module:attr"`` targets, imported only when used.

Built-in placers live in this package. The learned policies (``doppler``, ``placeto``, ``gdp``)
are reserved names whose targets live in :mod:`doppler_lab.search.learned` (torch); they are
listed by :func:`available_placers` once that module exists, found without importing it, so
``doppler_lab.placers`` never imports torch. Other packages can add placers through the entry
point group ``doppler_lab.placers`` (``name = "package.module:PlacerClass"``).

A target is a class (or factory) called with the placer's options as keyword arguments; the
object it returns has a ``name`` and a ``place(graph, cluster, rng)`` method (see
:class:`~doppler_lab.placers.placer_base.Placer`).
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import importlib.machinery
import importlib.metadata
import importlib.util
import inspect
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

import numpy as np

from ..hardware.cluster import Cluster
from ..house.errors import PlacementError
from ..house.limits import LIMITS
from ..house.settings import parse_spec, split_specs, unknown_setting
from ..ir.graph import DataflowGraph
from ..ir.placement import Placement
from ..timing.cost_model import CostModel
from ..timing.fit import MemoryGuard, no_fit_error, static_bounds
from .placer_base import Placer, make_rng
from .repair import fit_placement, fit_schedule

ENTRY_POINT_GROUP = "doppler_lab.placers"
LEARNED_MODULE = "doppler_lab.search.learned"


@dataclass(frozen=True)
class PlacerSpec:
    """A registry entry.

    Attributes:
        name: the name used on the command line and in tables.
        target: ``"module:attr"`` of the placer class or factory.
        kind: ``baseline``, ``list`` (list scheduler), ``search``, ``exact`` or ``learned``.
        summary: one line for ``--help`` and tables.
        stochastic: the result depends on the seed (tables run it once per seed).
        needs_checkpoint: takes a ``checkpoint`` option (learned policies).
        max_ops: the limit (:mod:`doppler_lab.house.limits`) on the compute ops it takes, for a
            placer that would run for many minutes above it (:func:`check_placer_size`).
        max_cells: the limit on its compute ops times the cluster's devices, for a placer
            that holds tensors per (node, device) (:func:`check_placer_size`).
    """

    name: str
    target: str
    kind: str
    summary: str
    stochastic: bool = False
    needs_checkpoint: bool = False
    max_ops: str | None = None
    max_cells: str | None = None


def _spec(name: str, target: str, kind: str, summary: str, **kw: Any) -> tuple[str, PlacerSpec]:
    return name, PlacerSpec(name, target, kind, summary, **kw)


_P = "doppler_lab.placers"
BUILTIN_PLACERS: Mapping[str, PlacerSpec] = MappingProxyType(
    dict(
        [
            _spec(
                "random",
                f"{_P}.simple:RandomPlacer",
                "baseline",
                "uniform random device per node",
                stochastic=True,
            ),
            _spec(
                "round-robin",
                f"{_P}.simple:RoundRobinPlacer",
                "baseline",
                "node i on device i mod D",
            ),
            _spec("single", f"{_P}.simple:SinglePlacer", "baseline", "every node on one device"),
            _spec(
                "cp",
                f"{_P}.critical_path:CriticalPathPlacer",
                "list",
                "Critical Path teacher: max b-level node, min earliest-start device",
                stochastic=True,
            ),
            _spec(
                "cp-released",
                f"{_P}.critical_path:ReleasedCriticalPathPlacer",
                "list",
                "the released CP baseline with its indexing bug (comparison only)",
                stochastic=True,
            ),
            _spec(
                "heft",
                f"{_P}.heft:HeftPlacer",
                "list",
                "HEFT (Topcuoglu et al. 2002), insertion-based",
            ),
            _spec("cpop", f"{_P}.heft:CpopPlacer", "list", "CPOP (Topcuoglu et al. 2002)"),
            _spec(
                "etf",
                f"{_P}.baechi:EtfPlacer",
                "list",
                "earliest task first (Baechi m-ETF)",
            ),
            _spec(
                "m-topo",
                f"{_P}.baechi:TopoPlacer",
                "list",
                "topological fill per device (Baechi m-TOPO)",
            ),
            _spec(
                "m-sct",
                f"{_P}.baechi:SctPlacer",
                "list",
                "ETF with LP favourite children, small communication times (Baechi m-SCT)",
                max_ops="MAX_QUADRATIC_PLACER_OPS",
            ),
            _spec(
                "pipeline",
                f"{_P}.pipeline_placer:PipelinePlacer",
                "baseline",
                "contiguous stages in topological order: least bottleneck compute, each stage "
                "within its device's memory",
            ),
            _spec(
                "cp-rollout",
                f"{_P}.cp_rollout:CPRolloutPlacer",
                "search",
                "rollout over deterministic CP: each CP node on the device whose CP completion "
                "simulates best",
                max_ops="MAX_ROLLOUT_PLACER_OPS",
            ),
            _spec(
                "partition",
                f"{_P}.partition:PartitionPlacer",
                "search",
                "METIS min-cut k-way partition (balanced compute, least transfer), best of tries",
            ),
            _spec(
                "clustering",
                f"{_P}.clustering:ClusteringPlacer",
                "list",
                "edge-zeroing clustering (Sarkar 1989), clusters mapped onto the devices; for "
                "transfer-heavy graphs",
                max_ops="MAX_QUADRATIC_PLACER_OPS",
            ),
            _spec(
                "local-search",
                f"{_P}.local_search:LocalSearchPlacer",
                "search",
                "simulated annealing / hill climbing over placements (budget: simulator calls)",
                stochastic=True,
            ),
            _spec(
                "enumerative",
                f"{_P}.enumerative:EnumerativePlacer",
                "search",
                "greedy per-node/group enumeration of device choices by simulated cost",
                stochastic=True,  # its start (cp) breaks ties at random
            ),
            _spec(
                "exact",
                f"{_P}.exact:ExactPlacer",
                "exact",
                "CP-SAT placement + order under the delay model",
            ),
        ]
    )
)

LEARNED_PLACERS: Mapping[str, PlacerSpec] = MappingProxyType(
    dict(
        [
            _spec(
                "doppler",
                f"{LEARNED_MODULE}:DopplerPlacer",
                "learned",
                "DOPPLER dual policy (SEL + PLC): the general one or a checkpoint; --budget searches",
                needs_checkpoint=True,
                max_cells="MAX_LEARNED_PLACER_CELLS",
            ),
            _spec(
                "placeto",
                f"{LEARNED_MODULE}:PlacetoPlacer",
                "learned",
                "Placeto (Addanki et al. 2019), from a checkpoint",
                needs_checkpoint=True,
                max_ops="MAX_PLACETO_OPS",
                max_cells="MAX_LEARNED_PLACER_CELLS",
            ),
            _spec(
                "gdp",
                f"{LEARNED_MODULE}:GdpPlacer",
                "learned",
                "GDP (Zhou et al. 2019), from a checkpoint",
                needs_checkpoint=True,
                max_cells="MAX_LEARNED_PLACER_CELLS",
            ),
        ]
    )
)


def _module_exists(module: str) -> bool:
    """Whether ``module`` can be imported, found on the path without importing its packages."""
    if module in sys.modules:
        return True
    parts = module.split(".")
    try:
        spec = importlib.util.find_spec(parts[0])
    except (ImportError, ValueError):
        return False
    for part in parts[1:]:
        if spec is None or spec.submodule_search_locations is None:
            return False
        spec = importlib.machinery.PathFinder.find_spec(part, list(spec.submodule_search_locations))
    return spec is not None


@functools.lru_cache(maxsize=1)
def _entry_point_specs() -> dict[str, PlacerSpec]:
    """Plugin placers, read once per process (scanning the installed distributions' entry
    points took 20-80 ms, on every ``place`` call before)."""
    out: dict[str, PlacerSpec] = {}
    for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        out[ep.name] = PlacerSpec(ep.name, ep.value, "plugin", f"plugin placer {ep.value}")
    return out


def placer_specs() -> dict[str, PlacerSpec]:
    """Every available placer's :class:`PlacerSpec`, by name (built-ins first)."""
    specs = dict(BUILTIN_PLACERS)
    if _module_exists(LEARNED_MODULE):
        specs.update(LEARNED_PLACERS)
    for name, spec in dict(_entry_point_specs()).items():
        specs.setdefault(name, spec)
    return specs


#: the ``doppler`` placer's policy alone as a placer spec (its greedy rollout and samples, no
#: heuristic proposal: :data:`~doppler_lab.search.proposals.POLICY_ALONE_PROPOSALS`), the
#: "policy alone" row beside every ``doppler`` row
POLICY_ALONE_SPEC = "doppler:proposals=none"


def parse_placer_spec(spec: str) -> tuple[str, dict[str, Any]]:
    """A placer spec in the one spec grammar, ``NAME`` or ``NAME:key=value,...`` (e.g.
    ``doppler:proposals=none``, the policy alone), as the placer's name and its options.

    Raises:
        PlacementError: an unknown placer (naming the choices).
        ConfigError: an option not of the form ``key=value``, or one given twice.
    """
    name, options = parse_spec(spec, f"placer spec {spec.strip()!r}", "option")
    placer_spec(name)
    return name, options


def split_placer_specs(text: str) -> list[str]:
    """The placer specs of a comma-separated list (``cp,heft,doppler:proposals=none``): an
    item ``key=value`` continues the spec before it (``doppler:samples=4,partitions=0`` is
    one spec); items stripped, empty ones kept (the caller names them);
    :func:`~doppler_lab.house.settings.split_specs`."""
    return split_specs(text)


def available_placers() -> list[str]:
    """Names accepted by :func:`get_placer` and :func:`place`."""
    return list(placer_specs())


def placer_spec(name: str) -> PlacerSpec:
    """The registry entry of ``name`` (:class:`PlacementError` naming the choices if unknown)."""
    specs = placer_specs()
    if name not in specs:
        hint = ""
        if name in LEARNED_PLACERS:
            hint = (
                f" ({name!r} needs the learned policies: module {LEARNED_MODULE} is not installed)"
            )
        raise PlacementError(f"unknown placer {name!r}{hint}; expected one of: {', '.join(specs)}")
    return specs[name]


def _resolve(target: str) -> Any:
    module, _, attr = target.partition(":")
    obj = importlib.import_module(module)
    for part in attr.split("."):
        obj = getattr(obj, part)
    return obj


def placer_options(name: str) -> list[str]:
    """The option names placer ``name`` accepts."""
    factory = _resolve(placer_spec(name).target)
    if dataclasses.is_dataclass(factory):
        return [f.name for f in dataclasses.fields(factory) if f.init and f.name != "name"]
    params = inspect.signature(factory).parameters.values()
    return [p.name for p in params if p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD)]


class FittedPlacer:
    """A registered placer whose every placement is fitted to the memory caps once, here
    (:func:`~doppler_lab.placers.repair.fit_placement`: as it is where it fits by the static
    bound or the simulated peak, else repaired), so that placers need not finish their own
    result; everything else (``name``, ``schedule``, options) is the placer's own."""

    def __init__(self, placer: Any) -> None:
        self._placer = placer

    def __getattr__(self, name: str) -> Any:
        if name == "_placer":  # not set yet (copy, unpickling)
            raise AttributeError(name)
        return getattr(self._placer, name)

    def __repr__(self) -> str:
        return f"FittedPlacer({self._placer!r})"

    @property
    def placer(self) -> Any:
        """The placer itself (its result not fitted)."""
        return self._placer

    def place(self, graph: DataflowGraph, cluster: Cluster, rng: np.random.Generator) -> Placement:
        """The placer's placement, fitted to ``cluster``'s caps."""
        out = self._placer.place(graph, cluster, rng)
        return fit_placement(graph, cluster, out, self._placer.name)

    @staticmethod
    def of(placer: Any) -> FittedPlacer:
        """``placer`` with its results fitted (:class:`FittedScheduler` for a placer that also
        gives a schedule)."""
        return FittedScheduler(placer) if hasattr(placer, "schedule") else FittedPlacer(placer)


class FittedScheduler(FittedPlacer):
    """A :class:`FittedPlacer` of a scheduling placer: its schedule is fitted, and its
    placement is the fitted schedule's."""

    def place(self, graph: DataflowGraph, cluster: Cluster, rng: np.random.Generator) -> Placement:
        """The placement of the fitted :meth:`schedule`."""
        return self.schedule(graph, cluster, rng).placement

    def schedule(self, graph: DataflowGraph, cluster: Cluster, rng: np.random.Generator) -> Any:
        """A scheduling placer's schedule, fitted to the caps
        (:func:`~doppler_lab.placers.repair.fit_schedule`: itself where it fits, else the list
        schedule of the fixed placement in its order) under the placer's ``memory_cap`` when it
        has one; a ``memory_used`` in its meta (the static bound per device) is of the result."""
        placer = self._placer
        sched = placer.schedule(graph, cluster, rng)
        cap = getattr(placer, "memory_cap", "device")
        fitted = fit_schedule(graph, cluster, sched, placer.name, CostModel(graph, cluster), cap)
        if "memory_used" in sched.meta and fitted is not sched:
            dev = fitted.placement.device[None, :]
            fitted = fitted.with_meta(
                memory_used=static_bounds(graph, dev, cluster.num_devices)[0].tolist()
            )
        return fitted


def get_placer(name: str, **options: Any) -> Placer:
    """Build placer ``name`` with ``options`` (unknown options raise :class:`ConfigError`), its
    results fitted to the memory caps (:class:`FittedPlacer`).

    ``timing``, the name of ``estimate`` before 0.2, is still read.
    """
    if "timing" in options and "estimate" not in options:
        options = {("estimate" if k == "timing" else k): v for k, v in options.items()}
    spec = placer_spec(name)
    factory = _resolve(spec.target)
    takes_any = not dataclasses.is_dataclass(factory) and any(
        p.kind is p.VAR_KEYWORD for p in inspect.signature(factory).parameters.values()
    )
    if not takes_any:
        known = placer_options(name)
        bad = [k for k in options if k not in known]
        if bad:
            raise unknown_setting(f"placer {name!r}", bad[0], known, "option")
    return FittedPlacer.of(factory(**options))  # type: ignore[return-value]


#: placers that take 100,000 ops in seconds, suggested when a graph is over another's limit
FAST_PLACERS = ("heft", "etf", "cp")


def check_placer_size(name: str, graph: DataflowGraph, cluster: Cluster | None = None) -> None:
    """Refuse a graph over placer ``name``'s size limit (:attr:`PlacerSpec.max_ops`), or a
    graph and ``cluster`` over its limit on compute ops x devices (:attr:`PlacerSpec.max_cells`);
    before the placer allocates anything.

    Raises:
        PlacementError: naming the placer, the graph's compute ops (and the devices), the limit
            and faster placers.
    """
    spec = placer_spec(name)
    ops = int(graph.compute_nodes.size)
    faster = f"a faster placer ({', '.join(FAST_PLACERS)}: seconds on 100,000 ops)"
    if spec.max_ops is not None and ops > LIMITS[spec.max_ops]:
        raise PlacementError(
            f"placer {name!r} on graph {graph.name!r}: {ops:,} compute ops; the limit is "
            f"{LIMITS[spec.max_ops]:,} (doppler_lab.house.limits.{spec.max_ops}) as its time "
            f"grows with the square of the ops; expected a smaller graph or {faster}"
        )
    if spec.max_cells is None or cluster is None:
        return
    cells = ops * cluster.num_devices
    if cells > LIMITS[spec.max_cells]:
        raise PlacementError(
            f"placer {name!r} on graph {graph.name!r} and cluster {cluster.name!r}: {ops:,} "
            f"compute ops x {cluster.num_devices:,} devices = {cells:,}; the limit is "
            f"{LIMITS[spec.max_cells]:,} (doppler_lab.house.limits.{spec.max_cells}) as its "
            f"rollouts hold features per node and device; expected a smaller graph, fewer "
            f"devices or {faster}"
        )


def place(
    name: str,
    graph: DataflowGraph,
    cluster: Cluster,
    seed: int | np.random.Generator | None = None,
    **options: Any,
) -> Placement:
    """Place ``graph`` on ``cluster`` with placer ``name``; the result is validated.

    Example:
        >>> from doppler_lab.ir.graph import GraphBuilder
        >>> from doppler_lab.hardware import make_cluster
        >>> b = GraphBuilder("g")
        >>> a = b.add_node("a", cost=2.0)
        >>> _ = b.add_node("b", inputs=[a], cost=1.0, edge_costs=[5.0])
        >>> place("cp", b.build(), make_cluster("uniform", 2), seed=0).device.tolist()
        [0, 0]
    """
    check_placer_size(name, graph, cluster)
    placer = get_placer(name, **options)
    placement = placer.place(graph, cluster, make_rng(seed))
    return placement.validate(graph, cluster.num_devices)


def start_placement(
    graph: DataflowGraph, cluster: Cluster, start: str, placer: str, rng: np.random.Generator
) -> Placement:
    """The placement a search placer ``placer`` starts from: placer ``start``'s; where no
    placement fits the caps, the one-line :func:`no_fit_error` in ``placer``'s name."""
    guard = MemoryGuard(graph, cluster, placer)  # a cap nothing meets: this placer says so
    try:
        return place(start, graph, cluster, seed=rng)
    except PlacementError:
        if not guard.binds:
            raise
        raise no_fit_error(graph, guard.caps, placer) from None
