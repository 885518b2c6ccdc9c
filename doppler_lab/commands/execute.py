"""``doppler-lab execute``: run one placement of an executable graph on real devices."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..errors import ConfigError
from ._common import (
    add_graph_argument,
    add_placement_argument,
    int_arg,
    number_arg,
    print_json,
    resolve_graph,
    resolve_placement,
)

NAME = "execute"
HELP = "run a placement of an executable graph on real devices (CPU workers or CUDA GPUs)"


def add_device_arguments(p: argparse.ArgumentParser) -> None:
    """``--cluster``, ``--devices`` and ``--threads``: which real devices to use."""
    p.add_argument(
        "--cluster",
        default="cpu",
        metavar="cpu|dist|cuda|FILE",
        help="cpu (worker threads, default), dist (a process per device), cuda (GPUs), "
        "cuda-shared (several devices per GPU), or a cluster / calibration profile JSON",
    )
    p.add_argument(
        "--devices",
        type=int_arg(1),
        metavar="N",
        help="number of devices (default: 2-4 CPU workers, or all GPUs)",
    )
    p.add_argument(
        "--threads",
        type=int_arg(1),
        metavar="N",
        help="intra-op threads per CPU device (default 1)",
    )


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_graph_argument(p)
    add_device_arguments(p)
    add_placement_argument(p)
    p.add_argument(
        "--repeats",
        type=int_arg(1),
        default=3,
        metavar="N",
        help="timed runs; the makespan is their median (default 3)",
    )
    p.add_argument(
        "--warmup", type=int_arg(0), default=1, metavar="N", help="untimed runs first (default 1)"
    )
    p.add_argument(
        "--dispatch",
        choices=("fifo", "priority"),
        default="fifo",
        help="order of ready ops on a device",
    )
    p.add_argument(
        "--seed", type=int_arg(0), default=0, help="input seed and random placements (default 0)"
    )
    p.add_argument(
        "--timeout",
        type=number_arg(above=0),
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


def run(args: argparse.Namespace) -> int:
    from ..executor import Executor
    from ..executor.runner import compare_outputs

    if args.repeats < 1 or args.warmup < 0:
        raise ConfigError(
            f"--repeats must be >= 1 and --warmup >= 0, got {args.repeats} and {args.warmup}"
        )
    if args.devices is not None and args.devices < 1:
        raise ConfigError(f"--devices must be >= 1, got {args.devices}")
    graph = resolve_graph(args.graph)
    with Executor(
        graph,
        args.cluster,
        num_devices=args.devices,
        seed=args.seed,
        timeout_s=args.timeout,
        threads_per_device=args.threads,
    ) as ex:
        cluster = ex.cluster
        placement = resolve_placement(args.placement, graph, cluster, seed=args.seed)
        result = ex.run(
            placement,
            repeats=args.repeats,
            warmup=args.warmup,
            dispatch=args.dispatch,
            keep_outputs=args.check,
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
    }
    if args.check:
        from ..executor.torch_ops import reference_outputs

        match = compare_outputs(
            graph, result.outputs or {}, reference_outputs(graph, seed=args.seed)
        )
        out["outputs_match"] = match.ok
        out["max_abs_error"] = match.max_abs_error
        out["worst_output"] = match.worst
    if args.trace:
        from ..io import save_trace

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
            f"  makespan     {result.makespan:.6g} s  (median of {args.repeats}; min {result.makespans_s.min():.6g})"
        )
        print(f"  transfers    {trace.num_transfers}")
        print(f"  utilisation  {' '.join(f'{u:.0%}' for u in out['utilisation'])}")
        if args.check:
            print(
                f"  outputs      {'match' if out['outputs_match'] else 'DIFFER'} the reference (max abs error {out['max_abs_error']:.3g})"
            )
        if args.gantt:
            print(f"  gantt        {args.gantt}")
    return 0 if out.get("outputs_match", True) else 1


def _write_gantt(trace, graph, path: str, title: str) -> Path:  # noqa: ANN001 - lazy imports
    from ..viz.gantt import gantt
    from ..viz.html import HtmlReport

    report = HtmlReport(title)
    report.figure(gantt(trace, graph, title=title, time_unit="s"))
    return report.write(path)
