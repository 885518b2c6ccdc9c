"""``doppler-lab bench memory``: models that do not fit on one GPU, placed by every placer.

Each case (:data:`CASES`) is a model imported at its published size without weights (the
zoo's presets, :mod:`doppler_lab.importers.zoo`) or a large generated MoE, on a cluster none of
whose devices can hold it: the case table gives the simulated peak of the whole graph on one
device against the cap, so that "memory-bound" is measured, not assumed. Every placer of
:func:`placer_runs` then places it within the devices' memory (``wc`` semantics, no noise, seed
0); a row is the simulated makespan, the peak per device against the cap and the wall time of
the ``place`` call, or "does not fit" with the placer's one-line error. ``exact`` runs only on
graphs of at most :data:`EXACT_MAX_OPS` ops and is skipped, with the reason, on larger ones.

:data:`FITS_ONE_CASES` are the other way round: models whose static bound (every tensor live
for the whole run) exceeds the 8 GB cap but whose simulated peak fits one device; the target of
issue 44 (:func:`one_device_targets`): every memory-aware placer (:data:`MEMORY_AWARE`) within
:data:`ONE_DEVICE_SLACK` of the whole graph's makespan on one device there. Caps are each
device's memory less its runtime reserve (:func:`~doppler_lab.timing.memory.memory_caps`).

The targets of issue 35 (:func:`target_rows`): ``doppler`` (zero-shot, the general policy with
its proposals) fits every case and is no worse than the best of m-ETF (placer ``etf``), m-SCT
and ``pipeline`` on at least :data:`TARGET_SHARE` of them; ``doppler --budget 2000`` is no
worse than that best on every case. Issue 45's: the policy alone (the best of ``doppler``'s own
rollouts, each judged with a placement over a cap costing inf) no worse than that best on every
case. ``--checkpoint`` picks the ``doppler`` rows' policy (default: the placer's). "No worse"
allows float rounding only (:data:`REL_TOL`).

Notebook 14 (``14_memory``) calls :func:`compare_placers` and :func:`cap_sweep` from here.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ...hardware.cluster import Cluster
from ...house.deps import require
from ...house.errors import ConfigError, PlacementError
from ...house.progress import progress as progress_bar
from ...ir.graph import DataflowGraph
from ...ir.placement import Placement
from ...placers import get_placer, placer_options
from ...placers.placer_base import make_rng
from ...timing.fit import stored_bytes
from ...timing.memory import memory_caps, memory_reserves, tensor_bytes
from ...timing.sim import Simulator
from ...viz import series_color
from ...viz.tables import axis_scale, axis_type
from ...workloads.specs import cluster_from_spec, graph_from_spec
from ._report import write_report

#: the memory baselines of the targets, by row label (m-ETF is the placer ``etf``)
BASELINES: tuple[str, ...] = ("m-etf", "m-sct", "pipeline")
#: the doppler rows of the targets: zero-shot, and with a budget of simulator calls
DOPPLER, DOPPLER_BUDGET = "doppler", "doppler-budget"
#: the share of cases on which zero-shot doppler must be no worse than the best baseline
TARGET_SHARE = 0.8
#: "no worse": a makespan at most the best baseline's times (1 + REL_TOL) (float rounding)
REL_TOL = 1e-9
#: ``exact`` (CP-SAT) runs on graphs of at most this many ops; on larger ones a time-limited
#: solve returns its hint (a measured run: reports/notes/bench_notes.md)
EXACT_MAX_OPS = 150
SEMANTICS = "wc"
#: the bench's first run, before the memory baselines joined doppler's proposals (history: the
#: why of :data:`~doppler_lab.search.proposals.MEMORY_BASELINES`)
EARLIER = (
    "Before the memory baselines joined doppler's proposals (code version de644a65560b, the "
    "same cases), doppler zero-shot was no worse than the best baseline on 2 of 4 cases "
    "(llama3-8b: 28.63 ms against m-ETF's 28.62, +0.04%; moe: 423.1 ms against m-SCT's 421.9, "
    "+0.3%) and doppler --budget 2000 on 3 of 4 (llama3-8b: 28.63, its search from the "
    "policy's greedy rollout found nothing better); and pipeline and clustering did not fit "
    "gpt2-xl (the static bound of its activations, 54 GB, exceeds 4 x 8 GB), until the "
    "pipeline split fell back to the compute-balanced one when its simulated peak fits."
)


@dataclass(frozen=True)
class MemoryCase:
    """One graph on one cluster whose devices cannot hold it alone.

    Attributes:
        name: the label of the case in the tables.
        graph: a graph spec (README, "Graph and cluster specs").
        cluster: a cluster spec.
        memory_cap: bytes of every device (``--memory-cap``); None: the devices' own memory.
    """

    name: str
    graph: str
    cluster: str
    memory_cap: float | None = None

    def __post_init__(self) -> None:
        if self.memory_cap is not None and not (
            math.isfinite(self.memory_cap) and self.memory_cap > 0
        ):
            raise ConfigError(
                f"memory case {self.name!r}: memory_cap = {self.memory_cap!r}; expected bytes > 0"
            )

    def build(self) -> tuple[DataflowGraph, Cluster]:
        """The graph and the cluster (with the cap, when one is given)."""

        graph = graph_from_spec(self.graph)
        cluster = cluster_from_spec(self.cluster)
        if self.memory_cap is not None:
            cluster = cluster.with_memory(self.memory_cap)
        return graph, cluster


#: the issue's cases: sequence lengths and layer counts chosen so that each is too big for one
#: device (the case table measures it) and the bench runs in minutes on two cores
CASES: tuple[MemoryCase, ...] = (
    MemoryCase("llama2-13b fp16 / p100x4", "hf-llama:preset=llama2-13b,dtype=float16", "p100x4"),
    MemoryCase("llama3-8b fp32 / v100x8", "hf-llama:preset=llama3-8b,dtype=float32", "v100x8"),
    # activations bind (figures: reports/notes/bench_notes.md)
    MemoryCase("gpt2-xl b12 / 4 x 8 GB", "hf-gpt2:preset=gpt2-xl,seq=1024,batch=12", "p100x4", 8e9),
    # Mixtral-8x22B-sized layers (d_model 6144, experts 16384 wide), 13 of them
    MemoryCase(
        "moe 13 layers / h100x8",
        "moe_layer:layers=13,d_model=6144,expert_ffn=16384,heads=48",
        "h100x8",
    ),
)
#: models that fit on one 8 GB device by their simulated peak although their static bound (every
#: tensor live for the whole run) is several times the cap (reports/notes/bench_notes.md): a
#: memory-aware placer has no reason to split them (the target of issue 44: within
#: :data:`ONE_DEVICE_SLACK` of one device's makespan)
FITS_ONE_CASES: tuple[MemoryCase, ...] = (
    MemoryCase("gpt2-xl b4 / 4 x 8 GB", "hf-gpt2:preset=gpt2-xl,seq=1024,batch=4", "p100x4", 8e9),
    MemoryCase("moe 1 layer / 4 x 8 GB", "moe_layer", "p100x4", 8e9),
    MemoryCase(
        "resnet b128 / 4 x 8 GB",
        "resnet:stages=4,blocks=3,channels=64,image=224,batch=128",
        "p100x4",
        8e9,
    ),
)
#: the memory-aware placers held to the one-device target on :data:`FITS_ONE_CASES`
MEMORY_AWARE: tuple[str, ...] = ("cp", "heft", "m-etf", "m-topo", "m-sct", "pipeline")
#: on a case that fits one device, a memory-aware placer's makespan is at most this times the
#: whole graph's makespan on one device
ONE_DEVICE_SLACK = 1.1
#: ``--quick``: two small graphs under caps that make them memory-bound
QUICK_CASES: tuple[MemoryCase, ...] = (
    MemoryCase(
        "llama2-13b 2 layers / p100x4 at 0.8 GB",
        "hf-llama:preset=llama2-13b,dtype=float16,layers=2",
        "p100x4",
        0.8e9,
    ),
    MemoryCase(
        "moe 2 layers / h100x8 at 8 GB",
        "moe_layer:layers=2,d_model=6144,expert_ffn=16384,heads=48",
        "h100x8",
        8e9,
    ),
)


@dataclass(frozen=True)
class PlacerRun:
    """A row of the placer table: a label, the registered placer and its options (the case's
    semantics is added where the placer takes one)."""

    label: str
    placer: str
    options: Mapping[str, Any] = field(default_factory=dict)


def placer_runs(
    budget: int = 2000, exact_time_limit: float = 30.0, checkpoint: str | None = None
) -> tuple[PlacerRun, ...]:
    """Every placer of the table: the list schedulers, the memory baselines, the search
    placers with ``budget`` simulator calls, ``exact``, and ``doppler`` zero-shot and with
    ``budget`` (``checkpoint``: its policy, a path or a shipped name; None: the default)."""
    policy = {} if checkpoint is None else {"checkpoint": str(checkpoint)}
    return (
        PlacerRun("cp", "cp"),
        PlacerRun("heft", "heft"),
        PlacerRun("m-etf", "etf"),
        PlacerRun("cpop", "cpop"),
        PlacerRun("m-topo", "m-topo"),
        PlacerRun("m-sct", "m-sct"),
        PlacerRun("pipeline", "pipeline"),
        PlacerRun("clustering", "clustering"),
        PlacerRun("partition", "partition"),
        PlacerRun("local-search", "local-search", {"budget": budget}),
        PlacerRun("exact", "exact", {"time_limit": exact_time_limit}),
        PlacerRun(DOPPLER, "doppler", policy),
        PlacerRun(DOPPLER_BUDGET, "doppler", {**policy, "budget": budget}),
    )


def select_runs(labels: str | Sequence[str], budget: int = 2000) -> tuple[PlacerRun, ...]:
    """The runs of :func:`placer_runs` named in ``labels`` (comma-separated text or a list), in
    that order."""
    names = [x.strip() for x in labels.split(",")] if isinstance(labels, str) else list(labels)
    known = {r.label: r for r in placer_runs(budget)}
    unknown = [n for n in names if n and n not in known]
    if unknown:
        raise ConfigError(
            f"bench memory: unknown placer {unknown[0]!r}; expected one of {', '.join(known)}"
        )
    return tuple(known[n] for n in names if n)


def make_placers(runs: Sequence[PlacerRun], semantics: str = SEMANTICS) -> dict[str, Any]:
    """The placer of each run by label (built once: a learned placer loads its checkpoint
    once for every case)."""

    out = {}
    for run in runs:
        opts = dict(run.options)
        if "semantics" in placer_options(run.placer):
            opts.setdefault("semantics", semantics)
        out[run.label] = get_placer(run.placer, **opts)
    return out


def _gb(x: float) -> float | None:
    return float(x) / 1e9 if math.isfinite(x) else None


def peaks_text(peaks: np.ndarray) -> str:
    """``6.17 7.70 6.26 5.91``: each device's peak in GB."""
    return " ".join(f"{p / 1e9:.2f}" for p in np.asarray(peaks, dtype=np.float64))


def case_facts(graph: DataflowGraph, cluster: Cluster, semantics: str = SEMANTICS) -> dict:
    """How big the case is: ops, devices, the cap, the stored inputs (weights), every tensor
    once (the static bound of one device), and the simulated peak and makespan of the whole
    graph on one device (``fits_one_device`` False: the case is memory-bound)."""

    caps = memory_caps(cluster)
    reserve = memory_reserves(cluster)
    trace = Simulator(graph, cluster, semantics).run(np.zeros(graph.num_nodes, dtype=np.int64))
    peak = float(trace.peak_memory_bytes[0])
    return {
        "ops": int(graph.compute_nodes.size),
        "devices": int(cluster.num_devices),
        "memory_gb": _gb(float(caps[0] + reserve[0])),
        "reserve_gb": float(reserve[0]) / 1e9,
        "cap_gb": _gb(float(caps[0])),
        "weights_gb": stored_bytes(graph) / 1e9,
        "all_tensors_gb": float(tensor_bytes(graph).sum()) / 1e9,
        "one_device_peak_gb": peak / 1e9,
        "fits_one_device": bool(peak <= caps[0]),
        "one_device_makespan_s": float(trace.makespan),
    }


def _skip_reason(run: PlacerRun, graph: DataflowGraph) -> str | None:
    ops = int(graph.compute_nodes.size)
    if run.placer == "exact" and ops > EXACT_MAX_OPS:
        return (
            f"skipped: {ops} ops > {EXACT_MAX_OPS} (CP-SAT under a time limit returns its hint "
            "at this size)"
        )
    return None


def _meta_note(meta: Mapping[str, Any]) -> str:
    """What a placement's meta says worth a table cell: the learned placer's winner and its
    rollouts' best, how a placement fits when its static bound does not, exact's status."""
    parts = []
    if "source" in meta:
        parts.append(f"winner: {meta['source']}")
    if "rollout_cost" in meta and math.isfinite(float(meta["rollout_cost"])):
        parts.append(f"policy's best rollout {float(meta['rollout_cost']):.5g}")
    if "memory_fit" in meta:
        parts.append(f"fits: {meta['memory_fit']}")
    if "status" in meta:
        parts.append(f"CP-SAT {meta['status']}, gap {float(meta.get('gap', math.nan)):.1%}")
    return "; ".join(parts)


def compare_placers(
    graph: DataflowGraph,
    cluster: Cluster,
    runs: Sequence[PlacerRun],
    placers: Mapping[str, Any] | None = None,
    semantics: str = SEMANTICS,
    seed: int = 0,
    bar: Any = None,
    one_device_s: float | None = None,
) -> tuple[list[dict[str, Any]], dict[str, Placement]]:
    """Every run of ``runs`` on ``graph`` and ``cluster``: one row each (makespan under
    ``semantics`` without noise, or None with the one-line error when the placer finds nothing
    that fits; the peak per device against the cap; the seconds of the ``place`` call) and the
    placement of each run that placed.

    Args:
        graph, cluster: the case (the cluster carries the caps).
        runs: the placers (:func:`placer_runs`).
        placers: the built placers by label (:func:`make_placers`; built here when None).
        semantics: the simulator semantics of the makespans (and of the placers that take one).
        seed: the placers' seed.
        bar: a progress bar advanced once per run.
        one_device_s: the makespan of the whole graph on one device, where it fits there:
            each row's ``ratio_vs_one_device`` (makespan over it; None without it or where the
            placement does not fit).
    """

    placers = placers if placers is not None else make_placers(runs, semantics)
    caps = memory_caps(cluster)
    sim = Simulator(graph, cluster, semantics)  # type: ignore[arg-type]
    rows: list[dict[str, Any]] = []
    placements: dict[str, Placement] = {}
    for run in runs:
        if bar is not None:
            bar.set_postfix_str(run.label)
        row: dict[str, Any] = {"placer": run.label, "makespan_s": None, "fits": False}
        skip = _skip_reason(run, graph)
        if skip is not None:
            rows.append({**row, "fits": None, "note": skip})
            if bar is not None:
                bar.update(1)
            continue
        t0 = time.perf_counter()
        try:
            p = placers[run.label].place(graph, cluster, make_rng(seed))
        except PlacementError as exc:
            rows.append({**row, "runtime_s": time.perf_counter() - t0, "note": str(exc)})
            if bar is not None:
                bar.update(1)
            continue
        runtime = time.perf_counter() - t0
        p = p.validate(graph, cluster.num_devices)
        trace = sim.run(p)
        peaks = np.asarray(trace.peak_memory_bytes, dtype=np.float64)
        placements[run.label] = p
        rows.append(
            {
                **row,
                "makespan_s": float(trace.makespan),
                "fits": bool(np.all(peaks <= caps)),
                "peak_gb": peaks_text(peaks),
                "max_peak_gb": float(peaks.max()) / 1e9,
                "cap_gb": _gb(float(caps.min())),
                "devices_used": int(np.count_nonzero(np.bincount(
                    p.device[graph.compute_nodes], minlength=cluster.num_devices))),
                "runtime_s": runtime,
                "sim_calls": int(p.meta.get("sim_calls", 0)),
                "source": p.meta.get("source"),
                "policy_s": p.meta.get("rollout_cost"),
                "note": _meta_note(p.meta),
            }
        )  # fmt: skip
        if bar is not None:
            bar.update(1)
    best = best_baseline(rows)
    for r in rows:
        ms = r["makespan_s"]
        r["vs_best_baseline"] = 1.0 - ms / best[1] if (best and ms is not None) else None
        fits = ms is not None and r["fits"] and one_device_s is not None
        r["ratio_vs_one_device"] = ms / one_device_s if fits else None
    return rows, placements


def best_baseline(rows: Sequence[Mapping[str, Any]]) -> tuple[str, float] | None:
    """The memory baseline (:data:`BASELINES`) with the lowest makespan among those that fit,
    as (label, makespan); None when none fits."""
    fitting = [
        (r["placer"], float(r["makespan_s"]))
        for r in rows
        if r["placer"] in BASELINES and r["fits"] and r["makespan_s"] is not None
    ]
    return min(fitting, key=lambda x: x[1]) if fitting else None


def no_worse(makespan: float | None, best: tuple[str, float] | None) -> bool:
    """Whether ``makespan`` (None: it did not fit) is no worse than the best baseline's (any
    makespan is, when no baseline fits)."""
    if makespan is None:
        return False
    return best is None or makespan <= best[1] * (1.0 + REL_TOL)


def verdict_row(case: str, rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """One case's line of the targets: the best baseline, doppler zero-shot and with a budget,
    whether each fits and is no worse."""
    by = {r["placer"]: r for r in rows}
    best = best_baseline(rows)
    out: dict[str, Any] = {
        "case": case,
        "best_baseline": best[0] if best else "none fits",
        "best_baseline_s": best[1] if best else None,
    }
    for label in (DOPPLER, DOPPLER_BUDGET):
        r = by.get(label)
        ms = None if r is None else r["makespan_s"]
        fits = bool(r is not None and r["fits"])
        out[f"{label}_s"] = ms
        out[f"{label}_fits"] = fits
        out[f"{label}_no_worse"] = fits and no_worse(ms, best)
    zero = by.get(DOPPLER, {})
    # what won among doppler's proposals, and the policy's own rollouts against the baselines
    out["doppler_winner"] = zero.get("source")
    own = zero.get("policy_s")  # inf or nan: no rollout of the policy fits
    out["policy_s"] = own
    out["policy_no_worse"] = no_worse(own if own is not None and math.isfinite(own) else None, best)
    return out


def target_rows(verdicts: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The issue's targets over the cases' verdicts (:func:`verdict_row`): the measured value,
    the threshold and whether it passed."""
    n = len(verdicts)
    fits = sum(v[f"{DOPPLER}_fits"] for v in verdicts)
    zero = sum(v[f"{DOPPLER}_no_worse"] for v in verdicts)
    budget = sum(v[f"{DOPPLER_BUDGET}_no_worse"] for v in verdicts)
    policy = sum(v["policy_no_worse"] for v in verdicts)
    return [
        {"target": "doppler zero-shot fits every case", "value": f"{fits} of {n}",
         "threshold": f"{n} of {n}", "passed": bool(n) and fits == n},
        {"target": "doppler zero-shot no worse than the best of m-ETF, m-SCT, pipeline",
         "value": f"{zero} of {n}", "threshold": f">= {TARGET_SHARE:.0%} of the cases",
         "passed": bool(n) and zero >= TARGET_SHARE * n},
        {"target": "doppler --budget no worse than that best on every case",
         "value": f"{budget} of {n}", "threshold": f"{n} of {n}",
         "passed": bool(n) and budget == n},
        {"target": "the policy alone (doppler's own rollouts) fits and is no worse than that "
                   "best on every case",
         "value": f"{policy} of {n}", "threshold": f"{n} of {n}",
         "passed": bool(n) and policy == n},
    ]  # fmt: skip


def one_device_row(case: str, rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """One case that fits one device: each memory-aware placer's (:data:`MEMORY_AWARE`)
    makespan over the whole graph's on one device (None: it did not fit) and how many devices
    it used."""
    by = {r["placer"]: r for r in rows}
    out: dict[str, Any] = {"case": case}
    for label in MEMORY_AWARE:
        r = by.get(label, {})
        out[label] = r.get("ratio_vs_one_device")
        out[f"{label}_devices"] = r.get("devices_used")
    return out


def one_device_targets(rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The target of issue 44 over :func:`one_device_row` rows: every memory-aware placer
    within :data:`ONE_DEVICE_SLACK` of the one-device makespan on every case that fits one
    device (no row when no case does)."""
    if not rows:
        return []
    pairs = [(r["case"], p, r[p]) for r in rows for p in MEMORY_AWARE]
    good = sum(v is not None and v <= ONE_DEVICE_SLACK * (1.0 + REL_TOL) for _, _, v in pairs)
    return [
        {"target": f"memory-aware placers within {ONE_DEVICE_SLACK}x of one device where the "
         "model fits one device", "value": f"{good} of {len(pairs)}",
         "threshold": f"{len(pairs)} of {len(pairs)}", "passed": good == len(pairs)},
    ]  # fmt: skip


# -- the makespan against the memory cap (notebook 14) -----------------------------------------
def cap_sweep(
    graph: DataflowGraph,
    cluster: Cluster,
    caps: Sequence[float],
    runs: Sequence[PlacerRun],
    semantics: str = SEMANTICS,
    progress: bool = False,
) -> list[dict[str, Any]]:
    """Every run of ``runs`` at every cap of ``caps`` (bytes per device, largest first): one row
    per (cap, placer) as :func:`compare_placers` gives it, with ``cap_gb``."""
    placers = make_placers(runs, semantics)
    rows: list[dict[str, Any]] = []
    bar = progress_bar(total=len(caps) * len(runs), desc="cap sweep", enabled=progress, unit="run")
    try:
        for cap in sorted(caps, reverse=True):
            capped = cluster.with_memory(float(cap))
            got, _ = compare_placers(graph, capped, runs, placers, semantics, bar=bar)
            rows += [{**r, "cap_gb": float(cap) / 1e9} for r in got]
    finally:
        bar.close()
    return rows


def best_by_cap(rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Per cap of a :func:`cap_sweep` (largest first): the placers with the lowest makespan among
    those that fit (``best``: their labels, comma-separated when tied, ``none fits`` when none
    does), that makespan, how many placers fit, and whether the best changed from the cap
    before: none of the placers best there is best here (where the best placement changes as
    the devices shrink)."""
    out: list[dict[str, Any]] = []
    before: set[str] = set()
    for cap in sorted({r["cap_gb"] for r in rows}, reverse=True):
        fit = [r for r in rows if r["cap_gb"] == cap and r["fits"] and r["makespan_s"] is not None]
        low = min((float(r["makespan_s"]) for r in fit), default=None)
        tied = [
            r["placer"] for r in fit if low is not None and r["makespan_s"] <= low * (1 + REL_TOL)
        ]
        out.append(
            {
                "cap_gb": cap,
                "best": ", ".join(tied) if tied else "none fits",
                "makespan_s": low,
                "placers_fit": len(fit),
                "changed": bool(out) and not before & set(tied or ["none fits"]),
            }
        )
        before = set(tied or ["none fits"])
    return out


def cap_figure(rows: Sequence[Mapping[str, Any]], title: str | None = None) -> Any:
    """Makespan against the memory per device of a :func:`cap_sweep`: one line per placer
    (points where it fits), the caps where the best placement changes marked; the cap axis runs
    from large to small (the devices shrink to the right)."""
    go = require("plotly.graph_objects", "the cap figure")

    drawn = [r["makespan_s"] for r in rows if r["fits"] and r["makespan_s"] is not None]
    factor, unit = axis_scale(drawn, "s")  # the unit the tables show these makespans in
    fig = go.Figure()
    for i, placer in enumerate(dict.fromkeys(r["placer"] for r in rows)):
        pts = sorted(
            (r["cap_gb"], r["makespan_s"])
            for r in rows
            if r["placer"] == placer and r["fits"] and r["makespan_s"] is not None
        )
        fig.add_trace(
            go.Scatter(
                x=[p[0] for p in pts], y=[p[1] * factor for p in pts], mode="lines+markers",
                name=placer, line=dict(color=series_color(i)),
                hovertemplate=f"{placer}<br>%{{x:.3g}} GB: %{{y:.4g}} {unit}<extra></extra>",
            )
        )  # fmt: skip
    for b in best_by_cap(rows):
        if b["changed"]:
            fig.add_vline(
                x=b["cap_gb"], line=dict(color="#444", dash="dot", width=1),
                annotation_text=f"best: {b['best']}", annotation_position="top",
            )  # fmt: skip
    fig.update_layout(
        title=title or "Makespan against the memory of each device",
        xaxis=dict(title="memory per device (GB)", autorange="reversed"),
        yaxis=dict(
            title=f"makespan ({unit}), where the placement fits",
            type=axis_type([v * factor for v in drawn]),
        ),
        template="plotly_white",
        legend=dict(title="placer"),
    )
    return fig


# -- the bench -----------------------------------------------------------------------------------
CASE_COLUMNS = [
    "case", "graph", "cluster", "ops", "devices", "memory_gb", "reserve_gb", "cap_gb",
    "weights_gb", "all_tensors_gb",
    "one_device_peak_gb", "fits_one_device", "one_device_makespan_s", "import_s",
]  # fmt: skip
PLACER_COLUMNS = [
    "placer", "makespan_s", "vs_best_baseline", "fits", "peak_gb", "cap_gb", "devices_used",
    "runtime_s", "sim_calls", "ratio_vs_one_device", "note",
]  # fmt: skip
VERDICT_COLUMNS = [
    "case", "best_baseline", "best_baseline_s", "doppler_s", "doppler_fits", "doppler_no_worse",
    "doppler_winner", "policy_s", "policy_no_worse", "doppler-budget_s", "doppler-budget_fits",
    "doppler-budget_no_worse",
]  # fmt: skip


def overview_rows(
    tables: Mapping[str, Sequence[Mapping[str, Any]]],
) -> list[dict[str, Any]]:
    """One row per placer, one column per case: the makespan (seconds), ``does not fit`` or
    ``skipped``."""
    labels = list(dict.fromkeys(r["placer"] for rows in tables.values() for r in rows))
    out = []
    for label in labels:
        row: dict[str, Any] = {"placer": label}
        for case, rows in tables.items():
            r = next((x for x in rows if x["placer"] == label), None)
            if r is None or r["fits"] is None:
                row[f"{case}_s"] = "skipped"
            elif r["makespan_s"] is None or not r["fits"]:
                row[f"{case}_s"] = "does not fit"
            else:
                row[f"{case}_s"] = r["makespan_s"]
        out.append(row)
    return out


def beaten_notes(tables: Mapping[str, Sequence[Mapping[str, Any]]]) -> list[str]:
    """Notes naming every placer that beat doppler zero-shot or with a budget on a case, and
    what placing the memory baselines cost doppler's zero-shot call on its slowest case."""
    notes = []
    for case, rows in tables.items():
        by = {r["placer"]: r for r in rows}
        for label in (DOPPLER, DOPPLER_BUDGET):
            mine = by.get(label, {}).get("makespan_s")
            if mine is None:
                continue
            better = [
                f"{r['placer']} {r['makespan_s']:.4g} s"
                for r in rows
                if r["placer"] not in (DOPPLER, DOPPLER_BUDGET)
                and r["fits"]
                and r["makespan_s"] is not None
                and r["makespan_s"] < mine * (1 - REL_TOL)
            ]
            if better:
                notes.append(f"{case}: better than {label} ({mine:.4g} s): {', '.join(better)}")
    slow = max(
        ((case, rows) for case, rows in tables.items()),
        key=lambda cr: next(
            (r.get("runtime_s") or 0.0 for r in cr[1] if r["placer"] == DOPPLER), 0.0
        ),
        default=None,
    )
    if slow is not None:
        case, rows = slow
        by = {r["placer"]: r for r in rows}
        own = sum(by[b].get("runtime_s") or 0.0 for b in BASELINES if b in by)
        if DOPPLER in by and by[DOPPLER].get("runtime_s"):
            notes.append(
                f"doppler zero-shot's slowest case, {case}: {by[DOPPLER]['runtime_s']:.2f} s, "
                f"of which placing m-ETF, m-SCT and pipeline (its memory proposals) takes about "
                f"{own:.2f} s (their own rows' runtimes)"
            )
    return notes


def _warm_up(placers: Mapping[str, Any], cluster: Cluster) -> None:
    """One untimed call of each learned placer (torch, the checkpoint, compiled kernels), so
    that the table times placing, not loading."""

    small = graph_from_spec("llama_block:scale=0.05")
    for label in (DOPPLER,):
        if label in placers:
            placers[label].place(small, cluster, make_rng(0))


def run(
    out_dir: Path, quick: bool = False, progress: bool = True, checkpoint: str | None = None
) -> dict[str, Any]:
    """Run the benchmark and write ``memory.{json,md}`` into ``out_dir`` (``checkpoint``: the
    ``doppler`` rows' policy, a path or a shipped name; None: the placer's default)."""
    t_start = time.perf_counter()
    cases = (QUICK_CASES + FITS_ONE_CASES[1:2]) if quick else (CASES + FITS_ONE_CASES)
    budget = 200 if quick else 2000
    runs = placer_runs(budget, exact_time_limit=10.0 if quick else 30.0, checkpoint=checkpoint)
    placers = make_placers(runs)
    case_rows: list[dict[str, Any]] = []
    tables: dict[str, list[dict[str, Any]]] = {}
    verdicts: list[dict[str, Any]] = []
    one_device: list[dict[str, Any]] = []
    bar = progress_bar(total=len(cases) * len(runs), desc="bench memory", enabled=progress,
                       unit="run")  # fmt: skip
    try:
        for i, case in enumerate(cases):
            bar.set_postfix_str(f"importing {case.graph}")
            t0 = time.perf_counter()
            graph, cluster = case.build()
            import_s = time.perf_counter() - t0
            if i == 0:
                _warm_up(placers, cluster)
            facts = case_facts(graph, cluster)
            case_rows.append({"case": case.name, "graph": case.graph, "cluster": case.cluster,
                              **facts, "import_s": import_s})  # fmt: skip
            one = facts["one_device_makespan_s"]
            rows, _ = compare_placers(graph, cluster, runs, placers, bar=bar, one_device_s=one)
            tables[case.name] = rows
            if facts["fits_one_device"]:
                one_device.append(one_device_row(case.name, rows))
            else:
                verdicts.append(verdict_row(case.name, rows))
    finally:
        bar.close()
    targets = target_rows(verdicts) + one_device_targets(one_device)
    summary: dict[str, Any] = {}
    for t in targets:
        if t["passed"] is None:
            summary[t["target"]] = t["value"]
            continue
        mark = "pass" if t["passed"] else "FAIL"
        summary[t["target"]] = f"{mark} ({t['value']}; target {t['threshold']})"
    summary["cases"] = len(cases)
    summary["wall_s"] = round(time.perf_counter() - t_start, 1)
    bound = [c["case"] for c in case_rows if not c["fits_one_device"]]
    notes = [
        f"Memory-bound: {len(bound)} of {len(case_rows)} cases do not fit on one device (the "
        "whole graph's simulated peak on device 0 exceeds the cap; case table)"
        + ("" if len(bound) == len(case_rows) else "; the others are NOT memory-bound"),
        "Caps: each device's memory less its runtime reserve (CUDA context and allocator "
        "slack: 256 MiB + 2% of a GPU's memory by default; memory_gb, reserve_gb, cap_gb in "
        "the case table).",
        f"Makespans: {SEMANTICS} semantics, no noise, seed 0 for every placer; fits = every "
        "device's simulated peak within its cap; peak_gb = the peak per device (GB); "
        "vs_best_baseline = 1 - makespan / the best of m-ETF, m-SCT and pipeline that fits "
        "(> 0: below it); "
        "runtime_s = the place call (doppler warmed up once before the first case).",
        f"local-search and doppler-budget: {budget} simulator calls; doppler: "
        + (
            "the shipped general policy (doppler/general-memory where a memory cap can bind, "
            "as on every case here)"
            if checkpoint is None
            else f"the policy {checkpoint}"
        )
        + ", greedy + 16 samples with its proposals: the clustering (graphs of at "
        "most 2000 ops), 4 METIS partitions and, for a graph that does not fit on one device, "
        "the memory baselines' placements (m-ETF, m-SCT, pipeline); doppler_winner names the "
        "proposal that won and policy_s the best of the policy's own rollouts (judged with a "
        "placement over a cap costing inf, so a finite one fits). exact: CP-SAT "
        f"under the delay model, only on graphs of at most {EXACT_MAX_OPS} ops.",
        f"No worse = a makespan at most the best baseline's x (1 + {REL_TOL:g}).",
        *beaten_notes(tables),
        EARLIER,
    ]
    sections: dict[str, tuple[Sequence[dict[str, Any]], Sequence[str] | None]] = {
        "Targets": (targets, ["target", "value", "threshold", "passed"]),
        "Cases": (case_rows, CASE_COLUMNS),
        "Makespan per placer and case (s)": (overview_rows(tables), None),
        "Doppler against the best memory baseline": (verdicts, VERDICT_COLUMNS),
        "Cases that fit one device: makespan / one device's": (one_device, None),
    }
    for name, rows in tables.items():
        sections[f"Placers on {name}"] = (rows, PLACER_COLUMNS)
    return write_report(
        out_dir,
        "memory",
        "Models that do not fit on one GPU: every placer within the devices' memory",
        sections,
        summary=summary,
        notes=notes,
        command="doppler-lab bench memory"
        + (" --quick" if quick else "")
        + ("" if checkpoint is None else f" --checkpoint {checkpoint}"),
    )


__all__ = [
    "BASELINES",
    "CASES",
    "EXACT_MAX_OPS",
    "FITS_ONE_CASES",
    "MEMORY_AWARE",
    "ONE_DEVICE_SLACK",
    "QUICK_CASES",
    "MemoryCase",
    "PlacerRun",
    "best_baseline",
    "beaten_notes",
    "best_by_cap",
    "cap_figure",
    "cap_sweep",
    "case_facts",
    "compare_placers",
    "make_placers",
    "no_worse",
    "one_device_row",
    "one_device_targets",
    "overview_rows",
    "placer_runs",
    "run",
    "select_runs",
    "target_rows",
    "verdict_row",
]
