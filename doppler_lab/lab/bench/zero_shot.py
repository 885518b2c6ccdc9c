"""``bench general``, part one: the general policy zero-shot on each held-out task against CP,
HEFT, the clustering and the rollout over CP, with the milliseconds of its ``place`` call."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ...house.codeversion import versioned_key
from ...house.runners import torch_threads
from ...placers import get_placer, place
from ...placers.placer_base import make_rng
from ...timing.sim import Simulator
from ...train.general_policy import Task
from ._report import row_time_unit
from .general_config import (
    GeneralBenchConfig,
    built_task,
    cached_case,
    checkpoint_digest,
    gmean,
    slug,
    vs_known,
    yardstick_name,
)
from .yardstick import best_known


def zero_shot_case(cfg: GeneralBenchConfig, task: Task, root: str) -> dict[str, Any]:
    """CP, HEFT and the general policy (greedy, and greedy + samples, timed) on one task."""

    digest = checkpoint_digest(cfg.checkpoint)
    seeds = list(cfg.seed_range)
    key = versioned_key(
        "zero-shot", task.to_dict(), digest, seeds, cfg.cp_seeds, cfg.samples, cfg.partitions,
        cfg.clustering,
    )  # fmt: skip
    where = Path(root) / "zero_shot" / slug(task.name) / key / "result.json"
    return cached_case(where, lambda: _zero_shot(cfg, task))


def _zero_shot(cfg: GeneralBenchConfig, task: Task) -> dict[str, Any]:

    graph, cluster = built_task(task)
    sem = task.semantics
    sim = Simulator(graph, cluster, sem)  # type: ignore[arg-type]
    cp = [
        sim.makespan(place("cp", graph, cluster, seed=s, semantics=sem))
        for s in range(cfg.seed, cfg.seed + cfg.cp_seeds)
    ]
    heft = sim.makespan(place("heft", graph, cluster, seed=0))
    clustering = sim.makespan(place("clustering", graph, cluster, seed=0))
    t0 = time.perf_counter()
    rollout = sim.makespan(place("cp-rollout", graph, cluster, semantics=sem))
    rollout_s = time.perf_counter() - t0
    opts = {"checkpoint": cfg.checkpoint, "semantics": sem}
    general, policy, parts, sources, made, greedy_ms, ms = [], [], [], [], [], [], []
    with torch_threads(1):
        # built and called once untimed: the registry lookup, the checkpoint load, compilation
        greedy = get_placer("doppler", samples=0, partitions=0, clustering=False, **opts)
        protocol = get_placer(
            "doppler",
            samples=cfg.samples,
            partitions=cfg.partitions,
            clustering=cfg.clustering,
            **opts,
        )
        for placer in (greedy, protocol):
            placer.place(graph, cluster, make_rng(0))
        for s in cfg.seed_range:
            t0 = time.perf_counter()
            p0 = greedy.place(graph, cluster, make_rng(s))
            greedy_ms.append((time.perf_counter() - t0) * 1e3)
            t0 = time.perf_counter()
            p = protocol.place(graph, cluster, make_rng(s))
            ms.append((time.perf_counter() - t0) * 1e3)
            general.append(sim.makespan(p.validate(graph, cluster.num_devices)))
            # the rollouts draw the same numbers with or without partitions (which draw none)
            policy.append(float(p.meta.get("rollout_cost", general[-1])))
            parts.append(float(p.meta.get("partition_cost", np.nan)))
            sources.append(str(p.meta.get("source", "")))
            made.append(str(p.meta.get("produced_by", "")))  # the winner's label, per seed
    p0 = p0.validate(graph, cluster.num_devices)
    return {
        "task": task.name,
        "group": task.group,
        "graph": yardstick_name(task),
        "cluster": task.cluster,
        "semantics": sem,
        "unit": graph.time_unit,
        "nodes": int(graph.compute_nodes.size),
        "devices": int(cluster.num_devices),
        "lower_bound": float(sim.lower_bound()),
        "cp": cp,
        "heft": float(heft),
        "clustering": float(clustering),
        "cp_rollout": float(rollout),
        "cp_rollout_s": rollout_s,
        "greedy": float(sim.makespan(p0)),
        "general": general,
        "policy": policy,
        "partition": parts,
        "source": sources,
        "produced_by": made,
        "greedy_ms": greedy_ms,
        "ms": ms,
    }


def zero_shot_rows(results: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Table (a): one row per task and a geometric-mean row (of ratios: ``vs_cp``,
    ``policy_vs_cp``, ``vs_heft``, ``vs_cp_rollout``, ``ratio_lb``; its makespan cells are
    empty, since raw makespans of different tasks do not average)."""
    rows = []
    for r in results:
        cp, gen = float(np.mean(r["cp"])), float(np.mean(r["general"]))
        pol = float(np.mean(r.get("policy", r["general"])))
        part = float(np.mean(r["partition"])) if r.get("partition") else float("nan")
        ms = float(np.median(r["ms"]))
        rows.append(
            {
                "task": r["task"],
                "group": r["group"],
                "unit": row_time_unit(r),
                "nodes": r["nodes"],
                "devices": r["devices"],
                "cp": cp,
                "heft": r["heft"],
                "cp_rollout": r["cp_rollout"],
                "greedy": r["greedy"],
                "general": gen,
                "general_std": float(np.std(r["general"])),
                "policy": pol,
                "partition": part,
                "clustering": r.get("clustering"),
                "from_partition": sum(x == "partition" for x in r.get("source", [])),
                "from_clustering": sum(x == "clustering" for x in r.get("source", [])),
                "from_fewer": sum(x.startswith("greedy on") for x in r.get("source", [])),
                "policy_vs_cp": (cp - pol) / cp,
                "ratio_lb": gen / r["lower_bound"],
                "vs_cp": (cp - gen) / cp,
                "vs_heft": 1.0 - gen / r["heft"],
                "vs_cp_rollout": 1.0 - gen / r["cp_rollout"],
                "cp_rollout_s": r["cp_rollout_s"],
                "best_known": best_known(r["graph"]),
                "vs_best_known": vs_known(r["graph"], gen),
                "cp_vs_best_known": vs_known(r["graph"], cp),
                "ms": ms,
                "greedy_ms": float(np.median(r["greedy_ms"])),
                "ms_per_250_nodes": ms * 250.0 / max(r["nodes"], 1),
            }
        )
    if rows:
        # makespans of different tasks differ in scale (and in unit: the paper's graphs carry
        # its cost units), so the summary row holds ratios only: no mean of raw makespans
        rows.append(
            {
                "task": "geometric mean",
                "from_partition": sum(r["from_partition"] for r in rows),
                "from_clustering": sum(r["from_clustering"] for r in rows),
                "from_fewer": sum(r["from_fewer"] for r in rows),
                "policy_vs_cp": 1.0 - gmean([r["policy"] / r["cp"] for r in rows]),
                "ratio_lb": gmean([r["ratio_lb"] for r in rows]),
                "vs_cp": 1.0 - gmean([r["general"] / r["cp"] for r in rows]),
                "vs_heft": 1.0 - gmean([r["general"] / r["heft"] for r in rows]),
                "vs_cp_rollout": 1.0 - gmean([r["general"] / r["cp_rollout"] for r in rows]),
                "ms": float(np.median([r["ms"] for r in rows])),
            }
        )
    return rows


ZERO_COLUMNS = [
    "task", "group", "unit", "nodes", "devices", "cp", "heft", "greedy", "general", "general_std",
    "vs_cp", "vs_heft", "policy", "policy_vs_cp", "clustering", "partition", "from_clustering", "from_partition", "from_fewer", "cp_rollout", "vs_cp_rollout", "cp_rollout_s", "ratio_lb", "best_known", "vs_best_known", "cp_vs_best_known", "ms",
    "greedy_ms", "ms_per_250_nodes",
]  # fmt: skip
