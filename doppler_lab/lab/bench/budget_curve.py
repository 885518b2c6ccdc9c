"""``bench general``, part two: the ``doppler`` placer with a budget of simulator calls against
``local-search`` and the same iterated local search without the policy, per task at the table's
budget and along the budget curve (its rows and its figure)."""

from __future__ import annotations

import inspect
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ...house.codeversion import versioned_key
from ...house.deps import require
from ...house.runners import torch_threads
from ...placers import parse_placer_spec, place
from ...placers.registry import POLICY_ALONE_SPEC
from ...search.learned import DopplerPlacer
from ...timing.sim import Simulator
from ...train.general_policy import Task
from ...viz import series_color
from ._report import row_time_unit
from .general_config import (
    TIE_RTOL,
    GeneralBenchConfig,
    built_task,
    cached_case,
    checkpoint_digest,
    gmean,
    slug,
    vs_known,
)

#: the budget part's methods: ``local-search`` (its defaults: annealing from CP), the
#: ``doppler`` placer's budget search, that search without the policy from HEFT's
#: placement (``ils-heft``) and from the clustering's (``ils-clustering``), and the ``doppler``
#: search from the policy alone (``doppler:proposals=none``: no heuristic proposal among its
#: starts, :data:`~doppler_lab.placers.registry.POLICY_ALONE_SPEC`)
BUDGET_METHODS: tuple[str, ...] = (
    "local-search", "ils-heft", "ils-clustering", "doppler", POLICY_ALONE_SPEC,
)  # fmt: skip
#: ``ils-heft``: the ``local-search`` placer running ``doppler``'s iterated local search from HEFT
ILS_HEFT_OPTIONS: dict[str, str] = {"method": "ils", "start": "heft"}
#: ``ils-clustering``: the same search from the ``clustering`` placer's placement
ILS_CLUSTERING_OPTIONS: dict[str, str] = {"method": "ils", "start": "clustering"}


def doppler_takes_budget() -> bool:
    """Whether the ``doppler`` placer takes a ``budget`` of simulator calls."""

    return "budget" in inspect.signature(DopplerPlacer).parameters


def budget_case(cfg: GeneralBenchConfig, task: Task, method: str, root: str) -> dict[str, Any]:
    """``method`` (one of :data:`BUDGET_METHODS`) with each budget of ``cfg.budgets`` over the
    seeds; ``{"makespans": {budget: [per seed]}}`` (None for doppler without a budget option)."""

    if method in ("doppler", POLICY_ALONE_SPEC) and not doppler_takes_budget():
        return {"task": task.name, "method": method, "makespans": None}
    parts: list[Any] = ["budget", method, task.to_dict(), cfg.budgets, list(cfg.seed_range)]
    if method == "doppler":
        parts += [checkpoint_digest(cfg.checkpoint), cfg.partitions, cfg.clustering]
    if method == POLICY_ALONE_SPEC:
        parts += [checkpoint_digest(cfg.checkpoint)]
    where = Path(root) / "budget" / slug(task.name) / slug(method) / versioned_key(*parts)
    return cached_case(where / "result.json", lambda: _budget(cfg, task, method))


def _budget(cfg: GeneralBenchConfig, task: Task, method: str) -> dict[str, Any]:

    graph, cluster = built_task(task)
    sim = Simulator(graph, cluster, task.semantics)  # type: ignore[arg-type]
    opts: dict[str, Any] = {"semantics": task.semantics}
    placer = method
    if method == "doppler":
        opts.update(checkpoint=cfg.checkpoint, partitions=cfg.partitions, clustering=cfg.clustering)
    elif method == POLICY_ALONE_SPEC:
        placer, alone = parse_placer_spec(method)
        opts.update(checkpoint=cfg.checkpoint, **alone)
    elif method == "ils-heft":
        placer = "local-search"
        opts.update(ILS_HEFT_OPTIONS)
    elif method == "ils-clustering":
        placer = "local-search"
        opts.update(ILS_CLUSTERING_OPTIONS)
    out: dict[str, list[float]] = {}
    with torch_threads(1):
        for n in cfg.budgets:
            out[str(n)] = [
                sim.makespan(place(placer, graph, cluster, seed=s, budget=n, **opts))
                for s in cfg.seed_range
            ]
    return {"task": task.name, "method": method, "makespans": out}


def budget_rows(
    results: Sequence[Mapping[str, Any]], zero: Sequence[Mapping[str, Any]], budget: int
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Table (b) at ``budget`` (win/tie/loss per task, a count row) and the curve rows
    (``task``, ``method``, ``sim_calls``, ``makespan``, ``ratio_cp``; ``task="geometric mean"``
    rows average the ratio to CP geometrically over the tasks)."""
    cp_of = {z["task"]: float(np.mean(z["cp"])) for z in zero}
    graph_of = {z["task"]: z["graph"] for z in zero}
    unit_of = {z["task"]: row_time_unit(z) for z in zero}
    by: dict[tuple[str, str], dict[str, list[float]]] = {}
    for r in results:
        if r["makespans"] is not None:
            by[(r["task"], r["method"])] = r["makespans"]
    curve: list[dict[str, Any]] = []
    for (task, method), ms in by.items():
        for n, vals in ms.items():
            m = float(np.mean(vals))
            cp = cp_of.get(task)
            curve.append(
                {
                    "task": task,
                    "unit": unit_of.get(task),
                    "method": method,
                    "sim_calls": int(n),
                    "makespan": m,
                    "std": float(np.std(vals)),
                    "ratio_cp": m / cp if cp else None,
                }
            )
    for method in dict.fromkeys(m for _, m in by):
        for n in sorted({c["sim_calls"] for c in curve if c["method"] == method}):
            pts = [
                c["ratio_cp"]
                for c in curve
                if c["method"] == method and c["sim_calls"] == n and c["ratio_cp"]
            ]
            curve.append(
                {
                    "task": "geometric mean",
                    "method": method,
                    "sim_calls": n,
                    "ratio_cp": gmean(pts),
                }
            )
    table: list[dict[str, Any]] = []
    counts = {"win": 0, "tie": 0, "loss": 0}
    for task in dict.fromkeys(t for t, _ in by):
        ls = by.get((task, "local-search"), {}).get(str(budget))
        ih = by.get((task, "ils-heft"), {}).get(str(budget))
        ic = by.get((task, "ils-clustering"), {}).get(str(budget))
        dp = by.get((task, "doppler"), {}).get(str(budget))
        alone = by.get((task, POLICY_ALONE_SPEC), {}).get(str(budget))
        row: dict[str, Any] = {"task": task, "unit": unit_of.get(task), "budget": budget}
        row["cp"] = cp_of.get(task)
        row["local_search"] = float(np.mean(ls)) if ls else None
        row["ils_heft"] = float(np.mean(ih)) if ih else None
        row["ils_clustering"] = float(np.mean(ic)) if ic else None
        row["doppler"] = float(np.mean(dp)) if dp else None
        row["policy_alone"] = float(np.mean(alone)) if alone else None  # doppler's policy alone
        if ls and dp:
            a, b = row["doppler"], row["local_search"]
            rel = (b - a) / b
            row["doppler_vs_local_search"] = rel
            row["result"] = "tie" if abs(rel) <= TIE_RTOL else ("win" if rel > 0 else "loss")
            counts[row["result"]] += 1
        if ih and dp:
            row["doppler_vs_ils_heft"] = (row["ils_heft"] - row["doppler"]) / row["ils_heft"]
        if ic and dp:
            ic_mean = row["ils_clustering"]
            row["doppler_vs_ils_clustering"] = (ic_mean - row["doppler"]) / ic_mean
        for k in ("local_search", "ils_heft", "ils_clustering", "doppler", "policy_alone"):
            if row[k] is not None:
                row[f"{k}_vs_best_known"] = vs_known(graph_of.get(task, ""), row[k])
        table.append(row)
    if any(r.get("result") for r in table):
        table.append(
            {"task": "win / tie / loss", "result": "{win} / {tie} / {loss}".format(**counts)}
        )
    return table, curve


def ils_comparison(budget: Sequence[Mapping[str, Any]], start: str = "heft") -> str | None:
    """What the policy adds to the budget search: doppler against ``ils-<start>`` (the same
    search from HEFT's or the clustering's placement) per task, and the geometric mean of
    doppler / ils-<start>."""
    col = f"ils_{start}"
    pairs = [(r["doppler"], r[col]) for r in budget
             if r.get("doppler") is not None and r.get(col) is not None]  # fmt: skip
    if not pairs:
        return None
    rel = [(b - a) / b for a, b in pairs]
    better = sum(x > TIE_RTOL for x in rel)
    worse = sum(x < -TIE_RTOL for x in rel)
    gm = gmean([a / b for a, b in pairs])
    return (
        f"better on {better}, tied on {len(rel) - better - worse}, worse on {worse} of "
        f"{len(rel)}; geometric mean of doppler / ils-{start} {gm:.3f}"
    )


def budget_figure(curve: Sequence[Mapping[str, Any]], title: str | None = None):
    """Makespan / CP against simulator calls: per task (faint) and the geometric mean over the
    tasks (bold), one colour per method; log-scaled calls."""
    go = require("plotly.graph_objects", "the budget figure")

    fig = go.Figure()
    methods = list(dict.fromkeys(c["method"] for c in curve))
    for i, method in enumerate(methods):
        color = series_color(i)
        mine = [c for c in curve if c["method"] == method and c.get("ratio_cp") is not None]
        for task in dict.fromkeys(c["task"] for c in mine if c["task"] != "geometric mean"):
            pts = sorted((c["sim_calls"], c["ratio_cp"]) for c in mine if c["task"] == task)
            fig.add_trace(
                go.Scatter(
                    x=[p[0] for p in pts], y=[p[1] for p in pts], mode="lines",
                    line=dict(color=color, width=1), opacity=0.3, name=task,
                    legendgroup=method, showlegend=False, hovertemplate=f"{task}<br>{method}: %{{y:.3f}}",
                )
            )  # fmt: skip
        pts = sorted((c["sim_calls"], c["ratio_cp"]) for c in mine if c["task"] == "geometric mean")
        fig.add_trace(
            go.Scatter(
                x=[p[0] for p in pts], y=[p[1] for p in pts], mode="lines+markers",
                line=dict(color=color, width=3), name=f"{method} (geometric mean)", legendgroup=method,
            )
        )  # fmt: skip
    fig.add_hline(y=1.0, line_dash="dot", annotation_text="CP")
    fig.update_layout(
        title=title or "Budget curve: makespan / CP against simulator calls",
        xaxis=dict(title="simulator calls", type="log"),
        yaxis=dict(title="makespan / CP (lower is better)"),
        template="plotly_white",
    )
    return fig


BUDGET_COLUMNS = [
    "task", "unit", "budget", "cp", "local_search", "ils_heft", "ils_clustering", "doppler",
    "policy_alone", "doppler_vs_local_search", "result", "doppler_vs_ils_heft",
    "doppler_vs_ils_clustering", "local_search_vs_best_known", "ils_heft_vs_best_known",
    "ils_clustering_vs_best_known", "doppler_vs_best_known", "policy_alone_vs_best_known",
]  # fmt: skip

CURVE_COLUMNS = ["task", "unit", "method", "sim_calls", "makespan", "std", "ratio_cp"]
