"""``doppler-lab bench stuck``: how often a training seed gets stuck, today and with the fix.

A seed *fails* when its final makespan (the experiment protocol: best of the final policy's
greedy rollout and ``samples`` sampled rollouts) ends more than ``threshold`` (5%) above the best
seed of its cell, a cell being one (graph, variant, arm). Variants: the dual policy (learned SEL
and PLC), SEL-only (PLC by the Critical Path rule) and PLC-only (SEL by the rule), trained as
``bench policy`` trains them (Stage I imitation, then Stage II in the simulator). Arms
(:data:`ARMS`): ``today`` (the Stage II preset as it is), ``fix`` (the preset with :data:`FIX`
on top) and ``short-imitation`` (Stage I ends after a tenth of the budget; ``bench
stuck-split``, :mod:`~doppler_lab.lab.bench.stuck_split`, runs it at the paper's budget).

Every (graph, variant, seed, arm) is one :func:`~doppler_lab.lab.bench.policy.run_case`, cached in its
own resumable run directory under ``runs_dir`` (keyed by configuration and code version), so an
interrupted bench resumes. ``runs_dir`` is by default the run cache of ``bench policy`` and
notebooks 03 and 07 (``runs/bench_policy``): the arms differ by their stage settings, so their
runs never share a folder, and a run the paper's settings give (``bench stuck-split``'s ``today``
arm is notebook 07's dual, SEL-only and PLC-only cells) is trained once for all of them. Beside each seed's makespan the page shows what its Stage II curves
say about why it ended where it did: SEL's and PLC's entropies at the start and end of Stage II
and their gradient norms (:func:`stage_diagnostics`).
"""

from __future__ import annotations

import csv
import os
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ...house.errors import ConfigError
from ...house.paths import BENCH_POLICY_RUNS
from ...house.runners import Run, Runner
from ...house.stats import (
    AB_WORDS,
    bootstrap_interval,
    judge_claim,
    paired_differences,
    paired_stats,
)
from ...workloads.catalog import PAPER_GRAPH_NAMES
from . import adopt
from ._report import write_report
from .policy import PolicyBenchConfig, _cases, adopted_sweep, run_case
from .yardstick import best_known

#: the paper's 4-GPU graphs
GRAPHS: tuple[str, ...] = PAPER_GRAPH_NAMES
#: variant name -> ``bench policy`` method
VARIANTS: dict[str, str] = {"dual": "doppler", "sel-only": "sel-only", "plc-only": "plc-only"}
#: the Stage II settings of the ``fix`` arm (on top of the ``sim`` preset)
FIX: dict[str, Any] = {"sel_temperature_end": 0.25}
#: the Stage I share of the episode budget in the ``short-imitation`` arm (the workbench's own
#: recipe: 400 of 4000 episodes, the ``imitation`` preset's length)
SHORT_IMITATION_SHARE = 0.1


@dataclass(frozen=True)
class Arm:
    """How one arm trains, against the configuration's own settings.

    Attributes:
        imitation_share: Stage I's share of the episode budget (None: the configuration's
            ``imitation_episodes``).
        train: Stage II settings on top of the ``sim`` preset.
    """

    imitation_share: float | None = None
    train: dict[str, Any] = field(default_factory=dict)


#: the arms a configuration can name: ``today`` (the preset as it is), ``fix`` (SEL's
#: temperature schedule, :data:`FIX`) and ``short-imitation`` (Stage I ends after
#: :data:`SHORT_IMITATION_SHARE` of the budget; Stage II has the rest)
ARMS: dict[str, Arm] = {
    "today": Arm(),
    "fix": Arm(train=dict(FIX)),
    "short-imitation": Arm(imitation_share=SHORT_IMITATION_SHARE),
}
#: a seed fails when it ends more than this fraction above its cell's best seed
THRESHOLD = 0.05


@dataclass(frozen=True)
class StuckBenchConfig:
    """Settings of ``bench stuck``.

    Attributes:
        graphs: paper graph names (4 devices, paper semantics).
        variants: keys of :data:`VARIANTS`.
        arms: names of :data:`ARMS` (the first is the one the others are paired against).
        seeds: training seeds per cell.
        episodes: episodes per run (Stage I + Stage II).
        imitation_episodes: Stage I's share.
        samples: sampled rollouts besides the greedy one (the protocol).
        threshold: the failure threshold (fraction above the cell's best).
        jobs: training processes (None: 2 when the machine is idle, else 1).
        policy: policy-config changes (notebook 07's encoder: width 64, 4 steps).
        runs_dir: the run cache.
    """

    graphs: tuple[str, ...] = GRAPHS
    variants: tuple[str, ...] = tuple(VARIANTS)
    arms: tuple[str, ...] = ("today", "fix")
    seeds: int = 8
    episodes: int = 600
    imitation_episodes: int = 100
    samples: int = 16
    threshold: float = THRESHOLD
    jobs: int | None = None
    policy: dict[str, Any] = field(default_factory=lambda: {"hidden": 64, "mp_steps": 4})
    runs_dir: str = BENCH_POLICY_RUNS

    def __post_init__(self) -> None:
        bad = [v for v in self.variants if v not in VARIANTS]
        if bad or not self.variants:
            raise ConfigError(
                f"bench stuck: variant {bad[0] if bad else None!r}; expected some of "
                f"{', '.join(VARIANTS)}"
            )
        bad = [a for a in self.arms if a not in ARMS]
        if bad or not self.arms:
            raise ConfigError(
                f"bench stuck: arm {bad[0] if bad else None!r}; expected some of {', '.join(ARMS)}"
            )
        if self.seeds < 2:
            raise ConfigError(f"bench stuck: seeds = {self.seeds}, expected at least 2")
        if not 0 < self.threshold < 1:
            raise ConfigError(f"bench stuck: threshold = {self.threshold}, expected in (0, 1)")


def quick_config() -> StuckBenchConfig:
    """A smoke run: one small graph, two seeds, tiny budgets."""
    return StuckBenchConfig(
        graphs=("chain_mm_112nodes",),
        seeds=2,
        episodes=48,
        imitation_episodes=16,
        samples=2,
        jobs=1,
        policy={"hidden": 16, "mp_steps": 2},
        runs_dir="runs/bench_stuck_quick",
    )


# -- the failure rate ---------------------------------------------------------------------------
def mark_failures(
    results: Sequence[Mapping[str, Any]], threshold: float = THRESHOLD
) -> list[dict[str, Any]]:
    """Each result with its cell's best (``cell_best``), its distance above it (``above_best``,
    a fraction) and ``failed`` (above by more than ``threshold``); a cell is a (graph, variant,
    arm) (a result without ``arm`` is in the arm ``""``). Also against the best known placement
    of a paper graph (``above_known``, ``failed_above_known``; None elsewhere): a cell whose seeds
    are all stuck at the same place has no failure by its own best, but every seed above the
    best known."""
    best: dict[tuple[str, str, str], float] = {}
    for r in results:
        key = (r["graph"], r["variant"], r.get("arm", ""))
        best[key] = min(best.get(key, np.inf), float(r["makespan"]))
    out = []
    for r in results:
        b = best[(r["graph"], r["variant"], r.get("arm", ""))]
        above = float(r["makespan"]) / b - 1.0
        known = best_known(r["graph"])
        above_known = float(r["makespan"]) / known - 1.0 if known else None
        out.append(
            {
                **r,
                "cell_best": b,
                "above_best": above,
                "failed": above > threshold,
                "above_known": above_known,
                "failed_above_known": None if above_known is None else above_known > threshold,
            }
        )
    return out


def interval(values: Sequence[float]) -> tuple[float, float, float]:
    """The mean of ``values`` and its 95% bootstrap interval."""
    mean = float(np.mean(values))
    if len(values) < 2:
        return mean, mean, mean
    low, high = bootstrap_interval(values)
    return mean, low, high


def failure_rates(marked: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Per (arm, variant): seeds, failures, the failure rate with its 95% bootstrap interval,
    and the mean distance above the cell's best over all its cells."""
    rows = []
    keys = list(dict.fromkeys((r.get("arm", ""), r["variant"]) for r in marked))
    for arm, variant in keys:
        mine = [r for r in marked if r.get("arm", "") == arm and r["variant"] == variant]
        fails = [1.0 if r["failed"] else 0.0 for r in mine]
        rate, low, high = interval(fails)
        vs_known = [
            1.0 if r["failed_above_known"] else 0.0
            for r in mine
            if r.get("above_known") is not None
        ]
        rows.append(
            {
                "arm": arm,
                "variant": variant,
                "seeds": len(mine),
                "failures": int(sum(fails)),
                "failure_rate": rate,
                "rate_low": low,
                "rate_high": high,
                "mean_above_best": float(np.mean([r["above_best"] for r in mine])),
                "failures_above_known": int(sum(vs_known)) if vs_known else None,
                "rate_above_known": float(np.mean(vs_known)) if vs_known else None,
            }
        )
    return rows


def cell_rows(marked: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Per (graph, variant, arm): mean makespan and its 95% interval, the best seed, failures,
    the mean and best seed's distance to the best known placement (positive: above it)."""
    rows = []
    keys = list(dict.fromkeys((r["graph"], r["variant"], r.get("arm", "")) for r in marked))
    for graph, variant, arm in keys:
        mine = [
            r
            for r in marked
            if r["graph"] == graph and r["variant"] == variant and r.get("arm", "") == arm
        ]
        ms = [float(r["makespan"]) for r in mine]
        mean, low, high = interval(ms)
        known = best_known(graph)
        rows.append(
            {
                "graph": graph,
                "variant": variant,
                "arm": arm,
                "seeds": len(ms),
                "makespan": mean,
                "mean_low": low,
                "mean_high": high,
                "best": min(ms),
                "failures": sum(bool(r["failed"]) for r in mine),
                "mean_over_best_known": mean / known - 1.0 if known else None,
                "best_over_best_known": min(ms) / known - 1.0 if known else None,
            }
        )
    return rows


def paired_change(marked: Sequence[Mapping[str, Any]], base: str = "today") -> list[dict[str, Any]]:
    """Per other arm and variant: the relative makespan change arm / ``base`` - 1, paired by
    (graph, seed), with its 95% interval (negative: the arm ends lower) and the verdict the
    interval gives (``better``, ``worse`` or ``cannot tell``)."""
    ref = {(r["graph"], r["variant"], r["seed"]): r for r in marked if r.get("arm") == base}
    rows = []
    arms = [a for a in dict.fromkeys(r.get("arm") for r in marked) if a != base]
    for arm in arms:
        for variant in dict.fromkeys(r["variant"] for r in marked):
            d = [
                float(r["makespan"]) / float(ref[k]["makespan"]) - 1.0
                for r in marked
                if r.get("arm") == arm and r["variant"] == variant
                if (k := (r["graph"], r["variant"], r["seed"])) in ref
            ]
            if d:
                # the house's paired statistics (the same bootstrap as interval()); a verdict
                # from any number of pairs, as this bench has always given
                s = paired_stats(d, min_pairs=1)
                rows.append(
                    {
                        "arm": arm,
                        "against": base,
                        "variant": variant,
                        "pairs": s.n,
                        "change": s.mean,
                        "low": s.low,
                        "high": s.high,
                        "verdict": AB_WORDS[-s.sign],
                    }
                )
    return rows


def dual_against_halves(marked: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Per arm: the dual policy against each half it was trained beside, paired by (graph,
    seed): how much lower the dual policy's makespan is, as a fraction of the half's (positive:
    the dual policy is better), with its 95% interval, Wilcoxon p-value, effect size d_z and the
    verdict on the paper's claim that the dual policy beats the half (``supports`` only when
    the interval lies above zero, ``contradicts`` below, ``inconclusive`` otherwise)."""
    rows = []
    for arm in dict.fromkeys(r.get("arm") for r in marked):
        runs = [
            {**r, "method": r["variant"]}
            for r in marked
            if r.get("arm") == arm and r.get("makespan") is not None
        ]
        for half in ("sel-only", "plc-only"):
            d, _ = paired_differences(runs, "dual", half)
            if d.size == 0:
                continue
            st = judge_claim(d)
            rows.append(
                {
                    "arm": arm,
                    "comparison": f"dual vs {half}",
                    "pairs": st.n,
                    "lower_by": st.mean,
                    "low": st.low,
                    "high": st.high,
                    "p_value": st.p_value,
                    "d_z": st.effect_size,
                    "wins": int((d > 0).sum()),
                    "losses": int((d < 0).sum()),
                    "verdict": st.verdict,
                }
            )
    return rows


# -- diagnostics from the training curves ----------------------------------------------------------
def stage_diagnostics(metrics_csv: str | Path, stage: str = "sim") -> dict[str, float | None]:
    """What Stage II's curves say: SEL's and PLC's mean entropy over the first and the last
    tenth of the updates, their mean gradient norms (before clipping) and the share of updates
    whose SEL / PLC gradient was clipped (norm above 1)."""
    path = Path(metrics_csv)
    if not path.exists():
        return {}
    with path.open(newline="") as fh:
        rows = list(csv.DictReader(fh))
    if not rows:
        return {}

    def col(name: str) -> np.ndarray:
        vals = [r.get(f"{stage}/{name}", "") for r in rows]
        return np.array([float(v) if v not in ("", "None") else np.nan for v in vals])

    n = len(rows)
    tenth = max(1, n // 10)
    out: dict[str, float | None] = {}
    for half in ("sel", "plc"):
        ent = col(f"{half}_entropy")
        gn = col(f"grad_norm_{half}")
        ok = ~np.isnan(ent)
        out[f"{half}_entropy_start"] = float(np.nanmean(ent[:tenth])) if ok.any() else None
        out[f"{half}_entropy_end"] = float(np.nanmean(ent[-tenth:])) if ok.any() else None
        ok = ~np.isnan(gn)
        out[f"{half}_grad"] = float(np.nanmean(gn)) if ok.any() else None
        out[f"{half}_clipped"] = float(np.mean(gn[ok] > 1.0)) if ok.any() else None
    return out


def _stuck_case(cfg: Any, case: Any, method: str, seed: int, root: str) -> dict[str, Any]:
    """One run of ``bench policy`` (cached) and its Stage II diagnostics."""

    res = run_case(cfg, case, method, seed, Path(root))
    run_dir = Path(res["checkpoint"]).parents[1]
    sims = sorted(run_dir.glob("*_sim/metrics.csv"))
    return {**res, **(stage_diagnostics(sims[-1]) if sims else {})}


def _policy_config(cfg: StuckBenchConfig, arm: str) -> Any:
    spec = ARMS[arm]
    imitation = (
        cfg.imitation_episodes
        if spec.imitation_share is None
        else round(spec.imitation_share * cfg.episodes)
    )
    return PolicyBenchConfig.of_graphs(
        list(cfg.graphs),
        methods=[VARIANTS[v] for v in cfg.variants],
        seeds=cfg.seeds,
        episodes=cfg.episodes,
        imitation_episodes=imitation,
        samples=cfg.samples,
        policy=dict(cfg.policy),
        train=dict(spec.train),
    )


def _jobs(cfg: StuckBenchConfig) -> int:
    if cfg.jobs is not None:
        return cfg.jobs
    return 2 if os.getloadavg()[0] < 1.0 else 1


def run(
    out_dir: Path,
    quick: bool = False,
    config: StuckBenchConfig | None = None,
    progress: bool = True,
    runner: str | Runner = "local",
    keep_going: bool = False,
) -> dict[str, Any]:
    """Run (or resume) the benchmark and write ``stuck.json`` / ``stuck.md``."""
    cfg = config or (quick_config() if quick else StuckBenchConfig())
    return run_arms(
        out_dir,
        cfg,
        "stuck",
        "Training that does not get stuck: failure rate per variant",
        "doppler-lab bench stuck" + (" --quick" if quick else ""),
        progress=progress,
        runner=runner,
        keep_going=keep_going,
    )


def _arm_text(cfg: StuckBenchConfig, arm: str) -> str:
    spec = _policy_config(cfg, arm)
    changes = ", ".join(f"{k}={v}" for k, v in ARMS[arm].train.items())
    return (
        f"{arm}: Stage I {spec.imitation_episodes} + Stage II "
        f"{spec.episodes - spec.imitation_episodes} episodes, the sim preset"
        + (f" with {changes}" if changes else " as it is")
    )


def run_arms(
    out_dir: Path,
    cfg: StuckBenchConfig,
    name: str,
    title: str,
    command: str,
    progress: bool = True,
    runner: str | Runner = "local",
    keep_going: bool = False,
) -> dict[str, Any]:
    """Train every (arm, graph, variant, seed) of ``cfg`` (cached runs are read back) and write
    ``NAME.json`` / ``NAME.md``: failure rates, each arm against the first paired by graph and
    seed, the cells and every seed with its Stage II diagnostics."""
    root = Path(cfg.runs_dir)
    root.mkdir(parents=True, exist_ok=True)
    jobs = _jobs(cfg)
    results: list[dict[str, Any]] = []
    notes: list[str] = []
    wall: dict[str, float] = {}
    for arm in cfg.arms:
        pcfg = _policy_config(cfg, arm)
        cases, missing = _cases(pcfg)
        notes += [m for m in missing if m not in notes]
        cells = [(case, v, s) for case in cases for v in cfg.variants for s in range(cfg.seeds)]
        runs = [
            Run(
                _stuck_case,
                (pcfg, case, VARIANTS[v], s, str(root)),
                label=f"{arm}/{case.name}/{v}/seed{s}",
            )
            for case, v, s in cells
        ]
        sweep, checked, wall[arm] = adopted_sweep(
            [(pcfg, case, VARIANTS[v], s, root) for case, v, s in cells],
            runs,
            f"bench {name} ({arm})",
            runner,
            jobs,
            progress,
            keep_going,
        )
        notes += checked
        notes += sweep.notes()
        by_method = {m: v for v, m in VARIANTS.items()}
        for r in sweep.done():
            results.append({**r, "variant": by_method[r["method"]], "arm": arm})
    notes += [line for line in [adopt.summary_line(results)] if line]
    marked = mark_failures(results, cfg.threshold)
    rates = failure_rates(marked)
    cells = cell_rows(marked)
    change = paired_change(marked, base=cfg.arms[0])
    halves = dual_against_halves(marked)
    seed_cols = [
        "arm", "graph", "variant", "seed", "makespan", "greedy", "cell_best", "above_best",
        "failed", "above_known", "sel_entropy_start", "sel_entropy_end", "plc_entropy_start",
        "plc_entropy_end", "sel_grad", "plc_grad", "sel_clipped", "plc_clipped", "train_s",
    ]  # fmt: skip
    per_seed = sorted(marked, key=lambda r: (r["arm"], r["graph"], r["variant"], r["seed"]))
    summary: dict[str, Any] = {
        f"failure rate {r['arm']} {r['variant']}": f"{r['failures']} of {r['seeds']} "
        f"({r['failure_rate']:.3f}, 95% interval {r['rate_low']:.3f} to {r['rate_high']:.3f})"
        for r in rates
    }
    for r in change:
        summary[f"{r['arm']} against {r['against']}, {r['variant']}"] = (
            f"{r['change']:+.2%} (95% interval {r['low']:+.2%} to {r['high']:+.2%}, "
            f"{r['pairs']} pairs): {r['verdict']}"
        )
    for r in halves:
        summary[f"{r['arm']}: {r['comparison']}, dual lower by"] = (
            f"{r['lower_by']:+.2%} (95% interval {r['low']:+.2%} to {r['high']:+.2%}, "
            f"{r['pairs']} pairs, {r['wins']} wins / {r['losses']} losses): {r['verdict']} "
            "the claim that the dual policy beats it"
        )
    for arm, s in wall.items():
        summary[f"wall seconds, {arm} arm (this invocation; cached runs are free)"] = round(s, 1)
    summary["training processes"] = jobs
    return write_report(
        out_dir,
        name,
        title,
        {
            "Failure rate per arm and variant": (rates, None),
            f"Each arm against {cfg.arms[0]}, paired by graph and seed (arm / {cfg.arms[0]} - 1)": (
                change,
                None,
            ),
            "The dual policy against each half, per arm, paired by graph and seed "
            "(lower_by: (half - dual) / half; positive: the dual policy is better)": (halves, None),
            "Cells (graph x variant x arm)": (cells, None),
            "Per seed, with Stage II diagnostics": (per_seed, seed_cols),
        },
        summary=summary,
        notes=notes
        + [
            f"A seed fails when its makespan ends more than {cfg.threshold:.0%} above the best "
            "seed of its cell (graph, variant, arm); the rate's interval is the 95% bootstrap "
            "interval of the mean of the 0/1 failure indicators. failures_above_known counts "
            f"the seeds more than {cfg.threshold:.0%} above the best known placement (a cell "
            "whose seeds all stop at the same place fails none by its own best).",
            f"{cfg.seeds} seeds per cell, encoder {cfg.policy}, the protocol's best of greedy + "
            f"{cfg.samples} samples.",
            "Arms: " + "; ".join(_arm_text(cfg, a) for a in cfg.arms) + ".",
            "Diagnostics over Stage II: entropies (nats) averaged over its first and last "
            "tenth of updates, mean gradient norm per half before clipping, share of updates "
            "clipped (norm above 1).",
            "mean_over_best_known / best_over_best_known / above_known: makespan / best known - "
            "1 (positive: above the best known placement).",
        ],
        command=command,
    ) | {"config": asdict(cfg)}


__all__ = [
    "ARMS",
    "FIX",
    "SHORT_IMITATION_SHARE",
    "Arm",
    "GRAPHS",
    "THRESHOLD",
    "VARIANTS",
    "StuckBenchConfig",
    "cell_rows",
    "dual_against_halves",
    "failure_rates",
    "interval",
    "mark_failures",
    "paired_change",
    "quick_config",
    "run",
    "run_arms",
    "stage_diagnostics",
]
