"""``doppler-lab bench policy-wc``: DOPPLER against local search at equal simulator calls on the
generated workloads under the realistic ``wc`` semantics (p100x4), the table of ``bench policy``
on its own (that benchmark retrains everything; its cost: reports/notes/bench_notes.md).

Rows per workload, mean over seeds:

- ``cp``: the Critical Path teacher;
- ``doppler``: a DOPPLER policy trained on the workload (Stage I + II, ``episodes`` episodes, the
  ``wc`` estimate), judged by the protocol (greedy + 16 samples); its simulator calls are
  the training episodes plus the 17 judged rollouts;
- ``local-search``: annealing from CP with as many simulator calls;
- ``doppler-general-search``: the shipped general policy (no training on the workload) as the
  proposal of ``--placer doppler --budget N`` with the same N calls (its rollouts and, by the
  placer's default, 4 METIS partition proposals, then the search from the best of them).

The training runs are cached like ``bench policy``'s (``runs/bench_policy_wc``, keyed by
configuration and code version), so a rerun only evaluates.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from ...hardware.cluster import make_cluster
from ...house.paths import REPO_ROOT
from ...house.runners import Runner
from ...placers import place
from ...policies.pretrained import GENERAL_CHECKPOINT
from ...timing.sim import Simulator
from ...workloads.specs import graph_from_spec
from ._report import write_report
from .policy import PolicyBenchConfig, ablation_rows
from .quality import WORKLOADS

#: seeds, episodes and workloads of the full run
SEEDS = 2
EPISODES = 4000
IMITATION_EPISODES = 400


def _general_rows(
    rows: list[dict[str, Any]], graphs: tuple[str, ...], seeds: int, checkpoint: str
) -> list[dict[str, Any]]:

    out = []
    for spec in graphs:
        g = graph_from_spec(spec)
        mine = [r for r in rows if r["graph"] == g.name]
        if not mine:
            continue
        budget = int(max(r["sim_calls"] for r in mine))
        cp = next(r for r in mine if r["method"] == "cp")["makespan"]
        cluster = make_cluster("p100x4")
        sim = Simulator(g, cluster, "wc")
        ms = [
            sim.makespan(
                place(
                    "doppler",
                    g,
                    cluster,
                    seed=s,
                    checkpoint=checkpoint,
                    budget=budget,
                    semantics="wc",
                )
            )
            for s in range(seeds)
        ]
        a = np.asarray(ms)
        lb = sim.lower_bound()
        out.append(
            {
                "graph": g.name,
                "method": "doppler-general-search",
                "makespan": float(a.mean()),
                "std": float(a.std()),
                "best": float(a.min()),
                "ratio_lb": float(a.mean()) / lb,
                "vs_best_known": None,
                "vs_cp": (cp - float(a.mean())) / cp,
                "episodes": 0,
                "sim_calls": budget,
            }
        )
    return out


def verdicts(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per workload: each DOPPLER row against local search at the same calls (ties within
    0.5%)."""
    out = []
    for g in dict.fromkeys(r["graph"] for r in rows):
        by = {r["method"]: r for r in rows if r["graph"] == g}
        ls = by.get("local-search")
        if ls is None:
            continue
        row: dict[str, Any] = {"graph": g, "local-search": ls["makespan"]}
        for m in ("doppler", "doppler-general-search"):
            if m in by:
                rel = by[m]["makespan"] / ls["makespan"] - 1.0
                row[m] = by[m]["makespan"]
                row[f"{m} vs local-search"] = rel
                row[f"{m} >= local-search"] = rel <= 0.005
        out.append(row)
    return out


def run(
    out_dir: Path,
    quick: bool = False,
    progress: bool = True,
    runner: str | Runner = "local",
    keep_going: bool = False,
    checkpoint: str | None = None,
) -> dict[str, Any]:
    """Run (or resume) the benchmark; writes ``policy-wc.{json,md}``. ``checkpoint``: the
    general policy of the ``doppler-general-search`` rows (a path or a shipped name; default
    :data:`~doppler_lab.policies.pretrained.GENERAL_CHECKPOINT`)."""

    graphs = ("chainmm:matrices=3,scale=0.01",) if quick else tuple(WORKLOADS)
    seeds, episodes, imitation = (1, 48, 16) if quick else (SEEDS, EPISODES, IMITATION_EPISODES)
    root = REPO_ROOT / ("runs/bench_policy_wc" + ("_quick" if quick else ""))
    config = PolicyBenchConfig.of_graphs(
        graphs,
        methods=("doppler",),
        seeds=seeds,
        episodes=episodes,
        imitation_episodes=imitation,
        search_placers=("local-search",),
    )
    rows, _ = ablation_rows(config, root, runner, keep_going, progress)
    general = GENERAL_CHECKPOINT if checkpoint is None else str(checkpoint)
    rows = rows + _general_rows(rows, graphs, seeds, general)
    rows.sort(key=lambda r: r["graph"])
    verdict = verdicts(rows)
    wins = {
        m: sum(bool(v.get(f"{m} >= local-search")) for v in verdict)
        for m in ("doppler", "doppler-general-search")
    }
    summary = {f"{m} >= local-search (of {len(verdict)})": n for m, n in wins.items()}
    cols = [
        "graph",
        "method",
        "makespan",
        "std",
        "best",
        "ratio_lb",
        "vs_cp",
        "episodes",
        "sim_calls",
    ]
    return write_report(
        out_dir,
        "policy-wc",
        "DOPPLER vs local search at equal simulator calls (p100x4, wc semantics)",
        {
            "Workloads (mean over seeds)": (rows, cols),
            "Against local search at the same calls (>=: within 0.5% or better)": (verdict, None),
        },
        summary,
        notes=[
            f"{seeds} seeds; doppler = Stage I {imitation} + Stage II {episodes - imitation} "
            "episodes per workload (estimate of the semantics: wc), judged by greedy + 16 "
            f"samples; doppler-general-search = the general policy {general} with "
            "--budget equal to doppler's calls, no training on the workload."
        ],
        command="doppler-lab bench policy-wc"
        + (" --quick" if quick else "")
        + ("" if checkpoint is None else f" --checkpoint {checkpoint}"),
    )
