"""The demo's training and executor steps: a short Stage II from a shipped checkpoint, and a real
run of two placements checked against the single-device reference."""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from ...executor import Executor
from ...executor.backend import make_cpu_cluster
from ...executor.runner import compare_outputs
from ...executor.torch_ops import reference_outputs
from ...hardware.cluster import Cluster
from ...ir.graph import DataflowGraph
from ...ir.trace import Trace
from ...placers import place
from ...timing.sim import Simulator
from ...train.analysis import PolicyRecipe, compare_placements, starting_policy
from ...train.loop import train as train_stage
from ...train.train_config import preset
from .common import cpu_cluster, greedy_makespan, stage_curve, start_point, torch_threads


@dataclass
class ShortFinetune:
    """What :func:`short_finetune` returns.

    Attributes:
        start_how: where the starting policy came from.
        rows: the protocol's comparison (``cp``, ``start``, ``stage II``).
        traces: simulated traces of those placements.
        curve: the Stage II learning curve (:func:`stage_curve` with episode 0 = the start).
        episodes: Stage II episodes run.
    """

    start_how: str
    rows: list[dict[str, Any]]
    traces: dict[str, Trace]
    curve: pd.DataFrame
    episodes: int


#: :func:`short_finetune`'s recipe unless given one: Stage II of 320 episodes
FINETUNE_RECIPE = PolicyRecipe(imitation_episodes=200, sim_episodes=320, eval_every=2)


def short_finetune(
    graph: DataflowGraph,
    cluster: Cluster,
    semantics: str,
    out_dir: str | Path,
    recipe: PolicyRecipe = FINETUNE_RECIPE,
    samples: int = 16,
    progress: bool = False,
) -> ShortFinetune:
    """A short Stage II (``recipe.sim_episodes``, ``eval_every``, ``train``) from the shipped
    checkpoint of ``graph`` (``recipe.init="auto"``; else from a Stage I of
    ``recipe.imitation_episodes``), compared with its start and the CP teacher by the protocol
    (``samples`` sampled rollouts). ``out_dir`` holds the runs (a rerun starts afresh)."""

    out = Path(out_dir)
    shutil.rmtree(out, ignore_errors=True)
    seed = recipe.seed
    with torch_threads(1):
        start, ckpt, how = starting_policy(graph, cluster, semantics, out, recipe, progress)
        g0 = greedy_makespan(start, graph, cluster, semantics)
        cfg = preset("sim", **recipe.sim_settings(semantics))
        res = train_stage(
            cfg, [graph], cluster, out_dir=out / "stage2", init=ckpt, progress=progress
        )
        rows, traces = compare_placements(
            {"cp": "cp", "start": start, "stage II": res.policy},
            graph,
            cluster,
            semantics,
            samples,
            seed,
        )
    curve = pd.concat([start_point(g0, "sim"), stage_curve(res.rows, "sim")], ignore_index=True)
    return ShortFinetune(how, rows, traces, curve, recipe.sim_episodes)


@dataclass
class ExecutorComparison:
    """What :func:`executor_comparison` returns.

    Attributes:
        rows: per placement: measured makespan (median), simulated (calibrated cluster and the
            uncalibrated ``cpu`` preset), whether the outputs match the reference (an imported
            model's eager outputs, else a single-device run) and the largest absolute difference.
        traces: the measured traces, by placement.
        cluster_how: how the simulated cluster was obtained.
    """

    rows: list[dict[str, Any]]
    traces: dict[str, Trace]
    cluster_how: str


def executor_comparison(
    graph: DataflowGraph,
    devices: int = 2,
    placers: Sequence[str] = ("round-robin", "cp"),
    repeats: int = 5,
    calibrate: bool = True,
    seed: int = 0,
) -> ExecutorComparison:
    """Run ``graph`` on ``devices`` CPU workers under each placer's placement; check the outputs
    against the reference (an imported model's eager outputs, else a single-device run) and
    compare measured with simulated makespans."""

    cluster, how = cpu_cluster(graph, devices, calibrate, seed)
    calibrated = Simulator(graph, cluster, "wc")
    preset_sim = Simulator(graph, make_cpu_cluster(devices), "wc")
    reference = reference_outputs(graph, seed=seed)
    rows, traces = [], {}
    with Executor(graph, cluster, seed=seed) as ex:
        for name in placers:
            pl = place(name, graph, cluster, seed=seed)
            res = ex.run(pl, repeats=repeats, warmup=1, keep_outputs=True)
            check = compare_outputs(graph, res.outputs or {}, reference)
            traces[name] = res.trace
            simulated = calibrated.makespan(pl), preset_sim.makespan(pl)
            rows.append(
                {
                    "placement": name,
                    "measured_s": res.makespan,
                    "simulated_calibrated_s": simulated[0],
                    "simulated_preset_s": simulated[1],
                    "outputs_match": bool(check.ok),
                    "max_abs_error": check.max_abs_error,
                    "transfers": res.trace.num_transfers,
                }
            )
    return ExecutorComparison(rows, traces, how)
