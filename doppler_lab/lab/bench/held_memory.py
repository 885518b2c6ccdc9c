"""``doppler-lab bench allocator``: what keeping freed memory (:mod:`doppler_lab.executor.allocator`)
does to the CPU workers' makespans.

The setting is process-wide and cannot be undone, so each arm runs in a process of its own:
``pairs`` pairs of processes, one with the memory held (the default) and one with the C
library's own policy (``DOPPLER_LAB_CPU_ALLOCATOR=system``), in alternating order (ABBA...) so
that a drift in the machine's load hits both arms alike. Each process runs every workload of
``bench fidelity`` under the same placements (one device, round robin, seeded random ones):
one warm-up, then the median of ``repeats`` timed runs. Reported per workload, and over all:
held against system, paired by process pair and placement, as the relative change of the
makespan with its 95% bootstrap interval and the verdict (``better``, ``worse`` or ``cannot
tell``, :func:`~doppler_lab.house.stats.compare`); and each arm's run-to-run spread (the median
over placements of the coefficient of variation of its timed runs).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
from tqdm.auto import tqdm

from ...executor.allocator import ENV
from ...house.errors import ExecutorError
from ...house.stats import compare
from ._report import write_report

#: placements per workload besides one device and round robin: random ones (seeds 0..)
RANDOM_PLACEMENTS = 3
ARMS = ("held", "system")
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


def _placements(g: Any, devices: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    out = {
        "single": np.zeros(g.num_nodes, np.int64),
        "round-robin": np.arange(g.num_nodes) % devices,
    }
    for k in range(RANDOM_PLACEMENTS):
        out[f"random{k}"] = rng.integers(0, devices, g.num_nodes)
    return out


def measure(specs: dict[str, str], repeats: int, devices: int = 2) -> dict[str, Any]:
    """One arm, in this process: every workload's placements timed on the CPU backend (whose
    allocator policy the environment chose); ``{"allocator": ..., "runs": {workload:
    {placement: [seconds, ...]}}}``."""
    from ...executor import Executor, make_backend
    from ...ir.placement import Placement
    from ...workloads.specs import graph_from_spec

    be = make_backend("cpu", devices)
    runs: dict[str, dict[str, list[float]]] = {}
    try:
        for name, spec in specs.items():
            g = graph_from_spec(spec)
            runs[name] = {}
            with Executor(g, be) as ex:
                for label, dev in _placements(g, devices).items():
                    pl = Placement(dev, placer=label).with_inputs_filled(g)
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
    pairs, repeats = (1, 3) if quick else (4, 5)
    results: dict[str, list[dict[str, Any]]] = {a: [] for a in ARMS}
    order = [ARMS if k % 2 == 0 else ARMS[::-1] for k in range(pairs)]
    with tqdm(total=2 * pairs, desc="bench allocator", disable=not progress) as bar:
        for arms in order:
            for arm in arms:
                results[arm].append(_arm(arm, specs, repeats))
                bar.update()
    held_state = results["held"][0]["allocator"]
    rows, ratios_all = [], []
    for name in specs:
        labels = list(results["held"][0]["runs"][name])
        held, system, cv = [], [], {a: [] for a in ARMS}
        for k in range(pairs):
            for label in labels:
                h = np.asarray(results["held"][k]["runs"][name][label])
                s = np.asarray(results["system"][k]["runs"][name][label])
                held.append(float(np.median(h)))
                system.append(float(np.median(s)))
                cv["held"].append(float(np.std(h) / np.mean(h)))
                cv["system"].append(float(np.std(s) / np.mean(s)))
        ratio = np.asarray(held) / np.asarray(system)
        ratios_all.extend(ratio.tolist())
        st = compare(ratio, np.ones_like(ratio))
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
    total = compare(np.asarray(ratios_all), np.ones(len(ratios_all)))
    summary = {
        "allocator_held": held_state,
        "process_pairs": pairs,
        "repeats": repeats,
        "paired_placements": total.n,
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
        f"placement the median of {repeats} timed runs after one warm-up. change: mean over "
        "pairs (process pair x placement) of held / system - 1, 95% bootstrap interval; "
        "better / worse / cannot tell by the interval. cv: median over placements of the "
        "timed runs' coefficient of variation.",
        "Placements: one device, round robin, "
        f"{RANDOM_PLACEMENTS} seeded random ones, on bench fidelity's CPU workloads.",
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
