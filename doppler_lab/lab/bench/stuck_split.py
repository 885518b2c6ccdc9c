"""``doppler-lab bench stuck-split``: does the dual policy get stuck because Stage I is long?

At the paper's budget (Stage I 2000 + Stage II 2000 episodes, notebook 07's cells) most dual
seeds on the FFNN end where the Critical Path teacher does (84.18 against a best known 56.70):
after 2000 imitation episodes PLC puts 0.9999 of its probability on the teacher's devices
(entropy 0.17 nats), and Stage II's samples find better placements (56.7-77.3) without moving
the greedy policy off the teacher's. This benchmark asks whether that is the Stage I length:
arm ``today`` trains as notebook 07 does (2000 + 2000), arm ``short-imitation`` gives Stage I a
tenth of the same 4000 episodes (the ``imitation`` preset's 400) and Stage II the rest; same
graphs, seeds and protocol, paired by graph and seed (:mod:`~doppler_lab.lab.bench.stuck`'s
machinery and failure rates, also counted against the best known placement).

The dual policy, SEL-only and PLC-only on the paper's four 4-GPU graphs, 8 seeds: 192 runs,
about 3 CPU-hours; runs are cached per (graph, variant, seed, settings) in ``runs/bench_policy``,
the cache notebook 07 trains its cells into (the ``today`` arm's runs are its runs), and an
interrupted bench resumes.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from ...house.paths import BENCH_POLICY_RUNS
from ...house.runners import Runner
from .stuck import GRAPHS, StuckBenchConfig, run_arms
from .stuck import quick_config as stuck_quick_config

#: the paper's budget and Stage I share, the dual policy and its halves, both arms
SPLIT_CONFIG = StuckBenchConfig(
    graphs=GRAPHS,
    variants=("dual", "sel-only", "plc-only"),
    arms=("today", "short-imitation"),
    seeds=8,
    episodes=4000,
    imitation_episodes=2000,
    runs_dir=BENCH_POLICY_RUNS,
)


def quick_config() -> StuckBenchConfig:
    """A smoke run: ``bench stuck``'s (one small graph, two seeds, a small encoder), the dual
    policy in both arms at a smaller budget."""
    return replace(
        stuck_quick_config(),
        variants=("dual",),
        arms=("today", "short-imitation"),
        episodes=40,
        imitation_episodes=20,
        runs_dir="runs/bench_stuck_split_quick",
    )


def run(
    out_dir: Path,
    quick: bool = False,
    config: StuckBenchConfig | None = None,
    progress: bool = True,
    runner: str | Runner = "local",
    keep_going: bool = False,
) -> dict[str, Any]:
    """Run (or resume) the benchmark and write ``stuck-split.json`` / ``stuck-split.md``."""
    cfg = config or (quick_config() if quick else SPLIT_CONFIG)
    return run_arms(
        out_dir,
        cfg,
        "stuck-split",
        "Stuck at the teacher: the paper's Stage I share against a short Stage I",
        "doppler-lab bench stuck-split" + (" --quick" if quick else ""),
        progress=progress,
        runner=runner,
        keep_going=keep_going,
    )


__all__ = ["SPLIT_CONFIG", "quick_config", "run"]
