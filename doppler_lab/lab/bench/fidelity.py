"""``doppler-lab bench fidelity``: does the calibrated simulator rank placements like the real
system?

Per workload (sized so that ops take about a millisecond on one CPU core): calibrate the
devices with the executor (one profile for all workloads), draw >= 30 placements of varied
quality (placers, single, round-robin, uniform and skewed random, contiguous blocks, perturbed
placer outputs), measure each on the real devices (median of repeats, over several rounds in
shuffled order so that drifts in machine load hit every placement alike) and simulate it with
``wc`` semantics under several models: today's calibrated model (measured op times, no host),
the host model (the same with the calibration's fitted host thread and parallel capacity,
:mod:`doppler_lab.hardware.host`; and each of its parts alone), calibrated roofline only (no
per-op table), and the uncalibrated preset. Reported per workload: Spearman rank correlation
with the measured makespans and the median relative error of the makespan.

The targets (Spearman >= 0.9 on every workload, median relative error <= 10%, on the host
model) are judged only on a run whose measured parallel capacity reaches 1.6 of 2 devices: a
run that starts on a loaded machine measures the capacity again a few times before it starts,
and a run that stays loaded says in its report that it could not judge them.

The raw measurements go beside the report, ``fidelity_raw.json.gz``
(:mod:`doppler_lab.timing.raw_data`): the calibration's every op, transfer and dispatch gap, and
per workload the placements, every timed run's makespan and the per-op and per-copy times of
each placement's median run (``op_traces``); ``doppler-lab calibrate --from`` refits the profile
from them.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np

from ...executor import make_backend
from ...executor.fidelity_runs import (
    DISTURBED_SLOWDOWN,
    MAX_RETRIES,
    Passes,
    error_correlation,
    fidelity_placements,
    measure_placements,
    median_rel_error,
    noise_ceiling,
    placement_shape,
    spearman,
    workload_row,
)
from ...executor.profiling import measure_calibration, parallel_capacity
from ...house.errors import ConfigError, FormatError
from ...house.validate import want_fields, want_int
from ...ir.placement import Placement
from ...timing.cost_model import CostModel
from ...timing.raw_data import RAW_FILE, read_raw, write_raw
from ...timing.sim import Simulator
from ...workloads.specs import graph_from_spec
from ._report import write_report
from .fidelity_oracle import ORACLES, oracle_scores

#: workload -> build spec, sized for CPU worker devices (ms-scale ops on one core)
CPU_WORKLOADS: dict[str, str] = {
    "chainmm": "chainmm:scale=0.1",
    "ffnn": "ffnn:scale=0.1",
    "llama_block": "llama_block:scale=0.15",
    "llama_layer": "llama_layer:scale=0.12",
    "moe_layer": "moe_layer:scale=0.1",
}
#: the same, for a quick smoke run
QUICK_WORKLOADS: dict[str, str] = {
    "chainmm": "chainmm:scale=0.05",
    "ffnn": "ffnn:scale=0.05",
    "llama_block": "llama_block:scale=0.07",
    "llama_layer": "llama_layer:scale=0.06",
    "moe_layer": "moe_layer:scale=0.05",
}


#: the measured parallel capacity, as a share of the devices, below which a run cannot judge the
#: targets (1.6 of 2 devices): other processes held the cores
CAPACITY_TO_JUDGE = 0.8
#: the targets on the host model, judged on a run whose capacity reaches CAPACITY_TO_JUDGE
TARGET_SPEARMAN = 0.9
TARGET_MRE = 0.10
#: how often a run that starts on a loaded machine measures the capacity again, and how long
#: it waits in between (seconds)
CAPACITY_TRIES = 3
CAPACITY_WAIT_S = 30.0


def run(
    out_dir: Path,
    quick: bool = False,
    backend: str = "cpu",
    num_devices: int | None = None,
    profile_out: str | Path | None = None,
    progress: bool = True,
    rounds: int | None = None,
    from_raw: str | Path | Sequence[str | Path] | None = None,
) -> dict[str, Any]:
    """Run the benchmark and write ``fidelity.{json,md}`` into ``out_dir``.

    Args:
        out_dir: report folder.
        quick: smaller workloads, fewer placements and repeats (a smoke run).
        backend: the devices (``cpu`` by default; ``dist`` for one process per device).
        num_devices: devices (default 2).
        profile_out: also save the calibration profile there.
        progress: show progress bars.
        rounds: shuffled measuring passes over the placements (default 4, quick 1; why:
            reports/notes/bench_notes.md).
        from_raw: measure nothing: score today's models on the measurements of an earlier
            run kept in this raw file (its calibration refitted, its placements and timed
            runs, its parallel capacity), so a change of the model is judged on the same
            measurements, on any machine. Several files: each run scored so, and the host
            model judged against today's model over all of them, paired by run (one report
            over the runs).
    """
    if from_raw is not None:
        paths = (
            [Path(from_raw)] if isinstance(from_raw, str | Path) else [Path(p) for p in from_raw]
        )
        if len(paths) == 1:
            return _rescore(Path(out_dir), paths[0], profile_out)
        if profile_out is not None:
            raise ConfigError(
                f"a profile is saved from one run's measurements; got {len(paths)} raw files "
                "(give one --from with --profile-out)"
            )
        return _rescore_many(Path(out_dir), paths)
    t_start = time.perf_counter()
    be = make_backend(backend, num_devices or 2)
    specs = QUICK_WORKLOADS if quick else CPU_WORKLOADS
    graphs = {k: graph_from_spec(s) for k, s in specs.items()}
    passes = Passes(*((2, 1) if quick else (3, 1)), rounds or (1 if quick else 4))
    try:
        capacity = _wait_for_capacity(be, 1 if quick else CAPACITY_TRIES)
        measured_cal = measure_calibration(
            be,
            list(graphs.values()),
            name=f"{be.cluster.name}-bench",
            quick=quick,
            progress=progress,
        )
        profile = measured_cal.fit()
        if profile_out is not None:
            profile.save(profile_out)
        rows, raw = [], {}
        rng = np.random.default_rng(0)
        for name, g in graphs.items():
            row, raw[name] = _measure_workload(
                name, specs[name], g, profile, be, rng, passes, quick, progress
            )
            rows.append(row)
        capacity += _wait_for_capacity(be, 1)
    finally:
        be.close()
    Path(out_dir).mkdir(parents=True, exist_ok=True)
    raw_path = write_raw(
        Path(out_dir) / RAW_FILE,
        "bench fidelity" + (" --quick" if quick else ""),
        measured_cal,
        raw,
        {"passes": passes.__dict__, "capacity": capacity},
    )
    summary = _summary(rows, be, capacity, profile, t_start)
    return write_report(
        out_dir,
        "fidelity",
        "Simulator fidelity against the real executor",
        {"Per workload": (rows, COLUMNS)},
        summary=summary,
        notes=_notes(summary, passes, profile, raw_path.name),
        command=f"doppler-lab bench fidelity{' --quick' if quick else ''}",
    )


def _rescore(out_dir: Path, raw_path: Path, profile_out: str | Path | None) -> dict[str, Any]:
    """``run(from_raw=...)``: today's models scored on the measurements kept in ``raw_path``."""
    t_start = time.perf_counter()
    doc, cal, profile, kept, rows = _rescored_rows(raw_path)
    if profile_out is not None:
        profile.save(profile_out)
    passes = kept or Passes(repeats=0, warmup=0, rounds=0)
    measured_on = SimpleNamespace(name=cal.backend, num_devices=cal.base.num_devices)
    summary = _summary(rows, measured_on, list(doc.get("capacity") or []), profile, t_start)
    summary["rescored_from"] = raw_path.name
    summary["measured_on"] = cal.meta.get("date")
    notes = [
        f"Re-scored: nothing was measured by this run. The measurements are those of "
        f"{raw_path.name} ({doc.get('source', 'bench fidelity')}, {cal.meta.get('date', '?')}): "
        "its calibration refitted with today's fit, its placements simulated under today's "
        "models; 'seconds' is the re-scoring's own time.",
        *_notes(summary, passes, profile, raw_path.name),
    ]
    return write_report(
        out_dir,
        "fidelity",
        "Simulator fidelity against the real executor (re-scored from kept measurements)",
        {"Per workload": (rows, COLUMNS)},
        summary=summary,
        notes=notes,
        command=f"doppler-lab bench fidelity --from {raw_path.name}",
    )


def _rescored_rows(
    raw_path: Path,
) -> tuple[dict[str, Any], Any, Any, Passes | None, list[dict[str, Any]]]:
    """The raw document of ``raw_path``, its calibration, the profile today's fit makes of it,
    its measuring passes (:func:`_raw_passes`) and one row per workload scored under today's
    models.

    Raises:
        FormatError: not the raw file of a bench fidelity run, naming the bad workload; its
            passes malformed or not those of its timed runs.
    """
    doc = read_raw(raw_path)
    cal = doc.get("calibration")
    workloads = doc.get("workloads")
    if cal is None or not isinstance(workloads, dict) or not workloads:
        raise FormatError(
            "not the raw file of a bench fidelity run (expected its calibration and its "
            "measured workloads)",
            str(raw_path),
        )
    passes = _raw_passes(doc, raw_path)
    profile = cal.fit()
    rows = []
    for name, w in workloads.items():
        try:
            if passes is not None:
                _check_runs(name, w["measured_s"], passes, raw_path)
            spec, samples = w["spec"], np.array(w["measured_s"], dtype=np.float64)
            g = graph_from_spec(spec)
            pls = [
                Placement(np.asarray(p["device"], dtype=np.int64), placer=str(p["placer"]))
                for p in w["placements"]
            ]
            counts = w["runs"]
            traces = w.get("op_traces")
            if traces is not None and not (
                isinstance(traces, list) and all(isinstance(t, dict) for t in traces)
            ):
                raise ValueError("op_traces must be a list of objects, one per placement")
        except FormatError:  # (a ValueError too: already names the file and what was expected)
            raise
        except (KeyError, TypeError, ValueError) as exc:
            raise FormatError(
                f"workload {name!r} is not a fidelity record ({exc})", str(raw_path)
            ) from None
        if samples.ndim != 2 or samples.shape[0] != len(pls):
            raise FormatError(
                f"workload {name!r}: {samples.shape[0] if samples.ndim else 0} rows of measured "
                f"runs, expected one per placement ({len(pls)})",
                str(raw_path),
            )
        rows.append(
            _workload_record(
                name,
                spec,
                g,
                pls,
                samples,
                counts,
                profile,
                cal.base,
                None if passes is None else passes.repeats,
                traces,
            )
        )
    return doc, cal, profile, passes, rows


#: the fields of a kept run's ``passes`` (:class:`Passes`) and the least each may be
_PASS_FIELDS = {"repeats": 1, "warmup": 0, "rounds": 1}


def _raw_passes(doc: dict[str, Any], raw_path: Path) -> Passes | None:
    """The measuring passes a kept run records (``passes``: ``repeats``, ``warmup`` and
    ``rounds``, whole numbers), or None where it records none (``gpu-check`` keeps none; such a
    run is scored without them).

    Raises:
        FormatError: ``passes`` is not such an object (a field missing, unknown or not a whole
            number), naming the file and what was expected.
    """
    if "passes" not in doc:
        return None

    def fail(msg: str) -> FormatError:
        return FormatError(msg, str(raw_path))

    p = want_fields(doc["passes"], "passes", fail, _PASS_FIELDS)
    return Passes(
        **{k: want_int(p[k], f"passes {k}", fail, minimum=m) for k, m in _PASS_FIELDS.items()}
    )


def _check_runs(name: str, runs: Any, passes: Passes, raw_path: Path) -> None:
    """Every placement of workload ``name`` kept ``rounds x repeats`` timed runs (``runs``: its
    ``measured_s``, one list per placement, pass after pass).

    Raises:
        FormatError: a placement with another number of runs, naming the file and the count
            expected.
    """
    want = passes.rounds * passes.repeats
    if not isinstance(runs, list) or not all(isinstance(r, list) for r in runs):
        raise FormatError(
            f"workload {name!r}: measured_s is not a list of timed runs per placement",
            str(raw_path),
        )
    lengths = sorted({len(r) for r in runs})
    if lengths and lengths != [want]:
        expected = f"rounds x repeats = {passes.rounds} x {passes.repeats} = {want}"
        if len(lengths) == 1:
            msg = f"{lengths[0]} timed runs per placement, expected {expected}"
        else:
            i = next(i for i, r in enumerate(runs) if len(r) != want)
            msg = f"placement {i} has {len(runs[i])} timed runs, expected {expected}"
        raise FormatError(f"workload {name!r}: {msg} (the file's passes)", str(raw_path))


def _run_label(raw_path: Path) -> str:
    """A run's name in a report over several: its folder (``reports/bench/fidelity-1615``), or
    the file's own name where the folder says nothing (``.``)."""
    parent = raw_path.resolve().parent.name
    return parent if parent and raw_path.name == RAW_FILE else raw_path.name


def _rescore_many(out_dir: Path, raw_paths: list[Path]) -> dict[str, Any]:
    """``run(from_raw=[A, B, ...])``: today's models scored on several runs' measurements, and
    judged over them: per workload the host model's Spearman and error over the runs (mean with
    its 95% bootstrap interval, worst), and the host model against today's model paired by run,
    each run's mean over its workloads (``better``, ``worse`` or ``cannot tell`` by the interval
    of the mean difference, :func:`~doppler_lab.house.stats.compare`; the (run, workload) cells
    share a run's machine and calibration, so they are shown, not judged). One run's minimum over workloads is
    a noisy statistic (reports/notes/bench_notes.md): this is how a change of the model is
    judged."""
    from ...house.stats import bootstrap_interval, compare

    t_start = time.perf_counter()
    labels = [_run_label(p) for p in raw_paths]
    if len(set(labels)) != len(labels):
        labels = [str(p) for p in raw_paths]
    per_run: list[dict[str, Any]] = []
    met_runs = 0
    for label, path in zip(labels, raw_paths):
        _, cal, profile, _, rows = _rescored_rows(path)
        host = profile.host
        met_runs += int(
            min(r["spearman_host"] for r in rows) >= TARGET_SPEARMAN
            and max(r["mre_host"] for r in rows) <= TARGET_MRE
        )
        for r in rows:
            per_run.append(
                {
                    "run": label,
                    "measured_on": cal.meta.get("date"),
                    "cores": None if host is None or not host.cores else host.cores,
                    **{k: r[k] for k in _MANY_KEYS},
                }
            )
    workloads = list(dict.fromkeys(r["workload"] for r in per_run))
    across = []
    for w in workloads:
        mine = [r for r in per_run if r["workload"] == w]
        row: dict[str, Any] = {"workload": w, "runs": len(mine)}
        for key in ("spearman_calibrated", "spearman_host", "mre_calibrated", "mre_host"):
            x = [r[key] for r in mine]
            row[f"{key}_mean"] = float(np.mean(x))
            row[f"{key}_low"], row[f"{key}_high"] = bootstrap_interval(x)
        row["spearman_host_worst"] = min(r["spearman_host"] for r in mine)
        row["mre_host_worst"] = max(r["mre_host"] for r in mine)
        for o in ORACLES:  # the in-sample bounds, where every run was traced
            x = [r[f"spearman_{o}"] for r in mine]
            row[f"spearman_{o}_mean"] = None if None in x else float(np.mean(x))
            row[f"spearman_{o}_best"] = None if None in x else max(x)
        for key, lower in (("spearman", False), ("mre", True)):  # the host model, paired by run
            st = compare(
                [r[f"{key}_host"] for r in mine],
                [r[f"{key}_calibrated"] for r in mine],
                lower_is_better=lower,
            )
            row[f"{key}_host_vs_calibrated"] = st.verdict
        across.append(row)

    # the run is the unit: its workloads share one machine state and one calibration, so the
    # verdict pairs each run's mean over its workloads (the cells are shown beside it)
    def run_means(key: str) -> list[float]:
        return [float(np.mean([r[key] for r in per_run if r["run"] == lab])) for lab in labels]

    rank = compare(
        run_means("spearman_host"), run_means("spearman_calibrated"), lower_is_better=False
    )
    err = compare(run_means("mre_host"), run_means("mre_calibrated"))
    cells = compare(
        [r["spearman_host"] for r in per_run],
        [r["spearman_calibrated"] for r in per_run],
        lower_is_better=False,
    )
    cells_err = compare([r["mre_host"] for r in per_run], [r["mre_calibrated"] for r in per_run])
    summary = {
        "runs": len(raw_paths),
        "pairs": rank.n,
        "cells": cells.n,
        "spearman_host_minus_calibrated": rank.mean,
        "spearman_interval": [round(rank.low, 4), round(rank.high, 4)],
        "spearman_verdict": rank.verdict,
        "mre_host_minus_calibrated": err.mean,
        "mre_interval": [round(err.low, 4), round(err.high, 4)],
        "mre_verdict": err.verdict,
        "runs_meeting_targets": met_runs,
        "target_spearman": TARGET_SPEARMAN,
        "target_mre": TARGET_MRE,
        "seconds": round(time.perf_counter() - t_start, 1),
    }
    notes = [
        "Re-scored: nothing was measured. Each run's calibration is refitted with today's fit "
        "and its placements simulated under today's models (as `--from RAW` does for one run).",
        f"The host model against today's model, paired by run ({rank.n} runs, each its mean "
        "over its workloads: a run's workloads share its machine and its calibration, so the "
        "run is the unit), 95% bootstrap interval of the mean difference: Spearman "
        f"{rank.mean:+.4f} [{rank.low:+.4f}, {rank.high:+.4f}], Wilcoxon p = "
        f"{_p(rank.p_value)}: {rank.verdict}; median relative error {err.mean:+.2%} "
        f"[{err.low:+.2%}, {err.high:+.2%}], p = {_p(err.p_value)}: {err.verdict}. Over the "
        f"{cells.n} (run, workload) cells, which are not independent: Spearman "
        f"{cells.mean:+.4f} [{cells.low:+.4f}, {cells.high:+.4f}] ({cells.verdict}), error "
        f"{cells_err.mean:+.2%} [{cells_err.low:+.2%}, {cells_err.high:+.2%}] "
        f"({cells_err.verdict}).",
        f"Targets (Spearman >= {TARGET_SPEARMAN} and error <= {TARGET_MRE:.0%} on every "
        f"workload of a run, host model): met in {met_runs} of {len(raw_paths)} runs. Each "
        "run's own report says whether its machine was quiet enough to judge them.",
        "Per workload over the runs: mean with its 95% bootstrap interval over the runs "
        "(their spread: runs are measured and calibrated anew), the worst run, and the host "
        "model against today's model paired by run (better, worse or cannot tell).",
        "spearman_oracle_*: the in-sample bounds of one run's report (the host model fed the "
        "traced runs' own op times, copy times and dispatch order, "
        "doppler_lab/lab/bench/fidelity_oracle.py), mean and best over the runs; empty where a "
        "run kept no traces.",
    ]
    return write_report(
        out_dir,
        "fidelity",
        f"Simulator fidelity over {len(raw_paths)} runs (re-scored from kept measurements)",
        {
            "Per workload over runs": (across, None),
            "Per run and workload": (per_run, None),
        },
        summary=summary,
        notes=notes,
        command="doppler-lab bench fidelity " + " ".join(f"--from {p}" for p in raw_paths),
    )


#: the columns of a run's workload that a report over several runs keeps
_MANY_KEYS = (
    "workload",
    "spearman_ceiling",
    "spearman_ceiling_by_pass",
    "spearman_calibrated",
    "spearman_host",
    "mre_calibrated",
    "mre_host",
    *(f"spearman_{o}" for o in ORACLES),
    "mre_oracle_order",
)


def _p(p: float | None) -> str:
    return "n/a" if p is None else f"{p:.2g}"


def _wait_for_capacity(backend: Any, tries: int) -> list[float]:
    """The devices' parallel capacity, measured up to ``tries`` times, :data:`CAPACITY_WAIT_S`
    apart, until it reaches :data:`CAPACITY_TO_JUDGE` of the devices (a loaded machine may
    quieten); every figure measured (empty for backends whose devices do not share cores)."""
    if backend.name not in ("cpu", "dist"):
        return []
    out = []
    for k in range(tries):
        out.append(parallel_capacity(backend.num_devices))
        if out[-1] >= CAPACITY_TO_JUDGE * backend.num_devices:
            break
        if k + 1 < tries:
            time.sleep(CAPACITY_WAIT_S)
    return out


def _host_models(profile: Any) -> dict[str, Any]:
    """The profile as today's model (no host) and with its fitted host, whole and in parts
    (the launch and copy costs alone; the parallel capacity or the shared cores alone)."""

    host = profile.host
    models = {"calibrated": replace(profile, host=None), "host": profile}
    if host is not None and host.parallel_capacity is not None:
        models["host_costs"] = replace(profile, host=replace(host, parallel_capacity=None))
        models["capacity"] = replace(profile, host=replace(host, launch_s=0.0, copy_s=0.0))
    if host is not None and host.cores and (host.launch_s or host.copy_s):
        models["host_costs"] = replace(profile, host=replace(host, cores=0.0))
        models["cores"] = replace(profile, host=replace(host, launch_s=0.0, copy_s=0.0))
    return models


def _measure_workload(
    name: str,
    spec: str,
    g: Any,
    profile: Any,
    be: Any,
    rng: np.random.Generator,
    passes: Passes,
    quick: bool,
    progress: bool,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """One workload: its placements measured, and simulated under each model; returns its
    table row and its raw record."""
    pls = fidelity_placements(g, profile.cluster, rng, quick)
    op_traces: list[dict[str, Any]] = []
    samples, counts = measure_placements(
        g,
        be,
        pls,
        passes,
        rng,
        progress,
        expected=profile.cost_model(g).compute,
        op_traces=op_traces,
    )
    raw = {
        "spec": spec,
        "placements": [{"placer": p.placer, "device": np.asarray(p.device).tolist()} for p in pls],
        "measured_s": samples.tolist(),
        "runs": counts,
        "op_traces": op_traces,
    }
    record = _workload_record(
        name, spec, g, pls, samples, counts, profile, be.cluster, passes.repeats, op_traces
    )
    return record, raw


def _workload_record(
    name: str,
    spec: str,
    g: Any,
    pls: list,
    samples: np.ndarray,
    counts: dict[str, int],
    profile: Any,
    preset: Any,
    runs_per_pass: int | None = None,
    traces: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """One workload's table row from its measured runs ``samples`` ``(placements, runs)``, in
    measuring order, ``runs_per_pass`` timed runs to a pass where known (its
    ``spearman_ceiling_by_pass``: None where unknown, under 2 passes or not computable), and
    the in-sample oracles of :mod:`~doppler_lab.lab.bench.fidelity_oracle` from the placements'
    ``traces`` (None where the runs were not traced)."""
    measured = np.median(samples, axis=1)
    by_pass = (
        _finite_or_none(noise_ceiling(samples, runs_per_pass=runs_per_pass))
        if runs_per_pass and samples.shape[1] >= 2 * runs_per_pass
        else None
    )
    row: dict[str, Any] = {
        **workload_row(name, spec, g, len(pls), measured),
        "coverage": profile.coverage(g),
        "runs": counts["runs"],
        "discarded_runs": counts["discarded"],
        "kept_disturbed_runs": counts["kept_disturbed"],
        "spearman_ceiling": noise_ceiling(samples),
        "spearman_ceiling_by_pass": by_pass,
    }
    row.update(_scores(g, pls, measured, samples.min(axis=1), profile, preset))
    row.update(oracle_scores(g, pls, measured, traces or [], profile))
    return row


def _finite_or_none(x: float) -> float | None:
    """``x``, or None where it is NaN (a column that cannot be computed for this workload)."""
    return float(x) if np.isfinite(x) else None


def _scores(
    g: Any, pls: list, measured: np.ndarray, best: np.ndarray, profile: Any, preset: Any
) -> dict[str, float | None]:
    """Spearman and median relative error of each model's ``wc`` makespans against the
    measured ones (``*_best``: against each placement's fastest run), and where the host model
    errs: the Spearman of its log error with each placement's imbalance and copies
    (``error_vs_imbalance``, ``error_vs_copies``: :func:`placement_shape` with the host model's
    op costs, :func:`error_correlation`; None where they cannot be computed)."""
    models: dict[str, tuple[Any, Any]] = {
        label: (p.cluster, p.cost_model(g)) for label, p in _host_models(profile).items()
    }
    models["roofline"] = (profile.cluster, profile.cost_model(g, use_op_times=False))
    models["preset"] = (preset, CostModel(g, preset))
    out: dict[str, float | None] = {}
    preds: dict[str, np.ndarray] = {}
    for label, (cluster, cm) in models.items():
        if label == "host" and profile.host is None:  # the same model as "calibrated"
            pred = preds["calibrated"]
        else:
            pred = Simulator(g, cluster, "wc", cost_model=cm).makespans(pls)
        preds[label] = pred
        out[f"spearman_{label}"] = spearman(pred, measured)
        out[f"mre_{label}"] = median_rel_error(pred, measured)
        if label in ("calibrated", "host"):
            out[f"spearman_{label}_best"] = spearman(pred, best)
            out[f"mre_{label}_best"] = median_rel_error(pred, best)
    host_cluster, host_cm = models["host"]
    shape = placement_shape(g, pls, host_cm.compute, host_cluster.num_devices)
    for key, r in error_correlation(preds["host"], measured, shape).items():
        out[f"error_vs_{key}"] = _finite_or_none(r)
    return out


def _summary(
    rows: list[dict[str, Any]], be: Any, capacity: list[float], profile: Any, t_start: float
) -> dict[str, Any]:
    """The report's summary: today's model and the host model, the host fitted, and whether
    this run could judge the targets (its parallel capacity)."""
    spear = [r["spearman_calibrated"] for r in rows]
    host_spear = [r["spearman_host"] for r in rows]
    host_mre = [r["mre_host"] for r in rows]
    summary: dict[str, Any] = {
        "backend": be.name,
        "devices": be.num_devices,
        "min_spearman_calibrated": float(np.min(spear)),
        "mean_spearman_calibrated": float(np.mean(spear)),
        "max_mre_calibrated": float(np.max([r["mre_calibrated"] for r in rows])),
        "min_spearman_calibrated_best": float(
            np.min([r["spearman_calibrated_best"] for r in rows])
        ),
        "min_spearman_host": float(np.min(host_spear)),
        "mean_spearman_host": float(np.mean(host_spear)),
        "max_mre_host": float(np.max(host_mre)),
        "host_launch_us": None if profile.host is None else profile.host.launch_s * 1e6,
        "host_copy_us": None if profile.host is None else profile.host.copy_s * 1e6,
        "host_parallel_capacity": None if profile.host is None else profile.host.parallel_capacity,
        "host_cores": None
        if profile.host is None or not profile.host.cores
        else profile.host.cores,
        "target_spearman": TARGET_SPEARMAN,
        "target_mre": TARGET_MRE,
        "seconds": round(time.perf_counter() - t_start, 1),
        "load_average_1min": os.getloadavg()[0] if hasattr(os, "getloadavg") else None,
    }
    met = bool(np.min(host_spear) >= TARGET_SPEARMAN and np.max(host_mre) <= TARGET_MRE)
    judged = not capacity or min(capacity) >= CAPACITY_TO_JUDGE * be.num_devices
    if capacity:
        summary["parallel_capacity"] = round(min(capacity), 2)
        summary["parallel_capacity_measured"] = [round(c, 2) for c in capacity]
    summary["target_judged"] = judged
    summary["target_met"] = met if judged else None
    return summary


COLUMNS = [
    "workload",
    "ops",
    "placements",
    "measured_min_ms",
    "measured_max_ms",
    "spearman_ceiling",
    "spearman_ceiling_by_pass",
    "spearman_calibrated",
    "mre_calibrated",
    "spearman_host",
    "mre_host",
    "error_vs_imbalance",
    "error_vs_copies",
    *(f"{m}_{o}" for o in ORACLES for m in ("spearman", "mre")),
    "spearman_host_costs",
    "mre_host_costs",
    "spearman_capacity",
    "mre_capacity",
    "spearman_cores",
    "mre_cores",
    "spearman_calibrated_best",
    "mre_calibrated_best",
    "spearman_host_best",
    "mre_host_best",
    "spearman_roofline",
    "mre_roofline",
    "spearman_preset",
    "mre_preset",
    "coverage",
    "runs",
    "discarded_runs",
    "kept_disturbed_runs",
]


def _notes(summary: dict[str, Any], passes: Passes, profile: Any, raw_name: str) -> list[str]:
    """The report's notes: the verdict's conditions first, then how it was measured."""
    d = summary["devices"]
    notes = []
    if not summary["target_judged"]:
        notes.append(
            f"NOT JUDGED: parallel capacity {summary['parallel_capacity']:.2f} < "
            f"{CAPACITY_TO_JUDGE * d:.1f} of {d} devices (measured "
            f"{summary['parallel_capacity_measured']}, up to {CAPACITY_TRIES} tries "
            f"{CAPACITY_WAIT_S:.0f} s apart): other processes held cores, so the measured "
            "makespans of multi-device placements say more about the machine's load than about "
            "the simulator; the targets (Spearman >= "
            f"{TARGET_SPEARMAN} on every workload, median relative error <= {TARGET_MRE:.0%}) "
            "can only be judged on a quieter machine. The columns still compare today's model "
            "with the host model on the same measurements."
        )
    host = profile.host
    fitted = (
        "no host probe in the calibration: the host model is today's"
        if host is None
        else f"{host.launch_s * 1e6:.2f} us per launch, {host.copy_s * 1e6:.2f} us per copy "
        "issued, "
        + (
            f"{host.cores:.2f} cores shared by the devices and the copy lane(s)"
            if host.cores
            else "parallel capacity "
            + (f"{host.parallel_capacity:.2f}" if host.parallel_capacity else "all devices")
        )
    )
    measured = profile.meta.get("parallel_capacity_measured")
    if host is not None and host.cores and measured:
        fitted += (
            " (the calibration's parallel-capacity probes: "
            + ", ".join(f"{c:.2f}" for c in measured)
            + "; their median)"
        )
    probe = profile.meta.get("fit", {}).get("host_probe") or {}
    shown = ", ".join(f"{k} {v * 1e6:.1f} us" for k, v in probe.items() if k != "devices")
    return notes + [
        f"Measured: median of {passes.repeats} timed runs after {passes.warmup} warm-up, over "
        f"{passes.rounds} shuffled round(s).",
        "Simulated: wc semantics, no noise. calibrated = today's model: the profile with measured "
        "op times per signature, no host; host = the same with the fitted host thread (launches "
        "and copy issues one at a time; on CPU workers the devices and copy lanes share the fitted "
        "cores, else devices beyond the measured parallel capacity are slowed: "
        "doppler_lab.hardware.host); host_costs = its launch and copy costs alone; capacity = its "
        "parallel capacity alone; cores = its shared cores alone; roofline = the profile's "
        "fitted devices without the op table; preset = uncalibrated cluster preset.",
        f"Host fitted: {fitted}. Host probe (per-op periods of tiny-op chains): {shown or '-'}.",
        "mre = median over placements of |simulated - measured| / measured.",
        "error_vs_imbalance, error_vs_copies: where the host model errs, the Spearman over "
        "placements of its log error, log(simulated / measured), with the placement's imbalance "
        "(its busiest device's load over the mean device load, by the host model's op times) "
        "and with its number of cross-device copies (one per producing op and receiving "
        "device); positive: the model is the slower, the more the placement has of it; empty "
        "where it cannot be computed (under 3 placements, or a constant).",
        "oracle_ops, oracle_copies, oracle_order: in-sample bounds "
        "(doppler_lab/lab/bench/fidelity_oracle.py): the host model fed what the traced median "
        "run of each placement measured: each op's median duration per device (oracle_ops), "
        "also each edge's median copy time (oracle_copies), also each placement's measured "
        "dispatch order (oracle_order). Fitted on the runs they score, they bound what any op "
        "table, copy model or dispatch rule of this simulator could reach here; empty where the "
        "runs were not traced.",
        "spearman_ceiling: the Spearman a perfect model could expect against these measurements "
        "(split-half reliability of the measured medians over random halves of each placement's "
        "runs, Spearman-Brown corrected, square root): where it is well above a model's Spearman, "
        "what the model misses is the model's, not the measurements' noise.",
        "spearman_ceiling_by_pass: the same with halves of whole measuring passes (half the "
        "rounds against the others, mean over the ways to split them): what drifts between passes is "
        "then noise between the halves, not shared by both, so it is the ceiling against "
        "measurements taken at another time; empty with fewer than 2 rounds.",
        "*_best: against the fastest of a placement's runs instead of their median (the run least "
        "disturbed by other processes; useful when the machine's load comes and goes).",
        f"A run whose ops took over {DISTURBED_SLOWDOWN}x their calibrated time (median over ops) "
        f"was disturbed by other work and was taken again, up to {MAX_RETRIES} times "
        "(discarded_runs); kept_disturbed_runs counts those kept after the last retry.",
        f"Profile: dispatch gap {', '.join(f'{g * 1e6:.1f}' for g in profile.dispatch_s)} us per "
        "device.",
        f"Raw measurements (every op of the calibration, the host probe, every timed run of every "
        f"placement): {raw_name}; `doppler-lab calibrate --from {raw_name} --out P.json` refits "
        "the profile from them.",
        "parallel_capacity: how many of the devices' threads really ran at once (a matmul probe "
        "before and after; the smaller; parallel_capacity_measured: every try). target_met is "
        f"judged on the host model where the capacity reaches {CAPACITY_TO_JUDGE:.0%} of the "
        "devices, else left empty (target_judged: no).",
    ]
