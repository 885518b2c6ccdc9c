"""The measurements of ``doppler-lab gpu-check`` on a GPU machine (each a function returning
rows and a summary, so that the command stays a list of sections).

Sections (each imports only torch, numba and the package; no plot or notebook stack):

- :func:`dispatch_section`: executor overhead per op on ``cuda`` and ``cuda-shared``;
- :func:`fidelity_section`: the simulator against measured makespans of >= 12 placements of
  generated and imported workloads on ``cuda-shared``, under four cost models: the
  uncalibrated nominal GPU (:mod:`doppler_lab.hardware.gpu_specs`) with sharing, the calibrated profile
  alone (devices independent), the calibrated profile with sharing
  (:mod:`doppler_lab.timing.contention`), and the calibrated profile with its fitted host thread
  as a resource of the ``wc`` kernel (``host``: :mod:`doppler_lab.hardware.host`); the raw measurements (the calibration's and every
  timed run's) are kept for replay and refitting (:mod:`doppler_lab.timing.raw_data`);
- :func:`stage3_section`: Stage III (RL on the real system) from the shipped general policy;
- :func:`paper_size_section`: 10k-node Llama graphs under cp and doppler placements.

On a machine without CUDA (``--allow-cpu``) every section runs on CPU worker devices instead,
as a smoke test of the command.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import numpy as np
import torch
from tqdm.auto import tqdm

from ...executor import Executor, ExecutorCost
from ...executor.fidelity_runs import (
    Passes,
    measure_placements,
    median_rel_error,
    spearman,
    workload_row,
)
from ...executor.profiling import fit_fill_s, interference_probe, measure_calibration
from ...executor.runner import compare_outputs
from ...executor.torch_ops import evaluate
from ...ir.placement import Placement, random_placement, round_robin, single_device
from ...placers import place
from ...policies.pretrained import GENERAL_CHECKPOINT, resolve_checkpoint
from ...timing.contention import Sharing, contended_makespan
from ...timing.cost_model import CostModel
from ...timing.sim import Simulator
from ...train.loop import Trainer
from ...train.train_config import preset
from ...workloads.specs import graph_from_spec
from .executor import dispatch_overhead

#: fidelity workloads on cuda-shared: generated ones and an imported model (ops of tens of
#: microseconds to milliseconds on a data-centre GPU)
GPU_FIDELITY_WORKLOADS: dict[str, str] = {
    "chainmm": "chainmm:scale=0.25",
    "ffnn": "ffnn:scale=0.25",
    "llama_block": "llama_block:scale=0.25",
    "hf-llama": "hf-llama:layers=2,hidden=512,heads=8,seq=128,vocab=512",
}
#: the same on CPU workers (the --allow-cpu smoke run)
CPU_FIDELITY_WORKLOADS: dict[str, str] = {
    "chainmm": "chainmm:scale=0.03",
    "ffnn": "ffnn:scale=0.03",
    "llama_block": "llama_block:scale=0.03",
    "hf-llama": "hf-llama:layers=1,hidden=32,heads=2,seq=8,vocab=64",
}
#: the paper-sized graphs: Llama-2-7B dimensions on 2 x 2048 tokens, split into 10k+ ops
PAPER_SIZE: dict[str, str] = {
    "llama_block": "llama_block:blocks=8,seq_blocks=8",
    "llama_layer": "llama_layer:blocks=8,seq_blocks=8",
}
PAPER_SIZE_CPU: dict[str, str] = {
    "llama_block": "llama_block:scale=0.02,blocks=8,seq_blocks=8",
    "llama_layer": "llama_layer:scale=0.02,blocks=8,seq_blocks=8",
}
#: the dispatch target of the issue, microseconds per op
DISPATCH_TARGET_US = 15.0
SPEARMAN_TARGET = 0.8
UNCALIBRATED_WITHIN = 3.0


def dispatch_section(backends: Sequence[Any], num_ops: int = 500) -> dict[str, Any]:
    """Executor overhead per op on each backend (:func:`~doppler_lab.lab.bench.executor.dispatch_overhead`).

    Summary: ``worst_overhead_us``, the largest per-device gap (with ``k`` devices busy at once
    a device waits for the host's ``k`` launches, so it is about ``k x host - op``); and the
    host's own time per op, ``host_us_per_op_one_device`` and ``host_us_per_op_busy_devices``
    (the worst row with two or more devices busy at once: what ``host_target_met`` judges
    against ``target_us``).
    """

    rows: list[dict[str, Any]] = []
    for be in backends:
        for r in dispatch_overhead(be, num_ops, 3):
            rows.append({**r, "backend": f"{be.name}:{be.num_devices}"})
    worst = {r["backend"]: r["overhead_gaps_us"] for r in rows if "overhead_gaps_us" in r}

    def host(busy: bool) -> float | None:
        vals = [
            r["host_us_per_op"]
            for r in rows
            if "host_us_per_op" in r and "busy_devices" in r and (r["busy_devices"] > 1) == busy
        ]
        return round(max(vals), 2) if vals else None

    busy = host(True)
    summary = {
        "worst_overhead_us": round(max(worst.values()), 2) if worst else None,
        "target_us": DISPATCH_TARGET_US,
        "target_met": bool(worst and max(worst.values()) <= DISPATCH_TARGET_US),
        "host_us_per_op_one_device": host(False),
        "host_us_per_op_busy_devices": busy,
        "host_target_met": None if busy is None else bool(busy <= DISPATCH_TARGET_US),
    }
    return {"rows": rows, "summary": summary}


def sharing_of(backend: Any, host_s: float, fill_s: float) -> Any:
    """The :class:`~doppler_lab.timing.contention.Sharing` of a backend's devices (the stream
    backends' own; CPU workers: separate cores behind one host)."""

    if hasattr(backend, "sharing"):
        return backend.sharing(host_s, fill_s)
    return Sharing(tuple(range(backend.num_devices)), host_s=host_s, fill_s=fill_s)


def gpu_placements(graph: Any, cluster: Any, rng: np.random.Generator) -> list[Any]:
    """At least 12 placements of varied quality: single, round-robin, cp, heft, doppler
    (greedy rollout), uniform and skewed random, contiguous blocks, perturbed cp."""

    d, n = cluster.num_devices, graph.num_nodes
    out = [single_device(graph, d), round_robin(graph, d)]
    for name, opts in (
        ("cp", {}),
        ("heft", {}),
        ("doppler", {"samples": 0, "partitions": 0, "clustering": False}),
    ):
        p = place(name, graph, cluster, seed=0, **opts)
        out.append(Placement(p.device, placer=name))
    for _ in range(4):
        out.append(random_placement(graph, d, rng))
    for p0 in (0.6, 0.8, 0.9):
        dev = np.where(rng.random(n) < p0, 0, rng.integers(1, max(d, 2), n) % d)
        out.append(Placement(dev, placer=f"skewed{p0}").with_inputs_filled(graph))
    order = graph.topo_order[~graph.is_input[graph.topo_order]]
    for chunks in (2, 4):
        dev = np.zeros(n, dtype=np.int64)
        for i, part in enumerate(np.array_split(order, chunks)):
            dev[part] = i % d
        out.append(Placement(dev, placer=f"blocks{chunks}").with_inputs_filled(graph))
    dev = out[2].device.copy()
    flip = rng.random(n) < 0.2
    dev[flip] = rng.integers(0, d, int(flip.sum()))
    out.append(Placement(dev, placer="cp~0.2").with_inputs_filled(graph))
    return out


def fidelity_section(
    backend: Any,
    specs: dict[str, str],
    quick: bool = False,
    progress: bool = False,
    rounds: int = 2,
) -> dict[str, Any]:
    """Calibrate ``backend``, then predict and measure placements of each workload."""

    t0 = time.perf_counter()

    graphs = {k: graph_from_spec(s) for k, s in specs.items()}
    measured_cal = measure_calibration(
        backend, list(graphs.values()), name=f"{backend.cluster.name}-gpu-check", quick=quick
    )
    fitted = measured_cal.fit()  # with its host thread (doppler_lab.hardware.host), if it binds
    profile = replace(fitted, host=None)  # today's model: the host only through the sharing
    host_s = float(np.median(profile.dispatch_s)) if profile.dispatch_s else 0.0
    cuda = backend.name == "cuda"
    probe = interference_probe(
        backend, (64, 256, 1024, 2048, 4096) if cuda else (16, 64), length=40 if cuda else 8
    )
    gpus = len(set(sharing_of(backend, host_s, 1.0).gpu_of))
    fill_s = fit_fill_s(probe, host_s, gpus)
    sharing = sharing_of(backend, host_s, fill_s)
    nominal = backend.cluster  # the uncalibrated description (nominal GPU rates)
    nominal_sharing = sharing_of(backend, nominal.devices[0].launch_overhead_s, fill_s)
    rng = np.random.default_rng(0)
    rows, raw = [], {}
    labels = ("nominal", "calibrated", "shared", "host")
    pooled: dict[str, list[float]] = {k: [] for k in ("measured", *labels)}
    for name, g in tqdm(graphs.items(), desc="fidelity", disable=not progress, leave=False):
        pls = gpu_placements(g, profile.cluster, rng)
        cal = profile.cost_model(g)
        passes = Passes(repeats=3, warmup=1, rounds=rounds)
        op_traces: list[dict[str, Any]] = []
        samples, counts = measure_placements(
            g, backend, pls, passes, rng, progress, op_traces=op_traces
        )
        measured = np.median(samples, axis=1)
        pred = {
            "nominal": np.array(
                [
                    contended_makespan(g, nominal, CostModel(g, nominal), p, nominal_sharing)
                    for p in pls
                ]
            ),
            "calibrated": Simulator(g, profile.cluster, "wc", cost_model=cal).makespans(pls),
            "shared": np.array(
                [contended_makespan(g, profile.cluster, cal, p, sharing) for p in pls]
            ),
            "host": Simulator(g, fitted.cluster, "wc", cost_model=fitted.cost_model(g)).makespans(
                pls
            ),
        }
        row: dict[str, Any] = {
            **workload_row(name, specs[name], g, len(pls), measured),
            "coverage": round(profile.coverage(g), 3),
        }
        for label, p in pred.items():
            row[f"spearman_{label}"] = round(spearman(p, measured), 3)
            row[f"mre_{label}"] = round(median_rel_error(p, measured), 3)
            pooled[label] += p.tolist()
        ratio = pred["nominal"] / measured
        row["nominal_ratio_min"] = round(float(ratio.min()), 3)
        row["nominal_ratio_max"] = round(float(ratio.max()), 3)
        pooled["measured"] += measured.tolist()
        rows.append(row)
        raw[name] = {
            "spec": specs[name],
            "placements": [
                {"placer": p.placer, "device": np.asarray(p.device).tolist()} for p in pls
            ],
            "measured_s": samples.tolist(),
            "predicted_s": {k: v.tolist() for k, v in pred.items()},
            "runs": counts,
            "op_traces": op_traces,
        }
    m = np.array(pooled["measured"])
    summary: dict[str, Any] = {"backend": f"{backend.name}:{backend.num_devices}"}
    for label in labels:
        p = np.array(pooled[label])
        summary[f"{label}_spearman_pooled"] = round(spearman(p, m), 3)
        summary[f"{label}_spearman_mean"] = round(
            float(np.mean([r[f"spearman_{label}"] for r in rows])), 3
        )
        summary[f"{label}_mre"] = round(median_rel_error(p, m), 3)
    ratio = np.array(pooled["nominal"]) / m
    summary["nominal_within_x"] = round(float(max(ratio.max(), 1 / ratio.min())), 2)
    summary["nominal_target_met"] = bool(summary["nominal_within_x"] <= UNCALIBRATED_WITHIN)
    summary["spearman_target"] = SPEARMAN_TARGET
    summary["spearman_target_met"] = bool(summary["shared_spearman_mean"] >= SPEARMAN_TARGET)
    fit = profile.meta.get("fit")
    summary["roofline_median_rel_error"] = (
        fit.get("roofline_median_rel_error") if isinstance(fit, dict) else None
    )
    summary["fill_us"] = round(fill_s * 1e6, 2)
    summary["host_us"] = round(host_s * 1e6, 2)
    summary["seconds"] = round(time.perf_counter() - t0, 1)
    return {
        "rows": rows,
        "summary": summary,
        "probe": probe,
        "raw": raw,
        "calibration": measured_cal,
        "profile": fitted,
        "sharing": sharing.to_dict(),
    }


def stage3_section(
    backend: Any, spec: str, episodes: int, out_dir: Any, progress: bool = False
) -> dict[str, Any]:
    """Greedy placement of the shipped general policy measured, ``episodes`` of Stage III on
    ``backend``, the greedy placement of the result measured; cp measured beside them."""

    t0 = time.perf_counter()

    g = graph_from_spec(spec)
    cluster = backend.cluster
    greedy = {"samples": 0, "partitions": 0, "clustering": False}
    init = resolve_checkpoint(GENERAL_CHECKPOINT)
    before = place("doppler", g, cluster, seed=0, checkpoint=str(init), **greedy)
    cp = place("cp", g, cluster, seed=0)
    with Executor(g, backend) as ex:
        cost = ExecutorCost(g, ex, repeats=5, warmup=1)
        before_s, cp_s = cost(before), cost(cp)
        config = preset("real", episodes=episodes, episodes_per_update=4, repeats=3)
        result = Trainer(
            config,
            [g],
            cluster,
            None,
            out_dir,
            init=init,
            cost_fns=[ExecutorCost(g, ex, repeats=3, warmup=1)],
            progress=progress,
        ).run()
        after = place("doppler", g, cluster, seed=0, checkpoint=str(result.checkpoint), **greedy)
        after_s = cost(after)
    summary = {
        "graph": spec,
        "ops": int(g.compute_nodes.size),
        "episodes": episodes,
        "greedy_before_ms": round(before_s * 1e3, 4),
        "greedy_after_ms": round(after_s * 1e3, 4),
        "best_seen_ms": round(float(min(result.summary["best_cost"].values())) * 1e3, 4),
        "cp_ms": round(cp_s * 1e3, 4),
        "seconds": round(time.perf_counter() - t0, 1),
    }
    return {"summary": summary}


def _output_check(graph: Any, outputs: Any, ref: Any) -> dict[str, Any]:

    if ref is None:
        return {"outputs_match": None}
    check = compare_outputs(graph, outputs or {}, ref)
    rel = None
    if check.worst is not None and check.worst in graph.names:
        v = graph.names.index(check.worst)
        if v in ref:
            rel = float(check.max_abs_error / max(float(ref[v].abs().max()), 1e-30))
    return {
        "outputs_match": bool(check.ok),
        "max_abs_error": float(check.max_abs_error),
        "max_rel_error": rel,
        "worst_output": check.worst,
    }


def _loop_per_op_us(trace: Any, ops: int) -> float | None:
    """The dispatch loop's wall time per op of the run shown (stream backends), else None."""
    loop_s = trace.meta.get("host_loop_s")
    return None if loop_s is None else round(float(loop_s) / max(ops, 1) * 1e6, 2)


def paper_size_section(backend: Any, specs: dict[str, str], check: bool = True) -> dict[str, Any]:
    """Each 10k-node graph under cp and doppler placements: measured makespan, executor
    overhead per op, outputs against a single-device reference on the first device.

    Host time per op, two ways: ``host_wall_per_op_us``, the wall time of the whole
    ``Executor.run`` (a warm-up and two timed runs, with the plan, the traces and the output
    copy) over three runs' ops; ``host_loop_per_op_us``, the dispatch loop of the run shown
    over its ops (while the GPUs are the bottleneck the loop waits on them, so this bounds
    the host's cost per op from above; the dispatch section's tiny ops measure the cost).
    """

    rows = []
    for name, spec in specs.items():
        g = graph_from_spec(spec)
        ops = int(g.compute_nodes.size)
        pls = {}
        for placer in ("cp", "doppler"):
            t = time.perf_counter()
            pls[placer] = (place(placer, g, backend.cluster, seed=0), time.perf_counter() - t)
        ref = None
        if check:
            dev = backend.api.device(0) if hasattr(backend, "api") else torch.device("cpu")
            ref = {k: v.cpu() for k, v in evaluate(g, device=dev).items()}
        with Executor(g, backend) as ex:
            for placer, (pl, place_s) in pls.items():
                t = time.perf_counter()
                r = ex.run(pl, repeats=2, warmup=1, keep_outputs=check)
                wall = time.perf_counter() - t
                tr = r.trace
                busy = tr.busy_time()
                per_dev = np.bincount(tr.device[g.compute_nodes], minlength=tr.num_devices)
                k = int(np.argmax(per_dev))
                rows.append(
                    {
                        "graph": name,
                        "spec": spec,
                        "nodes": int(g.num_nodes),
                        "ops": ops,
                        "placement": placer,
                        "place_s": round(place_s, 2),
                        "makespan_ms": round(tr.makespan * 1e3, 3),
                        "busiest_device_ops": int(per_dev[k]),
                        "overhead_per_op_us": round(
                            float((tr.makespan - busy[k]) / max(per_dev[k], 1) * 1e6), 2
                        ),
                        "host_wall_per_op_us": round(wall / 3 / ops * 1e6, 2),
                        "host_loop_per_op_us": _loop_per_op_us(tr, ops),
                        "transfers": int(tr.transfer_src.size),
                        **_output_check(g, r.outputs, ref),
                    }
                )
    return {"rows": rows}


__all__ = [
    "GPU_FIDELITY_WORKLOADS",
    "PAPER_SIZE",
    "dispatch_section",
    "fidelity_section",
    "gpu_placements",
    "paper_size_section",
    "stage3_section",
]
