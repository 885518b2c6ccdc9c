"""Simulator fidelity, the pieces shared by ``doppler-lab bench fidelity`` and the Stage III
experiments (:mod:`doppler_lab.lab.experiments.real`): placements of varied quality, measuring
them on real devices (shuffled rounds, disturbed runs taken again), and the agreement of
simulated and measured makespans (Spearman rank correlation, median relative error).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from tqdm.auto import tqdm

from ..hardware.cluster import Cluster
from ..house.deps import require
from ..house.errors import ConfigError, PlacementError
from ..house.validate import is_int, show
from ..ir.graph import DataflowGraph
from ..ir.placement import Placement, random_placement, round_robin, single_device

#: placers used when :mod:`doppler_lab.placers` is available (name -> seeds)
PLACERS: dict[str, tuple[int, ...]] = {
    "cp": (0, 1, 2),
    "cp-released": (0,),
    "heft": (0,),
    "cpop": (0,),
    "etf": (0,),
    "m-topo": (0,),
    "enumerative": (0,),
    "local-search": (0,),
}


def _with_devices(graph: DataflowGraph, dev: np.ndarray, label: str) -> Placement:
    return Placement(dev, placer=label).with_inputs_filled(graph)


def fidelity_placements(
    graph: DataflowGraph, cluster: Cluster, rng: np.random.Generator, quick: bool = False
) -> list[Placement]:
    """Placements of varied quality (>= 30 for 2+ devices; fewer when ``quick``)."""
    d = cluster.num_devices
    n = graph.num_nodes
    out: list[Placement] = [single_device(graph, d), round_robin(graph, d)]
    base: list[Placement] = []
    try:
        from ..placers import available_placers, place

        names = [
            k for k in PLACERS if k in available_placers() and not (quick and k == "local-search")
        ]
        for name in names:
            for seed in PLACERS[name][: 1 if quick else None]:
                p = place(name, graph, cluster, seed=seed)
                base.append(Placement(p.device, placer=f"{name}#{seed}"))
    except ImportError:  # pragma: no cover - placers not installed
        pass
    out += base
    for _ in range(3 if quick else 8):
        out.append(random_placement(graph, d, rng))
    for p0 in (0.6, 0.75, 0.9) if quick else (0.6, 0.7, 0.8, 0.9):
        for _ in range(1 if quick else 2):
            dev = np.where(rng.random(n) < p0, 0, rng.integers(1, max(d, 2), n) % d)
            out.append(_with_devices(graph, dev, f"skewed{p0}"))
    order = graph.topo_order[~graph.is_input[graph.topo_order]]
    for chunks in (2, 4, 8):
        dev = np.zeros(n, dtype=np.int64)
        for i, part in enumerate(np.array_split(order, chunks)):
            dev[part] = i % d
        out.append(_with_devices(graph, dev, f"blocks{chunks}"))
    seeds = base or [round_robin(graph, d)]
    for k, frac in enumerate((0.1, 0.3) if quick else (0.05, 0.1, 0.2, 0.3)):
        src = seeds[k % len(seeds)]
        dev = src.device.copy()
        flip = rng.random(n) < frac
        dev[flip] = rng.integers(0, d, int(flip.sum()))
        out.append(_with_devices(graph, dev, f"{src.placer}~{frac}"))
    return out


def spearman(x: Sequence[float], y: Sequence[float]) -> float:
    """Spearman rank correlation (average ranks for ties)."""
    require("scipy.stats", "the Spearman rank correlation")
    from scipy.stats import spearmanr

    if len(x) < 3:
        return float("nan")
    return float(spearmanr(x, y).statistic)


def median_rel_error(predicted: Sequence[float], measured: Sequence[float]) -> float:
    p, m = np.asarray(predicted, dtype=np.float64), np.asarray(measured, dtype=np.float64)
    return float(np.median(np.abs(p - m) / m))


#: a run whose ops took this much longer (median) than calibrated was disturbed by other work
DISTURBED_SLOWDOWN = 1.3
#: how often a disturbed run is repeated before it is kept anyway
MAX_RETRIES = 4


def op_slowdown(trace: Any, graph: DataflowGraph, expected: np.ndarray) -> float:
    """Median over ops of measured duration / expected duration on its device."""
    comp = graph.compute_nodes
    exp = expected[comp, trace.device[comp]]
    dur = (trace.end - trace.start)[comp]
    ok = exp > 0
    return float(np.median(dur[ok] / exp[ok])) if ok.any() else 1.0


@dataclass(frozen=True)
class Passes:
    """How :func:`measure_placements` times each placement: ``rounds`` shuffled passes over
    all of them, each running a placement ``warmup`` times untimed, then ``repeats`` timed."""

    repeats: int
    warmup: int
    rounds: int


def measure_placements(
    graph: DataflowGraph,
    backend: Any,
    placements: Sequence[Placement],
    passes: Passes,
    rng: np.random.Generator,
    progress: bool = False,
    expected: np.ndarray | None = None,
    op_traces: list[dict[str, Any]] | None = None,
) -> tuple[np.ndarray, dict[str, int]]:
    """Every measured makespan of each placement, ``(placements, rounds x repeats)``, over
    the ``passes`` in shuffled order (``rng``).

    With ``op_traces`` (a list), one record per placement is appended to it, in placement
    order: the per-op and per-copy times of the placement's median run
    (:func:`trace_record`), for a model to be fitted to later from the raw file.

    With ``expected`` (``(N, D)`` op times, e.g. a calibrated cost model's), a run whose ops
    took :data:`DISTURBED_SLOWDOWN` times longer than expected (median) is taken again, up to
    :data:`MAX_RETRIES` times (then kept). Returns the samples and the counts of runs
    ``discarded`` and ``kept_disturbed``.
    """
    from . import Executor

    repeats, warmup, rounds = passes.repeats, passes.warmup, passes.rounds
    per: list[list[float]] = [[] for _ in placements]
    kept: list[list[Any]] = [[] for _ in placements]
    counts = {"runs": 0, "discarded": 0, "kept_disturbed": 0}
    with (
        Executor(graph, backend) as ex,
        tqdm(
            total=rounds * len(placements),
            desc=f"measure {graph.name}",
            disable=not progress,
            leave=False,
        ) as bar,
    ):
        for _ in range(rounds):
            for i in rng.permutation(len(placements)):
                pl = placements[i]
                for _ in range(warmup):
                    ex.run(pl)
                for _ in range(repeats):
                    for attempt in range(MAX_RETRIES + 1):
                        trace = ex.run(pl).trace
                        counts["runs"] += 1
                        if (
                            expected is None
                            or op_slowdown(trace, graph, expected) <= DISTURBED_SLOWDOWN
                        ):
                            break
                        if attempt == MAX_RETRIES:
                            counts["kept_disturbed"] += 1
                        else:
                            counts["discarded"] += 1
                    per[i].append(trace.makespan)
                    if op_traces is not None:
                        kept[i].append(trace)
                bar.update()
    if op_traces is not None:
        for times, traces in zip(per, kept, strict=True):
            median = int(np.argsort(times, kind="stable")[(len(times) - 1) // 2]) if times else 0
            op_traces.append(trace_record(traces[median], median) if traces else {})
    return np.array(per, dtype=np.float64), counts


#: the resolution of the times kept by :func:`trace_record` (seconds)
TRACE_RESOLUTION_S = 1e-7


def trace_record(trace: Any, run: int) -> dict[str, Any]:
    """A measured run's per-op and per-copy times as the raw files keep them: ``run`` (its index
    among the placement's timed runs), ``start``/``end`` per node (seconds from the run's start,
    to :data:`TRACE_RESOLUTION_S`; None for inputs, which are not run), and per copy its
    producing node, consuming node, source and destination devices, ``start`` and ``end``."""

    digits = round(-np.log10(TRACE_RESOLUTION_S))

    def times(x: np.ndarray) -> list[float | None]:
        return [None if not np.isfinite(v) else round(float(v), digits) for v in x]

    return {
        "run": int(run),
        "start": times(trace.start),
        "end": times(trace.end),
        "copies": {
            "src": np.asarray(trace.transfer_src, dtype=np.int64).tolist(),
            "dst": np.asarray(trace.transfer_dst, dtype=np.int64).tolist(),
            "src_device": np.asarray(trace.transfer_src_device, dtype=np.int64).tolist(),
            "dst_device": np.asarray(trace.transfer_dst_device, dtype=np.int64).tolist(),
            "start": times(trace.transfer_start),
            "end": times(trace.transfer_end),
        },
    }


#: up to this many ways to halve a run's measuring passes, :func:`noise_ceiling` takes every
#: one (12 passes: 462); beyond, ``splits`` of them drawn at random
ALL_PASS_SPLITS = 1000


def _pass_halves(
    runs: int, runs_per_pass: int, rng: np.random.Generator | None = None, splits: int = 200
) -> list[tuple[np.ndarray, np.ndarray]]:
    """Ways to halve a placement's ``runs`` by whole measuring passes: per way, the run indices
    of its two halves. The runs are in measuring order, pass after pass, ``runs_per_pass`` to a
    pass (the layout of :func:`measure_placements`: ``rounds`` passes of ``repeats`` runs).
    Every way of putting half the passes (rounded down) in the first half, each counted once,
    where there are at most :data:`ALL_PASS_SPLITS`; else ``splits`` of them drawn with ``rng``.

    Raises:
        ConfigError: (a ValueError) ``runs_per_pass`` is not an integer >= 1, the runs are not
            whole passes of it, or they make fewer than 2 passes.
    """
    if not is_int(runs_per_pass) or runs_per_pass < 1:
        raise ConfigError(
            f"noise_ceiling runs_per_pass is {show(runs_per_pass)}; expected an integer >= 1 "
            "(the timed runs of one measuring pass)"
        )
    passes, rest = divmod(int(runs), int(runs_per_pass))
    if rest:
        raise ConfigError(
            f"noise_ceiling: {runs} runs per placement are not whole passes of runs_per_pass="
            f"{runs_per_pass}; expected a multiple of it"
        )
    if passes < 2:
        raise ConfigError(
            f"noise_ceiling: {runs} runs per placement with runs_per_pass={runs_per_pass} make "
            f"{passes} pass(es); expected at least 2 passes to split"
        )
    k = passes // 2
    # with an even count a way and its mirror are the same split: keep those with pass 0 first
    once = passes % 2 == 0
    if math.comb(passes, k) // (2 if once else 1) <= ALL_PASS_SPLITS:
        firsts = [c for c in itertools.combinations(range(passes), k) if not once or 0 in c]
    else:
        rng = np.random.default_rng(0) if rng is None else rng
        firsts = [tuple(rng.permutation(passes)[:k]) for _ in range(splits)]
    which = np.arange(runs) // runs_per_pass
    out = []
    for first in firsts:
        a = np.isin(which, first)
        out.append((np.flatnonzero(a), np.flatnonzero(~a)))
    return out


def noise_ceiling(
    samples: np.ndarray,
    rng: np.random.Generator | None = None,
    splits: int = 200,
    runs_per_pass: int | None = None,
) -> float:
    """The Spearman correlation a perfect model could expect against these measurements.

    ``samples`` ``(placements, runs)``: every measured makespan. The runs of each placement are
    split in two random halves, the medians of the halves are rank-correlated over the
    placements (the split-half reliability, mean over ``splits`` splits, Spearman-Brown
    corrected to all runs), and the ceiling is its square root (the correlation of a noisy
    measure with its own noise-free value). Below about 0.9, the measurements themselves cannot
    confirm a Spearman target of 0.9; above it, what a model misses is the model's. NaN with
    fewer than 2 runs or 3 placements.

    With ``runs_per_pass``, the runs are in measuring order, pass after pass (a pass: a block
    of ``runs_per_pass`` consecutive runs, :func:`measure_placements`'s ``repeats``), and the
    halves are whole passes, half of them against the others (:func:`_pass_halves`: every such
    split where there are few, else ``splits`` drawn with ``rng``; the mean correlation over
    them, corrected as above): what drifts between passes (a placement measured at a busier
    moment of one pass) is then noise between the halves instead of being shared by both, so
    the ceiling is the one a model meets against another pass's measurements, lower where such
    drift exists.

    Raises:
        ConfigError: (a ValueError) with ``runs_per_pass``: it is below 1, the runs are not at
            least 2 whole passes of it, or ``samples`` is not ``(placements, runs)``.
    """
    x = np.asarray(samples, dtype=np.float64)
    if runs_per_pass is not None:
        if x.ndim != 2:
            raise ConfigError(
                f"noise_ceiling samples have shape {x.shape}; expected (placements, runs) to "
                "split by measuring pass"
            )
        halves = _pass_halves(x.shape[1], runs_per_pass, rng, splits)
        if x.shape[0] < 3:
            return float("nan")
        rs = [spearman(np.median(x[:, a], axis=1), np.median(x[:, b], axis=1)) for a, b in halves]
        return _spearman_brown_root(float(np.nanmean(rs)))
    if x.ndim != 2 or x.shape[0] < 3 or x.shape[1] < 2:
        return float("nan")
    rng = np.random.default_rng(0) if rng is None else rng
    half = x.shape[1] // 2
    runs = np.tile(np.arange(x.shape[1]), (x.shape[0], 1))
    rs = []
    for _ in range(splits):
        order = rng.permuted(runs, axis=1)
        a = np.median(np.take_along_axis(x, order[:, :half], axis=1), axis=1)
        b = np.median(np.take_along_axis(x, order[:, half:], axis=1), axis=1)
        rs.append(spearman(a, b))
    return _spearman_brown_root(float(np.nanmean(rs)))


def _spearman_brown_root(r: float) -> float:
    """The ceiling of a split-half correlation ``r``: Spearman-Brown corrected to both halves,
    square root (0 for a non-positive ``r``, NaN for NaN)."""
    if not np.isfinite(r) or r <= 0:
        return 0.0 if np.isfinite(r) else float("nan")
    return float(np.sqrt(2 * r / (1 + r)))


def placement_shape(
    graph: DataflowGraph,
    placements: Sequence[Placement | np.ndarray],
    costs: np.ndarray | None = None,
    num_devices: int | None = None,
) -> dict[str, np.ndarray]:
    """Per placement, how it spreads the graph (for where a model errs, :func:`error_correlation`).

    - ``imbalance``: the busiest device's load over the mean load of the ``num_devices``
      devices (1: even; ``D``: everything on one device). An op's load is its cost on its
      device, ``costs`` ``(N,)`` or ``(N, D)`` (e.g. a cost model's ``compute``), or 1 per
      compute op where ``costs`` is None; inputs are not run and weigh nothing.
    - ``copies``: the cross-device copies it makes, one per producing op and receiving device
      other than its own (one copy serves every consumer on that device, as the executor
      copies); inputs are resident wherever they are read and make none.

    Args:
        graph: the graph.
        placements: each a :class:`Placement` or its device per node.
        costs: per-op costs (None: op counts).
        num_devices: the devices (None: the columns of a 2-D ``costs``, else the highest device
            used + 1).

    Raises:
        PlacementError: a placement of another length than the graph, or a device out of range.
        ConfigError: ``costs`` of another shape than ``(N,)`` or ``(N, D)``.
    """
    devs = [
        np.asarray(p.device if isinstance(p, Placement) else p, dtype=np.int64) for p in placements
    ]
    n = graph.num_nodes
    c = None if costs is None else np.asarray(costs, dtype=np.float64)
    if num_devices is None:
        used = [int(d.max()) + 1 for d in devs if d.size]
        num_devices = c.shape[1] if c is not None and c.ndim == 2 else max(used, default=1)
    d = int(num_devices)
    comp = graph.compute_nodes
    if c is None:
        c = np.ones(n)
    if c.shape not in ((n,), (n, d)):
        raise ConfigError(
            f"placement_shape costs have shape {c.shape}; expected ({n},) or ({n}, {d})"
        )
    if c.ndim == 1:
        c = np.repeat(c[:, None], d, axis=1)
    cross = ~graph.is_input[graph.edge_src]
    src, dst = graph.edge_src[cross], graph.edge_dst[cross]
    imbalance, copies = np.empty(len(devs)), np.empty(len(devs), dtype=np.int64)
    for i, dev in enumerate(devs):
        if dev.shape != (n,) or (dev[comp].size and (dev[comp].min() < 0 or dev[comp].max() >= d)):
            raise PlacementError(
                f"placement {i} has {dev.size} devices for {n} nodes, or a device outside "
                f"[0, {d}); expected one device in [0, {d}) per node"
            )
        load = np.bincount(dev[comp], weights=c[comp, dev[comp]], minlength=d)
        mean = load.sum() / d
        imbalance[i] = load.max() / mean if mean > 0 else np.nan
        moved = dev[src] != dev[dst]
        copies[i] = np.unique(src[moved] * d + dev[dst[moved]]).size
    return {"imbalance": imbalance, "copies": copies}


def error_correlation(
    simulated: Sequence[float], measured: Sequence[float], shape: dict[str, Sequence[float]]
) -> dict[str, float]:
    """The Spearman correlation, over placements, of a model's log error
    ``log(simulated / measured)`` with each column of ``shape`` (:func:`placement_shape`): a
    positive one with ``imbalance`` means the model is slower than the real devices where a
    placement crowds one device. NaN where it cannot be computed: fewer than 3 placements
    with a finite error and value, or either side constant.

    Raises:
        ConfigError: (a ValueError) the inputs do not have one value per placement each.
    """
    sim = np.asarray(simulated, dtype=np.float64)
    mea = np.asarray(measured, dtype=np.float64)
    sizes = {sim.shape, mea.shape} | {np.shape(v) for v in shape.values()}
    if len(sizes) > 1:
        raise ConfigError(
            f"error_correlation got per-placement values of shapes {sorted(sizes)}; expected "
            "one value per placement in each"
        )
    with np.errstate(divide="ignore", invalid="ignore"):
        err = np.log(sim / mea)
    out = {}
    for key, values in shape.items():
        v = np.asarray(values, dtype=np.float64)
        ok = np.isfinite(err) & np.isfinite(v)
        e, x = err[ok], v[ok]
        constant = e.size == 0 or np.ptp(e) == 0 or np.ptp(x) == 0
        out[key] = float("nan") if e.size < 3 or constant else spearman(e, x)
    return out


def workload_row(
    name: str, spec: str, graph: DataflowGraph, placements: int, measured: np.ndarray
) -> dict[str, Any]:
    """The first columns of a fidelity table's row for one workload."""
    return {
        "workload": name,
        "spec": spec,
        "ops": int(graph.compute_nodes.size),
        "placements": int(placements),
        "measured_min_ms": float(measured.min() * 1e3),
        "measured_max_ms": float(measured.max() * 1e3),
    }
