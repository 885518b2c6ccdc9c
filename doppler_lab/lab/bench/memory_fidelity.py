"""``doppler-lab bench memory-fidelity``: the simulated peak memory against the measured one.

Each generated workload at ``scale=0.1`` runs on CPU workers (2 by default) under the cp,
round-robin and random placements. The prediction is the simulated run's peak per device
(``wc`` semantics, FIFO, the roofline: what ``simulate`` prints). Each placement then runs
:data:`RUNS` times (one repeat each, after one warm-up) under two dispatch rules:

- ``fifo``, the executor's default: work-conserving, ops in the order they become ready. Its
  schedule is not the simulator's and does not repeat itself (threads, the GIL and other load
  decide who goes first), so its peak varies from run to run for one placement;
- ``simulated`` (:mod:`doppler_lab.executor.replay`): each device allocates and releases in the
  order of the simulated run.

A row is one placement and rule: the simulated peak per device, the measured range over the
runs, the largest gap ``|measured - simulated| / measured`` over runs and devices, the gap of
the runs' median, the share of runs within :data:`TARGET_GAP` on every device, and the median
makespan. The target (issue 35, item 6): the simulated peak within 10% of the measured one on
every run of every case under the ``simulated`` rule. FIFO's rows show how far a free-running
schedule is from any single prediction.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ...executor import Executor
from ...executor.replay import simulated_schedule
from ...house.deps import require
from ...house.progress import progress as progress_bar
from ...ir.placement import random_placement, round_robin
from ...placers import place
from ...timing.sim import Simulator
from ...viz import series_color
from ...workloads.specs import graph_from_spec
from ._report import write_report

WORKLOADS: tuple[str, ...] = ("chainmm", "ffnn", "llama_block", "llama_layer", "moe_layer")
QUICK_WORKLOADS: tuple[str, ...] = ("chainmm", "llama_block")
PLACEMENTS: tuple[str, ...] = ("cp", "round-robin", "random")
QUICK_PLACEMENTS: tuple[str, ...] = ("cp", "round-robin")
DISPATCH: tuple[str, ...] = ("fifo", "simulated")
SCALE, QUICK_SCALE = 0.1, 0.02
RUNS, QUICK_RUNS = 8, 2
#: the issue's bound on ``|measured - simulated| / measured``
TARGET_GAP = 0.10
#: FIFO's band: the lowest and highest peak of BAND_RUNS simulations with lognormal duration
#: noise of sigma BAND_NOISE (the simulator's ``noise``), seeds 0..BAND_RUNS-1
BAND_NOISE, BAND_RUNS = 0.3, 64
COLUMNS = [
    "workload", "placement", "dispatch", "simulated_mb", "measured_mb", "worst_gap",
    "median_run_gap", "runs_within_target", "band_mb", "runs_in_band", "makespan_ms",
]  # fmt: skip


def measure_case(
    executor: Any, placement: Any, schedule: Any, dispatch: str, runs: int
) -> tuple[np.ndarray, np.ndarray]:
    """``runs`` executions of ``placement`` (one warm-up first): ``(peaks (runs, D),
    makespans (runs,))``."""
    peaks, spans = [], []
    for r in range(runs):
        res = executor.run(
            placement,
            repeats=1,
            warmup=1 if r == 0 else 0,
            dispatch=dispatch,
            schedule=schedule if dispatch == "simulated" else None,
        )
        peaks.append(np.asarray(res.trace.peak_memory_bytes, dtype=np.float64))
        spans.append(res.makespan)
    return np.array(peaks), np.array(spans)


def make_placement(name: str, graph: Any, cluster: Any) -> Any:
    """``cp``, ``round-robin`` or ``random`` (seed 1) of ``graph`` on ``cluster``."""

    if name == "round-robin":
        return round_robin(graph, cluster.num_devices)
    if name == "random":
        return random_placement(graph, cluster.num_devices, np.random.default_rng(1))

    return place(name, graph, cluster, seed=0)


def noisy_band(graph: Any, cluster: Any, placement: Any) -> tuple[np.ndarray, np.ndarray]:
    """``(lowest, highest)`` peak per device over :data:`BAND_RUNS` noisy simulations."""

    sim = Simulator(graph, cluster, "wc", noise=BAND_NOISE)
    peaks = np.array([sim.run(placement, seed=s).peak_memory_bytes for s in range(BAND_RUNS)])
    return peaks.min(axis=0), peaks.max(axis=0)


def band_row(band: tuple[np.ndarray, np.ndarray], measured: np.ndarray) -> dict[str, Any]:
    """The band columns: the band per device (MB) and the share of runs inside it on every
    device."""
    lo, hi = band
    inside = (measured >= lo * (1 - 1e-12)) & (measured <= hi * (1 + 1e-12))
    return {
        "band_mb": " ".join(f"{a / 1e6:.2f}-{b / 1e6:.2f}" for a, b in zip(lo, hi, strict=True)),
        "runs_in_band": round(float(inside.all(axis=1).mean()), 3),
    }


def gap_row(simulated: np.ndarray, measured: np.ndarray) -> dict[str, Any]:
    """The gap columns of a row: ``simulated`` ``(D,)`` against ``measured`` ``(runs, D)``."""
    gaps = np.abs(measured - simulated) / np.maximum(measured, 1.0)
    median = np.median(measured, axis=0)
    fmt = lambda a: " ".join(f"{x / 1e6:.2f}" for x in a)  # noqa: E731
    return {
        "simulated_mb": fmt(simulated),
        "measured_mb": " ".join(
            f"{lo / 1e6:.2f}-{hi / 1e6:.2f}"
            for lo, hi in zip(measured.min(axis=0), measured.max(axis=0), strict=True)
        ),
        "worst_gap": round(float(gaps.max()), 4),
        "median_run_gap": round(float((np.abs(median - simulated) / median).max()), 4),
        "runs_within_target": round(float((gaps.max(axis=1) <= TARGET_GAP).mean()), 3),
    }


def measure_workload(
    spec: str,
    num_devices: int = 2,
    runs: int = RUNS,
    placements: Sequence[str] = PLACEMENTS,
    bar: Any = None,
) -> list[dict[str, Any]]:
    """The rows of one workload (a graph spec): each placement under each rule of
    :data:`DISPATCH`, ``runs`` runs each on ``num_devices`` CPU workers; each row also keeps
    every run's peaks (``peaks_mb``, runs x devices) and the simulated ones (``simulated``)."""

    graph = graph_from_spec(spec)
    rows: list[dict[str, Any]] = []
    with Executor(graph, "cpu", num_devices=num_devices) as ex:
        for name in placements:
            placement = make_placement(name, graph, ex.cluster)
            schedule = simulated_schedule(graph, ex.cluster, placement)
            simulated = np.asarray(schedule.trace.peak_memory_bytes, dtype=np.float64)
            band = noisy_band(graph, ex.cluster, placement)
            for dispatch in DISPATCH:
                if bar is not None:
                    bar.set_postfix_str(f"{spec} {name} {dispatch}")
                peaks, spans = measure_case(ex, placement, schedule, dispatch, runs)
                rows.append({
                    "workload": spec.split(":")[0], "placement": name, "dispatch": dispatch,
                    **gap_row(simulated, peaks),
                    **(band_row(band, peaks) if dispatch == "fifo" else {}),
                    "makespan_ms": round(float(np.median(spans)) * 1e3, 2),
                    "peaks_mb": np.round(peaks / 1e6, 4).tolist(),
                    "simulated": np.round(simulated / 1e6, 4).tolist(),
                })  # fmt: skip
                if bar is not None:
                    bar.update(1)
    return rows


def peaks_figure(rows: Sequence[dict[str, Any]], title: str | None = None) -> Any:
    """Each run's measured peak per device (a box of points per placement, device and rule)
    against the simulated peak (a dashed line across the device), from
    :func:`measure_workload`'s rows."""
    go = require("plotly.graph_objects", "the measured-memory figure")

    fig = go.Figure()
    for i, dispatch in enumerate(DISPATCH):
        x, y = [], []
        for r in rows:
            if r["dispatch"] != dispatch:
                continue
            for run_peaks in r["peaks_mb"]:
                for d, p in enumerate(run_peaks):
                    x.append(f"{r['placement']} · device {d}")
                    y.append(p)
        fig.add_trace(
            go.Box(
                x=x, y=y, name=f"measured, {dispatch}", boxpoints="all", jitter=0.4, pointpos=0,
                marker=dict(color=series_color(i), size=5), line=dict(color=series_color(i)),
                fillcolor="rgba(0,0,0,0)",
            )
        )  # fmt: skip
    cats: list[str] = []  # the categories in the boxes' order, each with its simulated peak
    for r in rows:
        if r["dispatch"] == DISPATCH[0]:
            cats += [f"{r['placement']} · device {d}" for d in range(len(r["simulated"]))]
    sims = [p for r in rows if r["dispatch"] == DISPATCH[0] for p in r["simulated"]]
    for i, p in enumerate(sims):  # a dashed line across the category
        fig.add_shape(
            type="line", x0=i - 0.45, x1=i + 0.45, y0=p, y1=p, xref="x", yref="y",
            line=dict(color="black", width=2, dash="dash"),
        )  # fmt: skip
    fig.add_trace(  # the lines' legend entry
        go.Scatter(
            x=[cats[0]] if cats else [], y=[sims[0]] if sims else [], mode="lines",
            name="simulated peak", line=dict(color="black", width=2, dash="dash"),
        )
    )  # fmt: skip
    fig.update_layout(
        title=title or "Peak memory per device: measured runs against the simulated peak",
        boxmode="group",
        yaxis=dict(title="peak of live tensors (MB)"),
        template="plotly_white",
        legend=dict(title="run"),
    )
    return fig


def run(
    out_dir: Path,
    quick: bool = False,
    progress: bool = True,
    num_devices: int = 2,
    runs: int | None = None,
) -> dict[str, Any]:
    """Run the benchmark and write ``memory-fidelity.{json,md}`` into ``out_dir``."""
    t_start = time.perf_counter()
    works = QUICK_WORKLOADS if quick else WORKLOADS
    places = QUICK_PLACEMENTS if quick else PLACEMENTS
    scale = QUICK_SCALE if quick else SCALE
    runs = runs or (QUICK_RUNS if quick else RUNS)
    rows: list[dict[str, Any]] = []
    bar = progress_bar(
        total=len(works) * len(places) * len(DISPATCH), desc="bench memory-fidelity",
        enabled=progress, unit="case",
    )  # fmt: skip
    try:
        for w in works:
            rows += measure_workload(f"{w}:scale={scale}", num_devices, runs, places, bar)
    finally:
        bar.close()
    summary = summarise(rows)
    summary["wall_s"] = round(time.perf_counter() - t_start, 1)
    notes = [
        f"{len(works)} workloads at scale={scale} on {num_devices} CPU workers (one intra-op "
        f"thread each), placements {', '.join(places)} (random: seed 1); {runs} runs of each "
        "placement and rule, one repeat each after one warm-up.",
        "simulated_mb: the simulated run's peak per device (wc semantics, FIFO, the roofline "
        "of this machine's cpu cluster); measured_mb: the lowest-highest measured peak per "
        "device (bytes of live tensors the executor held); worst_gap: the largest "
        "|measured - simulated| / measured over runs and devices; median_run_gap: the same for "
        f"the runs' median per device; runs_within_target: the share of runs within "
        f"{TARGET_GAP:.0%} on every device.",
        "fifo runs whichever op is ready first, so its schedule (and its peak) changes from run "
        "to run; simulated replays the simulated order of allocations and releases on each "
        "device (doppler_lab.executor.replay), so its peak is the simulated one except where an "
        "op's real output size differs from the graph's out_bytes.",
        f"band_mb (fifo rows): the lowest-highest simulated peak per device over {BAND_RUNS} "
        f"simulations with lognormal duration noise sigma {BAND_NOISE} (seeds 0-"
        f"{BAND_RUNS - 1}): what the simulator expects a free-running schedule to span; "
        "runs_in_band: the share of FIFO runs inside it on every device.",
    ]
    return write_report(
        out_dir,
        "memory-fidelity",
        "Simulated against measured peak memory on CPU workers",
        {"Peaks per workload, placement and dispatch rule": (rows, COLUMNS)},
        summary=summary,
        notes=notes,
        command="doppler-lab bench memory-fidelity" + (" --quick" if quick else ""),
    )


def summarise(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The target and each rule's worst and typical gaps."""
    out: dict[str, Any] = {}
    for dispatch in DISPATCH:
        mine = [r for r in rows if r["dispatch"] == dispatch]
        if not mine:
            continue
        worst = max(r["worst_gap"] for r in mine)
        out[f"{dispatch}_worst_gap"] = worst
        out[f"{dispatch}_median_run_gap_max"] = max(r["median_run_gap"] for r in mine)
        out[f"{dispatch}_runs_within_target"] = round(
            float(np.mean([r["runs_within_target"] for r in mine])), 3
        )
        if dispatch == "fifo":
            out["fifo_runs_in_band"] = round(float(np.mean([r["runs_in_band"] for r in mine])), 3)
    replay = [r for r in rows if r["dispatch"] == "simulated"]
    if replay:
        worst = max(r["worst_gap"] for r in replay)
        ok = worst <= TARGET_GAP
        out["target"] = (
            f"{'pass' if ok else 'FAIL'} (simulated dispatch: worst gap {worst:.1%} over "
            f"{len(replay)} cases; target <= {TARGET_GAP:.0%} on every run)"
        )
    fifo = {
        (r["workload"], r["placement"]): r["makespan_ms"] for r in rows if r["dispatch"] == "fifo"
    }
    ratios = [
        r["makespan_ms"] / fifo[(r["workload"], r["placement"])]
        for r in replay
        if fifo.get((r["workload"], r["placement"]))
    ]
    if ratios:
        out["simulated_over_fifo_makespan_median"] = round(float(np.median(ratios)), 3)
    return out


__all__ = [
    "COLUMNS",
    "TARGET_GAP",
    "WORKLOADS",
    "band_row",
    "gap_row",
    "make_placement",
    "measure_case",
    "measure_workload",
    "peaks_figure",
    "noisy_band",
    "run",
    "summarise",
]
