"""``doppler-lab execute``: run one placement of an executable graph on real devices."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import numpy as np

from ..hardware.cluster import Cluster
from ..house.errors import ConfigError
from ..house.progress import format_seconds, format_time, note, show_progress, timer
from ..house.stats import MIN_PAIRS
from ..house.userfiles import add_force_output_argument, guard_outputs, html_page, json_document
from ..ir.graph import DataflowGraph
from ..ir.placement import Placement
from ..ir.trace import Trace
from ..timing.memory import format_bytes
from ._common import (
    add_graph_argument,
    add_placement_argument,
    int_arg,
    number_arg,
    print_json,
    resolve_cost_model,
    resolve_placement,
)
from ._memory import memory_fields, memory_lines

NAME = "execute"
HELP = "run a placement of an executable graph on real devices (CPU workers or CUDA GPUs)"

#: a command predicted to take longer than this on CPU workers suggests a smaller ``:scale=``
SUGGEST_SCALE_OVER_S = 60.0


def add_device_arguments(p: argparse.ArgumentParser) -> None:
    """``--cluster``, ``--devices`` and ``--threads``: which real devices to use."""
    p.add_argument(
        "--cluster",
        default="cpu",
        metavar="cpu|dist|cuda|FILE",
        help="cpu (worker threads, default), dist (a process per device; under torchrun, the "
        "job's ranks on every host), cuda (GPUs), cuda-shared (several devices per GPU), "
        "inline-strict (CPU stand-ins that check device residency as CUDA would), "
        "multihost:hosts=H,devices=K,..., or a cluster / calibration profile JSON",
    )
    p.add_argument(
        "--devices",
        type=int_arg(1, "MAX_DEVICES"),
        metavar="N",
        help="number of devices (default: 2-4 CPU workers, or all GPUs)",
    )
    p.add_argument(
        "--threads",
        type=int_arg(1, "MAX_THREADS"),
        metavar="N",
        help="intra-op threads per CPU device (default 1)",
    )


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_graph_argument(p)
    add_device_arguments(p)
    add_placement_argument(p)
    p.add_argument(
        "--repeats",
        type=int_arg(1, "MAX_REPEATS"),
        default=3,
        metavar="N",
        help="timed runs; the makespan is their median (default 3); with --against, the "
        "number of interleaved pairs",
    )
    p.add_argument(
        "--against",
        metavar="PLACEMENT",
        help="compare --placement (A) with this placement (B, as --placement takes it) by "
        "paired, interleaved runs (A B A B ...): prints A - B with its 95%% interval and the "
        "verdict (better, worse or cannot tell; a verdict needs 5 or more --repeats)",
    )
    p.add_argument(
        "--warmup",
        type=int_arg(0, "MAX_REPEATS"),
        default=1,
        metavar="N",
        help="untimed runs first (default 1)",
    )
    p.add_argument(
        "--dispatch",
        choices=("fifo", "priority", "simulated"),
        default="fifo",
        help="order of ready ops on a device: fifo (by readiness), priority (the placement's), "
        "or simulated (CPU workers: each device allocates and releases in the order of the "
        "simulated run, so its peak memory is the simulated peak; not work-conserving)",
    )
    p.add_argument(
        "--seed", type=int_arg(0), default=0, help="input seed and random placements (default 0)"
    )
    p.add_argument(
        "--timeout",
        type=number_arg(above=0, limit="MAX_SECONDS"),
        default=120.0,
        metavar="S",
        help="a run that takes longer fails (default 120)",
    )
    p.add_argument(
        "--check",
        action="store_true",
        help="compare the outputs with a single-device reference run",
    )
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument(
        "--gantt", metavar="OUT.html", help="write an interactive Gantt chart of the median run"
    )
    p.add_argument("--trace", metavar="OUT.json", help="write the measured trace as JSON")
    add_force_output_argument(p)
    p.add_argument(
        "--dry-run",
        action="store_true",
        help="print what the cost model predicts for this command (and a smaller :scale= when "
        "it is over a minute on CPU workers), then exit without running",
    )


def run(args: argparse.Namespace) -> int:
    from ..executor.factory import make_backend
    from ..executor.torchrun import TorchrunBackend, coordinate_or_serve, under_torchrun

    guard_outputs(args, {"trace": json_document("doppler_lab.trace"), "gantt": html_page})
    if not under_torchrun() or args.cluster in (
        "cpu",
        "cuda",
        "cuda-shared",
        "inline",
        "inline-strict",
    ):
        return _execute(args, args.cluster)
    # a rank of a torchrun job: rank 0 runs the command, the others serve it
    backend = make_backend(args.cluster, args.devices, args.threads)
    assert isinstance(backend, TorchrunBackend)
    code = coordinate_or_serve(backend, NAME, lambda: _execute(args, backend))
    return 0 if code is None else code


def _execute(args: argparse.Namespace, devices: Any) -> int:
    from ..executor import Executor
    from ..executor.runner import compare_outputs

    if args.repeats < 1 or args.warmup < 0:
        raise ConfigError(
            f"--repeats must be >= 1 and --warmup >= 0, got {args.repeats} and {args.warmup}"
        )
    if args.devices is not None and args.devices < 1:
        raise ConfigError(f"--devices must be >= 1, got {args.devices}")
    from ..workloads.specs import graph_from_spec

    graph = graph_from_spec(args.graph)
    with Executor(
        graph,
        devices,
        num_devices=args.devices,
        seed=args.seed,
        timeout_s=args.timeout,
        threads_per_device=args.threads,
    ) as ex:
        cluster = ex.cluster
        placement = resolve_placement(
            args.placement, graph, cluster, seed=args.seed, progress=show_progress(args)
        )
        sharing = ex.backend.sharing() if hasattr(ex.backend, "sharing") else None
        forecast = predict_command(args, graph, cluster, placement, sharing)
        simulated = _simulated_run(args, graph, cluster, placement)
        if args.dry_run:
            if args.json:
                print_json(forecast)
            else:
                print("\n".join(forecast_lines(forecast)))
            return 0
        for line in forecast_lines(forecast):
            note(f"execute: {line}", show_progress(args))
        if args.against is not None:
            return _compare(args, ex, graph, placement)
        result = ex.run(
            placement,
            repeats=args.repeats,
            warmup=args.warmup,
            dispatch=args.dispatch,
            keep_outputs=args.check,
            progress=show_progress(args),
            schedule=_schedule(args, graph, simulated),
        )
        info = ex.backend.describe()
    trace = result.trace
    out = {
        "graph": graph.name,
        "backend": info["backend"],
        "cluster": cluster.name,
        "placement": args.placement,
        "dispatch": args.dispatch,
        "seed": args.seed,
        "num_nodes": graph.num_nodes,
        "num_compute_nodes": int(graph.compute_nodes.size),
        "num_devices": cluster.num_devices,
        "repeats": args.repeats,
        "warmup": args.warmup,
        "makespan": result.makespan,
        "makespans": result.makespans_s.tolist(),
        "num_transfers": trace.num_transfers,
        "utilisation": trace.utilisation().round(4).tolist(),
        "threads_per_device": info.get("threads_per_device"),
        "predicted_s": forecast["predicted_s"],
        **memory_fields(trace, cluster, None),
        **_predicted_memory(trace, simulated),
    }
    if "cuda_max_memory_allocated_bytes" in trace.meta:
        out["cuda_max_memory_allocated_bytes"] = trace.meta["cuda_max_memory_allocated_bytes"]
    if args.check:
        from ..executor.torch_ops import reference_outputs

        reference_s = forecast["predicted_reference_s"]
        # an imported model's eager outputs, else the single-device run
        with timer("reference", reference_s, enabled=show_progress(args)):
            reference = reference_outputs(graph, seed=args.seed)
        match = compare_outputs(graph, result.outputs or {}, reference)
        out["outputs_match"] = match.ok
        out["max_abs_error"] = match.max_abs_error
        out["worst_output"] = match.worst
    if args.trace:
        from ..io.documents import save_trace

        save_trace(trace, args.trace)
    if args.gantt:
        _write_gantt(trace, graph, args.gantt, f"{graph.name} on {cluster.name} (measured)")
    if args.json:
        print_json(out)
    else:
        print(
            f"{graph.name}: {graph.num_nodes} nodes on {cluster.name} ({cluster.num_devices} {info['backend']} devices), placement {args.placement}"
        )
        print(
            f"  makespan     {format_time(result.makespan)}  (median of {args.repeats}; min {format_time(result.makespans_s.min())})"
        )
        print(f"  transfers    {trace.num_transfers}")
        print(f"  utilisation  {' '.join(f'{u:.0%}' for u in out['utilisation'])}")
        for line in memory_lines(out, peak="measured peak"):
            print(line)
        if out["peak_memory_gap"] is not None:
            sim = " ".join(format_bytes(b) for b in out["simulated_peak_memory_bytes"])
            print(
                f"  simulated    {sim}  (peak per device; the measured peaks differ by at most "
                f"{out['peak_memory_gap']:.1%})"
            )
        if args.check:
            print(
                f"  outputs      {'match' if out['outputs_match'] else 'DIFFER'} the reference (max abs error {out['max_abs_error']:.3g})"
            )
        if args.gantt:
            print(f"  gantt        {args.gantt}")
    return 0 if out.get("outputs_match", True) else 1


def _compare(args: argparse.Namespace, ex: Any, graph: DataflowGraph, placement: Placement) -> int:
    """``--against``: A (``--placement``) and B by interleaved pairs, and the verdict."""
    other = [f for f in ("check", "gantt", "trace") if getattr(args, f)]
    if other or args.dispatch == "simulated":
        what = f"--{other[0]}" if other else "--dispatch simulated"
        raise ConfigError(f"--against compares makespans only; {what} is for a single placement")
    against = resolve_placement(
        args.against, graph, ex.cluster, seed=args.seed, progress=show_progress(args)
    )
    runs = ex.compare(
        placement,
        against,
        pairs=args.repeats,
        warmup=args.warmup,
        dispatch=args.dispatch,
        progress=show_progress(args),
        seed=args.seed,
    )
    st = runs.stats
    out = {
        "graph": graph.name,
        "backend": ex.backend.describe()["backend"],
        "cluster": ex.cluster.name,
        "placement": args.placement,
        "against": args.against,
        "dispatch": args.dispatch,
        "pairs": args.repeats,
        "warmup": args.warmup,
        "makespans_a": runs.makespans_a_s.tolist(),
        "makespans_b": runs.makespans_b_s.tolist(),
        "median_a": float(np.median(runs.makespans_a_s)),
        "median_b": float(np.median(runs.makespans_b_s)),
        "difference": st.to_dict(),
        "verdict": st.verdict,
    }
    if args.json:
        print_json(out)
        return 0
    print(
        f"{graph.name} on {ex.cluster.name} ({ex.cluster.num_devices} {out['backend']} devices): "
        f"{args.placement} (A) against {args.against} (B), {args.repeats} interleaved pairs"
    )
    print(f"  A            {format_time(out['median_a'])}  (median)")
    print(f"  B            {format_time(out['median_b'])}  (median)")
    p = "n/a" if st.p_value is None else f"{st.p_value:.3g}"
    print(
        f"  A - B        {format_time(st.mean)}  ({st.confidence:.0%} interval "
        f"{format_time(st.low)} to {format_time(st.high)}; Wilcoxon p {p}; d_z {st.effect_size:.2f})"
    )
    why = {"better": "A is faster", "worse": "A is slower"}.get(
        st.verdict,
        f"fewer than {MIN_PAIRS} pairs" if st.n < MIN_PAIRS else "the interval holds zero",
    )
    print(f"  verdict      {st.verdict} ({why})")
    return 0


def _simulated_run(
    args: argparse.Namespace, graph: DataflowGraph, cluster: Cluster, placement: Placement
) -> Trace:
    """The simulated run this command is compared with (``wc``, the command's cost model and
    dispatch rule): its peak memory is the prediction, and ``--dispatch simulated`` replays it."""
    from ..timing.sim import Simulator

    dispatch = "fifo" if args.dispatch == "simulated" else args.dispatch
    model = resolve_cost_model(args, graph, cluster)
    return Simulator(graph, cluster, "wc", cost_model=model).run(placement, dispatch=dispatch)


def _schedule(args: argparse.Namespace, graph: DataflowGraph, simulated: Trace) -> Any:
    """``--dispatch simulated``: the replay of ``simulated``; else ``None``."""
    if args.dispatch != "simulated":
        return None
    from ..executor.replay import ReplaySchedule

    return ReplaySchedule.from_trace(graph, simulated)


def _predicted_memory(measured: Trace, simulated: Trace) -> dict[str, Any]:
    """``simulated_peak_memory_bytes`` per device and ``peak_memory_gap``: the largest
    ``|measured - simulated| / measured`` over devices (``None`` when nothing was counted)."""
    sim = simulated.peak_memory_bytes
    got = measured.peak_memory_bytes
    if sim is None or got is None or not np.any(np.asarray(got) > 0):
        return {"simulated_peak_memory_bytes": None, "peak_memory_gap": None}
    got, sim = np.asarray(got, dtype=np.float64), np.asarray(sim, dtype=np.float64)
    gap = np.abs(got - sim) / np.maximum(got, 1.0)
    return {"simulated_peak_memory_bytes": sim.tolist(), "peak_memory_gap": float(gap.max())}


def predict_command(
    args: argparse.Namespace,
    graph: DataflowGraph,
    cluster: Cluster,
    placement: Placement,
    sharing: Any = None,
) -> dict[str, Any]:
    """What the cost model predicts for this ``execute`` command (warm-up, timed runs and the
    ``--check`` reference), and a smaller ``:scale=`` of the workload when that is over
    :data:`SUGGEST_SCALE_OVER_S` on CPU workers."""
    from ..executor.cost import ExecutionPrediction, predict_execution
    from ..workloads.sizing import scale_within, with_scale

    def predict(g: DataflowGraph) -> ExecutionPrediction:
        return predict_execution(
            g,
            cluster,
            placement,
            runs=(args.warmup + args.repeats) * (2 if getattr(args, "against", None) else 1),
            reference=args.check,
            dispatch=args.dispatch,
            cost_model=resolve_cost_model(args, g, cluster),
            sharing=sharing,
        )

    p = predict(graph)
    calibrated = resolve_cost_model(args, graph, cluster) is not None
    out: dict[str, Any] = {
        "graph": args.graph,
        "cluster": cluster.name,
        "device_kind": cluster.devices[0].kind,
        "num_devices": cluster.num_devices,
        "calibrated": calibrated,
        "runs": p.runs,
        "flops_per_run": p.flops,
        "predicted_run_s": p.run_s,
        "predicted_reference_s": p.reference_s,
        "predicted_s": p.total_s,
        "suggested_spec": None,
        "suggested_predicted_s": None,
    }
    on_cpu = all(d.kind == "cpu" for d in cluster.devices)
    if on_cpu and p.total_s > SUGGEST_SCALE_OVER_S:
        smaller = scale_within(args.graph, lambda g: predict(g).total_s, SUGGEST_SCALE_OVER_S)
        if smaller is not None:
            out["suggested_spec"] = with_scale(args.graph, smaller[0])
            out["suggested_predicted_s"] = smaller[1]
    return out


def forecast_lines(f: dict[str, Any]) -> list[str]:
    """One or two lines for people from :func:`predict_command`."""
    flops = f["flops_per_run"]
    amount = f"{flops / 1e12:.3g} TFLOP" if flops >= 1e12 else f"{flops / 1e9:.3g} GFLOP"
    line = (
        f"the cost model predicts {format_seconds(f['predicted_s'])} for this command: "
        f"{f['runs']} run{'s' if f['runs'] > 1 else ''} of {format_seconds(f['predicted_run_s'])} "
        f"({amount} a run on {f['num_devices']} {f['device_kind']} devices)"
    )
    if f["predicted_reference_s"] > 0:
        line += f" + a {format_seconds(f['predicted_reference_s'])} reference run"
    if not f["calibrated"]:
        line += "; uncalibrated: `doppler-lab calibrate` measures this machine"
    lines = [line]
    if f["suggested_spec"]:
        lines.append(
            f"over a minute on CPU workers: try {f['suggested_spec']} "
            f"(predicted {format_seconds(f['suggested_predicted_s'])}) or fewer --repeats"
        )
    return lines


def _write_gantt(trace, graph, path: str, title: str) -> Path:  # noqa: ANN001 - lazy imports
    from ..viz.html import write_gantt_html

    return write_gantt_html(trace, graph, path, title=title, time_unit="s")
