"""``doppler-lab place GRAPH --placer NAME``: place a graph, simulate it, report or save it."""

from __future__ import annotations

import argparse
import math
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ..house.errors import ConfigError, WriteError
from ..house.progress import format_time, show_progress, timer
from ..house.userfiles import add_force_output_argument, guard_outputs, html_page, json_document
from ._common import (
    add_cluster_arguments,
    add_graph_argument,
    add_semantics_argument,
    int_arg,
    number_arg,
    print_json,
    ratio_text,
    ratio_to_lower_bound,
    resolve_cluster,
    resolve_semantics,
    source_label,
)
from ._compare import COMMAND_PLACER_FLAGS, PLACER_FLAGS, learned_note
from ._memory import add_memory_cap_argument, memory_fields, memory_lines, with_memory_args

if TYPE_CHECKING:
    from ..hardware.cluster import Cluster
    from ..ir.graph import DataflowGraph
    from ..ir.placement import Placement
    from ..ir.trace import Trace

NAME = "place"
HELP = "place a graph with a placer (cp, heft, exact, ...) and simulate the placement"


def exact_line(result: dict[str, Any], semantics: str, in_seconds: bool = True) -> str:
    """What the exact placer proved, said against its own model: the gap is between its
    schedule and its proven bound in the delay model (transfers without contention), not
    against the simulator's makespan printed above it."""
    verdict = (
        "proven optimal"
        if result["optimal"]
        else f"not proven optimal (solver status {result.get('status', '?')})"
    )
    own = result.get("schedule_makespan", math.nan)
    return (
        f"  exact: {verdict} in CP-SAT's own delay model (each device one op at a time, transfers "
        f"without link contention): schedule {format_time(own, in_seconds)}, proven bound "
        f"{format_time(result['bound'], in_seconds)}, "
        f"gap {result['gap']:.3%} between the two; the makespan above is the {semantics} "
        "simulator's, which the solver does not optimise"
    )


def _provenance(result: dict[str, Any], t: Any) -> str:
    """``the <winner's label>`` and, where another candidate placed otherwise, ``(runner-up:
    the <its label>, <its makespan>)``."""
    text = f"the {result['produced_by']}"
    if result.get("runner_up"):
        cost = result.get("runner_up_cost")
        shown = t(cost) if isinstance(cost, int | float) else "n/a"
        text += f" (runner-up: the {result['runner_up']}, {shown})"
    return text


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_graph_argument(p)
    from ..placers import available_placers

    p.add_argument(
        "--placer",
        required=True,
        metavar="NAME",
        help=f"one of: {', '.join(available_placers())}, optionally with options "
        "(NAME:key=value,...; doppler:proposals=none is the policy alone); several, "
        "comma-separated (cp,heft,doppler), compare them in one table",
    )
    add_cluster_arguments(p)
    add_semantics_argument(
        p, "simulator semantics for the makespan (and for search placers' objective)"
    )
    p.add_argument(
        "--noise",
        type=number_arg(minimum=0, limit="MAX_NOISE"),
        default=0.0,
        help="lognormal sigma of durations when simulating",
    )
    p.add_argument(
        "--budget",
        type=int_arg(limit="MAX_BUDGET"),
        metavar="N",
        help="simulator calls of search placers and doppler",
    )
    p.add_argument(
        "--time-limit",
        type=number_arg(limit="MAX_SECONDS"),
        metavar="S",
        help="seconds for the exact solver",
    )
    p.add_argument(
        "--seed", type=int_arg(0), default=0, help="seed of the placer and the simulator noise"
    )
    p.add_argument(
        "--checkpoint",
        metavar="CKPT",
        help="learned placers (doppler, placeto, gdp): a policy checkpoint or a shipped name",
    )
    p.add_argument(
        "-o",
        "--option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="another placer option (VALUE read as JSON when it parses), e.g. -o estimate=additive",
    )
    add_memory_cap_argument(p)
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument(
        "--out", metavar="FILE", help="write the placement (JSON, readable by simulate --placement)"
    )
    p.add_argument(
        "--gantt",
        metavar="OUT.html",
        help="write a Gantt chart of the simulated run (several placers: one chart each, one page)",
    )
    add_force_output_argument(p)


def parse_options(pairs: list[str], owner: str = "-o") -> dict[str, Any]:
    """``KEY=VALUE`` strings to a dict (:func:`doppler_lab.house.settings.parse_items`: numbers,
    booleans, JSON lists; ``NaN``, ``inf`` and ``1e400`` are errors)."""
    from ..house.settings import parse_items

    return parse_items(pairs, owner, "option")


def placer_arguments(
    name: str,
    args: argparse.Namespace,
    spec_options: dict[str, Any] | None = None,
    semantics: str | None = None,
) -> dict[str, Any]:
    """The options for placer ``name`` from the command line: those of its spec
    (``--placer NAME:key=value``, ``spec_options``), then ``-o`` and the flags that set a
    placer option (``--budget``, ``--time-limit``, ``--checkpoint``, and the command's own
    ``--semantics`` and ``--memory-cap``). An option given twice is refused with two values
    and harmless with one (:func:`~doppler_lab.house.settings.given_once`); ``semantics`` is
    the simulator's, given to a placer that takes it where nothing else said."""
    from ..house.settings import given_once
    from ..placers import placer_options

    accepted = placer_options(name)
    own_flags = [flag for flag, _, _ in COMMAND_PLACER_FLAGS]
    opts = dict(spec_options or {})
    owner = f"placer {name!r}: option"
    for key, value in parse_options(args.option, f"placer {name!r}").items():
        given_once(opts, key, value, f"in --placer {args.placer!r}", f"as -o {key}={value}", owner)
    if getattr(args, "checkpoint", None) == "":  # not the default policy
        raise ConfigError("--checkpoint is empty; expected a checkpoint file or a shipped name")
    for flag, key, value, shown in _flag_options(args):
        if key not in accepted:
            if flag in own_flags:  # the command's own; this placer has no such option
                continue
            raise ConfigError(
                f"placer {name!r} takes no {flag}"
                + (f"; its options: {', '.join(accepted) or 'none'}" if key != "checkpoint" else "")
            )
        there = f"as {key}={opts.get(key)} (in --placer or -o)"
        if key != "memory_cap":
            given_once(opts, key, value, there, f"as {flag} {shown}", owner)
        elif opts.get(key, "device") != "device":  # checked, never set: "device" reads the
            # capped cluster less its reserve, what the placer does without the option
            old = math.inf if opts[key] is None else opts[key]
            given_once({key: old}, key, value, there, f"as {flag} {shown}", owner)
    if "semantics" in accepted and "semantics" not in opts:
        opts["semantics"] = semantics or args.semantics
    if "progress" in accepted and "progress" not in opts:
        opts["progress"] = show_progress(args)
    return opts


def _flag_options(args: argparse.Namespace) -> list[tuple[str, str, Any, str]]:
    """The flags given that set a placer option: ``(flag, option, value, value as shown)``.

    Raises:
        ConfigError: ``--budget`` or ``--time-limit`` not positive.
    """
    from ..house.limits import format_bytes

    given = []
    for flag, attr, key in (*PLACER_FLAGS, *COMMAND_PLACER_FLAGS):
        value = getattr(args, attr, None)
        if value is None:
            continue
        if key in ("budget", "time_limit") and value <= 0:
            raise ConfigError(f"{flag} must be positive, got {value}")
        given.append((flag, key, value, format_bytes(value) if key == "memory_cap" else str(value)))
    return given


def run(args: argparse.Namespace) -> int:
    from ..placers import check_placer_size, get_placer, parse_placer_spec, split_placer_specs
    from ..timing.sim import Simulator

    if len(split_placer_specs(args.placer)) > 1:  # this function once per placer, one table
        from ._compare import run_compare

        return run_compare(args, run)
    # unknown names fail before the graph is built; ``NAME:key=value,...`` carries options
    name, spec_options = parse_placer_spec(args.placer)
    # never over an input, nor over a file that place did not write (house/userfiles.py)
    guard_outputs(args, {"out": json_document("doppler_lab.placement"), "gantt": html_page})
    from ..workloads.specs import graph_from_spec

    # a comparison builds the graph once and passes it in
    graph = graph_from_spec(args.graph) if isinstance(args.graph, str) else args.graph
    cluster = resolve_cluster(args, graph)
    # the placers keep to the devices' memory, less the runtime reserve
    cluster = with_memory_args(cluster, args.memory_cap, args.memory_reserve)
    semantics = resolve_semantics(args, graph)
    check_placer_size(name, graph, cluster)  # before a learned placer loads torch
    learned_note(name, show_progress(args))
    # with --semantics as given (None: not given), checked against the placer's own
    opts = placer_arguments(name, args, spec_options, semantics)
    args.semantics = semantics
    placer = get_placer(name, **opts)
    rng = np.random.default_rng(args.seed)
    t0 = time.perf_counter()
    schedule = None
    # a placer without its own bar gets a line counting the seconds once it passes 2 s
    ticking = show_progress(args) and "progress" not in opts
    ops = f"{args.placer}: placing {graph.compute_nodes.size:,} ops"
    with timer(ops, enabled=ticking, delay_s=2.0):
        if hasattr(placer, "schedule"):
            schedule = placer.schedule(graph, cluster, rng)
            placement = schedule.placement
        else:
            placement = placer.place(graph, cluster, rng)
    runtime = time.perf_counter() - t0
    placement.validate(graph, cluster.num_devices)
    sim = Simulator(graph, cluster, args.semantics, noise=args.noise)
    trace = sim.run(placement, seed=args.seed if args.noise > 0 else None)
    lower = sim.lower_bound()
    result: dict[str, Any] = {
        "placer": args.placer,
        "graph": graph.name,
        "cluster": cluster.name,
        "devices": cluster.num_devices,
        "semantics": args.semantics,
        "seed": args.seed,
        "options": opts,
        "placement": placement.device.tolist(),
        "makespan": trace.makespan,
        "lower_bound": lower,
        "ratio_to_lower_bound": ratio_to_lower_bound(trace.makespan, lower),
        "runtime_s": runtime,
        "sim_calls": placement.meta.get("sim_calls", 0),
        **memory_fields(trace, cluster, args.memory_cap, args.memory_reserve),
    }
    if schedule is not None:
        result["schedule_makespan"] = schedule.makespan
        result["schedule_model"] = schedule.model
    # the learned placers' candidates: the best rollout, the clustering, the best partition,
    # which one won
    keys = ("optimal", "bound", "gap", "status", "source", "rollout_cost", "clustering_cost")
    keys += ("memory_fit",)  # not by the static bound: simulated, repaired, packed, pipeline
    keys += ("produced_by", "runner_up", "runner_up_cost")  # what produced it, what came next
    for key in (*keys, "partition_cost", "memory_cost"):
        if key in placement.meta:
            result[key] = placement.meta[key]
    _write_outputs(args, result, placement, graph, cluster, trace, lower)
    if args.json:
        print_json(result)
        return 0
    _print_text(args, result, graph, cluster, schedule, trace, lower, runtime)
    return 0


def _write_outputs(
    args: argparse.Namespace,
    result: dict[str, Any],
    placement: Placement,
    graph: DataflowGraph,
    cluster: Cluster,
    trace: Trace,
    lower: float,
) -> None:
    """``--out`` (the placement document) and ``--gantt`` (the page); their paths into
    ``result``."""
    from ..io.documents import save_placement

    if args.out:
        try:
            save_placement(placement, args.out, graph, cluster.num_devices)
        except WriteError as exc:  # the placement is not lost: stdout gets its document
            print_json(placement.to_dict(graph, cluster.num_devices))
            raise WriteError(
                f"{exc}; the placement document was printed to stdout instead",
                exc.path,
                exc.errno,
            ) from None
        result["out"] = str(args.out)
    if args.gantt:
        from ..viz.html import write_gantt_html

        secs = graph.compute_cost is None  # modelled costs are seconds
        page = write_gantt_html(
            trace,
            graph,
            Path(args.gantt),
            title=f"{graph.name}: {args.placer} on {cluster.name} ({args.semantics})",
            subtitle=f"makespan {format_time(trace.makespan, secs)}, "
            f"lower bound {format_time(lower, secs)}",
        )
        result["gantt"] = str(page)


def _print_text(
    args: argparse.Namespace,
    result: dict[str, Any],
    graph: DataflowGraph,
    cluster: Cluster,
    schedule: Any,
    trace: Trace,
    lower: float,
    runtime: float,
) -> None:
    """The result in words: makespan, lower bound, memory, what produced it, files written."""
    secs = graph.compute_cost is None  # modelled costs are seconds; explicit ones the file's units

    def t(x: float) -> str:
        return format_time(x, secs)

    print(
        f"{args.placer} on {graph.name} ({cluster.name}, {args.semantics}): makespan {t(trace.makespan)}"
    )
    print(
        f"  lower bound {t(lower)} (ratio {ratio_text(result['ratio_to_lower_bound'])}), placer time {runtime:.3g} s"
    )
    if schedule is not None:
        print(f"  own schedule ({schedule.model}): {t(schedule.makespan)}")
    for line in memory_lines(result):
        print(line)
    if "memory_fit" in result:
        how = {
            "simulated": "its static bound exceeds a cap, its simulated peak fits",
            "repaired": "the placer's placement was over a cap and was repaired",
            "packed": "the placer's placement was over a cap: packed by memory instead",
            "pipeline": "the placer's placement was over a cap: pipeline stages instead",
        }[result["memory_fit"]]
        print(f"  memory fit   {how}")
    if "optimal" in result:
        print(exact_line(result, args.semantics, secs))
    others = [
        f"{label} {t(result[key])}"
        for key, label in (
            ("clustering_cost", "clustering"),
            ("partition_cost", "best partition"),
            ("memory_cost", "best memory baseline"),
        )
        if math.isfinite(result.get(key) or math.nan)
    ]
    if "source" in result and others:
        print(
            f"  best rollout {t(result['rollout_cost'])}, {', '.join(others)}: the "
            f"{source_label(result['source'])} won"
        )
    if result.get("produced_by"):
        print(f"  produced by  {_provenance(result, t)}")
    for key in ("out", "gantt"):
        if key in result:
            print(f"  wrote {result[key]}")
