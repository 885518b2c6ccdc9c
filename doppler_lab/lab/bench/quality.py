"""``doppler-lab bench quality``: every placer on the paper's graphs and the generated workloads.

Protocol (ARCHITECTURE.md): every method is evaluated with the same simulator settings and the
same noise seeds; a table row gives the mean and spread over the seeds. A stochastic placer
(``random``, ``cp``, ``local-search``, ...) is run once per seed (seed s for both the placer and
the noise); a deterministic one is run once and its placement evaluated at every noise seed.
Search placers get the same budget in simulator calls (stated in the table); ``exact`` a time
limit. Paper graphs: 4 devices, paper semantics (deterministic, so the spread is the placers'
own); workloads: ``p100x4``, wc semantics with lognormal duration noise.

Learned placers (``doppler``, ``placeto``, ``gdp``) join the table by themselves once they are
registered and a checkpoint exists for the graph: ``<folder>/<placer>/<graph>.pt`` or a
directory ``<folder>/<placer>/<graph>/`` (see :func:`find_checkpoint`), the first of the
``checkpoints`` folders that has one: by default what ``bench policy`` trained
(``runs/bench_policy/checkpoints``), then the shipped ones (``data/checkpoints``, see
:func:`doppler_lab.house.paths.checkpoint_dirs`). Their
rollouts are judged by the case's simulator semantics.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ...hardware.cluster import Cluster
from ...house.deps import require
from ...house.errors import ConfigError
from ...house.paths import (
    PAPER_GRAPHS_HINT,
    bench_checkpoints_dir,
    checkpoint_dirs,
    paper_graph_dirs,
    paper_graphs_dir,
)
from ...house.runners import Run, Runner, make_runner
from ...house.settings import parse_spec
from ...ir.graph import DataflowGraph
from ...ir.placement import Placement
from ...placers import (
    POLICY_ALONE_SPEC,
    get_placer,
    parse_placer_spec,
    place,
    placer_options,
    placer_spec,
    placer_specs,
    split_placer_specs,
)
from ...timing.sim import Simulator
from ...workloads.catalog import load_paper_graphs
from ...workloads.specs import cluster_from_spec, graph_from_spec
from ._report import write_report
from .yardstick import YARDSTICK

PAPER_GRAPHS: tuple[str, ...] = (
    "chain_mm_112nodes",
    "ffnn_192nodes",
    "transformer_block_215nodes",
    "full_transformer_layer_261nodes",
)
WORKLOADS: tuple[str, ...] = ("chainmm", "ffnn", "llama_block", "llama_layer", "moe_layer")

COLUMNS = [
    "graph", "placer", "makespan", "std", "best", "ratio_lb", "vs_cp", "vs_best_known",
    "schedule", "runtime_s", "sim_calls", "note",
]  # fmt: skip


@dataclass(frozen=True)
class QualityConfig:
    """Settings of the quality table.

    Attributes:
        paper_graphs: paper graph names (files ``<paper_dir>/<name>.txt``), 4 devices.
        paper_dir: folder of the paper's graphs (default: the search of
            :func:`doppler_lab.house.paths.paper_graphs_dir`).
        workloads: generated workloads (``doppler_lab.workloads.build`` names or specs).
        workload_cluster: cluster preset of the workloads.
        workload_semantics: simulator semantics of the workloads.
        noise: lognormal sigma of durations for the workloads (paper graphs: 0).
        seeds: noise (and stochastic placer) seeds.
        placers: placer names; None: every registered placer (learned ones with a checkpoint).
        search_budget: simulator calls for ``local-search`` and ``enumerative``.
        exact_time_limit: seconds for ``exact`` per graph.
        checkpoints: folders searched, in order, for learned placers' checkpoints (``shipped``:
            the shipped checkpoints' folders).
        cp_tie_seeds: tie seeds of the CP-vs-yardstick table.
    """

    paper_graphs: tuple[str, ...] = PAPER_GRAPHS
    paper_dir: str | None = None
    workloads: tuple[str, ...] = WORKLOADS
    workload_cluster: str = "p100x4"
    workload_semantics: str = "wc"
    noise: float = 0.1
    seeds: tuple[int, ...] = (0, 1, 2, 3, 4)
    placers: tuple[str, ...] | None = None
    search_budget: int = 2000
    exact_time_limit: float = 20.0
    checkpoints: tuple[str, ...] = (str(bench_checkpoints_dir()), "shipped")
    cp_tie_seeds: int = 20
    options: dict[str, dict[str, Any]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.seeds:
            raise ConfigError("quality: seeds is empty; expected at least one seed")
        for name, value in (
            ("search_budget", self.search_budget),
            ("exact_time_limit", self.exact_time_limit),
        ):
            if not (np.isfinite(value) and value > 0):
                raise ConfigError(f"quality: {name} = {value!r}, expected a positive number")
        if not (np.isfinite(self.noise) and self.noise >= 0):
            raise ConfigError(f"quality: noise = {self.noise!r}, expected >= 0")


@dataclass(frozen=True, eq=False)
class Case:
    """One graph of the table with its evaluation settings."""

    name: str
    group: str  # "paper" or "workload"
    graph: DataflowGraph
    cluster: Cluster
    semantics: str
    noise: float


def load_cases(config: QualityConfig) -> tuple[list[Case], list[str]]:
    """The table's graphs and notes about any that are missing."""

    folder = paper_graphs_dir(config.paper_dir)
    paper = load_paper_graphs(folder, config.paper_graphs)
    where = folder or config.paper_dir or ", ".join(str(d) for d in paper_graph_dirs())
    notes = [
        f"paper graph {name} not found in {where}: {PAPER_GRAPHS_HINT} (or pass paper_dir)"
        for name in config.paper_graphs
        if name not in paper
    ]
    cases = [
        Case(
            name,
            "paper",
            g,
            cluster_from_spec("uniform", 8 if name.startswith("8gpu") else 4),
            "paper",
            0.0,
        )
        for name, g in paper.items()
    ]
    for spec in config.workloads:
        g = graph_from_spec(spec)
        name = g.name if all(c.name != g.name for c in cases) else spec
        cluster = cluster_from_spec(config.workload_cluster)
        cases.append(Case(name, "workload", g, cluster, config.workload_semantics, config.noise))
    return cases, notes


def find_checkpoint(root: str | Path, placer: str, graph: str) -> Path | None:
    """A learned placer's checkpoint for ``graph``: ``root/placer/graph.pt`` or ``root/placer/graph/``."""
    base = Path(root) / placer
    for path in (base / f"{graph}.pt", base / graph):
        if path.exists():
            return path
    return None


def _checkpoint_folders(folders: str | Sequence[str]) -> list[Path]:
    """``folders`` (one or several) with ``shipped`` standing for the shipped checkpoints'
    folders."""
    out: list[Path] = []
    for f in (folders,) if isinstance(folders, str) else folders:
        if f == "shipped":
            out += checkpoint_dirs()
        else:
            out.append(Path(f))
    return out


def placer_plan(config: QualityConfig, case: Case) -> list[tuple[str, dict[str, Any]]]:
    """(placer, options) pairs to run on ``case``: a placer may be a spec with options
    (``doppler:proposals=none``); every registered placer by default, the ``doppler`` policy
    alone (:data:`~doppler_lab.placers.registry.POLICY_ALONE_SPEC`) after ``doppler``."""

    specs = placer_specs()
    if config.placers is not None:
        names = list(config.placers)
    else:
        names = [n for s in specs for n in ((s, POLICY_ALONE_SPEC) if s == "doppler" else (s,))]
    plan = []
    for name in names:
        base, spec_options = parse_spec(name, f"quality: placer {name!r}", "option")
        if base not in specs:
            raise ConfigError(
                f"quality: unknown placer {name!r}; expected one of {', '.join(specs)}"
            )
        opts: dict[str, Any] = {**spec_options, **config.options.get(name, {})}
        if specs[base].needs_checkpoint:
            found = (
                find_checkpoint(f, base, case.name) for f in _checkpoint_folders(config.checkpoints)
            )
            ckpt = next((c for c in found if c is not None), None)
            if ckpt is None:
                continue
            opts.setdefault("checkpoint", str(ckpt))
            opts.setdefault("semantics", case.semantics)
        accepted = placer_options(base) if specs[base].kind in ("search", "exact") else []
        if "budget" in accepted:
            opts.setdefault("budget", int(config.search_budget))
        if "passes" in accepted:
            opts.setdefault("passes", 10)  # the budget, not the passes, ends the search
        if "semantics" in accepted:
            opts.setdefault("semantics", case.semantics)
        if "time_limit" in accepted:
            opts.setdefault("time_limit", float(config.exact_time_limit))
        plan.append((name, opts))
    return plan


def evaluate_placer(
    case: Case, name: str, options: dict[str, Any], seeds: Sequence[int]
) -> tuple[dict[str, Any], list[Placement]]:
    """Run placer ``name`` (a name, or a spec: its options are in ``options``) on ``case`` and
    simulate it at every seed; a table row + placements."""

    base = parse_placer_spec(name)[0]  # a spec's options are already in ``options``
    stochastic = placer_spec(base).stochastic
    sim = Simulator(case.graph, case.cluster, case.semantics, noise=case.noise)
    placer = get_placer(base, **options)
    placements: list[Placement] = []
    runtimes: list[float] = []
    makespans: list[float] = []
    for i, seed in enumerate(seeds):
        if stochastic or i == 0:
            t0 = time.perf_counter()
            placements.append(placer.place(case.graph, case.cluster, np.random.default_rng(seed)))
            runtimes.append(time.perf_counter() - t0)
        p = placements[-1]
        makespans.append(sim.makespan(p, seed=seed if case.noise > 0 else None))
    ms = np.array(makespans)
    meta = placements[0].meta
    note = ""
    if "optimal" in meta:
        note = (
            "optimal (delay model)" if meta["optimal"] else f"gap {meta['gap']:.1%} (delay model)"
        )
    if "budget" in options:
        note = f"budget {options['budget']} sim calls"
    # what produced a learned placer's result (its winning candidate), once per distinct one
    made = list(
        dict.fromkeys(str(p.meta["produced_by"]) for p in placements if "produced_by" in p.meta)
    )
    if made:
        note = "; ".join(x for x in (note, f"from the {', '.join(made)}") if x)
    row = {
        "graph": case.name,
        "group": case.group,
        "unit": case.graph.time_unit,
        "placer": name,
        "makespan": float(ms.mean()),
        "std": float(ms.std()),
        "best": float(ms.min()),
        "lower_bound": sim.lower_bound(),
        "ratio_lb": float(ms.mean() / sim.lower_bound()),
        "schedule": float(np.mean([p.meta.get("schedule_makespan", np.nan) for p in placements])),
        "runtime_s": float(np.mean(runtimes)),
        "sim_calls": float(np.mean([p.meta.get("sim_calls", 0) for p in placements])),
        "runs": len(placements),
        "seeds": list(seeds),
        "note": note,
        "produced_by": made,
        "options": {k: v for k, v in options.items() if k != "progress"},
    }
    return row, placements


def _compare(rows: list[dict[str, Any]]) -> None:
    """Add improvement over ``cp`` and distance to the yardstick's best known, in place."""
    cp = {r["graph"]: r["makespan"] for r in rows if r["placer"] == "cp"}
    for r in rows:
        base = cp.get(r["graph"])
        r["vs_cp"] = (base - r["makespan"]) / base if base else None
        known = YARDSTICK.get(r["graph"], {}).get("best_known")
        r["vs_best_known"] = 1.0 - r["makespan"] / known if known else None


def quality_rows(
    config: QualityConfig,
    progress: bool = True,
    runner: str | Runner = "local",
    keep_going: bool = False,
) -> tuple[list[dict[str, Any]], dict[tuple[str, str], list[Placement]], list[Case], list[str]]:
    """Every (graph, placer) row, the placements by (graph, placer), the cases and notes.

    Each (graph, placer) is one run of ``runner`` (``local``, ``ray`` or a
    :class:`~doppler_lab.house.runners.Runner`); with ``keep_going`` a failed one is named in the
    notes and left out of the rows.
    """
    cases, notes = load_cases(config)
    runs = [
        Run(evaluate_placer, (case, name, opts, config.seeds), label=f"{case.name}/{name}")
        for case in cases
        for name, opts in placer_plan(config, case)
    ]
    sweep = make_runner(runner).run(runs, desc="quality", progress=progress, keep_going=keep_going)
    rows: list[dict[str, Any]] = []
    placements: dict[tuple[str, str], list[Placement]] = {}
    for row, pls in sweep.done():
        rows.append(row)
        placements[(row["graph"], row["placer"])] = pls
    _compare(rows)
    return rows, placements, cases, notes + sweep.notes()


def cp_yardstick_rows(cases: Sequence[Case], tie_seeds: int = 20) -> list[dict[str, Any]]:
    """CP with the released estimate over ``tie_seeds`` seeds vs YARDSTICK's column."""

    rows = []
    for case in cases:
        if case.name not in YARDSTICK:
            continue
        sim = Simulator(case.graph, case.cluster, "paper")
        out = {}
        for estimate in ("additive", "est"):
            ms = np.array(
                [
                    sim.makespan(place("cp", case.graph, case.cluster, seed=s, estimate=estimate))
                    for s in range(tie_seeds)
                ]
            )
            out[estimate] = ms
        y = YARDSTICK[case.name]
        rows.append(
            {
                "graph": case.name,
                "cp_paper_mean": float(out["additive"].mean()),
                "cp_paper_best": float(out["additive"].min()),
                "yardstick_mean": y["cp_mean"],
                "yardstick_best": y["cp_best"],
                "cp_est_mean": float(out["est"].mean()),
                "cp_est_best": float(out["est"].min()),
                "best_known": y["best_known"],
            }
        )
    return rows


def summary_rows(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per placer: geometric-mean ratio to the lower bound and to cp, per group."""
    out = []
    for name in dict.fromkeys(r["placer"] for r in rows):
        entry: dict[str, Any] = {"placer": name}
        for group in ("paper", "workload"):
            mine = [r for r in rows if r["placer"] == name and r["group"] == group]
            if mine:
                entry[f"{group}_ratio_lb"] = float(
                    np.exp(np.mean([np.log(r["ratio_lb"]) for r in mine]))
                )
                vs = [r["vs_cp"] for r in mine if r["vs_cp"] is not None]
                entry[f"{group}_vs_cp"] = float(np.mean(vs)) if vs else None
        out.append(entry)
    return out


def notebook_config(
    paper_graphs_dir: str | None,
    paper_graphs: str,
    workloads: str,
    scale: float | str,
    seeds: int,
    noise: float,
    search_budget: int,
    exact_time_limit: float,
    placers: str = "",
    seed: int = 0,
) -> QualityConfig:
    """A :class:`QualityConfig` from a notebook's flat parameters (comma-separated names).

    Its parameters are notebook 03's flat parameters: turning them into the config is its job.
    """

    def names(text: str) -> tuple[str, ...]:
        return tuple(x.strip() for x in text.split(",") if x.strip())

    return QualityConfig(
        paper_graphs=names(paper_graphs),
        paper_dir=paper_graphs_dir,
        workloads=tuple(f"{w}:scale={scale}" for w in names(workloads)),
        noise=noise,
        seeds=tuple(range(seed, seed + int(seeds))),
        # placer specs may carry options (doppler:proposals=none,samples=4)
        placers=tuple(x for x in split_placer_specs(placers) if x) or None,
        search_budget=search_budget,
        exact_time_limit=exact_time_limit,
    )


def quality_frame(rows: Sequence[dict[str, Any]]):
    """The rows as a pandas frame with the table's columns (and ``group``, ``unit``)."""
    pd = require("pandas", "the quality frame")

    return pd.DataFrame([{c: r.get(c) for c in ["group", "unit", *COLUMNS]} for r in rows])


def extreme_traces(
    rows: Sequence[dict[str, Any]],
    placements: dict[tuple[str, str], list[Placement]],
    cases: Sequence[Case],
    graph: str,
) -> dict[str, Any]:
    """Traces of the best and the worst placer on ``graph`` (first seed), keyed by label."""
    case = next((c for c in cases if c.name == graph), None)
    mine = [r for r in rows if r["graph"] == graph]
    if case is None or not mine:
        raise ConfigError(
            f"quality: no rows for graph {graph!r}; have {sorted({r['graph'] for r in rows})}"
        )
    best = min(mine, key=lambda r: r["makespan"])
    worst = max(mine, key=lambda r: r["makespan"])
    sim = Simulator(case.graph, case.cluster, case.semantics, noise=case.noise)
    seed = best["seeds"][0] if case.noise > 0 else None
    return {
        f"{label}: {r['placer']}": sim.run(placements[(graph, r["placer"])][0], seed=seed)
        for label, r in (("best", best), ("worst", worst))
    }


def quick_config() -> QualityConfig:
    """Small settings for a smoke run (two seeds, small budgets, small workloads)."""
    return QualityConfig(
        workloads=tuple(f"{w}:scale=0.25" for w in WORKLOADS),
        seeds=(0, 1),
        search_budget=200,
        exact_time_limit=2.0,
        cp_tie_seeds=5,
    )


def run(
    out_dir: Path,
    quick: bool = False,
    config: QualityConfig | None = None,
    progress: bool = True,
    runner: str | Runner = "local",
    keep_going: bool = False,
) -> dict[str, Any]:
    """Build the quality table and write ``quality.json`` / ``quality.md`` into ``out_dir``
    (the (graph, placer) runs go to ``runner``, see :func:`quality_rows`)."""
    cfg = config or (quick_config() if quick else QualityConfig())
    t0 = time.perf_counter()
    rows, _, cases, notes = quality_rows(cfg, progress, runner, keep_going)
    cp_rows = cp_yardstick_rows(cases, cfg.cp_tie_seeds)
    paper = [r for r in rows if r["group"] == "paper"]
    work = [r for r in rows if r["group"] == "workload"]
    tables = {
        "Summary per placer (geometric mean of makespan / lower bound; mean improvement over cp)": (
            summary_rows(rows),
            None,
        ),
        "Paper graphs (4 devices, paper semantics)": (paper, COLUMNS),
        f"Generated workloads ({cfg.workload_cluster}, {cfg.workload_semantics} semantics, noise {cfg.noise})": (
            work,
            [c for c in COLUMNS if c != "vs_best_known"],
        ),
        f"CP vs the best known placements (paper semantics, {cfg.cp_tie_seeds} tie seeds)": (
            cp_rows,
            None,
        ),
    }
    notes = [
        *notes,
        f"seeds {list(cfg.seeds)}: stochastic placers run once per seed; deterministic ones once, "
        "evaluated at every noise seed; makespan = mean, std and best over the seeds",
        f"search placers: budget {cfg.search_budget} simulator calls each (their objective: the "
        "noise-free simulator of the graph's semantics); exact: CP-SAT under the delay model (no "
        f"contention), time limit {cfg.exact_time_limit} s",
        "ratio_lb = makespan / lower bound; vs_cp = (cp - placer) / cp; vs_best_known = 1 - "
        "makespan / best known (below 0: above the best known); schedule = the placer's own schedule length (its estimate)",
        "paper-graph makespans are in cost units (the released costs / 10,000,000,000); "
        "workload makespans are in seconds",
    ]
    summary = {
        "graphs": len(cases),
        "placers": len({r["placer"] for r in rows}),
        "wall_s": round(time.perf_counter() - t0, 1),
    }
    command = "doppler-lab bench quality" + (" --quick" if quick else "")
    return write_report(
        out_dir,
        "quality",
        "Placement quality",
        tables,
        summary=summary,
        notes=notes,
        command=command,
    )


__all__ = [
    "COLUMNS",
    "PAPER_GRAPHS",
    "WORKLOADS",
    "Case",
    "QualityConfig",
    "cp_yardstick_rows",
    "evaluate_placer",
    "find_checkpoint",
    "load_cases",
    "placer_plan",
    "quality_rows",
    "quick_config",
    "run",
    "summary_rows",
]
