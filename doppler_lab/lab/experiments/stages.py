"""Notebook 08: the training stages (I+II+III against I+II, II alone, I alone and III alone) on
CPU worker devices, Stage III measuring every episode with the real executor."""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ...hardware.cluster import Cluster
from ...house.codeversion import versioned_key
from ...house.errors import ConfigError, FormatError
from ...house.jsonutil import read_json, write_json
from ...house.runners import Run, Runner, make_runner
from ...ir.graph import DataflowGraph
from ...ir.placement import Placement, single_device
from ...ir.trace import Trace
from ...placers import place
from ...policies.policy_config import POLICY_PRESETS
from ...search.learned import best_of_rollouts
from ...timing.sim import Simulator
from ...train.cost_functions import make_executor_cost
from ...train.loop import Trainer, is_finished
from ...train.train_config import preset
from ...workloads.specs import graph_from_spec
from .common import (
    convergence_stats,
    cpu_cluster,
    finite_or_none,
    mean_std_table,
    measure_placements,
    stage_curve,
    torch_threads,
    with_cost_units,
)

#: variants of the stage ablation: which stages run, in order
STAGE_VARIANTS: dict[str, tuple[str, ...]] = {
    "I+II+III": ("imitation", "sim", "real"),
    "I+II": ("imitation", "sim"),
    "II": ("sim",),
    "I": ("imitation",),
    "III": ("real",),
}
#: the runs each variant consists of (keys of :meth:`StageAblationConfig.stage_configs`)
VARIANT_RUNS: dict[str, tuple[str, ...]] = {
    "I+II+III": ("I", "II", "III"),
    "I+II": ("I", "II"),
    "II": ("II alone",),
    "I": ("I",),
    "III": ("III alone",),
}
#: the run each run warm-starts from
WARM_START: dict[str, str] = {"II": "I", "III": "II"}


@dataclass(frozen=True)
class StageAblationConfig:
    """Settings of the training-stage ablation (notebook 08).

    Attributes:
        workload: an executable workload spec, sized so ops take about a millisecond on a core.
        devices: CPU worker devices (the executor's and the simulator's cluster).
        calibrate: fit the simulator's devices to the real ones first (a quick calibration).
        variants: keys of :data:`STAGE_VARIANTS`.
        imitation_episodes: Stage I episodes.
        sim_episodes: Stage II episodes after Stage I; ``II`` alone gets Stage I's episodes too
            (the same simulated budget).
        real_episodes: Stage III episodes (each one measured on the real devices), after
            Stage II or (``III``) from fresh weights.
        seeds: training seeds (``seed`` .. ``seed + seeds - 1``).
        seed: the first training seed.
        samples: sampled rollouts besides the greedy one (evaluation protocol).
        repeats: timed real runs per Stage III cost (their median; one warm-up run each).
        measure_repeats: timed runs per round when measuring the final placements.
        measure_rounds: rounds of those measurements (placements interleaved).
        eval_every: updates between greedy evaluations (0: none); in Stage III each one is a
            measured run of the greedy placement.
        policy: policy-config overrides (``hidden``, ``mp_steps``, ...).
        sim_train: Stage II training-config overrides.
        real_train: Stage III training-config overrides.
    """

    workload: str = "chainmm:scale=0.08"
    devices: int = 2
    calibrate: bool = True
    variants: tuple[str, ...] = tuple(STAGE_VARIANTS)
    imitation_episodes: int = 200
    sim_episodes: int = 800
    real_episodes: int = 200
    seeds: int = 3
    seed: int = 0
    samples: int = 16
    repeats: int = 3
    measure_repeats: int = 3
    measure_rounds: int = 3
    eval_every: int = 5
    policy: Mapping[str, Any] = field(default_factory=dict)
    sim_train: Mapping[str, Any] = field(default_factory=dict)
    real_train: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        bad = [v for v in self.variants if v not in STAGE_VARIANTS]
        if bad or not self.variants:
            raise ConfigError(
                f"stage ablation: variant {bad[0] if bad else None!r}; expected some of "
                f"{list(STAGE_VARIANTS)}"
            )
        for name in (
            "devices",
            "imitation_episodes",
            "sim_episodes",
            "real_episodes",
            "seeds",
            "repeats",
            "measure_repeats",
            "measure_rounds",
        ):
            v = getattr(self, name)
            if not isinstance(v, int) or v < 1:
                raise ConfigError(f"stage ablation {name} = {v!r}, expected an integer >= 1")
        if self.samples < 0 or self.eval_every < 0:
            raise ConfigError(
                f"stage ablation samples = {self.samples!r} and eval_every = "
                f"{self.eval_every!r}, expected integers >= 0"
            )

    def stage_configs(self, seed: int) -> dict[str, Any]:
        """The training configuration of each run of one seed: ``I``, ``II`` (after I),
        ``III`` (after II), ``II alone`` and ``III alone``."""

        common = {"semantics": "wc", "seed": seed}
        sim = {**common, "eval_every": self.eval_every, **self.sim_train}
        real = {**common, "repeats": self.repeats, "eval_every": self.eval_every, **self.real_train}
        return {
            "I": preset(
                "imitation",
                episodes=self.imitation_episodes,
                eval_every=self.eval_every,
                **common,
            ),
            "II": preset("sim", **{**sim, "episodes": self.sim_episodes}),
            "III": preset("real", **{**real, "episodes": self.real_episodes}),
            "II alone": preset(
                "sim", **{**sim, "episodes": self.imitation_episodes + self.sim_episodes}
            ),
            "III alone": preset("real", **{**real, "episodes": self.real_episodes}),
        }


@dataclass
class StageAblation:
    """What :func:`run_stage_ablation` returns.

    Attributes:
        config: the settings.
        graph: the workload.
        cluster: the devices (calibrated or not).
        cluster_how: how the cluster was obtained.
        curves: learning curves of every (variant, seed) (see :func:`stage_curve`).
        runs: one row per (variant or reference, seed): protocol makespan (simulated),
            greedy, measured makespan, episodes, training seconds.
        table: mean and std over seeds per variant and reference.
        convergence: :func:`convergence_stats` of the Stage II / III part of each run.
        traces: measured traces of the first seed's final placements, by variant.
    """

    config: StageAblationConfig
    graph: DataflowGraph
    cluster: Cluster
    cluster_how: str
    curves: pd.DataFrame
    runs: pd.DataFrame
    table: pd.DataFrame
    convergence: pd.DataFrame
    traces: dict[str, Trace]


def _timed_run(trainer: Any, run_dir: Path) -> tuple[Any, float]:
    """Run a trainer; its wall time is kept in ``wall_s.json`` so a cached run reports it."""

    path = run_dir / "wall_s.json"
    cached = is_finished(run_dir) and path.exists()
    t0 = time.perf_counter()
    res = trainer.run()
    wall = json.loads(path.read_text()) if cached else time.perf_counter() - t0
    if not cached:
        write_json(path, wall, indent=None)
    return res, float(wall)


def _train_stage(
    config: Any,
    graph: DataflowGraph,
    cluster: Cluster,
    run_dir: Path,
    policy: Any = None,
    init: Path | None = None,
    progress: bool = False,
) -> tuple[Any, float]:
    """One resumable stage run; Stage III measures on the real devices (executor closed after)."""

    cost = make_executor_cost(graph, cluster, config.repeats) if config.stage == "real" else None
    try:
        trainer = Trainer(
            config,
            [graph],
            cluster,
            policy,
            run_dir,
            init=init,
            cost_fns=None if cost is None else [cost],
            progress=progress,
        )
        return _timed_run(trainer, run_dir)
    finally:
        close = getattr(cost, "close", None)
        if close is not None:
            close()


def _needed_runs(variants: Sequence[str]) -> list[str]:
    """The training runs of one seed that ``variants`` need, in an order that trains each
    run's warm start first."""
    need = {k for v in variants for k in VARIANT_RUNS[v]}
    return [k for k in ("I", "II", "III", "II alone", "III alone") if k in need]


def _variant_curve(variant: str, seed: int, done: Mapping[str, Any]) -> pd.DataFrame:
    """The stages of ``variant`` one after the other on a cumulative episode axis."""
    parts, offset = [], 0
    for stage, key in zip(STAGE_VARIANTS[variant], VARIANT_RUNS[variant]):
        cfg, res, _ = done[key]
        parts.append(stage_curve(res.rows, stage, offset, variant=variant, seed=seed))
        offset += cfg.episodes
    return pd.concat(parts, ignore_index=True)


def _train_seed(
    config: StageAblationConfig,
    seed: int,
    graph: DataflowGraph,
    cluster: Cluster,
    policy: Any,
    root: Path,
    progress: bool,
) -> dict[str, tuple[Any, Any, float]]:
    """Every run one seed needs: key -> (train config, result, wall seconds)."""
    cfgs = config.stage_configs(seed)
    done: dict[str, tuple[Any, Any, float]] = {}
    for key in _needed_runs(config.variants):
        init = done[WARM_START[key]][1].checkpoint if key in WARM_START else None
        res, wall = _train_stage(
            cfgs[key],
            graph,
            cluster,
            root / key.replace(" ", "_"),
            None if init else policy,
            init,
            progress,
        )
        done[key] = (cfgs[key], res, wall)
    return done


def _variant_row(variant: str, seed: int, done: Mapping[str, Any], result: Any) -> dict[str, Any]:
    runs = [done[k] for k in VARIANT_RUNS[variant]]
    return {
        "variant": variant,
        "seed": seed,
        "makespan": result.best_cost,
        "greedy": result.greedy_cost,
        "sim_episodes": sum(c.episodes for c, _, _ in runs if c.stage != "real"),
        "real_episodes": sum(c.episodes for c, _, _ in runs if c.stage == "real"),
        "train_s": sum(w for _, _, w in runs),
    }


def _workers(
    config: StageAblationConfig, graph: DataflowGraph, out_dir: Path, progress: bool
) -> tuple[Cluster, str]:
    """The CPU workers as the simulator sees them (:func:`cpu_cluster`), measured once per run
    folder: the calibration is kept in ``out_dir`` (``workers-<key>.json``) and used again by
    a resumed or repeated run, so that its cached runs and the new ones train on the same
    simulator. A new calibration: remove the file, or another ``out_dir``."""
    path = (
        out_dir / f"workers-{versioned_key(config.workload, config.devices, config.calibrate)}.json"
    )
    if path.exists():
        doc = read_json(path, "the kept calibration of the CPU workers")
        try:
            return Cluster.from_dict(doc["cluster"]), f"{doc['how']} (kept in {path.name})"
        except (KeyError, TypeError, ValueError) as exc:
            raise FormatError(
                f"expected {{'cluster': a cluster, 'how': text}} ({exc}); remove it to calibrate "
                "again",
                str(path),
            ) from None
    cluster, how = cpu_cluster(graph, config.devices, config.calibrate, progress=progress)
    write_json(path, {"cluster": cluster.to_dict(), "how": how})
    return cluster, how


def run_stage_ablation(
    config: StageAblationConfig,
    out_dir: str | Path,
    progress: bool = False,
    runner: str | Runner = "local",
) -> StageAblation:
    """Train every variant over the seeds, evaluate it by the protocol and measure its final
    placement on the real devices (runs cached per seed under ``out_dir``).

    Each seed's trainings are one run of ``runner`` (``local``: one after the other here;
    ``ray``: one Ray task each, see :mod:`doppler_lab.house.runners`). Stage III measures on the CPU
    workers of the machine it runs on: runs side by side on one machine disturb each other's
    measurements, so ``ray`` suits a cluster of several machines or variants without III.

    Shared prefixes are trained once per seed: ``I`` is the first stage of ``I+II`` and
    ``I+II`` the first two of ``I+II+III``. CP (one run per seed as its tie seed) and the
    single-device placement are simulated and measured too, for reference.
    """

    graph = graph_from_spec(config.workload)
    with torch_threads(1):
        cluster, how = _workers(config, graph, Path(out_dir), progress)
        pcfg = POLICY_PRESETS["default"].replace(**dict(config.policy))
        sim = Simulator(graph, cluster, "wc")
        curves, runs = [], []
        placements: dict[str, Placement] = {}
        first = config.seed
        seeds = range(first, first + config.seeds)
        seed_runs = [
            Run(
                _train_seed,
                (config, seed, graph, cluster, pcfg, Path(out_dir) / f"seed{seed}-{key}", False),
                label=f"{config.workload} seed {seed}",
            )
            for seed in seeds
            # the cluster too: Stages I and II train on its simulator, so a run trained on one
            # calibration is never taken for a run on another
            for key in [
                versioned_key(pcfg, cluster.to_dict(), *config.stage_configs(seed).values())
            ]
        ]
        sweep = make_runner(runner).run(seed_runs, desc="seeds", progress=progress)
        for seed, done in zip(seeds, sweep.values):
            for variant in config.variants:
                curves.append(_variant_curve(variant, seed, done))
                policy = done[VARIANT_RUNS[variant][-1]][1].policy
                rng = np.random.default_rng(1000 + seed)
                res = best_of_rollouts(policy, graph, cluster, config.samples, rng, "wc")
                placements[f"{variant}#{seed}"] = res.placement
                runs.append(_variant_row(variant, seed, done, res))
            placements[f"cp#{seed}"] = place("cp", graph, cluster, seed=seed)
            runs.append({"variant": "cp", "seed": seed})
        placements[f"single#{first}"] = single_device(graph, cluster.num_devices)
        runs.append({"variant": "single", "seed": first})
    measured, traces = measure_placements(
        graph, cluster, placements, config.measure_repeats, config.measure_rounds
    )
    for r in runs:
        key = f"{r['variant']}#{r['seed']}"
        r.setdefault("makespan", sim.makespan(placements[key]))
        r["measured"] = float(np.median(measured[key]))
    frame = pd.DataFrame(runs)
    frame["ratio_lb"] = frame["makespan"] / sim.lower_bound()
    curve_frame = pd.concat(curves, ignore_index=True)
    return StageAblation(
        config,
        graph,
        cluster,
        how,
        curve_frame,
        frame,
        stage_table(frame, list(config.variants)),
        convergence_table(curve_frame),
        {v: traces[f"{v}#{first}"] for v in [*config.variants, "cp", "single"]},
    )


def stage_table(runs: pd.DataFrame, variants: Sequence[str] = ()) -> pd.DataFrame:
    """Mean and std over seeds per variant (and reference) of the protocol makespan, the greedy
    rollout and the measured makespan, with ``vs_cp`` / ``measured_vs_cp`` (improvement over
    CP's mean, simulated and measured) and the episode budgets."""
    values = [c for c in ("makespan", "greedy", "measured", "ratio_lb") if c in runs.columns]
    table = mean_std_table(runs, ["variant"], values, [*variants, "cp", "single"])
    extra = [c for c in ("sim_episodes", "real_episodes", "train_s") if c in runs.columns]
    if extra:
        means = runs.groupby("variant", sort=False)[extra].mean()
        table = table.merge(means, left_on="variant", right_index=True, how="left")
    cp = table.loc[table.variant == "cp"]
    if len(cp):
        for col, name in (("makespan", "vs_cp"), ("measured", "measured_vs_cp")):
            if col in table.columns:
                ref = float(cp[col].iloc[0])
                table[name] = (ref - table[col]) / ref
    return table


def convergence_table(
    curves: pd.DataFrame, metric: str = "cost_mean", tol: float = 0.05
) -> pd.DataFrame:
    """:func:`convergence_stats` of the last stage of each (variant, seed) when it is an RL
    stage (``sim`` or ``real``; Stage I imitates, its costs are not what it optimises): one row
    per (variant, seed, stage)."""
    rows = []
    last = curves.groupby(["variant", "seed"], sort=False).stage.transform("last")
    rl = curves[(curves.stage == last) & curves.stage.isin(["sim", "real"])]
    for (variant, seed, stage), f in rl.groupby(["variant", "seed", "stage"], sort=False):
        f = f.sort_values("stage_episode")
        stats = convergence_stats(f.stage_episode, f[metric], tol=tol)
        rows.append({"variant": variant, "seed": seed, "stage": stage, **stats})
    return pd.DataFrame(rows)


def stage_curve_frames(ablation: StageAblation) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The simulated part (Stages I and II: variants I, I+II, II on one cumulative episode
    axis) and the real part (Stage III of I+II+III and III alone, on Stage III's episodes)."""
    c = ablation.curves
    sim = c[c.variant.isin(["I", "I+II", "II"]) & (c.stage != "real")]
    real = c[c.stage == "real"]
    return (
        with_cost_units(sim.reset_index(drop=True), ablation.graph.time_unit),
        with_cost_units(real.reset_index(drop=True), "s"),  # measured on the devices
    )


def stage_key_numbers(ablation: StageAblation) -> dict[str, Any]:
    """The few numbers the report index shows: measured makespan per variant (mean over seeds)
    and the Stage III settling episodes of the warm-started and the fresh policy."""
    t = ablation.table.set_index("variant")
    conv = ablation.convergence
    real = conv[conv.stage == "real"].groupby("variant").settle_episode.mean()
    return {
        "measured_s": {v: float(t.at[v, "measured"]) for v in t.index},
        "stage3_settle_episodes": {v: finite_or_none(x) for v, x in real.items()},
    }
