"""Notebook 09: a policy trained on one graph and cluster, fine-tuned on another, against training
from scratch there with the same episode budget."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
from tqdm.auto import tqdm

from ...hardware.cluster import Cluster
from ...house.codeversion import versioned_key
from ...house.errors import ConfigError
from ...house.runners import Run, Runner, make_runner
from ...ir.graph import DataflowGraph
from ...policies.checkpoint import load_policy, make_policy
from ...policies.policy_config import POLICY_PRESETS
from ...policies.pretrained import list_checkpoints
from ...train.analysis import PolicyRecipe, compare_placements, graph_case, starting_policy
from ...train.loop import Trainer
from ...train.pipeline import run_pipeline
from ...train.train_config import check_learner, preset
from ...workloads.specs import cluster_from_spec
from .common import (
    episodes_to_reach,
    finite_or_none,
    greedy_makespan,
    mean_std_table,
    stage_curve,
    start_point,
    torch_threads,
    with_cost_units,
)


@dataclass(frozen=True)
class TransferCase:
    """A source graph and cluster, and the target the policy is fine-tuned on.

    Attributes:
        source: a workload spec or paper graph name.
        source_cluster: a cluster preset (None: the graph's default, see ``graph_case``).
        target: a workload spec or paper graph name.
        target_cluster: a cluster preset (None: the graph's default).
    """

    source: str
    source_cluster: str | None
    target: str
    target_cluster: str | None

    @property
    def source_label(self) -> str:
        return self.source + (f"@{self.source_cluster}" if self.source_cluster else "")

    @property
    def target_label(self) -> str:
        return self.target + (f"@{self.target_cluster}" if self.target_cluster else "")

    @property
    def label(self) -> str:
        return f"{self.source_label} -> {self.target_label}"


def _graph_at(text: str, where: str) -> tuple[str, str | None]:
    graph, _, cluster = text.strip().partition("@")
    if not graph.strip() or ("@" in text and not cluster.strip()):
        raise ConfigError(
            f"transfer case {where!r}: {text.strip()!r} is not GRAPH or GRAPH@CLUSTER"
        )
    return graph.strip(), cluster.strip() or None


def parse_transfer_cases(spec: str) -> list[TransferCase]:
    """Cases from ``"SOURCE[@CLUSTER] -> TARGET[@CLUSTER]; ..."``, e.g.
    ``"ffnn@p100x4 -> llama_block@p100x4; llama_block@p100x4 -> llama_block@v100x8"``."""
    cases = []
    for part in (p for p in spec.split(";") if p.strip()):
        if part.count("->") != 1:
            raise ConfigError(
                f"transfer case {part.strip()!r}: expected 'SOURCE[@CLUSTER] -> TARGET[@CLUSTER]'"
            )
        a, b = part.split("->")
        cases.append(TransferCase(*_graph_at(a, part.strip()), *_graph_at(b, part.strip())))
    if not cases:
        raise ConfigError(f"no transfer case in {spec!r}; expected 'SOURCE -> TARGET; ...'")
    return cases


def case_graph(
    name: str, cluster: str | None = None, paper_graphs_dir: str | None = None
) -> tuple[DataflowGraph, Cluster, str]:
    """``graph_case(name)`` with its cluster replaced by the preset ``cluster`` when given."""

    graph, default, semantics = graph_case(name, paper_graphs_dir)
    return graph, cluster_from_spec(cluster) if cluster else default, semantics


def source_policy(
    graph: DataflowGraph,
    cluster: Cluster,
    semantics: str,
    out_dir: str | Path,
    recipe: PolicyRecipe | None = None,
    progress: bool = False,
) -> tuple[Any, Path, str]:
    """The policy to transfer: a shipped or given checkpoint, or Stages I+II trained here.

    ``recipe.init="auto"`` (default :class:`~doppler_lab.train.analysis.PolicyRecipe`) takes
    the shipped ``doppler/<graph>`` checkpoint when it was trained on a cluster of
    ``cluster``'s name and a graph of as many nodes, else trains Stage I
    (``imitation_episodes``) and Stage II (``sim_episodes``, the ``train`` overrides) of the
    recipe in ``out_dir`` (resumed if present); a path or shipped name loads that; None always
    trains.

    Returns:
        ``(policy, checkpoint, how)``.
    """

    r = recipe or PolicyRecipe()
    init, imitation_episodes, sim_episodes = r.init, r.imitation_episodes, r.sim_episodes
    shipped = list_checkpoints().get(f"doppler/{graph.name}", {})
    same = shipped.get("cluster") == cluster.name and shipped.get("graph_nodes") == graph.num_nodes
    if (init == "auto" and same) or init not in (None, "auto"):
        return starting_policy(graph, cluster, semantics, out_dir, PolicyRecipe(init))
    common = {"semantics": semantics, "seed": r.seed}
    stages = [
        preset("imitation", episodes=imitation_episodes, **common),
        preset(r.learner, **{**common, **dict(r.train or {}), "episodes": sim_episodes}),
    ]
    policy = r.policy_config()
    results = run_pipeline(stages, [graph], cluster, policy, out_dir, progress=progress)
    ckpt = results[-1].checkpoint
    assert ckpt is not None
    how = f"trained here (Stage I {imitation_episodes} + Stage II {sim_episodes} episodes)"
    return results[-1].policy, ckpt, how


@dataclass
class TransferResult:
    """What :func:`run_transfers` returns.

    Attributes:
        curves: learning curves on the targets: ``case``, ``run`` (``fine-tune`` or
            ``scratch``), ``seed``, ``stage``, ``episode`` (on the target, episode 0 = before
            training), :data:`CURVE_METRICS`.
        runs: the protocol's makespans per (case, label, seed): CP, the transferred policy
            before fine-tuning (``zero-shot``), ``fine-tuned`` and ``scratch``.
        table: mean and std of ``runs`` over seeds.
        matches: per (case, seed): the episode budget, scratch's final greedy cost, the episodes
            fine-tuning needed to reach it (None: not within the budget).
        sources: how each source policy was obtained, by source label.
    """

    curves: pd.DataFrame
    runs: pd.DataFrame
    table: pd.DataFrame
    matches: pd.DataFrame
    sources: dict[str, str]


def _slug(text: str) -> str:
    keep = [ch if ch.isalnum() or ch in "._-" else "_" for ch in text]
    return "".join(keep).strip("_")


def _transfer_seed(
    graph: DataflowGraph,
    cluster: Cluster,
    checkpoint: Path,
    policy: Any,
    config: Any,
    imitation_episodes: int,
    samples: int,
    root: Path,
    labels: Mapping[str, Any],
    progress: bool,
) -> tuple[pd.DataFrame, pd.DataFrame, list[dict[str, Any]]]:
    """Fine-tuning and scratch on one target with one seed: their curves and the protocol's
    rows (CP, zero-shot, fine-tuned, scratch). ``config`` is the Stage II configuration with the
    whole budget; scratch spends ``imitation_episodes`` of it in Stage I first.

    Its positional arguments are a :class:`~doppler_lab.house.runners.Run`'s ``args`` (a runner
    ships them to a worker; :func:`run_transfers` reads the labels back from them).
    """

    sem, seed, d = config.semantics, config.seed, cluster.num_devices
    zero = load_policy(checkpoint, num_devices=d, allow_device_change=True)[0]
    ft = Trainer(
        config,
        [graph],
        cluster,
        None,
        root / "finetune",
        init=checkpoint,
        allow_device_change=True,
        progress=progress,
    ).run()
    fresh = make_policy(policy, d, seed, sem)
    stages = [config.replace(episodes=config.episodes - imitation_episodes)]
    if imitation_episodes:
        stages.insert(
            0,
            preset(
                "imitation",
                episodes=imitation_episodes,
                semantics=sem,
                seed=seed,
                eval_every=config.eval_every,
            ),
        )
    scratch = run_pipeline(stages, [graph], cluster, policy, root / "scratch", progress=progress)
    ft_parts = [start_point(greedy_makespan(zero, graph, cluster, sem), "sim", **labels)]
    ft_parts.append(stage_curve(ft.rows, "sim", **labels))
    sc_parts = [start_point(greedy_makespan(fresh, graph, cluster, sem), "sim", **labels)]
    offset = 0
    for cfg, res in zip(stages, scratch):
        sc_parts.append(stage_curve(res.rows, cfg.stage, offset, **labels))
        offset += cfg.episodes
    entries = {
        "cp": "cp",
        "zero-shot": zero,
        "fine-tuned": ft.policy,
        "scratch": scratch[-1].policy,
    }
    rows, _ = compare_placements(entries, graph, cluster, sem, samples, seed)
    return (
        pd.concat(ft_parts, ignore_index=True).assign(run="fine-tune"),
        pd.concat(sc_parts, ignore_index=True).assign(run="scratch"),
        rows,
    )


@dataclass(frozen=True)
class TransferConfig:
    """Settings of the transfer experiment (notebook 09; :func:`run_transfers`).

    Attributes:
        episodes: the budget on the target: fine-tuning is Stage II for ``episodes``; scratch
            is Stage I (``imitation_episodes``) then Stage II for the rest.
        imitation_episodes: scratch's Stage I share (0: Stage II alone from fresh weights).
        seeds: seeds of the target runs (``seed`` .. ``seed + seeds - 1``).
        seed: the first seed (a source trained here uses it).
        source_init: see :func:`source_policy`.
        source_imitation_episodes: Stage I episodes of a source trained here.
        source_sim_episodes: Stage II episodes of a source trained here.
        samples: sampled rollouts besides the greedy one (protocol).
        eval_every: updates between greedy evaluations (the curves' ``greedy_cost``).
        policy: policy-config overrides for policies trained from fresh weights.
        train: Stage II overrides (source, fine-tuning and scratch alike).
        paper_graphs_dir: folder of the paper's graphs, for cases that name them.
        learner: the Stage II training preset (source, fine-tuning and scratch alike; a
            ``sim`` preset of :data:`~doppler_lab.train.train_config.TRAIN_PRESETS`).
    """

    episodes: int = 2000
    imitation_episodes: int = 400
    seeds: int = 1
    seed: int = 0
    source_init: str | None = "auto"
    source_imitation_episodes: int = 400
    source_sim_episodes: int = 1600
    samples: int = 16
    eval_every: int = 4
    policy: Mapping[str, Any] | None = None
    train: Mapping[str, Any] | None = None
    paper_graphs_dir: str | None = None
    learner: str = "sim"

    def __post_init__(self) -> None:

        check_learner(self.learner, "transfer")


def run_transfers(
    cases: Sequence[TransferCase],
    out_dir: str | Path,
    config: TransferConfig | None = None,
    progress: bool = False,
    runner: str | Runner = "local",
    jobs: int | None = 1,
) -> TransferResult:
    """Fine-tune each case's source policy on its target and train from scratch there, with
    the same episode budget on the target; runs cached under ``out_dir``.

    Args:
        cases: the transfers.
        out_dir: run folder (``sources/`` and one folder per case and seed).
        config: the budgets, seeds and overrides (default :class:`TransferConfig`).
        progress: progress bars.
        runner: where the (case, seed) runs on the targets go: ``local`` (``jobs`` processes
            here), ``ray``, ``auto`` (Ray when a cluster is up, else local) or a
            :class:`~doppler_lab.house.runners.Runner`; sources train here first.
        jobs: local processes (None: one per core).
    """

    c = config or TransferConfig()
    episodes, imitation_episodes, seed, seeds = c.episodes, c.imitation_episodes, c.seed, c.seeds
    source_imitation_episodes, source_sim_episodes = (
        c.source_imitation_episodes,
        c.source_sim_episodes,
    )
    paper_graphs_dir, eval_every, samples = c.paper_graphs_dir, c.eval_every, c.samples
    if not 0 <= imitation_episodes < episodes:
        raise ConfigError(
            f"transfer: imitation_episodes {imitation_episodes} must lie in "
            f"[0, episodes={episodes})"
        )
    out = Path(out_dir)
    pcfg = POLICY_PRESETS["default"].replace(**dict(c.policy or {}))
    overrides = dict(c.train or {})
    curves, runs, matches = [], [], []
    sources: dict[str, tuple[Path, str]] = {}
    targets: list[Run] = []
    with torch_threads(1):
        for case in tqdm(cases, desc="transfer cases", disable=not progress):
            if case.source_label not in sources:
                sg, sc, ssem = case_graph(case.source, case.source_cluster, paper_graphs_dir)
                key = versioned_key(
                    pcfg,
                    preset(c.learner, **overrides),
                    source_imitation_episodes,
                    source_sim_episodes,
                    seed,
                    ssem,
                )
                recipe = PolicyRecipe(
                    c.source_init,
                    source_imitation_episodes,
                    source_sim_episodes,
                    seed=seed,
                    policy=pcfg,
                    train=overrides,
                    learner=c.learner,
                )
                where = out / "sources" / f"{_slug(case.source_label)}-{key}"
                _, ckpt, how = source_policy(sg, sc, ssem, where, recipe, progress)
                sources[case.source_label] = (ckpt, how)
            ckpt = sources[case.source_label][0]
            graph, cluster, sem = case_graph(case.target, case.target_cluster, paper_graphs_dir)
            for s in range(seed, seed + seeds):
                labels = {"case": case.label, "seed": s}
                rl = preset(
                    c.learner,
                    **{"semantics": sem, "seed": s, "eval_every": eval_every, **overrides},
                )
                rl = rl.replace(episodes=episodes)
                key = versioned_key(pcfg, rl, imitation_episodes, str(ckpt))
                args = (graph, cluster, ckpt, pcfg, rl, imitation_episodes, samples)
                where = out / _slug(case.label) / f"seed{s}-{key}"
                label = f"{case.label} seed {s}"
                targets.append(Run(_transfer_seed, (*args, where, labels, False), label=label))
        sweep = make_runner(runner, jobs=jobs).run(targets, desc="transfer runs", progress=progress)
        for run, (ft_curve, sc_curve, rows) in zip(targets, sweep.values):
            labels = run.args[-2]
            curves += [ft_curve, sc_curve]
            runs += [{**labels, **r} for r in rows]
            matches.append(match_row(ft_curve, sc_curve, episodes, **labels))
    run_frame = pd.DataFrame(runs)
    table = mean_std_table(
        run_frame.assign(key=run_frame.case + " | " + run_frame.label),
        ["key"],
        ["makespan", "greedy", "ratio_lb", "vs_cp"],
    )
    parts = table.key.str.split(" | ", regex=False)
    table.insert(0, "case", parts.str[0])
    table.insert(1, "label", parts.str[1])
    units = {t.args[0].time_unit for t in targets}
    return TransferResult(
        with_cost_units(
            pd.concat(curves, ignore_index=True), units.pop() if len(units) == 1 else None
        ),
        run_frame,
        table.drop(columns="key"),
        pd.DataFrame(matches),
        {k: how for k, (_, how) in sources.items()},
    )


def match_row(
    finetune: pd.DataFrame, scratch: pd.DataFrame, budget: int, **labels: Any
) -> dict[str, Any]:
    """How many target episodes fine-tuning needed to first reach scratch's final greedy cost
    (None: not within the budget), and whether its own final greedy cost is still that good
    (the greedy curve of a policy in training goes up as well as down)."""
    sg = scratch.dropna(subset=["greedy_cost"]).sort_values("episode")
    fg = finetune.dropna(subset=["greedy_cost"]).sort_values("episode")
    target = float(sg.greedy_cost.iloc[-1])
    n = episodes_to_reach(fg.episode, fg.greedy_cost, target)
    return {
        **labels,
        "budget": budget,
        "zero_shot_greedy": float(fg.greedy_cost.iloc[0]),
        "finetune_final_greedy": float(fg.greedy_cost.iloc[-1]),
        "scratch_start_greedy": float(sg.greedy_cost.iloc[0]),
        "scratch_final_greedy": target,
        "finetune_episodes_to_match": n,
        "fraction_of_budget": n / budget if n is not None else None,
        "finetune_final_matches": bool(fg.greedy_cost.iloc[-1] <= target * (1 + 1e-9)),
    }


def transfer_table(result: TransferResult) -> pd.DataFrame:
    """One row per case: the budget, in how many seeds fine-tuning reached scratch's final
    greedy cost within it (``matched``) and after how many episodes (mean over those seeds; as
    a fraction of the budget), in how many it still was at the end (``final_matched``), and the
    protocol's improvement over CP of the zero-shot, fine-tuned and scratch policies (mean over
    seeds)."""
    m = result.matches
    rows = []
    for case, f in m.groupby("case", sort=False):
        hit = f.finetune_episodes_to_match.dropna()
        t = result.table[result.table.case == case].set_index("label")
        rows.append(
            {
                "case": case,
                "budget": int(f.budget.iloc[0]),
                "seeds": len(f),
                "matched": len(hit),
                "final_matched": int(f.finetune_final_matches.sum()),
                "episodes_to_match": float(hit.mean()) if len(hit) else math.nan,
                "fraction_of_budget": float(hit.mean() / f.budget.iloc[0])
                if len(hit)
                else math.nan,
                **{
                    f"{k}_vs_cp": float(t.at[k, "vs_cp"])
                    for k in ("zero-shot", "fine-tuned", "scratch")
                },
            }
        )
    return pd.DataFrame(rows)


def transfer_key_numbers(table: pd.DataFrame) -> dict[str, Any]:
    """The report index's numbers: per case, the episodes fine-tuning needed to match scratch
    and the fine-tuned and scratch policies' improvement over CP."""
    out: dict[str, Any] = {}
    for r in table.to_dict(orient="records"):
        out[f"{r['case']}: episodes to match"] = finite_or_none(r["episodes_to_match"])
        out[f"{r['case']}: fine-tuned vs cp"] = finite_or_none(r["fine-tuned_vs_cp"])
        out[f"{r['case']}: scratch vs cp"] = finite_or_none(r["scratch_vs_cp"])
    return out
