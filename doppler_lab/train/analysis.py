"""Helpers the training notebooks call: a graph with its evaluation settings, and learned
policies compared with placers under the experiment protocol."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..hardware.cluster import Cluster
from ..ir.graph import DataflowGraph
from ..ir.placement import Placement
from ..ir.trace import Trace
from ..policies.policy_base import PlacementPolicy
from ..timing.sim import Simulator


def graph_case(
    name: str, paper_graphs_dir: str | None = None
) -> tuple[DataflowGraph, Cluster, str]:
    """A graph and how it is evaluated. ``name`` is a graph spec
    (:mod:`doppler_lab.workloads.specs`): a paper graph (``transformer_block_215nodes``,
    ``paper:NAME``, a ``.txt`` file; ``paper:NAME`` looked up in ``paper_graphs_dir`` when
    given) or any graph with explicit costs gives ``(graph, uniform devices, "paper")`` (4
    devices, 8 for the ``8gpu_*`` graphs); anything else (``llama_block``,
    ``chainmm:scale=0.01``, a model) gives ``(graph, p100x4, "wc")``."""
    from ..workloads.specs import cluster_from_spec, graph_from_spec

    graph = graph_from_spec(name, paper_dir=paper_graphs_dir)
    if graph.compute_cost is None:
        return graph, cluster_from_spec("p100x4"), "wc"
    devices = 8 if graph.name.startswith("8gpu") else 4
    return graph, cluster_from_spec("uniform", devices), "paper"


def compare_placements(
    entries: Mapping[str, PlacementPolicy | Placement | str],
    graph: DataflowGraph,
    cluster: Cluster,
    semantics: str,
    samples: int = 16,
    seed: int = 0,
    reference: str = "cp",
) -> tuple[list[dict[str, Any]], dict[str, Trace]]:
    """Evaluate policies (protocol: best of greedy + ``samples`` sampled rollouts), placers (by
    registry name, seeded) and fixed placements side by side on one simulator.

    Returns:
        Rows (label, makespan, greedy, ratio_lb, vs_reference) and the simulated trace of each
        entry's placement, by label.
    """
    from ..placers import place
    from ..search.learned import best_of_rollouts

    sim = Simulator(graph, cluster, semantics)  # type: ignore[arg-type]
    lb = sim.lower_bound()
    rows: list[dict[str, Any]] = []
    traces: dict[str, Trace] = {}
    for label, entry in entries.items():
        greedy = None
        if isinstance(entry, PlacementPolicy):
            res = best_of_rollouts(entry, graph, cluster, samples, seed, semantics)
            placement, greedy = res.placement, res.greedy_cost
        elif isinstance(entry, Placement):
            placement = entry
        else:
            placement = place(entry, graph, cluster, seed=seed)
        trace = sim.run(placement)
        traces[label] = trace
        rows.append(
            {
                "label": label,
                "makespan": trace.makespan,
                "greedy": greedy if greedy is not None else np.nan,
                "ratio_lb": trace.makespan / lb,
            }
        )
    ref = next((r["makespan"] for r in rows if r["label"] == reference), None)
    for r in rows:
        r[f"vs_{reference}"] = (ref - r["makespan"]) / ref if ref else np.nan
    return rows, traces


@dataclass(frozen=True)
class PolicyRecipe:
    """Where a notebook's policy comes from: a checkpoint, or Stage I (and II) trained here
    (:func:`starting_policy` and the experiments that train from it; each reads the fields it
    needs).

    Attributes:
        init: a checkpoint path or shipped name; ``"auto"``: a shipped checkpoint that fits the
            graph when there is one (each function says which), else training here; None:
            always training here.
        imitation_episodes: Stage I episodes of a policy trained here.
        sim_episodes: Stage II episodes (functions that run Stage II).
        eval_every: updates between greedy evaluations in Stage II (None: the preset's).
        seed: training seed.
        policy: the policy of fresh weights: a
            :class:`~doppler_lab.policies.policy_config.PolicyConfig`, or overrides of the
            ``default`` preset (``hidden``, ``mp_steps``, ...); None: the ``default`` preset.
        train: Stage II training-config overrides.
        learner: Stage II's training preset (a ``sim`` preset of
            :data:`~doppler_lab.train.train_config.TRAIN_PRESETS`).
    """

    init: str | None = "auto"
    imitation_episodes: int = 400
    sim_episodes: int = 1600
    eval_every: int | None = None
    seed: int = 0
    policy: Any = None
    train: Mapping[str, Any] | None = None
    learner: str = "sim"

    def policy_config(self) -> Any:
        """The :class:`~doppler_lab.policies.policy_config.PolicyConfig` of fresh weights."""
        from ..policies.policy_config import POLICY_PRESETS, PolicyConfig

        if isinstance(self.policy, PolicyConfig):
            return self.policy
        return POLICY_PRESETS["default"].replace(**dict(self.policy or {}))

    def sim_settings(self, semantics: str) -> dict[str, Any]:
        """Stage II's settings: episodes, semantics, seed, ``eval_every`` (when given), then
        the ``train`` overrides."""
        every = {} if self.eval_every is None else {"eval_every": self.eval_every}
        common = {"episodes": self.sim_episodes, "semantics": semantics, "seed": self.seed}
        return {**common, **every, **dict(self.train or {})}


def starting_policy(
    graph: DataflowGraph,
    cluster: Cluster,
    semantics: str,
    out_dir: str | Path,
    recipe: PolicyRecipe | None = None,
    progress: bool = False,
) -> tuple[PlacementPolicy, Path, str]:
    """The policy Stage II starts from, and how it was obtained.

    ``recipe.init`` (default :class:`PolicyRecipe`: ``"auto"``): a checkpoint path or shipped
    name; ``"auto"``: the shipped DOPPLER checkpoint of the graph if there is one
    (``doppler/<graph name>``), else a Stage I run of ``recipe.imitation_episodes`` episodes
    (``recipe.seed``, ``recipe.policy``) in ``<out_dir>/stage1`` (resumed if present); None:
    always that Stage I run.

    Returns:
        ``(policy, checkpoint path, "shipped ..." | "checkpoint ..." | "stage I ...")``.
    """
    from ..policies.checkpoint import load_policy
    from ..policies.pretrained import list_checkpoints, resolve_checkpoint
    from .loop import train
    from .train_config import preset

    r = recipe or PolicyRecipe()
    init, imitation_episodes, seed = r.init, r.imitation_episodes, r.seed
    d = cluster.num_devices
    if init == "auto":
        name = f"doppler/{graph.name}"
        if name in list_checkpoints():
            path = resolve_checkpoint(name)
            return load_policy(path, num_devices=d)[0], path, f"shipped {name}"
        init = None
    if init is not None:
        path = resolve_checkpoint(init)
        return load_policy(path, num_devices=d)[0], path, f"checkpoint {path}"
    cfg = preset("imitation", episodes=imitation_episodes, semantics=semantics, seed=seed)
    pcfg = r.policy_config()
    res = train(cfg, [graph], cluster, pcfg, Path(out_dir) / "stage1", progress=progress)
    assert res.checkpoint is not None
    return res.policy, res.checkpoint, f"stage I ({imitation_episodes} episodes)"
