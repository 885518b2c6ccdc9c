"""``doppler-lab bench learner``: REINFORCE against PPO-style clipped updates, paired by graph
and seed, for the two learners of the workbench's own policies.

- **training** (what ``train-general``'s Stage II does): a fresh DOPPLER policy trained by
  Stage II (the ``sim`` preset) for :data:`TRAIN_EPISODES` episodes on one of the paper's
  4-GPU graphs, once with each estimator from the same seed (the same initial weights); the
  result is the trained policy's best of its greedy rollout and 16 samples (the protocol);
- **adapt**: the shipped general policy adapted to the graph (:func:`~doppler_lab.search.
  adapter.adapt`, :data:`ADAPT_EPISODES` simulator calls, its default settings) with each
  estimator from the same seed; the result is the best placement found.

Each pair gives ``(REINFORCE - PPO) / REINFORCE`` (positive: PPO's makespan is shorter); the
verdict on "PPO beats REINFORCE" is the project's paired judgement
(:func:`~doppler_lab.house.stats.judge_claim`: the 95% bootstrap interval of the mean
difference, the Wilcoxon signed-rank test and the effect size): ``supports`` only when the
interval lies above zero, ``contradicts`` only when it lies below, ``inconclusive`` otherwise.
The defaults :data:`~doppler_lab.train.general_policy.GENERAL_ESTIMATOR` and
:data:`~doppler_lab.search.adapter.ADAPT_ESTIMATOR` follow this page (:func:`default_estimator`:
PPO only where the verdict supports it with a mean gain of at least 0.5%).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ...house.errors import ConfigError
from ...house.paths import PAPER_GRAPHS_HINT, paper_graphs_dir
from ...house.progress import progress as progress_bar
from ...house.stats import judge_claim
from ...policies.checkpoint import load_policy
from ...policies.policy_config import PolicyConfig
from ...policies.pretrained import GENERAL_CHECKPOINT, resolve_checkpoint
from ...search.adapter import AdaptConfig, adapt
from ...search.learned import best_of_rollouts
from ...train.loop import train
from ...train.train_config import preset
from ...viz.tables import format_value
from ...workloads.catalog import PAPER_GRAPH_NAMES, default_cluster, load_paper_graphs
from ._report import write_report

ESTIMATORS: tuple[str, str] = ("reinforce", "ppo")
SEEDS, QUICK_SEEDS = 8, 2
TRAIN_EPISODES, QUICK_TRAIN_EPISODES = 128, 32
ADAPT_EPISODES, QUICK_ADAPT_EPISODES = 200, 48
#: the rollouts that judge a trained policy: greedy + this many samples (the protocol)
SAMPLES = 16
PARTS = ("training", "adapt")
CLAIM = "PPO-style clipped updates reach shorter makespans than REINFORCE"
COLUMNS = [
    "graph", "pairs", "reinforce", "ppo", "ppo_gain_pct", "low_pct", "high_pct", "ppo_wins",
    "ppo_losses", "verdict",
]  # fmt: skip
SEED_COLUMNS = ["part", "graph", "seed", "reinforce", "ppo", "ppo_gain_pct"]


def _trained(graph: Any, cluster: Any, estimator: str, seed: int, episodes: int) -> float:
    """Best of greedy + :data:`SAMPLES` of a fresh policy after Stage II with ``estimator``."""

    cfg = preset("sim", episodes=episodes, estimator=estimator, seed=seed)
    result = train(cfg, [graph], cluster, PolicyConfig(), progress=False)
    return float(best_of_rollouts(result.policy, graph, cluster, SAMPLES, seed, "paper").cost)


def _adapted(policy: Any, graph: Any, cluster: Any, estimator: str, seed: int, calls: int) -> float:
    """The best makespan the adapter finds with ``estimator`` in ``calls`` simulator calls."""

    cfg = AdaptConfig(episodes=calls, estimator=estimator)
    return float(adapt(policy, graph, cluster, "paper", cfg, seed=seed).best_cost)


def _summary_row(graph: str, pairs: Sequence[dict[str, Any]]) -> dict[str, Any]:
    gains = np.array([p["ppo_gain"] for p in pairs])
    st = judge_claim(gains, direction=+1)
    return {
        "graph": graph,
        "pairs": len(pairs),
        "reinforce": float(np.mean([p["reinforce"] for p in pairs])),
        "ppo": float(np.mean([p["ppo"] for p in pairs])),
        "ppo_gain_pct": round(100 * st.mean, 2),
        "low_pct": round(100 * st.low, 2),
        "high_pct": round(100 * st.high, 2),
        "ppo_wins": int((gains > 0).sum()),
        "ppo_losses": int((gains < 0).sum()),
        "verdict": st.verdict,
        "p_value": st.p_value,
        "effect_size": st.effect_size,
    }


def verdict_text(part: str, gains: Sequence[float]) -> tuple[str, str]:
    """The verdict word on :data:`CLAIM` from one part's paired gains, and its sentence."""
    st = judge_claim(np.asarray(gains, dtype=np.float64), direction=+1)
    p = "n/a" if st.p_value is None else f"{st.p_value:.2g}"
    lo, hi = format_value(st.low, "%"), format_value(st.high, "%")
    text = (
        f"{part}: over {st.n} pairs PPO's makespan is {format_value(st.mean, '%')} shorter "
        f"(95% interval {lo} to {hi}; Wilcoxon p = {p}, effect size d_z = "
        f"{st.effect_size:.2f}): {st.verdict} for the claim that {CLAIM.lower()}."
    )
    return st.verdict, text


#: the smallest mean gain for which PPO becomes a default: below it a supported but tiny gain
#: does not pay for updates that take about twice the time (and a changed default stops
#: earlier runs from resuming under it)
MIN_PRACTICAL_GAIN = 0.005


def default_estimator(verdict: str, mean_gain: float) -> str:
    """``"ppo"`` where the paired verdict supports it and its mean gain (a fraction) is at
    least :data:`MIN_PRACTICAL_GAIN`; else ``"reinforce"``."""
    return "ppo" if verdict == "supports" and mean_gain >= MIN_PRACTICAL_GAIN else "reinforce"


def run(out_dir: Path, quick: bool = False, progress: bool = False) -> dict[str, Any]:
    """Both parts on the paper's 4-GPU graphs (``$DOPPLER_PAPER_GRAPHS``); writes
    ``learner.{json,md}``.

    Raises:
        ConfigError: the paper's graphs are not found.
    """

    graphs = load_paper_graphs(
        paper_graphs_dir(), PAPER_GRAPH_NAMES[:2] if quick else PAPER_GRAPH_NAMES
    )
    if not graphs:
        raise ConfigError(f"bench learner needs the paper's graphs; {PAPER_GRAPHS_HINT}")
    seeds = range(QUICK_SEEDS if quick else SEEDS)
    train_eps = QUICK_TRAIN_EPISODES if quick else TRAIN_EPISODES
    adapt_calls = QUICK_ADAPT_EPISODES if quick else ADAPT_EPISODES
    ckpt = resolve_checkpoint(GENERAL_CHECKPOINT, "doppler")
    torch.set_num_threads(1)
    per_seed: list[dict[str, Any]] = []
    seconds = {p: {e: 0.0 for e in ESTIMATORS} for p in PARTS}
    bar = progress_bar(
        total=len(graphs) * len(seeds) * len(PARTS), desc="bench learner", enabled=progress
    )
    try:
        for name, graph in graphs.items():
            cluster = default_cluster(graph)
            policy, _ = load_policy(ckpt, ("dual", "plc-only"), cluster.num_devices)
            for part in PARTS:
                for seed in seeds:
                    got = {}
                    for est in ESTIMATORS:
                        t0 = time.perf_counter()
                        if part == "training":
                            got[est] = _trained(graph, cluster, est, seed, train_eps)
                        else:
                            got[est] = _adapted(policy, graph, cluster, est, seed, adapt_calls)
                        seconds[part][est] += time.perf_counter() - t0
                    gain = (got["reinforce"] - got["ppo"]) / got["reinforce"]
                    per_seed.append(
                        {"part": part, "graph": name, "seed": seed, **got, "ppo_gain": gain,
                         "ppo_gain_pct": round(100 * gain, 2)}
                    )  # fmt: skip
                    bar.update(1)
    finally:
        bar.close()
    return _write(out_dir, quick, per_seed, seconds, train_eps, adapt_calls, len(seeds))


def _write(
    out_dir: Path,
    quick: bool,
    per_seed: list[dict[str, Any]],
    seconds: dict[str, dict[str, float]],
    train_eps: int,
    adapt_calls: int,
    seeds: int,
) -> dict[str, Any]:
    tables: dict[str, tuple[list[dict[str, Any]], list[str] | None]] = {}
    summary: dict[str, Any] = {}
    notes = []
    for part in PARTS:
        rows = [r for r in per_seed if r["part"] == part]
        by_graph = [
            _summary_row(g, [r for r in rows if r["graph"] == g])
            for g in dict.fromkeys(r["graph"] for r in rows)
        ]
        every = _summary_row("all graphs", rows)
        word, text = verdict_text(part, [r["ppo_gain"] for r in rows])
        summary[f"{part}_verdict"] = word
        summary[f"{part}_ppo_gain"] = f"{every['ppo_gain_pct']:.2f}%"
        summary[f"{part}_interval"] = f"{every['low_pct']:.2f}% to {every['high_pct']:.2f}%"
        for est, secs in seconds[part].items():
            summary[f"{part}_{est}_seconds"] = round(secs, 1)
        what = (
            f"Stage II from scratch, {train_eps} episodes; best of greedy + {SAMPLES} samples"
            if part == "training"
            else f"the general policy adapted, {adapt_calls} simulator calls; best found"
        )
        tables[f"{part}: {what} (paired by graph and seed, {seeds} seeds)"] = (
            [*by_graph, every],
            COLUMNS,
        )
        notes.append(text)
    tables["Every pair"] = (per_seed, SEED_COLUMNS)
    for part, key in (("training", "default_general"), ("adapt", "default_adapt")):
        gain = float(np.mean([r["ppo_gain"] for r in per_seed if r["part"] == part]))
        summary[key] = default_estimator(summary[f"{part}_verdict"], gain)
    notes += [
        "Makespans in the paper's cost units (its 4-GPU graphs, uniform devices, paper "
        "semantics). ppo_gain_pct: (REINFORCE - PPO) / REINFORCE per pair, in percent "
        "(positive: PPO shorter), and its mean over the pairs; low_pct / high_pct: the 95% "
        "bootstrap interval of that mean; "
        "ppo_wins / ppo_losses: pairs where PPO is shorter / longer.",
        "PPO: the batch's advantages normalised, then 4 clipped steps (clip 0.2) over each "
        "batch of episodes; REINFORCE: one step. Same seed, same initial weights and "
        "settings otherwise (the sim preset; the adapter's defaults).",
        f"Defaults this page sets: train-general's Stage II {summary['default_general']}, "
        f"adapt {summary['default_adapt']} (PPO only where the verdict supports it and its "
        f"mean gain is at least {MIN_PRACTICAL_GAIN:.1%}: its updates take about twice the "
        "time). The paper-reproduction stages keep REINFORCE either way.",
    ]
    return write_report(
        out_dir,
        "learner",
        "Policy-gradient estimators: REINFORCE against PPO-style clipped updates",
        tables,
        summary=summary,
        notes=notes,
        command="doppler-lab bench learner" + (" --quick" if quick else ""),
    )
