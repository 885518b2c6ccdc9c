"""``doppler-lab bench executor``: dispatch overhead of the real executor, and workload runs.

Dispatch overhead is measured on chains of tiny ops (``add_scalar`` on one element, one chain
per device, no transfers), two ways:

- gaps: per device, ``(makespan - busy time) / ops`` -- what the executor adds between two ops
  beyond the measured op durations (the issue's definition);
- versus a plain loop: ``(executor wall per op) - (a plain sequential Python loop over the
  same compiled ops, per op)``, on one device; the loop has no scheduling, so this is the full
  price of the dispatcher, including its timing calls.

On the stream backends (``cuda``, ``cuda-shared``, ``inline``) each row also gives the host's
time per op, ``host_us_per_op``: the wall time of the dispatch loop (``host_loop_s`` of the
run, from its clock start to the last completion seen) over every op of the graph. With
several chains of tiny ops busy at once the host is the bottleneck, so this is what one op
costs the single dispatching thread (the per-device gap is then about ``devices x host - op``).

A ping-pong chain (every op on the other device) gives the cost of a cross-device hop (copy
lane plus two wake-ups). The workload table runs each generated workload under a few
placements and checks its outputs against the single-device reference.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm.auto import tqdm

from ...executor import Executor, make_backend
from ...executor.plan import compile_ops
from ...executor.profiling import (
    alternating_placement,
    chain_placement,
    device_gaps,
    parallel_capacity,
    tiny_chain_graph,
)
from ...executor.runner import compare_outputs
from ...executor.torch_ops import evaluate, input_seed, make_input
from ...ir.placement import round_robin, single_device
from ...placers import place
from ...workloads.specs import graph_from_spec
from ._report import write_report
from .fidelity import CPU_WORKLOADS, QUICK_WORKLOADS

#: targets of the issue, microseconds per op
TARGET_US = {"cpu": 30.0, "dist": 30.0, "cuda": 15.0, "cuda-shared": 15.0, "inline": float("inf")}


def plain_loop_us(backend: Any, graph: Any, repeats: int) -> float:
    """Per-op wall time of a plain loop over ``graph``'s ops on ``backend``'s device 0."""

    fns = compile_ops(graph)
    dev = backend.api.device(0) if hasattr(backend, "api") else torch.device("cpu")
    order = [int(v) for v in graph.topo_order if not graph.is_input[v]]
    preds = {v: [int(u) for u in graph.predecessors(v)] for v in order}
    cuda = dev.type == "cuda"
    times = []
    with torch.inference_mode():
        inputs = {
            int(u): make_input(graph.specs[u], input_seed(0, int(u)), dev)
            for u in np.flatnonzero(graph.is_input)
        }
        for rep in range(repeats + 1):
            vals = dict(inputs)
            if cuda:
                torch.cuda.synchronize(dev)
            t0 = time.perf_counter()
            for v in order:
                vals[v] = fns[v](*[vals[u] for u in preds[v]])
            if cuda:
                torch.cuda.synchronize(dev)
            if rep:  # the first pass warms up
                times.append(time.perf_counter() - t0)
    return float(np.median(times)) / len(order) * 1e6


def host_per_op(trace: Any, ops: int) -> dict[str, float]:
    """``{"host_us_per_op": ...}``: the dispatch loop's wall time of the run shown in
    ``trace`` over ``ops`` (stream backends; empty for the others)."""
    loop_s = trace.meta.get("host_loop_s")
    return {} if loop_s is None else {"host_us_per_op": float(loop_s) / max(ops, 1) * 1e6}


def dispatch_overhead(backend: Any, num_ops: int, repeats: int) -> list[dict[str, Any]]:
    """Rows of the dispatch table for ``backend`` (see the module notes)."""

    rows = []
    d = backend.num_devices
    cases = [(1, [0])] + ([(d, list(range(d)))] if d > 1 else [])
    for chains, devices in cases:
        g = tiny_chain_graph(num_ops, chains)
        with Executor(g, backend) as ex:
            r = ex.run(chain_placement(g, devices), repeats=repeats, warmup=2)
        t = r.trace
        per_dev = (g.num_nodes - 1) / chains
        busy = t.busy_time()[devices]
        gaps = (t.makespan - busy) / per_dev
        row: dict[str, Any] = {
            "backend": backend.name,
            "case": f"{chains} chain(s) on {chains} device(s), no transfers",
            "busy_devices": chains,
            "ops": int(g.num_nodes - 1),
            "makespan_ms": t.makespan * 1e3,
            "op_us": float(busy.sum() / (g.num_nodes - 1) * 1e6),
            "overhead_gaps_us": float(gaps.mean() * 1e6),
            "median_gap_us": float(np.median(np.concatenate(device_gaps(t, g))) * 1e6),
            "wall_per_op_us": t.makespan / per_dev * 1e6,
            **host_per_op(t, g.num_nodes - 1),
        }
        if chains == 1:
            loop = plain_loop_us(backend, g, repeats)
            row["plain_loop_us"] = loop
            row["overhead_vs_loop_us"] = row["wall_per_op_us"] - loop
        rows.append(row)
    if d > 1:
        g = tiny_chain_graph(min(num_ops, 400))
        with Executor(g, backend) as ex:
            r = ex.run(alternating_placement(g, [0, 1]), repeats=repeats, warmup=2)
        t = r.trace
        ops = g.num_nodes - 1
        rows.append(
            {
                "backend": backend.name,
                "case": "ping-pong: every op on the other device (a transfer per op)",
                "ops": int(ops),
                "makespan_ms": t.makespan * 1e3,
                "op_us": float(t.busy_time().sum() / ops * 1e6),
                "wall_per_op_us": t.makespan / ops * 1e6,
                "copy_us": float(np.median(t.transfer_end - t.transfer_start) * 1e6),
                "hop_us": float((t.makespan - t.busy_time().sum()) / ops * 1e6),
                **host_per_op(t, ops),
            }
        )
    return rows


def workload_rows(
    backend: Any, specs: Sequence[str], repeats: int, progress: bool
) -> list[dict[str, Any]]:
    """Each workload under single / round-robin / cp placements: makespans and output checks."""

    rows = []
    for spec in tqdm(specs, desc=f"workloads ({backend.name})", disable=not progress, leave=False):
        g = graph_from_spec(spec)
        ref = evaluate(g)
        pls = {
            "single": single_device(g, backend.num_devices),
            "round-robin": round_robin(g, backend.num_devices),
        }
        try:
            pls["cp"] = place("cp", g, backend.cluster, seed=0)
        except ImportError:  # pragma: no cover - the cp placer's solver is optional
            pass
        row: dict[str, Any] = {
            "backend": backend.name,
            "workload": spec,
            "ops": int(g.compute_nodes.size),
        }
        ok = True
        with Executor(g, backend) as ex:
            for name, pl in pls.items():
                r = ex.run(pl, repeats=repeats, warmup=1, keep_outputs=True)
                ok &= compare_outputs(g, r.outputs or {}, ref).ok
                row[f"{name}_ms"] = r.makespan * 1e3
        best = min(v for k, v in row.items() if k.endswith("_ms"))
        row["speedup_vs_single"] = row["single_ms"] / best
        row["outputs_match"] = ok
        rows.append(row)
    return rows


def run(
    out_dir: Path,
    quick: bool = False,
    backends: Sequence[str] | None = None,
    progress: bool = True,
) -> dict[str, Any]:
    """Run the benchmark on ``backends`` (default: cpu and dist, plus cuda when visible); write
    ``executor.{json,md}``."""

    if backends is None:
        backends = ["cpu", "dist"] + (["cuda"] if torch.cuda.is_available() else [])
    num_ops, repeats = (500, 3) if quick else (2000, 5)
    specs = list((QUICK_WORKLOADS if quick else CPU_WORKLOADS).values())
    dispatch_rows: list[dict[str, Any]] = []
    wl_rows: list[dict[str, Any]] = []
    t0 = time.perf_counter()
    for name in backends:
        be = make_backend(name, 2 if name in ("cpu", "dist", "inline", "cuda-shared") else None)
        try:
            dispatch_rows += dispatch_overhead(be, num_ops, repeats)
            wl_rows += workload_rows(
                be, specs if name != "inline" else specs[:1], repeats, progress
            )
        finally:
            be.close()
    summary: dict[str, Any] = {}
    for name in backends:
        mine = [r for r in dispatch_rows if r["backend"] == name and "overhead_gaps_us" in r]
        if mine:
            worst = max(r["overhead_gaps_us"] for r in mine)
            summary[f"{name}_dispatch_overhead_us"] = round(worst, 2)
            summary[f"{name}_overhead_vs_loop_us"] = round(mine[0]["overhead_vs_loop_us"], 2)
            summary[f"{name}_target_us"] = TARGET_US.get(name)
            summary[f"{name}_target_met"] = bool(worst <= TARGET_US.get(name, np.inf))
            host = [r["host_us_per_op"] for r in mine if "host_us_per_op" in r]
            if host:  # the dispatcher's cost per op, worst case (several devices busy)
                summary[f"{name}_host_us_per_op"] = round(max(host), 2)
    summary["all_outputs_match"] = bool(all(r["outputs_match"] for r in wl_rows))
    summary["seconds"] = round(time.perf_counter() - t0, 1)
    summary["load_average_1min"] = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    if any(b in ("cpu", "dist") for b in backends):
        summary["parallel_capacity"] = round(parallel_capacity(2), 2)
    dcols = [
        "backend",
        "case",
        "ops",
        "makespan_ms",
        "op_us",
        "overhead_gaps_us",
        "median_gap_us",
        "wall_per_op_us",
        "host_us_per_op",
        "plain_loop_us",
        "overhead_vs_loop_us",
        "copy_us",
        "hop_us",
    ]
    wcols = [
        "backend",
        "workload",
        "ops",
        "single_ms",
        "round-robin_ms",
        "cp_ms",
        "speedup_vs_single",
        "outputs_match",
    ]
    notes = [
        "overhead_gaps_us = (makespan - busy time of the device) / ops per device: the executor's time "
        "between two ops; the summary takes the worst case.",
        "overhead_vs_loop_us = executor wall per op - a plain Python loop over the same compiled ops "
        "(one device): the whole price of work-conserving dispatch and timing.",
        "host_us_per_op (stream backends) = wall time of the dispatch loop / ops of the graph: with "
        "tiny ops on several devices at once, the host's time per op.",
        "hop_us (ping-pong) = time per op beyond compute when every op waits for a copy from the other "
        "device: copy lane + two wake-ups.",
        "CPU devices are threads sharing this machine's cores (and the GIL for Python bookkeeping): with "
        "two devices running tiny ops, their Python work interleaves, so per-op times grow.",
    ]
    return write_report(
        out_dir,
        "executor",
        "Executor: dispatch overhead and workload runs",
        {"Dispatch overhead": (dispatch_rows, dcols), "Workloads": (wl_rows, wcols)},
        summary=summary,
        notes=notes,
        command=f"doppler-lab bench executor{' --quick' if quick else ''}",
    )
