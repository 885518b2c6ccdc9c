"""``doppler-lab simulate``: simulate one placement of a graph and report its makespan."""

from __future__ import annotations

import argparse

from ..house.errors import ConfigError
from ..house.progress import format_time, show_progress
from ..house.userfiles import add_force_output_argument, guard_outputs, html_page, json_document
from ..timing.sim import Simulator
from ._common import (
    add_cluster_arguments,
    add_graph_argument,
    add_placement_argument,
    add_semantics_argument,
    int_arg,
    number_arg,
    print_json,
    ratio_text,
    ratio_to_lower_bound,
    resolve_cluster,
    resolve_cost_model,
    resolve_placement,
    resolve_semantics,
)
from ._memory import add_memory_cap_argument, memory_fields, memory_lines, with_memory_args

NAME = "simulate"
HELP = "simulate a placement of a graph (paper, wc or bsp semantics)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_graph_argument(p)
    add_cluster_arguments(p)
    add_placement_argument(p)
    add_semantics_argument(p)
    p.add_argument(
        "--noise",
        type=number_arg(minimum=0, limit="MAX_NOISE"),
        default=0.0,
        help="sigma of lognormal duration noise (default 0)",
    )
    p.add_argument(
        "--seed",
        type=int_arg(0),
        default=0,
        help="seed for noise and random placements (default 0)",
    )
    p.add_argument(
        "--dispatch", choices=("fifo", "priority"), default="fifo", help="ready-op order (wc only)"
    )
    add_memory_cap_argument(p)
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--gantt", metavar="OUT.html", help="write an interactive Gantt chart")
    p.add_argument("--trace", metavar="OUT.json", help="write the trace as JSON")
    add_force_output_argument(p)


def run(args: argparse.Namespace) -> int:
    if args.noise < 0:
        raise ConfigError(f"--noise must be >= 0, got {args.noise}")
    guard_outputs(args, {"trace": json_document("doppler_lab.trace"), "gantt": html_page})
    from ..workloads.specs import graph_from_spec

    graph = graph_from_spec(args.graph)
    cluster = resolve_cluster(args, graph)
    semantics = resolve_semantics(args, graph)
    # a placer named by --placement keeps to --memory-cap as well
    capped = with_memory_args(cluster, args.memory_cap, args.memory_reserve)
    placement = resolve_placement(
        args.placement, graph, capped, seed=args.seed, progress=show_progress(args)
    )
    cost = resolve_cost_model(args, graph, cluster)
    sim = Simulator(graph, cluster, semantics, noise=args.noise, cost_model=cost)
    trace = sim.run(placement, seed=args.seed, dispatch=args.dispatch)
    lb = sim.lower_bound()
    result = {
        "graph": graph.name,
        "cluster": cluster.name,
        "placement": args.placement,
        "semantics": semantics,
        "noise": args.noise,
        "seed": args.seed,
        "num_nodes": graph.num_nodes,
        "num_compute_nodes": int(graph.compute_nodes.size),
        "num_devices": cluster.num_devices,
        "makespan": trace.makespan,
        "lower_bound": lb,
        "ratio_to_lower_bound": ratio_to_lower_bound(trace.makespan, lb),
        "num_transfers": trace.num_transfers,
        "utilisation": trace.utilisation().round(4).tolist(),
        **memory_fields(trace, cluster, args.memory_cap, args.memory_reserve),
    }
    if args.trace:
        from ..io.documents import save_trace

        save_trace(trace, args.trace)
    if args.gantt:
        from ..viz import write_gantt_html

        write_gantt_html(
            trace, graph, args.gantt, title=f"{graph.name} on {cluster.name} ({semantics})"
        )
    if args.json:
        print_json(result)
    else:
        print(
            f"{graph.name}: {graph.num_nodes} nodes on {cluster.name} ({cluster.num_devices} devices), "
            f"{semantics} semantics, placement {args.placement}"
        )
        secs = graph.compute_cost is None  # explicit costs are in the file's own units
        print(f"  makespan     {format_time(trace.makespan, secs)}")
        print(
            f"  lower bound  {format_time(lb, secs)}  (ratio {ratio_text(result['ratio_to_lower_bound'])})"
        )
        print(f"  transfers    {trace.num_transfers}")
        print(f"  utilisation  {' '.join(f'{u:.0%}' for u in result['utilisation'])}")
        for line in memory_lines(result):
            print(line)
        if args.gantt:
            print(f"  gantt        {args.gantt}")
    return 0
