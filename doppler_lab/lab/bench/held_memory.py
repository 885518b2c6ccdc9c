"""``doppler-lab bench allocator``: what keeping freed memory (:mod:`doppler_lab.executor.allocator`)
does to the CPU workers' makespans.

The setting is process-wide and cannot be undone, so each arm runs in a process of its own:
``pairs`` pairs of processes, one with the memory held (the default) and one with the C
library's own policy (``DOPPLER_LAB_CPU_ALLOCATOR=system``), in alternating order (ABBA...) so
that a drift in the machine's load hits both arms alike. Each process runs every workload of
``bench fidelity`` under the same placements (one device, round robin, seeded random ones):
one warm-up, then the median of ``repeats`` timed runs. Reported per workload, and over all:
held against system, paired by process pair (each pair's geometric-mean change over its
placements: placements timed in one process are not independent), as the relative change of
the makespan with its 95% bootstrap interval over the pairs and the verdict (``better``, ``worse`` or ``cannot
tell``, :func:`~doppler_lab.house.stats.compare`); and each arm's run-to-run spread (the median
over placements of the coefficient of variation of its timed runs). Every timed run of every
process is kept beside the report (:data:`RAW_FILE`).
"""

from __future__ import annotations

import gzip
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
from tqdm.auto import tqdm

from ...executor.allocator import ENV
from ...house.atomic import atomic_writer
from ...house.errors import ExecutorError
from ...house.stats import compare
from ._report import write_report

#: placements per workload besides one device and round robin: random ones (seeds 0..)
RANDOM_PLACEMENTS = 3
ARMS = ("held", "system")
#: process pairs (the unit of the comparison); ``--quick``: too few to judge, a smoke run
PAIRS = 8
QUICK_PAIRS = 2
#: the raw measurements beside the report
RAW_FILE = "allocator_raw.json.gz"
COLUMNS = (
    "workload",
    "placements",
    "pairs",
    "held_ms",
    "system_ms",
    "change_pct",
    "change_low_pct",
    "change_high_pct",
    "verdict",
    "cv_held_pct",
    "cv_system_pct",
)


def _placements(g: Any, devices: int) -> dict[str, Any]:
    """The measured placements: one device, round robin and seeded random ones (the placers'
    own baselines: inputs on their first consumer's device)."""
    from ...ir.placement import random_placement, round_robin, single_device

    rng = np.random.default_rng(0)
    out = {"single": single_device(g, devices), "round-robin": round_robin(g, devices)}
    for k in range(RANDOM_PLACEMENTS):
        out[f"random{k}"] = random_placement(g, devices, rng)
    return out


def measure(specs: dict[str, str], repeats: int, devices: int = 2) -> dict[str, Any]:
    """One arm, in this process: every workload's placements timed on the CPU backend (whose
    allocator policy the environment chose); ``{"allocator": ..., "runs": {workload:
    {placement: [seconds, ...]}}}``."""
    from ...executor import Executor, make_backend
    from ...workloads.specs import graph_from_spec

    be = make_backend("cpu", devices)
    runs: dict[str, dict[str, list[float]]] = {}
    try:
        for name, spec in specs.items():
            g = graph_from_spec(spec)
            runs[name] = {}
            with Executor(g, be) as ex:
                for label, pl in _placements(g, devices).items():
                    ex.run(pl)
                    runs[name][label] = [ex.run(pl).trace.makespan for _ in range(repeats)]
        return {"allocator": be.describe()["allocator"], "runs": runs}
    finally:
        be.close()


def _arm(arm: str, specs: dict[str, str], repeats: int) -> dict[str, Any]:
    """One arm in a fresh process (``DOPPLER_LAB_CPU_ALLOCATOR=arm``)."""
    env = {**os.environ, ENV: arm}
    cmd = [sys.executable, "-m", __name__, json.dumps({"specs": specs, "repeats": repeats})]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise ExecutorError(
            f"bench allocator: the {arm!r} arm's process failed ({done.returncode}): "
            f"{done.stderr.strip()[-800:]}"
        )
    out = json.loads(done.stdout.strip().splitlines()[-1])
    if out["allocator"] != arm and not (arm == "held" and out["allocator"] == "system"):
        raise ExecutorError(f"bench allocator: the {arm!r} arm ran with {out['allocator']!r}")
    return out


def run(out_dir: Path, quick: bool = False, progress: bool = True) -> dict[str, Any]:
    """Run the benchmark and write ``allocator.{json,md}`` into ``out_dir``."""
    from .fidelity import CPU_WORKLOADS, QUICK_WORKLOADS

    t0 = time.perf_counter()
    specs = dict(list(QUICK_WORKLOADS.items())[:2]) if quick else dict(CPU_WORKLOADS)
    pairs, repeats = (QUICK_PAIRS, 3) if quick else (PAIRS, 5)
    results: dict[str, list[dict[str, Any]]] = {a: [] for a in ARMS}
    order = [ARMS if k % 2 == 0 else ARMS[::-1] for k in range(pairs)]
    with tqdm(total=2 * pairs, desc="bench allocator", disable=not progress) as bar:
        for arms in order:
            for arm in arms:
                results[arm].append(_arm(arm, specs, repeats))
                bar.update()
    held_state = results["held"][0]["allocator"]
    rows = []
    # the unit is the process pair: the placements timed in one process share its memory layout
    # and load, so they are not independent (100 (pair x placement) ratios of one run once said
    # -11.5% [-14.4, -8.5]; three reruns said +0.7, -3.9 and -4.5%)
    logs_all = np.zeros(pairs)
    for name in specs:
        labels = list(results["held"][0]["runs"][name])
        logs = np.zeros((pairs, len(labels)))
        held, system, cv = [], [], {a: [] for a in ARMS}
        for k in range(pairs):
            for j, label in enumerate(labels):
                h = np.asarray(results["held"][k]["runs"][name][label])
                s = np.asarray(results["system"][k]["runs"][name][label])
                held.append(float(np.median(h)))
                system.append(float(np.median(s)))
                logs[k, j] = math.log(held[-1] / system[-1])
                cv["held"].append(float(np.std(h) / np.mean(h)))
                cv["system"].append(float(np.std(s) / np.mean(s)))
        per_pair = np.expm1(logs.mean(axis=1))  # each pair's geometric-mean change
        logs_all += logs.mean(axis=1) / len(specs)
        st = compare(per_pair, np.zeros(pairs))
        rows.append(
            {
                "workload": name,
                "placements": len(labels),
                "pairs": st.n,
                "held_ms": 1e3 * float(np.median(held)),
                "system_ms": 1e3 * float(np.median(system)),
                "change_pct": 100 * st.mean,
                "change_low_pct": 100 * st.low,
                "change_high_pct": 100 * st.high,
                "verdict": st.verdict,
                "cv_held_pct": 100 * float(np.median(cv["held"])),
                "cv_system_pct": 100 * float(np.median(cv["system"])),
            }
        )
    pair_changes = np.expm1(logs_all)
    total = compare(pair_changes, np.zeros(pairs))
    raw = {
        "command": "doppler-lab bench allocator",
        "specs": specs,
        "repeats": repeats,
        "order": order,
        "arms": results,  # per arm, per process in run order: {allocator, runs: seconds}
    }
    with atomic_writer(Path(out_dir) / RAW_FILE, "wb") as fh:
        fh.write(gzip.compress(json.dumps(raw).encode(), mtime=0))
    summary = {
        "allocator_held": held_state,
        "process_pairs": pairs,
        "repeats": repeats,
        "process_pairs_judged": total.n,
        "per_pair_change_pct": [round(100 * float(x), 2) for x in pair_changes],
        "change_pct": 100 * total.mean,
        "change_interval_pct": [round(100 * total.low, 2), round(100 * total.high, 2)],
        "verdict": total.verdict,
        "p_value": total.p_value,
        "seconds": round(time.perf_counter() - t0, 1),
        "load_average_1min": os.getloadavg()[0] if hasattr(os, "getloadavg") else None,
    }
    notes = [
        "held: freed memory kept in the process for the next op (glibc mallopt thresholds, "
        "doppler_lab.executor.allocator), the default; system: the C library's own policy "
        "(DOPPLER_LAB_CPU_ALLOCATOR=system), as the CPU workers ran before.",
        f"Each arm in its own process, {pairs} pair(s) in alternating order; per process and "
        f"placement the median of {repeats} timed runs after one warm-up. change: per process "
        "pair the geometric mean over placements (and over workloads, for the total) of held / "
        "system, minus 1; then the mean over the process pairs with its 95% bootstrap interval "
        "(the process pair is the unit: placements timed in one process are not independent); "
        "better / worse / cannot tell by the interval. cv: median over placements of the "
        "timed runs' coefficient of variation.",
        "Placements: one device, round robin, "
        f"{RANDOM_PLACEMENTS} seeded random ones, on bench fidelity's CPU workloads.",
        f"Raw data: {RAW_FILE} (every timed run of every process, in run order).",
    ]
    return write_report(
        out_dir,
        "allocator",
        "CPU workers: freed memory held against the C library's policy",
        {"Per workload": (rows, COLUMNS)},
        summary=summary,
        notes=notes,
        command=f"doppler-lab bench allocator{' --quick' if quick else ''}",
    )


if __name__ == "__main__":  # one arm: python -m doppler_lab.lab.bench.held_memory '{"specs": ...}'
    job = json.loads(sys.argv[1])
    print(json.dumps(measure(job["specs"], int(job["repeats"]))))
