"""``bench general``, part three: the general policy fine-tuned on the paper graphs (the
per-instance adapter, or Stage II of the network's weights) against training from scratch:
the cases, their rows and the training curves."""

from __future__ import annotations

import json
import math
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ...hardware.cluster import Cluster
from ...house.codeversion import versioned_key
from ...house.deps import require
from ...house.errors import ConfigError
from ...house.runners import torch_threads
from ...policies.checkpoint import load_policy, make_policy
from ...policies.pretrained import resolve_checkpoint
from ...search.adapter import adapt
from ...search.learned import best_of_rollouts
from ...train.general_policy import Task, general_policy_config
from ...train.pipeline import DEFAULT_CURRICULUM_DEVICES, curriculum_plan, run_pipeline
from ...train.train_config import preset
from ..experiments.common import greedy_makespan, stage_curve, start_point
from ._report import row_time_unit
from .general_config import (
    MATCH_RTOL,
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

#: the training table's method of the ``finetune-long`` runs
LONG_METHOD = "fine-tuned, network"


def training_case(
    cfg: GeneralBenchConfig, task: Task, mode: str, seed: int, root: str
) -> dict[str, Any]:
    """Fine-tune the general policy (``mode="finetune"``) or train from fresh weights
    (``"scratch"``) on one task; the protocol's final makespan, the training seconds and the
    curve rows. Resumes in its run folder."""

    stages, policy = _training_setup(cfg, task, mode, seed)
    parts: list[Any] = [mode, task.to_dict(), [s.to_dict() for s in stages], cfg.samples]
    if mode in ("finetune", "finetune-long"):
        parts.append(checkpoint_digest(cfg.checkpoint))
        if mode == "finetune" and cfg.finetune_method == "adapter":
            parts = [mode, "adapter", task.to_dict(), cfg.adapt_config().to_dict(), parts[-1]]
    else:
        parts.append(policy.to_dict())
    run_dir = (
        Path(root) / "training" / slug(task.name) / f"{mode}-seed{seed}-{versioned_key(*parts)}"
    )
    return cached_case(
        run_dir / "result.json", lambda: _train(cfg, task, mode, seed, stages, policy, run_dir)
    )


def _training_setup(cfg: GeneralBenchConfig, task: Task, mode: str, seed: int):

    common = {"semantics": task.semantics, "seed": seed}
    if mode == "finetune":
        sim = preset(
            "sim",
            **{**common, "episodes": cfg.finetune_episodes, "eval_every": cfg.finetune_eval_every},
            **cfg.finetune_train,
        )
        return [sim], None
    every = {"eval_every": cfg.scratch_eval_every}
    if mode == "finetune-long":
        return [preset("sim", **common, **every, episodes=cfg.scratch_episodes,
                       **cfg.long_train)], None  # fmt: skip
    if mode != "scratch":
        raise ConfigError(
            f"bench general: training mode {mode!r}, expected finetune, finetune-long or scratch"
        )
    n1 = cfg.scratch_imitation_episodes
    stages = [preset("sim", **common, **every, episodes=cfg.scratch_episodes - n1)]
    if n1:
        stages.insert(0, preset("imitation", **common, **every, episodes=n1))
    return stages, general_policy_config().replace(**cfg.policy)


def _curriculum(mode: str, cluster: Cluster) -> int | None:
    """Training from scratch on more than 4 devices goes through 4 first (``doppler-lab
    train``'s default; :func:`doppler_lab.train.pipeline.curriculum_plan`)."""

    if mode == "scratch" and cluster.num_devices > DEFAULT_CURRICULUM_DEVICES:
        return DEFAULT_CURRICULUM_DEVICES
    return None


def _train(cfg, task, mode, seed, stages, policy, run_dir: Path) -> dict[str, Any]:

    graph, cluster = built_task(task)
    init = None
    labels = {"task": task.name, "run": mode, "seed": seed}
    if mode == "finetune" and cfg.finetune_method == "adapter":
        return _adapt(cfg, task, seed, run_dir, labels)
    with torch_threads(1):
        if mode in ("finetune", "finetune-long"):
            init = resolve_checkpoint(cfg.checkpoint, "doppler")
            start = load_policy(init, num_devices=cluster.num_devices)[0]
        else:
            start = make_policy(policy, cluster.num_devices, seed, task.semantics)
        first = greedy_makespan(start, graph, cluster, task.semantics)
        results = run_pipeline(
            stages,
            [graph],
            cluster,
            policy,
            run_dir / "run",
            init=init,
            device_curriculum=_curriculum(mode, cluster),
            progress=False,
        )
        res = best_of_rollouts(
            results[-1].policy, graph, cluster, cfg.samples, 1000 + seed, task.semantics
        )
    curves = [start_point(first, stages[0].stage, **labels)]
    offset = 0
    plan = curriculum_plan(stages, cluster, _curriculum(mode, cluster))
    for (st, _), r in zip(plan, results):
        curves.append(stage_curve(r.rows, st.stage, offset, **labels))
        offset += st.episodes
    pd = require("pandas", "the curriculum's curve")
    curve = pd.concat(curves, ignore_index=True)
    # the best placement sampled on the way (the final policy need not reproduce it)
    found = best_found(plan, [r.rows for r in results], cluster.num_devices)
    return {
        "task": task.name,
        "graph": yardstick_name(task),
        "mode": mode,
        "seed": seed,
        "episodes": sum(s.episodes for s in stages),
        "makespan": res.best_cost,
        "greedy": res.greedy_cost,
        "search_best": found,
        "start_greedy": first,
        "train_s": float(sum(float(r.summary.get("train_s", 0.0)) for r in results)),
        "curve": json.loads(curve.to_json(orient="records")),
    }


def best_found(
    plan: Sequence[tuple[Any, Cluster]], rows: Sequence[Sequence[Mapping[str, Any]]], devices: int
) -> float | None:
    """The best placement cost a training run sampled (its stages' ``*/cost_best`` metrics),
    over the stages run on the task's ``devices`` only: the first stages of a device curriculum
    ran on fewer devices, another machine. None when no stage logged one."""
    found = [
        float(v)
        for (_, on), stage_rows in zip(plan, rows)
        if on.num_devices == devices
        for row in stage_rows
        for k, v in row.items()
        if k.endswith("/cost_best") and v is not None and math.isfinite(float(v))
    ]
    return min(found) if found else None


def _adapt(cfg, task: Task, seed: int, run_dir: Path, labels: dict[str, Any]) -> dict[str, Any]:
    """Fine-tuning by the per-instance adapter (:func:`doppler_lab.search.adapter.adapt`): the
    table is saved in ``run_dir`` (``adapter.pt``); the protocol judges the adapted policy."""
    pd = require("pandas", "the adapter's table")

    graph, cluster = built_task(task)
    acfg = cfg.adapt_config()
    with torch_threads(1):
        ckpt = resolve_checkpoint(cfg.checkpoint, "doppler")
        policy = load_policy(ckpt, num_devices=cluster.num_devices)[0]
        first = greedy_makespan(policy, graph, cluster, task.semantics)
        t0 = time.perf_counter()
        out = adapt(policy, graph, cluster, task.semantics, acfg, seed=seed, track_greedy=True)
        train_s = time.perf_counter() - t0
        out.save(run_dir / "adapter.pt", graph, cluster, cfg.checkpoint)
        policy.set_node_bias(out.bias)
        res = best_of_rollouts(policy, graph, cluster, cfg.samples, 1000 + seed, task.semantics)
    rows = [
        {**labels, "stage": "adapter", "episode": r["calls"], "stage_episode": r["calls"],
         "cost_mean": r["cost_mean"], "cost_min": r["cost_min"], "greedy_cost": r["greedy_cost"]}
        for r in out.rows
    ]  # fmt: skip
    curve = pd.concat(
        [start_point(first, "adapter", **labels), pd.DataFrame(rows)], ignore_index=True
    )
    return {
        "task": task.name,
        "graph": yardstick_name(task),
        "mode": "finetune",
        "method": "adapter",
        "seed": seed,
        "episodes": out.calls,
        "makespan": res.best_cost,
        "greedy": res.greedy_cost,
        "start_greedy": first,
        "start_best": out.start_cost,
        "search_best": out.best_cost,
        "train_s": train_s,
        "curve": json.loads(curve.to_json(orient="records")),
    }


def training_rows(
    results: Sequence[Mapping[str, Any]], zero: Sequence[Mapping[str, Any]]
) -> list[dict[str, Any]]:
    """Table (c): per paper task zero-shot, fine-tuned and scratch (mean over training seeds)."""
    zero_of = {z["task"]: z for z in zero}
    rows = []
    for task in dict.fromkeys(r["task"] for r in results):
        mine = [r for r in results if r["task"] == task]
        graph = mine[0]["graph"]
        z = zero_of.get(task)
        cp = float(np.mean(z["cp"])) if z else None
        unit = row_time_unit(z or {"task": task, "graph": graph})
        entries: list[tuple[str, list[Mapping[str, Any]]]] = [
            ("fine-tuned", [r for r in mine if r["mode"] == "finetune"]),
            (LONG_METHOD, [r for r in mine if r["mode"] == "finetune-long"]),
            ("scratch", [r for r in mine if r["mode"] == "scratch"]),
        ]
        if z:
            # the policy's rollouts alone, as fine-tuned and scratch are judged
            zm = float(np.mean(z.get("policy", z["general"])))
            rows.append(
                {
                    "task": task,
                    "unit": unit,
                    "method": "zero-shot",
                    "episodes": 0,
                    "makespan": zm,
                    "vs_best_known": vs_known(graph, zm),
                    "vs_cp": (cp - zm) / cp if cp else None,
                }
            )
        for label, rs in entries:
            if not rs:
                continue
            m = float(np.mean([r["makespan"] for r in rs]))
            rows.append(
                {
                    "task": task,
                    "unit": unit,
                    "method": label,
                    "episodes": rs[0]["episodes"],
                    "makespan": m,
                    "std": float(np.std([r["makespan"] for r in rs])),
                    "greedy": float(np.mean([r["greedy"] for r in rs])),
                    "best_known": best_known(graph),
                    "vs_best_known": vs_known(graph, m),
                    "vs_cp": (cp - m) / cp if cp else None,
                    "train_s": float(np.mean([r["train_s"] for r in rs])),
                    "seeds": len(rs),
                    # the best placement simulated on the way (the adapter's final policy settles
                    # on it; Stage II's need not reproduce it)
                    "found": (
                        float(np.mean([r["search_best"] for r in rs]))
                        if all(r.get("search_best") is not None for r in rs)
                        else None
                    ),
                }
            )
    return rows


def curve_records(results: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The training curves of every training run (rows of ``task``, ``run``, ``seed``,
    ``stage``, ``episode``, ``greedy_cost``, ...)."""
    return [rec for r in results for rec in r["curve"]]


def long_comparison(training: Sequence[Mapping[str, Any]]) -> str | None:
    """The network fine-tuned for as many episodes as scratch against scratch: on how many
    tasks it is at most :data:`MATCH_RTOL` worse, and the geometric mean of the ratio."""
    by = {(r["task"], r["method"]): r["makespan"] for r in training}
    pairs = [(by[(t, LONG_METHOD)], by[(t, "scratch")]) for t, m in by
             if m == LONG_METHOD and (t, "scratch") in by]  # fmt: skip
    if not pairs:
        return None
    ok = sum(a <= b * (1 + MATCH_RTOL) for a, b in pairs)
    gm = gmean([a / b for a, b in pairs])
    return (
        f"{ok} of {len(pairs)} at most {MATCH_RTOL:.0%} worse than scratch; geometric mean of "
        f"fine-tuned / scratch {gm:.3f}"
    )


TRAIN_COLUMNS = [
    "task", "unit", "method", "episodes", "makespan", "std", "greedy", "found", "best_known",
    "vs_best_known", "vs_cp", "train_s", "seeds",
]  # fmt: skip


def finetune_note(cfg: GeneralBenchConfig) -> str:
    """How the fine-tuning runs trained, for the notes."""
    if cfg.finetune_method == "network":
        return (
            f"Fine-tuning: Stage II (sim preset, {cfg.finetune_episodes} episodes"
            + (f", changes {cfg.finetune_train}" if cfg.finetune_train else "")
            + ") of the general policy's weights"
        )
    a = cfg.adapt_config()
    props = a.proposals
    return (
        f"Fine-tuning: the per-instance adapter (doppler_lab.search.adapter, {a.episodes} "
        f"simulator calls: the placer's proposals, greedy + {props.sample_count()} samples"
        + (" + the clustering" if props.clustering else "")
        + f" + up to {props.partitions} partitions, then updates of {a.batch} episodes of a node x device "
        f"bias on PLC's logits, the network frozen; settings {a.to_dict()}; "
        f"{cfg.finetune_seeds} seed(s)); the final "
        "policy is the network with its table, settled on the best placement found (column "
        "found; imitation steps without simulator calls)"
    )
