"""Notebook 06: Stage III on the real system.

The story, one call per step: calibrate the CPU worker devices (:func:`calibrate_workers`,
:func:`profile_tables`); obtain a Stage II policy (:func:`stage2_policy`: a shipped checkpoint
when it matches the workload and devices, else Stages I and II here, Stage II on the calibrated
simulator); check how well the simulator predicts measured makespans over many placements
(:func:`fidelity_set`, :func:`measure_fidelity`, :func:`fidelity_stats`,
:func:`fidelity_scatter`); train Stage III with measured makespans as the cost
(:func:`run_stage3`); measure the Stage II and the Stage III policy side by side in one run
(:func:`side_by_side`); collect the key numbers (:func:`real_key_numbers`).

Fidelity uses the benchmark's own pieces (:mod:`doppler_lab.executor.fidelity_runs`): its placements,
its measuring loop (shuffled rounds, disturbed runs retried) and its statistics.
"""

from __future__ import annotations

import math
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch

from ...executor import make_backend
from ...executor.backend import make_cpu_cluster
from ...executor.fidelity_runs import Passes, fidelity_placements, median_rel_error, spearman
from ...executor.fidelity_runs import measure_placements as measure_all
from ...executor.profiling import calibrate
from ...hardware.cluster import Cluster
from ...house.deps import require
from ...house.errors import ConfigError
from ...ir.graph import DataflowGraph
from ...ir.placement import Placement
from ...ir.trace import Trace
from ...policies.checkpoint import load_policy, read_checkpoint
from ...policies.context import GraphContext
from ...policies.pretrained import list_checkpoints, resolve_checkpoint
from ...policies.rollout import greedy_and_samples
from ...policies.tensors import flush_denormal
from ...timing.calibration import Profile
from ...timing.sim import Simulator
from ...train.analysis import PolicyRecipe, starting_policy
from ...train.cost_functions import SimulatorCost, make_executor_cost
from ...train.loop import Trainer
from ...train.train_config import preset
from ...viz import series_color
from .common import measure_placements, stage_curve, start_point, torch_threads

#: labels of the two policies measured side by side
STAGE_LABELS: tuple[str, str] = ("stage II", "stage III")


# -- calibration -------------------------------------------------------------------------------
def calibrate_workers(
    graph: DataflowGraph,
    devices: int = 2,
    quick: bool = True,
    seed: int = 0,
    progress: bool = False,
) -> Profile:
    """Calibrate ``devices`` CPU worker devices with the executor, measuring ``graph``'s ops.

    Args:
        graph: an executable workload (its op signatures get measured times).
        devices: CPU worker devices.
        quick: the quick calibration (about a second) instead of the full one.
        seed: placements and inputs of the measuring runs.
        progress: show progress bars.

    Returns:
        The fitted :class:`Profile` (``profile.meta["parallel_capacity"]``: how many devices
        really ran at once).
    """

    if not isinstance(devices, int) or devices < 1:
        raise ConfigError(f"calibrate_workers devices = {devices!r}, expected an integer >= 1")
    backend = make_backend(make_cpu_cluster(devices))
    try:
        with torch_threads(1):
            return calibrate(
                backend, [graph], name=f"cpu{devices}", quick=quick, seed=seed, progress=progress
            )
    finally:
        backend.close()


def profile_tables(profile: Profile) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The fitted profile as two tables.

    Returns:
        ``devices``: per device, ``gflops_per_s`` (float32 matmul rate), ``mem_gb_per_s``
        (elementwise bytes moved), ``dispatch_us`` (executor gap between two ops) and
        ``launch_overhead_us`` (what any op costs: call + dispatch gap). ``links``: per ordered
        pair of devices, ``bandwidth_gb_per_s`` and ``latency_us``.
    """
    gaps = profile.dispatch_s or (math.nan,) * profile.num_devices
    devices = pd.DataFrame(
        {
            "device": [d.name for d in profile.devices],
            "gflops_per_s": [d.rate("float32") / 1e9 for d in profile.devices],
            "mem_gb_per_s": [d.mem_bytes_per_s / 1e9 for d in profile.devices],
            "dispatch_us": [g * 1e6 for g in gaps],
            "launch_overhead_us": [d.launch_overhead_s * 1e6 for d in profile.devices],
        }
    )
    bw, lat = profile.bandwidth_bytes_per_s, profile.latency_s
    pairs = [(a, b) for a in range(profile.num_devices) for b in range(profile.num_devices)]
    links = pd.DataFrame(
        [
            {
                "src": a,
                "dst": b,
                "bandwidth_gb_per_s": float(bw[a, b]) / 1e9,
                "latency_us": float(lat[a, b]) * 1e6,
            }
            for a, b in pairs
            if a != b
        ],
        columns=["src", "dst", "bandwidth_gb_per_s", "latency_us"],
    )
    return devices, links


def profile_numbers(profile: Profile) -> dict[str, Any]:
    """Scalars of a profile: ``parallel_capacity`` (None when not measured), the 1-minute load
    average, the measured op signatures, the roofline's median relative error and the seconds
    the calibration took."""
    meta = profile.meta
    cap = meta.get("parallel_capacity")
    return {
        "parallel_capacity": float(cap) if cap is not None else None,
        "load_average_1min": meta.get("load_average_1min"),
        "op_signatures": len(profile.op_times),
        "roofline_median_rel_error": meta.get("fit", {}).get("roofline_median_rel_error"),
        "calibration_s": meta.get("seconds"),
    }


def calibrated_simulator(graph: DataflowGraph, profile: Profile) -> Any:
    """The ``wc`` simulator of ``graph`` on the calibrated devices with measured op times."""

    return Simulator(graph, profile.cluster, "wc", cost_model=profile.cost_model(graph))


# -- the Stage II policy -------------------------------------------------------------------------
@dataclass
class WarmStart:
    """What :func:`stage2_policy` returns.

    Attributes:
        policy: the Stage II policy Stage III starts from.
        checkpoint: its checkpoint.
        how: where it came from.
        curve: the Stage II learning curve when trained here, on episodes counted from the start
            of Stage I (empty otherwise).
    """

    policy: Any
    checkpoint: Path
    how: str
    curve: pd.DataFrame


def shipped_match(graph: DataflowGraph, num_devices: int) -> str | None:
    """The shipped checkpoint ``doppler/<graph name>`` when it was trained on the same graph
    (name and node count) for ``num_devices`` devices; else None."""

    name = f"doppler/{graph.name}"
    rec = list_checkpoints().get(name)
    if rec is None or rec.get("graph_nodes") != graph.num_nodes:
        return None
    head = read_checkpoint(rec["path"])["policy"]
    return name if int(head["num_devices"]) == num_devices else None


#: :func:`stage2_policy`'s recipe unless given one
STAGE2_RECIPE = PolicyRecipe(eval_every=5)


def stage2_policy(
    graph: DataflowGraph,
    profile: Profile,
    out_dir: str | Path,
    recipe: PolicyRecipe = STAGE2_RECIPE,
    progress: bool = False,
) -> WarmStart:
    """The Stage II policy that Stage III warm-starts from.

    Args:
        graph: the workload.
        profile: the calibrated devices; Stage II trains on their simulator with the measured
            op times (:func:`calibrated_simulator`).
        out_dir: run directory (``stage1``, ``stage2``; started afresh).
        recipe: :class:`~doppler_lab.train.analysis.PolicyRecipe`: ``init`` ``"auto"``: the
            shipped checkpoint when :func:`shipped_match` finds one, else Stages I and II here; a
            checkpoint path or shipped name: that policy as is (a DOPPLER checkpoint runs on any
            device count); None: Stages I and II here (``imitation_episodes``,
            ``sim_episodes``, ``eval_every``, ``seed``, ``policy``, ``train``).
        progress: show progress bars.
    """

    d = profile.num_devices
    init, imitation_episodes, sim_episodes = (
        recipe.init,
        recipe.imitation_episodes,
        recipe.sim_episodes,
    )
    if init == "auto":
        init = shipped_match(graph, d)
    if init is not None:
        path = resolve_checkpoint(init)
        pol, _ = load_policy(path, num_devices=d)
        return WarmStart(pol, path, f"checkpoint {init}", pd.DataFrame())
    out = Path(out_dir)
    shutil.rmtree(out, ignore_errors=True)
    cluster = profile.cluster
    cfg = preset("sim", **recipe.sim_settings("wc"))
    cost = SimulatorCost(graph, cluster, "wc", cost_model=profile.cost_model(graph))
    stage1 = PolicyRecipe(None, imitation_episodes, seed=recipe.seed, policy=recipe.policy_config())
    with torch_threads(1):
        _, ckpt, _ = starting_policy(graph, cluster, "wc", out, stage1, progress)
        res = Trainer(
            cfg, [graph], cluster, None, out / "stage2", ckpt, [cost], progress=progress
        ).run()
    assert res.checkpoint is not None
    curve = stage_curve(res.rows, "sim", imitation_episodes)
    how = f"stage I ({imitation_episodes} episodes) + stage II ({sim_episodes}) here"
    return WarmStart(res.policy, res.checkpoint, how, curve)


# -- simulator fidelity --------------------------------------------------------------------------
def policy_rollouts(
    policy: Any,
    graph: DataflowGraph,
    cluster: Cluster,
    samples: int,
    rng: np.random.Generator,
    label: str = "policy",
    semantics: str = "wc",
) -> list[Placement]:
    """``policy``'s greedy placement and ``samples`` sampled ones, labelled ``<label>-greedy``
    and ``<label>-sample`` (``semantics`` picks a ``task``-timed policy's estimate)."""

    if not isinstance(samples, int) or samples < 0:
        raise ConfigError(f"policy_rollouts samples = {samples!r}, expected an integer >= 0")
    ctx = GraphContext.for_policy(graph, cluster, policy.config, semantics)
    with flush_denormal(), torch_threads(1), torch.no_grad():
        enc = policy.encode(ctx)
        # the greedy rollout, then the samples (one compiled rollout where that is exact)
        cands = greedy_and_samples(policy, ctx, enc, samples, rng)
    greedy, sampled = cands[:1], cands[1:]
    return [Placement(p.device, p.priority, f"{label}-greedy") for p in greedy] + [
        Placement(p.device, p.priority, f"{label}-sample") for p in sampled
    ]


def fidelity_set(
    graph: DataflowGraph,
    cluster: Cluster,
    policy: Any = None,
    rollouts: int = 8,
    seed: int = 0,
) -> list[Placement]:
    """Placements of varied quality for the fidelity check: the benchmark's set
    (:func:`doppler_lab.executor.fidelity_runs.fidelity_placements`: placers, single, round-robin,
    random, skewed, contiguous blocks, perturbed placer outputs; 35 on 2+ devices) and, with a
    ``policy``, its greedy rollout and ``rollouts`` sampled ones."""

    rng = np.random.default_rng(seed)
    out = fidelity_placements(graph, cluster, rng)
    if policy is not None:
        out += policy_rollouts(policy, graph, cluster, rollouts, rng)
    return out


def placement_labels(placements: Sequence[Placement]) -> list[str]:
    """Unique labels: each placement's placer name, ``#k`` appended to repeated ones."""
    seen: dict[str, int] = {}
    names = [p.placer or "placement" for p in placements]
    total = {n: names.count(n) for n in names}
    out = []
    for n in names:
        seen[n] = seen.get(n, 0) + 1
        out.append(f"{n}#{seen[n]}" if total[n] > 1 else n)
    return out


def measure_fidelity(
    graph: DataflowGraph,
    profile: Profile,
    placements: Sequence[Placement],
    repeats: int = 3,
    rounds: int = 2,
    seed: int = 0,
    progress: bool = False,
) -> pd.DataFrame:
    """Measure every placement on the calibrated CPU workers and simulate it with the calibrated
    model and with the uncalibrated ``cpu`` preset.

    Measuring: the benchmark's loop (:func:`doppler_lab.executor.fidelity_runs.measure_placements`):
    ``rounds`` passes in shuffled order, one warm-up and ``repeats`` timed runs per placement and
    pass; a run whose ops took far longer than calibrated is taken again.

    Returns:
        One row per placement: ``placement`` (unique label), ``group`` (the placer or kind),
        ``measured_s`` (median of its runs), ``measured_min_s``, ``simulated_calibrated_s``,
        ``simulated_preset_s``; ``attrs["runs"]`` counts the runs (and the retried ones).
    """

    if not placements:
        raise ConfigError("measure_fidelity needs at least one placement; got none")
    if repeats < 1 or rounds < 1:
        raise ConfigError(f"repeats and rounds must be >= 1, got {repeats} and {rounds}")
    calibrated = calibrated_simulator(graph, profile)
    preset_sim = Simulator(graph, make_cpu_cluster(profile.num_devices), "wc")
    rng = np.random.default_rng(seed)
    backend = make_backend(profile.cluster)
    try:
        with torch_threads(1):
            samples, counts = measure_all(
                graph,
                backend,
                list(placements),
                Passes(repeats, 1, rounds),
                rng,
                progress,
                expected=calibrated.cost.compute,
            )
    finally:
        backend.close()
    frame = pd.DataFrame(
        {
            "placement": placement_labels(placements),
            "group": [(p.placer or "placement").split("#")[0] for p in placements],
            "measured_s": np.median(samples, axis=1),
            "measured_min_s": samples.min(axis=1),
            "simulated_calibrated_s": calibrated.makespans(list(placements)),
            "simulated_preset_s": preset_sim.makespans(list(placements)),
        }
    )
    frame.attrs["runs"] = dict(counts)
    return frame


#: the simulators compared by :func:`fidelity_stats` (column suffixes of the fidelity frame)
FIDELITY_MODELS: tuple[str, ...] = ("calibrated", "preset")


def fidelity_stats(frame: pd.DataFrame) -> dict[str, float]:
    """Spearman rank correlation and median relative error of each simulator's makespans
    against the measured ones (the benchmark's statistics): ``spearman_<model>`` and
    ``median_rel_err_<model>`` for ``calibrated`` and ``preset``, and ``placements``."""

    need = ["measured_s", *(f"simulated_{m}_s" for m in FIDELITY_MODELS)]
    missing = [c for c in need if c not in frame.columns]
    if missing:
        raise ConfigError(f"fidelity frame lacks the column {missing[0]!r}; expected {need}")
    out: dict[str, float] = {"placements": int(len(frame))}
    for m in FIDELITY_MODELS:
        out[f"spearman_{m}"] = spearman(frame[f"simulated_{m}_s"], frame.measured_s)
        out[f"median_rel_err_{m}"] = median_rel_error(frame[f"simulated_{m}_s"], frame.measured_s)
    return out


def fidelity_scatter(frame: pd.DataFrame, title: str | None = None) -> Any:
    """Measured (x) against simulated (y) makespans, one series per simulator, with the
    diagonal (a perfect simulator) and a placement's label on hover; log axes."""
    go = require("plotly.graph_objects", "the fidelity scatter chart")

    fig = go.Figure()
    lo = float(frame[["measured_s", *(f"simulated_{m}_s" for m in FIDELITY_MODELS)]].min().min())
    hi = float(frame[["measured_s", *(f"simulated_{m}_s" for m in FIDELITY_MODELS)]].max().max())
    for i, m in enumerate(FIDELITY_MODELS):
        fig.add_trace(
            go.Scatter(
                x=frame.measured_s,
                y=frame[f"simulated_{m}_s"],
                mode="markers",
                name=m,
                marker=dict(color=series_color(i), size=8, opacity=0.8),
                text=frame.placement,
                hovertemplate="%{text}<br>measured %{x:.4g} s<br>simulated %{y:.4g} s",
            )
        )
    fig.add_trace(
        go.Scatter(
            x=[lo, hi],
            y=[lo, hi],
            mode="lines",
            name="simulated = measured",
            line=dict(color="grey", dash="dot"),
        )
    )
    fig.update_xaxes(type="log", title="measured makespan (s)")
    fig.update_yaxes(type="log", title="simulated makespan (s)")
    fig.update_layout(title=title, template="plotly_white", height=480)
    return fig


# -- Stage III -----------------------------------------------------------------------------------
@dataclass
class Stage3Run:
    """What :func:`run_stage3` returns.

    Attributes:
        result: the Stage III :class:`~doppler_lab.train.TrainResult` (policy, rows, checkpoint).
        curve: its learning curve (measured seconds) with episode 0 = the Stage II policy's
            greedy placement measured before training.
        start_measured_s: that first measurement.
        episodes: Stage III episodes.
    """

    result: Any
    curve: pd.DataFrame
    start_measured_s: float
    episodes: int


@dataclass(frozen=True)
class Stage3Options:
    """How :func:`run_stage3` trains.

    Attributes:
        episodes: Stage III episodes, each one measured.
        repeats: timed runs per episode.
        eval_every: updates between measured greedy evaluations (the learning curve).
        seed: training seed.
        train: training-config overrides of the ``real`` preset (``lr``, ...).
    """

    episodes: int = 200
    repeats: int = 3
    eval_every: int = 5
    seed: int = 0
    train: Mapping[str, Any] | None = None


def run_stage3(
    graph: DataflowGraph,
    cluster: Cluster,
    warm: WarmStart,
    out_dir: str | Path,
    options: Stage3Options | None = None,
    progress: bool = False,
) -> Stage3Run:
    """Stage III: REINFORCE from the Stage II policy with the measured makespan as the cost
    (:func:`doppler_lab.train.cost_functions.make_executor_cost`, median of ``repeats`` timed runs after
    a warm-up). ``out_dir`` is started afresh.

    Args:
        graph: the workload.
        cluster: the CPU worker devices (the calibrated cluster).
        warm: the Stage II policy (:func:`stage2_policy`).
        out_dir: the run directory.
        options: episodes, repeats, evaluations, seed and overrides (default
            :class:`Stage3Options`).
        progress: show a progress bar.
    """

    o = options or Stage3Options()
    cfg = preset(
        "real",
        **{
            "episodes": o.episodes,
            "repeats": o.repeats,
            "eval_every": o.eval_every,
            "semantics": "wc",
            "seed": o.seed,
            **dict(o.train or {}),
        },
    )
    out = Path(out_dir)
    shutil.rmtree(out, ignore_errors=True)
    cost = make_executor_cost(graph, cluster, cfg.repeats)
    try:
        with torch_threads(1):
            trainer = Trainer(
                cfg, [graph], cluster, None, out, warm.checkpoint, [cost], progress=progress
            )
            start = trainer.greedy_cost()
            res = trainer.run()
    finally:
        close = getattr(cost, "close", None)
        if close is not None:
            close()
    curve = pd.concat(
        [start_point(start, "real"), stage_curve(res.rows, "real")], ignore_index=True
    )
    return Stage3Run(res, curve, float(start), cfg.episodes)


# -- side by side --------------------------------------------------------------------------------
@dataclass
class SideBySide:
    """What :func:`side_by_side` returns.

    Attributes:
        table: one row per label: ``measured_s`` (median of every timed run), ``measured_mean_s``,
            ``measured_std_s``, ``measured_min_s``, ``runs``, ``simulated_s`` (calibrated
            simulator), ``picked`` (which candidate won the screening), ``vs_stage_II``
            (improvement over the Stage II policy's median).
        samples: every timed makespan per label.
        placements: the placement measured per label.
        traces: the measured trace (median repeat of the last round) per label.
        screening: per candidate, its screening makespan (median of ``screen_repeats`` runs).
    """

    table: pd.DataFrame
    samples: dict[str, np.ndarray]
    placements: dict[str, Placement]
    traces: dict[str, Trace]
    screening: pd.DataFrame


@dataclass(frozen=True)
class SideBySideOptions:
    """How :func:`side_by_side` picks and measures.

    Attributes:
        samples: sampled candidates per policy besides its greedy one.
        screen_repeats: timed runs per candidate in the screening pass.
        repeats: timed runs per placement and round in the final measurement.
        rounds: rounds of the final measurement.
        seed: rollouts and measuring order.
    """

    samples: int = 4
    screen_repeats: int = 2
    repeats: int = 3
    rounds: int = 5
    seed: int = 0


def side_by_side(
    graph: DataflowGraph,
    profile: Profile,
    policies: Mapping[str, Any],
    references: Mapping[str, Placement] | None = None,
    options: SideBySideOptions | None = None,
    progress: bool = False,
) -> SideBySide:
    """Measure several policies (and reference placements) on the real devices in one run.

    Each policy proposes its greedy placement and ``samples`` sampled ones (the protocol's
    candidates); the real devices judge them: every candidate of every policy is measured in one
    shuffled pass (``screen_repeats`` timed runs each) and each policy's fastest is kept. Then
    the kept placements and ``references`` are measured together over ``rounds`` rounds of
    ``repeats`` runs, in a fresh random order each round (:func:`measure_placements`), so that
    drifts of the machine's load hit them alike.

    Args:
        graph: the workload.
        profile: the calibrated devices.
        policies: label -> policy (e.g. ``{"stage II": ..., "stage III": ...}``).
        references: label -> a fixed placement measured alongside (e.g. ``cp``).
        options: ``samples``, ``screen_repeats``, ``repeats``, ``rounds`` and ``seed`` above
            (default :class:`SideBySideOptions`).
        progress: show progress bars.
    """
    o = options or SideBySideOptions()
    samples, screen_repeats, repeats, rounds, seed = (
        o.samples, o.screen_repeats, o.repeats, o.rounds, o.seed
    )  # fmt: skip
    if not policies:
        raise ConfigError("side_by_side needs at least one policy; got none")
    references = dict(references or {})
    clash = sorted(set(policies) & set(references))
    if clash:
        raise ConfigError(f"side_by_side label {clash[0]!r} names a policy and a reference")
    cluster = profile.cluster
    rng = np.random.default_rng(seed)
    cands: dict[str, Placement] = {}
    for label, pol in policies.items():
        for k, p in enumerate(policy_rollouts(pol, graph, cluster, samples, rng, label)):
            cands[f"{label}|{'greedy' if k == 0 else f'sample {k}'}"] = p
    with torch_threads(1):
        screened, _ = measure_placements(graph, cluster, cands, screen_repeats, 1, seed, progress)
    screening = pd.DataFrame(
        [
            {
                "policy": k.split("|")[0],
                "candidate": k.split("|")[1],
                "measured_s": float(np.median(v)),
            }
            for k, v in screened.items()
        ]
    )
    chosen: dict[str, Placement] = {}
    picked: dict[str, str] = {}
    for label in policies:
        mine = screening[screening.policy == label]
        best = mine.loc[mine.measured_s.idxmin(), "candidate"]
        chosen[label], picked[label] = cands[f"{label}|{best}"], str(best)
    chosen.update(references)
    with torch_threads(1):
        measured, traces = measure_placements(
            graph, cluster, chosen, repeats, rounds, seed + 1, progress
        )
    sim = calibrated_simulator(graph, profile)
    rows = []
    for label, pl in chosen.items():
        m = measured[label]
        rows.append(
            {
                "label": label,
                "measured_s": float(np.median(m)),
                "measured_mean_s": float(np.mean(m)),
                "measured_std_s": float(np.std(m)),
                "measured_min_s": float(np.min(m)),
                "runs": int(m.size),
                "simulated_s": float(sim.makespan(pl)),
                "picked": picked.get(label, "fixed"),
            }
        )
    table = pd.DataFrame(rows)
    first = next(iter(policies))
    ref = float(table.loc[table.label == first, "measured_s"].iloc[0])
    table[f"vs_{first.replace(' ', '_')}"] = (ref - table.measured_s) / ref
    return SideBySide(table, measured, chosen, traces, screening)


def comparison_runs(comparison: SideBySide) -> pd.DataFrame:
    """A side-by-side measurement as a long frame for :func:`doppler_lab.viz.bar_compare`:
    ``label``, ``judge`` (``measured``: one row per timed run; ``simulated``: the calibrated
    simulator's makespan) and ``seconds``."""
    rows = [
        {"label": label, "judge": "measured", "seconds": float(x)}
        for label, runs in comparison.samples.items()
        for x in runs
    ]
    rows += [
        {"label": r.label, "judge": "simulated", "seconds": float(r.simulated_s)}
        for r in comparison.table.itertuples()
    ]
    return pd.DataFrame(rows, columns=["label", "judge", "seconds"])


def improvement(
    table: pd.DataFrame, before: str = STAGE_LABELS[0], after: str = STAGE_LABELS[1]
) -> float:
    """``(before - after) / before`` of the median measured makespans in a side-by-side table."""
    rows = table.set_index("label").measured_s
    for label in (before, after):
        if label not in rows.index:
            raise ConfigError(
                f"side-by-side table has no row {label!r}; labels: {list(rows.index)}"
            )
    return float((rows[before] - rows[after]) / rows[before])


def real_key_numbers(
    profile: Profile,
    fidelity: Mapping[str, float],
    stage3: Stage3Run,
    comparison: SideBySide,
) -> dict[str, Any]:
    """The flat key numbers of notebook 06: fidelity statistics, the Stage II and Stage III
    policies' measured makespans (side by side), the improvement, Stage III episodes and the
    machine's parallel capacity; ``measured_runs``: every timed run of the two policies, in
    measuring order (run k of each in the same round: the pairs the page's verdict takes)."""
    t = comparison.table.set_index("label")
    before, after = STAGE_LABELS
    return {
        "spearman_calibrated": fidelity["spearman_calibrated"],
        "spearman_preset": fidelity["spearman_preset"],
        "median_rel_err_calibrated": fidelity["median_rel_err_calibrated"],
        "median_rel_err_preset": fidelity["median_rel_err_preset"],
        "placements": int(fidelity["placements"]),
        "stage2_measured_s": float(t.at[before, "measured_s"]),
        "stage3_measured_s": float(t.at[after, "measured_s"]),
        "improvement": improvement(comparison.table),
        "episodes": int(stage3.episodes),
        "parallel_capacity": profile_numbers(profile)["parallel_capacity"],
        "measured_runs": {k: comparison.samples[k].tolist() for k in (before, after)},
    }
