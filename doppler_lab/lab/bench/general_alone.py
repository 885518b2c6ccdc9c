"""``doppler-lab bench general-alone``: the general policies *alone* (no proposals, no search:
the best of the greedy rollout and ``samples`` sampled rollouts) on the held-out tasks of
``bench general``, against the heuristics (cp, heft, etf, clustering, partition) and the
per-case best of them, for several named checkpoints side by side.

Per task: each heuristic's makespan (cp: the mean over ``cp_seeds`` tie seeds; the others are
deterministic, seed 0), ``best``: the smallest of them and which one; per checkpoint the policy
alone, the mean over ``seeds`` seeds, and its ratio to the per-case best. Per checkpoint the
issue's targets: geometric mean <= 0.97 x clustering and <= the per-case best; wins on >= 60% of
the cases that are not ties (within :data:`TIE_RTOL`) against the per-case best; no case more
than 2% worse than HEFT. The first checkpoint is compared with the reference
(``doppler/general``) paired by case: the bootstrap interval of the mean log ratio
(:func:`doppler_lab.house.stats.paired_stats`). What produced each placement is counted per
checkpoint: the kind of rollout that won, and how often it is the clustering's placement node for
node (a ``doppler12`` policy reads the clustering's devices and can copy them).

Every case (a task's heuristics, a task x checkpoint's rollouts) is cached under
``runs_dir/alone/`` keyed by the code version (and the checkpoint's content digest).
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ...house.codeversion import versioned_key
from ...house.errors import PlacementError
from ...house.runners import Run, Runner, make_runner, torch_threads
from ...house.stats import paired_stats
from ...placers import get_placer, place
from ...placers.clustering import CLUSTER_MAX_OPS, clustering_devices
from ...placers.placer_base import make_rng
from ...policies.pretrained import GENERAL_HINT_CHECKPOINT, GENERAL_HINTS_CHECKPOINT
from ...timing.cost_model import CostModel
from ...timing.sim import Simulator
from ...train.general_policy import GENERAL_CHECKPOINT, Task
from ._report import write_report
from .general_config import (
    GeneralBenchConfig,
    bench_tasks,
    built_task,
    cached_case,
    checkpoint_digest,
    gmean,
    make_config,
    slug,
)

#: the heuristics the policy is judged against (and whose per-case best it must reach)
HEURISTICS: tuple[str, ...] = ("cp", "heft", "etf", "clustering", "partition")
#: relative difference within which the policy and the per-case best tie
TIE_RTOL = 1e-3
#: the issue's targets
TARGET_VS_CLUSTERING = 0.97
TARGET_WIN_SHARE = 0.60
TARGET_VS_HEFT = 0.02
#: the shipped general policies shown by default (besides ``--checkpoint``)
SHIPPED_GENERAL: tuple[str, ...] = (
    GENERAL_CHECKPOINT,
    "doppler/general-v1",
    "doppler/general-memory",
    GENERAL_HINT_CHECKPOINT,
    GENERAL_HINTS_CHECKPOINT,
)


def _makespan(sim: Any, place: Any) -> float:
    try:
        return float(sim.makespan(place()))
    except PlacementError:  # a memory-bound task this placer cannot fit
        return math.nan


def heuristics_case(cfg: GeneralBenchConfig, task: Task, root: str) -> dict[str, Any]:
    """The heuristics' makespans on one task (cached)."""

    key = versioned_key("alone-heuristics", task.to_dict(), cfg.seed, cfg.cp_seeds)
    where = Path(root) / "alone" / "heuristics" / slug(task.name) / key / "result.json"

    def compute() -> dict[str, Any]:

        graph, cluster = built_task(task)
        sem = task.semantics
        sim = Simulator(graph, cluster, sem)  # type: ignore[arg-type]
        cps = [
            _makespan(sim, lambda s=s: place("cp", graph, cluster, seed=s, semantics=sem))
            for s in range(cfg.seed, cfg.seed + cfg.cp_seeds)
        ]
        out: dict[str, Any] = {"task": task.name, "group": task.group, "cp": float(np.mean(cps))}
        for name in HEURISTICS[1:]:
            out[name] = _makespan(sim, lambda n=name: place(n, graph, cluster, seed=0))
        out["nodes"] = int(graph.compute_nodes.size)
        out["devices"] = int(cluster.num_devices)
        return out

    return cached_case(where, compute)


def policy_case(cfg: GeneralBenchConfig, task: Task, checkpoint: str, root: str) -> dict[str, Any]:
    """The policy alone (greedy + ``samples`` samples, no proposals) on one task, one
    makespan per seed, with what produced each seed's placement (``sources``: the winning
    rollout's kind, e.g. ``greedy``, ``sample``, ``greedy without the clustering hint``) and
    whether it is the clustering placer's placement, node for node (``is_clustering``; None
    where the clustering does not run), or the partition placer's (``is_partition``, the
    placement of the bench's ``partition`` column) (cached)."""

    digest = checkpoint_digest(checkpoint)
    seeds = list(cfg.seed_range)
    key = versioned_key(
        "alone-policy", task.to_dict(), digest, seeds, cfg.samples, "sources", "partition"
    )
    where = Path(root) / "alone" / "policy" / slug(task.name) / key / "result.json"

    def compute() -> dict[str, Any]:

        graph, cluster = built_task(task)
        sim = Simulator(graph, cluster, task.semantics)  # type: ignore[arg-type]
        placer = get_placer(
            "doppler",
            checkpoint=checkpoint,
            samples=cfg.samples,
            proposals="none",  # the policy alone (search.proposals.POLICY_ALONE_PROPOSALS)
            semantics=task.semantics,
        )
        comp = graph.compute_nodes
        clus = None
        if comp.size <= CLUSTER_MAX_OPS:
            clus = clustering_devices(graph, CostModel(graph, cluster))[0][comp]
        try:
            part = place("partition", graph, cluster, seed=0).device[comp]
        except PlacementError:
            part = None
        spans, sources, same, same_part = [], [], [], []
        with torch_threads(1):
            for s in seeds:
                try:
                    p = placer.place(graph, cluster, make_rng(s))
                except PlacementError:  # a memory-bound task this placer cannot fit
                    spans.append(math.nan)
                    sources.append("unplaced")
                    same.append(None)
                    same_part.append(None)
                    continue
                spans.append(float(sim.makespan(p)))
                sources.append(str(p.meta.get("source", "")))
                same.append(None if clus is None else bool(np.array_equal(p.device[comp], clus)))
                same_part.append(
                    None if part is None else bool(np.array_equal(p.device[comp], part))
                )
        return {
            "task": task.name, "checkpoint": checkpoint, "digest": digest, "policy": spans,
            "sources": sources, "is_clustering": same, "is_partition": same_part,
        }  # fmt: skip

    return cached_case(where, compute)


def attribution_rows(
    names: Sequence[str], pol: dict[str, Sequence[dict[str, Any]]]
) -> list[dict[str, Any]]:
    """Per checkpoint, what produced the policy alone's placements over every task and seed:
    the count won by each kind of rollout, and how many are the clustering's or the partition's
    placement node for node (a policy that reads a heuristic's devices can copy them: that is no
    win of its own)."""
    out = []
    for n in names:
        count: dict[str, int] = {}
        same = same_part = total = 0
        for case in pol[n]:
            srcs = case.get("sources", [])
            parts = case.get("is_partition") or [None] * len(srcs)
            for src, eq, eq_part in zip(srcs, case.get("is_clustering", []), parts):
                count[src] = count.get(src, 0) + 1
                total += 1
                same += bool(eq)
                same_part += bool(eq_part) and not eq
        out.append(
            {
                "checkpoint": n,
                "placements": total,
                "the clustering's placement": same,
                "the partition's placement": same_part,
                "won by": ", ".join(
                    f"{k} {v}" for k, v in sorted(count.items(), key=lambda kv: -kv[1])
                ),
            }
        )
    return out


def alone_rows(
    heur: Sequence[dict[str, Any]], pol: dict[str, Sequence[dict[str, Any]]]
) -> list[dict[str, Any]]:
    """One row per task: the heuristics, the per-case best, each checkpoint's mean makespan and
    its ratio to the per-case best (``<name>/best``)."""
    rows = []
    for i, h in enumerate(heur):
        known = {n: h[n] for n in HEURISTICS if np.isfinite(h[n])}
        best_name = min(known, key=known.__getitem__)
        row = {k: h[k] for k in ("task", "group", "nodes", "devices", *HEURISTICS)}
        row.update(best=known[best_name], best_of=best_name)
        for name, cases in pol.items():
            v = float(np.mean(cases[i]["policy"]))
            row[name] = v
            row[f"{name}/best"] = v / row["best"]
        rows.append(row)
    return rows


def checkpoint_summary(rows: Sequence[dict[str, Any]], name: str) -> dict[str, Any]:
    """The targets' figures for checkpoint ``name`` over ``rows`` (cases the policy placed)."""
    ok = [r for r in rows if np.isfinite(r[name])]
    vs_best = [r[name] / r["best"] for r in ok]
    wins = sum(x < 1 - TIE_RTOL for x in vs_best)
    losses = sum(x > 1 + TIE_RTOL for x in vs_best)
    heft = [r[name] / r["heft"] - 1.0 for r in ok if np.isfinite(r["heft"])]
    return {
        "cases": len(ok),
        "unplaced": len(rows) - len(ok),
        # where the heuristic placed (on a memory-bound task it may not fit)
        "vs_clustering": gmean([r[name] / r["clustering"] for r in ok if r["clustering"] > 0]),
        "vs_best": gmean(vs_best),
        "vs_cp": gmean([r[name] / r["cp"] for r in ok if r["cp"] > 0]),
        "wins": wins,
        "ties": len(ok) - wins - losses,
        "losses": losses,
        "win_share": wins / (wins + losses) if wins + losses else math.nan,
        "worst_vs_heft": max(heft) if heft else math.nan,
    }


def target_rows(name: str, s: dict[str, Any]) -> list[dict[str, Any]]:
    """The issue's targets for one checkpoint's summary."""
    return [
        {
            "checkpoint": name,
            "target": "geometric mean vs clustering",
            "value": round(s["vs_clustering"], 4),
            "threshold": f"<= {TARGET_VS_CLUSTERING}",
            "passed": s["vs_clustering"] <= TARGET_VS_CLUSTERING,
        },
        {
            "checkpoint": name,
            "target": "geometric mean vs the per-case best heuristic",
            "value": round(s["vs_best"], 4),
            "threshold": "<= 1",
            "passed": s["vs_best"] <= 1.0,
        },
        {
            "checkpoint": name,
            "target": "wins against the per-case best (of the cases not tied)",
            "value": f"{s['wins']} of {s['wins'] + s['losses']} ({s['ties']} ties)",
            "threshold": f">= {TARGET_WIN_SHARE:.0%}",
            "passed": bool(s["win_share"] >= TARGET_WIN_SHARE),
        },
        {
            "checkpoint": name,
            "target": "worst case vs HEFT",
            "value": f"{s['worst_vs_heft']:+.2%}",
            "threshold": f"<= +{TARGET_VS_HEFT:.0%}",
            "passed": s["worst_vs_heft"] <= TARGET_VS_HEFT,
        },
    ]


def paired_vs(rows: Sequence[dict[str, Any]], name: str, reference: str) -> dict[str, Any] | None:
    """``name`` against ``reference`` paired by case: the mean of log(name / reference) with its
    bootstrap interval (:func:`~doppler_lab.house.stats.paired_stats`), as percentages."""

    pairs = [
        (r[name], r[reference]) for r in rows if np.isfinite(r[name]) and np.isfinite(r[reference])
    ]
    if name == reference or len(pairs) < 2:
        return None
    d = np.log([a / b for a, b in pairs])
    s = paired_stats(d)
    pct = lambda x: 100.0 * math.expm1(x)  # noqa: E731
    return {
        "checkpoint": name,
        "against": reference,
        "cases": s.n,
        "mean_pct": pct(s.mean),
        "low_pct": pct(s.low),
        "high_pct": pct(s.high),
        "p_value": s.p_value,
        "better": sum(a < b * (1 - TIE_RTOL) for a, b in pairs),
        "worse": sum(a > b * (1 + TIE_RTOL) for a, b in pairs),
        "verdict": "better" if s.sign < 0 else "worse" if s.sign > 0 else "cannot tell",
    }


def run(
    out_dir: Path,
    quick: bool = False,
    progress: bool = True,
    runner: str | Runner = "local",
    keep_going: bool = False,
    also: Sequence[str] | None = None,
    checkpoint: str | None = None,
    seeds: int | None = None,
    groups: str | None = None,
    tasks: Sequence[str] | None = None,
    **changes: Any,
) -> dict[str, Any]:
    """Run (or resume) the bench and write ``general-alone.{json,md}`` into ``out_dir``.

    ``checkpoint`` (the policy judged first), ``seeds``, ``groups``, ``tasks`` and ``changes``:
    :class:`~doppler_lab.lab.bench.general_config.GeneralBenchConfig` fields, as ``bench general``
    takes them;
    ``also``: further checkpoints shown beside it (default :data:`SHIPPED_GENERAL`).
    """
    given = {"checkpoint": checkpoint, "seeds": seeds, "groups": groups, "tasks": tasks}
    cfg = make_config(quick, None, **changes, **{k: v for k, v in given.items() if v is not None})
    names = list(dict.fromkeys([cfg.checkpoint, *(SHIPPED_GENERAL if also is None else also)]))
    for n in names:
        checkpoint_digest(n)  # a missing checkpoint: one error now
    cases = bench_tasks(cfg)
    root = str(Path(cfg.runs_dir + ("_quick" if quick else "")))
    t0 = time.perf_counter()
    run_ = make_runner(runner)
    notes: list[str] = []

    def sweep(runs: list[Run], desc: str) -> list[Any]:
        s = run_.run(runs, desc=desc, progress=progress, keep_going=keep_going)
        notes.extend(s.notes())
        return s.values

    heur = sweep(
        [Run(heuristics_case, (cfg, t, root), label=f"heuristics {t.name}") for t in cases],
        "bench general-alone: heuristics",
    )
    pol = {
        n: sweep(
            [Run(policy_case, (cfg, t, n, root), label=f"{n} {t.name}") for t in cases],
            f"bench general-alone: {n}",
        )
        for n in names
    }
    rows = alone_rows(heur, pol)
    summaries = {n: checkpoint_summary(rows, n) for n in names}
    targets = [t for n in names for t in target_rows(n, summaries[n])]
    # paired against the shipped default when it is shown, else against the judged policy
    reference = GENERAL_CHECKPOINT if GENERAL_CHECKPOINT in names else cfg.checkpoint
    paired = [p for n in names if (p := paired_vs(rows, n, reference))]
    attribution = attribution_rows(names, pol)
    rows.append(
        {
            "task": "geometric mean",
            **{f"{n}/best": summaries[n]["vs_best"] for n in names},
        }
    )
    summary: dict[str, Any] = {
        "checkpoints": ", ".join(names),
        "tasks": len(cases),
        "seeds": cfg.seeds,
        "wall_s": round(time.perf_counter() - t0, 1),
    }
    for n in names:
        s = summaries[n]
        summary[n] = (
            f"vs clustering {s['vs_clustering']:.4f}, vs per-case best {s['vs_best']:.4f}, "
            f"vs cp {s['vs_cp']:.4f}; wins/ties/losses vs best {s['wins']}/{s['ties']}/"
            f"{s['losses']}; worst vs heft {s['worst_vs_heft']:+.2%}"
        )
    for p in paired:
        summary[f"{p['checkpoint']} vs {p['against']}"] = (
            f"{p['verdict']}: mean {p['mean_pct']:+.2f}% [95% CI {p['low_pct']:+.2f}, "
            f"{p['high_pct']:+.2f}] over {p['cases']} cases ({p['better']} better, "
            f"{p['worse']} worse)"
        )
    columns = [
        "task", "group", "nodes", "devices", *HEURISTICS, "best", "best_of",
        *[c for n in names for c in (n, f"{n}/best")],
    ]  # fmt: skip
    return write_report(
        out_dir,
        "general-alone",
        "The general policies alone on held-out graphs and clusters",
        {
            "Targets (policy alone: greedy + samples, no proposals)": (
                targets,
                ["checkpoint", "target", "value", "threshold", "passed"],
            ),
            "Policy alone vs the heuristics and their per-case best": (rows, columns),
            "What produced the policy alone's placements (every task and seed)": (
                attribution,
                [
                    "checkpoint",
                    "placements",
                    "the clustering's placement",
                    "the partition's placement",
                    "won by",
                ],
            ),
            "Paired by case against the shipped default (else the judged policy)": (
                paired,
                [
                    "checkpoint",
                    "against",
                    "cases",
                    "mean_pct",
                    "low_pct",
                    "high_pct",
                    "p_value",
                    "better",
                    "worse",
                    "verdict",
                ],
            ),  # fmt: skip
        },
        summary=summary,
        notes=notes
        + [
            f"Policy alone: the doppler placer with samples={cfg.samples}, partitions=0, "
            f"clustering off, fewer_devices off, memory baselines off; mean over {cfg.seeds} "
            "seeds. cp: mean over "
            f"{cfg.cp_seeds} tie seeds; heft, etf, clustering, partition: seed 0. best: the "
            f"smallest of {', '.join(HEURISTICS)}; a tie is within {TIE_RTOL:.1%} of it.",
            f"Paired: mean of log(policy / {reference}) per case, 95% BCa bootstrap "
            "interval (doppler_lab.house.stats), shown as percent (negative: shorter).",
            *(f"Checkpoint {n}: {checkpoint_digest(n)}" for n in names),
        ],
        command="doppler-lab bench general-alone",
        makespans={"Policy alone vs the heuristics and their per-case best": ["etf", *names]},
    )
