"""Shared pieces of the training experiments: learning-curve frames, curve statistics, tables
over seeds, one torch thread, and runs on the real CPU worker devices."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd
from tqdm.auto import tqdm

from ...executor import Executor, make_backend
from ...executor.backend import make_cpu_cluster
from ...executor.profiling import calibrate as measure
from ...hardware.cluster import Cluster
from ...house.errors import ConfigError
from ...house.runners import torch_threads as torch_threads  # its home; experiments import it here
from ...house.stats import bootstrap_interval, judge_claim, paired_differences
from ...ir.graph import DataflowGraph
from ...ir.placement import Placement
from ...ir.trace import Trace
from ...search.learned import best_of_rollouts
from ...timing.sim import Simulator
from ...viz.curves import smooth
from ...workloads.specs import parse_graph_spec

#: metrics copied from a stage's rows into a learning-curve frame
CURVE_METRICS: tuple[str, ...] = ("cost_mean", "cost_min", "greedy_cost")


def stage_curve(
    rows: Sequence[Mapping[str, Any]], stage: str, offset: int = 0, **labels: Any
) -> pd.DataFrame:
    """One stage's metrics rows as a learning-curve frame.

    Args:
        rows: the stage's metrics rows (``TrainResult.rows`` or ``read_rows``).
        stage: ``imitation``, ``sim`` or ``real`` (the rows' column prefix).
        offset: episodes trained before this stage (added to ``episode``).
        labels: constant columns (``variant="I+II"``, ``seed=0``).

    Returns:
        Columns: the labels, ``stage``, ``episode`` (cumulative), ``stage_episode`` and
        :data:`CURVE_METRICS` (NaN where a row has no value).
    """
    recs = []
    for r in rows:
        rec: dict[str, Any] = {
            **labels,
            "stage": stage,
            "episode": int(r["episode"]) + offset,
            "stage_episode": int(r["episode"]),
        }
        for m in CURVE_METRICS:
            v = r.get(f"{stage}/{m}")
            rec[m] = float(v) if v is not None else math.nan
        recs.append(rec)
    cols = [*labels, "stage", "episode", "stage_episode", *CURVE_METRICS]
    return pd.DataFrame(recs, columns=cols)


def start_point(cost: float, stage: str, **labels: Any) -> pd.DataFrame:
    """A one-row curve frame at episode 0: the greedy cost of a policy before training."""
    rec = {**labels, "stage": stage, "episode": 0, "stage_episode": 0}
    rec.update({m: math.nan for m in CURVE_METRICS})
    rec["greedy_cost"] = float(cost)
    return pd.DataFrame([rec])


def greedy_makespan(policy: Any, graph: DataflowGraph, cluster: Cluster, semantics: str) -> float:
    """Simulated makespan of ``policy``'s greedy rollout (no sampling, no search)."""

    placement = best_of_rollouts(policy, graph, cluster, 0, 0, semantics).placement
    return float(Simulator(graph, cluster, semantics).makespan(placement))  # type: ignore[arg-type]


def episodes_to_reach(
    episodes: Sequence[float] | np.ndarray, costs: Sequence[float] | np.ndarray, target: float
) -> int | None:
    """The first episode whose cost is at most ``target`` (NaN costs skipped); None if never."""
    e = np.asarray(episodes, dtype=np.float64)
    c = np.asarray(costs, dtype=np.float64)
    hit = np.nonzero(~np.isnan(c) & (c <= target * (1 + 1e-9)))[0]
    return int(e[hit[0]]) if hit.size else None


def convergence_stats(
    episodes: Sequence[float] | np.ndarray,
    costs: Sequence[float] | np.ndarray,
    tail: float = 0.2,
    tol: float = 0.05,
    smoothing: float = 0.6,
) -> dict[str, float | None]:
    """How fast and how steadily a cost curve settles.

    Args:
        episodes: the episode of each point (increasing).
        costs: the cost of each point (e.g. ``cost_mean`` per update).
        tail: fraction of the points (at least one) averaged for ``first`` and ``final``.
        tol: relative band around ``final`` that counts as settled.
        smoothing: EMA weight applied before testing the band (noise of single updates).

    Returns:
        ``first`` and ``final`` (mean of the first / last ``tail`` of the points),
        ``improvement`` ((first - final) / first), ``settle_episode`` (the episode from which
        the smoothed curve stays within ``tol`` of ``final``; None if its last point is
        outside) and ``tail_cv`` (std / mean of the raw costs over the second half: jitter).
    """

    e = np.asarray(episodes, dtype=np.float64)
    c = np.asarray(costs, dtype=np.float64)
    ok = ~np.isnan(c)
    e, c = e[ok], c[ok]
    if c.size == 0:
        raise ConfigError("convergence_stats needs at least one finite cost; got none")
    if not 0 < tail <= 1:
        raise ConfigError(f"convergence_stats tail = {tail!r}, expected a fraction in (0, 1]")
    k = max(1, int(math.ceil(tail * c.size)))
    first, final = float(c[:k].mean()), float(c[-k:].mean())
    s = smooth(c, smoothing)
    outside = np.nonzero(np.abs(s - final) > tol * abs(final))[0]
    if outside.size == 0:
        settle: float | None = float(e[0])
    elif outside[-1] + 1 < c.size:
        settle = float(e[outside[-1] + 1])
    else:
        settle = None
    half = c[c.size // 2 :]
    return {
        "first": first,
        "final": final,
        "improvement": (first - final) / first if first else math.nan,
        "settle_episode": settle,
        "tail_cv": float(half.std() / half.mean()) if half.mean() else math.nan,
    }


def mean_std_table(
    frame: pd.DataFrame, by: Sequence[str], values: Sequence[str], order: Sequence[str] = ()
) -> pd.DataFrame:
    """Mean and standard deviation (over the rows of each group, e.g. seeds) of ``values``:
    columns ``<value>`` and ``<value>_std``, plus ``seeds`` (rows per group). Groups follow
    ``order`` for the first key when given."""
    g = frame.groupby(list(by), sort=False)
    out = g[list(values)].mean()
    std = g[list(values)].std(ddof=0).add_suffix("_std")
    out = out.join(std)
    out["seeds"] = g.size()
    out = out[[c for v in values for c in (v, f"{v}_std")] + ["seeds"]].reset_index()
    if order:
        rank = {v: i for i, v in enumerate(order)}
        out = out.sort_values(by[0], key=lambda s: s.map(lambda v: rank.get(v, len(rank))))
    return out.reset_index(drop=True)


def cpu_cluster(
    graph: DataflowGraph,
    devices: int = 2,
    calibrate: bool = True,
    seed: int = 0,
    progress: bool = False,
) -> tuple[Cluster, str]:
    """The CPU worker devices as a cluster for the simulator and the executor.

    With ``calibrate`` a quick calibration (about a second) measures the devices and ``graph``'s
    ops with the executor and returns the fitted cluster; else the uncalibrated ``cpu`` preset.

    Returns:
        ``(cluster, how)`` where ``how`` says which (and the parallel capacity measured).
    """

    base = make_cpu_cluster(devices)
    if not calibrate:
        return base, f"cpu preset, {devices} devices (uncalibrated)"

    backend = make_backend(base)
    try:
        profile = measure(backend, [graph], quick=True, seed=seed, progress=progress)
    finally:
        backend.close()
    cap = profile.meta.get("parallel_capacity")
    cap_s = f", parallel capacity {cap:.2f}" if isinstance(cap, float) else ""
    return profile.cluster, f"calibrated quickly on {devices} CPU workers{cap_s}"


def measure_placements(
    graph: DataflowGraph,
    cluster: Cluster,
    placements: Mapping[str, Placement],
    repeats: int = 3,
    rounds: int = 3,
    seed: int = 0,
    progress: bool = False,
) -> tuple[dict[str, np.ndarray], dict[str, Trace]]:
    """Measured makespans of several placements on the real devices of ``cluster``.

    Every round runs each placement ``repeats`` times (one warm-up run in the first round), the
    placements in a fresh random order, so that drifts in the machine's load hit them alike.

    Returns:
        Per label every timed makespan (seconds), and the trace of its last run (median repeat
        of the last round).
    """

    if repeats < 1 or rounds < 1:
        raise ConfigError(f"repeats and rounds must be >= 1, got {repeats} and {rounds}")
    rng = np.random.default_rng(seed)
    labels = list(placements)
    samples: dict[str, list[float]] = {k: [] for k in labels}
    traces: dict[str, Trace] = {}
    with Executor(graph, cluster, seed=seed) as ex:
        bar = tqdm(total=rounds * len(labels), desc="measure", leave=False, disable=not progress)
        for r in range(rounds):
            for i in rng.permutation(len(labels)):
                label = labels[i]
                res = ex.run(placements[label], repeats=repeats, warmup=1 if r == 0 else 0)
                samples[label] += res.makespans_s.tolist()
                traces[label] = res.trace
                bar.update()
        bar.close()
    return {k: np.asarray(v) for k, v in samples.items()}, traces


def finite_or_none(x: float) -> float | int | None:
    """``x`` as a float (an int stays an int), or None for NaN (JSON-friendly)."""
    if isinstance(x, int | np.integer):
        return int(x)
    v = float(x)
    return None if math.isnan(v) else v


def spec_with(spec: str, **params: Any) -> str:
    """A workload or model ``spec`` (maybe with parameters already) with ``params`` set
    (:meth:`doppler_lab.workloads.specs.GraphSpec.with_params`): ``spec_with("chainmm",
    scale=0.1)`` is ``"chainmm:scale=0.1"``."""
    if not params:
        return spec

    return str(parse_graph_spec(spec).with_params(**params))


def with_cost_units(frame: pd.DataFrame, unit: str | None) -> pd.DataFrame:
    """``frame`` (learning curves) saying the unit of its cost columns (:data:`CURVE_METRICS`: makespans
    of the graph trained on, in its ``time_unit``; measured ones in seconds) in
    ``attrs["units"]``, which :func:`~doppler_lab.viz.curves.learning_curves` draws them in;
    ``unit`` None (curves of graphs in different units) says nothing."""
    if unit is not None:
        frame.attrs["units"] = {c: unit for c in CURVE_METRICS if c in frame.columns}
    return frame


def interval_table(
    frame: pd.DataFrame,
    by: Sequence[str],
    value: str,
    order: Sequence[str] = (),
    seed: int = 0,
) -> pd.DataFrame:
    """Per group of ``by`` (e.g. graph and method), the mean of ``value`` over its rows (the
    seeds) with its 95% bootstrap interval (:func:`~doppler_lab.house.stats.bootstrap_interval`):
    columns ``by``, ``value`` (the mean), ``<value>_low``, ``<value>_high`` and ``seeds``. Groups
    follow ``order`` for the last key when given (e.g. the methods' order)."""

    recs = []
    for keys, group in frame.groupby(list(by), sort=False):
        vals = group[value].dropna().to_numpy(dtype=np.float64)
        if vals.size == 0:
            continue
        low, high = bootstrap_interval(vals, seed=seed)
        keys = keys if isinstance(keys, tuple) else (keys,)
        recs.append(
            {
                **dict(zip(by, keys, strict=True)),
                value: float(vals.mean()),
                f"{value}_low": low,
                f"{value}_high": high,
                "seeds": int(vals.size),
            }
        )
    out = pd.DataFrame(recs, columns=[*by, value, f"{value}_low", f"{value}_high", "seeds"])
    if order:
        rank = {v: i for i, v in enumerate(order)}
        last = by[-1]
        out = out.sort_values(
            [*by[:-1], last],
            key=lambda s: s.map(lambda v: rank.get(v, len(rank))) if s.name == last else s,
            kind="stable",
        )
    return out.reset_index(drop=True)


def paired_table(
    runs: pd.DataFrame | Sequence[Mapping[str, Any]],
    reference: str,
    others: Sequence[str],
    *,
    key: str = "method",
    value: str = "makespan",
    on: Sequence[str] = ("graph", "seed"),
    seed: int = 0,
) -> pd.DataFrame:
    """``reference`` against each of ``others``, paired by ``on`` (graph and seed): per
    comparison the pairs, the mean of ``(other - reference) / other`` (how much lower the
    reference's ``value`` is, a fraction of the other's; positive: the reference is better),
    its 95% bootstrap interval, the Wilcoxon signed-rank p-value, the effect size ``d_z`` and
    the verdict on "the reference is better" (``supports`` / ``contradicts`` /
    ``inconclusive``, :func:`~doppler_lab.house.stats.judge_claim`, the rule of every page)."""

    records = runs.to_dict(orient="records") if isinstance(runs, pd.DataFrame) else list(runs)
    rows = []
    for other in others:
        d, _ = paired_differences(records, reference, other, key=key, value=value, on=on)
        if d.size == 0:
            continue
        st = judge_claim(d, direction=+1, seed=seed)
        rows.append(
            {
                "comparison": f"{reference} vs {other}",
                "pairs": st.n,
                "lower_by": st.mean,
                "lower_by_low": st.low,
                "lower_by_high": st.high,
                "wilcoxon_p": st.p_value,
                "effect_size_dz": st.effect_size,
                "verdict": st.verdict,
            }
        )
    return pd.DataFrame(rows)
