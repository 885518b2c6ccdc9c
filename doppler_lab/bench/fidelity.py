"""``doppler-lab bench fidelity``: does the calibrated simulator rank placements like the real
system?

Per workload (sized so that ops take about a millisecond on one CPU core): calibrate the
devices with the executor (one profile for all workloads), draw >= 30 placements of varied
quality (placers, single, round-robin, uniform and skewed random, contiguous blocks, perturbed
placer outputs), measure each on the real devices (median of repeats, over several rounds in
shuffled order so that drifts in machine load hit every placement alike) and simulate it with
``wc`` semantics under three cost models: calibrated (measured op times), calibrated roofline
only (no per-op table), and the uncalibrated preset. Reported per workload: Spearman rank
correlation with the measured makespans and the median relative error of the makespan.

The raw measurements go beside the report, ``fidelity_raw.json.gz``
(:mod:`doppler_lab.timing.raw_data`): the calibration's every op, transfer and dispatch gap, and
per workload the placements and every timed run's makespan; ``doppler-lab calibrate --from``
refits the profile from them.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import numpy as np

from ..executor import make_backend
from ..executor.fidelity_runs import (
    DISTURBED_SLOWDOWN,
    MAX_RETRIES,
    Passes,
    fidelity_placements,
    measure_placements,
    median_rel_error,
    spearman,
    workload_row,
)
from ..executor.profiling import measure_calibration, parallel_capacity
from ..timing.cost_model import CostModel
from ..timing.raw_data import RAW_FILE, write_raw
from ..timing.sim import Simulator
from ..workloads.specs import graph_from_spec
from ._report import write_report

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


def run(
    out_dir: Path,
    quick: bool = False,
    backend: str = "cpu",
    num_devices: int | None = None,
    profile_out: str | Path | None = None,
    progress: bool = True,
    rounds: int | None = None,
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
    """

    t_start = time.perf_counter()
    be = make_backend(backend, num_devices or 2)
    capacity = [parallel_capacity(be.num_devices)] if be.name in ("cpu", "dist") else []
    specs = QUICK_WORKLOADS if quick else CPU_WORKLOADS
    graphs = {k: graph_from_spec(s) for k, s in specs.items()}
    repeats, warmup = (2, 1) if quick else (3, 1)
    rounds = rounds or (1 if quick else 4)
    try:
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
        rows = []
        raw: dict[str, Any] = {}
        rng = np.random.default_rng(0)
        for name, g in graphs.items():
            pls = fidelity_placements(g, profile.cluster, rng, quick)
            calibrated = profile.cost_model(g)
            passes = Passes(repeats, warmup, rounds)
            samples, counts = measure_placements(
                g, be, pls, passes, rng, progress, expected=calibrated.compute
            )
            measured = np.median(samples, axis=1)
            best = samples.min(axis=1)
            raw[name] = {
                "spec": specs[name],
                "placements": [
                    {"placer": p.placer, "device": np.asarray(p.device).tolist()} for p in pls
                ],
                "measured_s": samples.tolist(),
                "runs": counts,
            }
            cost_models = {
                "calibrated": calibrated,
                "roofline": profile.cost_model(g, use_op_times=False),
                "preset": CostModel(g, be.cluster),
            }
            row: dict[str, Any] = {
                **workload_row(name, specs[name], g, len(pls), measured),
                "coverage": profile.coverage(g),
                "runs": counts["runs"],
                "discarded_runs": counts["discarded"],
                "kept_disturbed_runs": counts["kept_disturbed"],
            }
            for label, cm in cost_models.items():
                cluster = profile.cluster if label != "preset" else be.cluster
                sim = Simulator(g, cluster, "wc", cost_model=cm)
                pred = sim.makespans(pls)
                row[f"spearman_{label}"] = spearman(pred, measured)
                row[f"mre_{label}"] = median_rel_error(pred, measured)
                if label == "calibrated":
                    row["spearman_calibrated_best"] = spearman(pred, best)
                    row["mre_calibrated_best"] = median_rel_error(pred, best)
            rows.append(row)
        if capacity:
            capacity.append(parallel_capacity(be.num_devices))
    finally:
        be.close()
    Path(out_dir).mkdir(parents=True, exist_ok=True)
    raw_path = write_raw(
        Path(out_dir) / RAW_FILE,
        "bench fidelity" + (" --quick" if quick else ""),
        measured_cal,
        raw,
        {"passes": {"repeats": repeats, "warmup": warmup, "rounds": rounds}, "capacity": capacity},
    )
    spear = [r["spearman_calibrated"] for r in rows]
    summary = {
        "backend": be.name,
        "devices": be.num_devices,
        "min_spearman_calibrated": float(np.min(spear)),
        "mean_spearman_calibrated": float(np.mean(spear)),
        "max_mre_calibrated": float(np.max([r["mre_calibrated"] for r in rows])),
        "min_spearman_calibrated_best": float(
            np.min([r["spearman_calibrated_best"] for r in rows])
        ),
        "target_spearman": 0.9,
        "target_met": bool(np.min(spear) >= 0.9),
        "seconds": round(time.perf_counter() - t_start, 1),
        "load_average_1min": os.getloadavg()[0] if hasattr(os, "getloadavg") else None,
    }
    warnings = []
    if capacity:
        summary["parallel_capacity"] = round(min(capacity), 2)
        if min(capacity) < 0.9 * be.num_devices:
            warnings.append(
                f"WARNING: parallel capacity {min(capacity):.2f} < {be.num_devices} devices: other "
                "processes held cores during this run, so its devices did not run independently and "
                "these correlations measure the machine's load, not the simulator. Rerun on an idle "
                "machine (doppler-lab gpu-check runs this benchmark on a GPU machine's idle cores)."
            )
    cols = [
        "workload",
        "ops",
        "placements",
        "measured_min_ms",
        "measured_max_ms",
        "spearman_calibrated",
        "mre_calibrated",
        "spearman_calibrated_best",
        "mre_calibrated_best",
        "spearman_roofline",
        "mre_roofline",
        "spearman_preset",
        "mre_preset",
        "coverage",
        "runs",
        "discarded_runs",
        "kept_disturbed_runs",
    ]
    notes = warnings + [
        f"Measured: median of {repeats} timed runs after {warmup} warm-up, over {rounds} shuffled round(s).",
        "Simulated: wc semantics, no noise. calibrated = profile with measured op times per signature; "
        "roofline = the profile's fitted devices without the op table; preset = uncalibrated cluster preset.",
        "mre = median over placements of |simulated - measured| / measured.",
        "*_best: against the fastest of a placement's runs instead of their median (the run least "
        "disturbed by other processes; useful when the machine's load comes and goes).",
        f"A run whose ops took over {DISTURBED_SLOWDOWN}x their calibrated time (median over ops) was "
        f"disturbed by other work and was taken again, up to {MAX_RETRIES} times (discarded_runs); "
        "kept_disturbed_runs counts those kept after the last retry.",
        "CPU devices share the machine's cores and memory bandwidth with each other, with the copy lane "
        "and with any other process (see load_average_1min): the simulator models none of that.",
        f"Profile: dispatch gap {', '.join(f'{g * 1e6:.1f}' for g in profile.dispatch_s)} us per device.",
        f"Raw measurements (every op of the calibration, every timed run of every placement): "
        f"{raw_path.name}; `doppler-lab calibrate --from {raw_path.name} --out P.json` refits "
        "the profile from them.",
        "parallel_capacity: how many of the devices' threads really ran at once (a matmul probe before "
        "and after; the smaller): below the device count, other processes held cores and the measured "
        "makespans of multi-device placements say more about the machine's load than about placement.",
    ]
    return write_report(
        out_dir,
        "fidelity",
        "Simulator fidelity against the real executor",
        {"Per workload": (rows, cols)},
        summary=summary,
        notes=notes,
        command=f"doppler-lab bench fidelity{' --quick' if quick else ''}",
    )
