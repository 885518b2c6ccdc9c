"""``doppler-lab place GRAPH --placer cp,heft,doppler``: several placers on one graph, one table.

Each placer runs exactly as ``place --placer NAME --json`` would (the same function, so the same
numbers); the comparison prints one table (makespan in one unit, ratio to the lower bound, the
placer's own time, what produced the result), ``--json`` prints the list of the single runs'
objects, and ``--gantt OUT.html`` writes one page with a chart per placer on a shared time axis.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import math
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from ..house.errors import ConfigError
from ..house.progress import note, show_progress
from ._common import print_json, ratio_text, resolve_cluster, source_label

#: ``(scale, unit)`` a column of makespans in seconds may take, largest first
SECOND_UNITS: tuple[tuple[float, str], ...] = ((1.0, "s"), (1e-3, "ms"), (1e-6, "us"), (1e-9, "ns"))


def placer_names(text: str) -> dict[str, str]:
    """The placers of ``--placer``: one name, or a comma-separated list (each known and once);
    a name may carry options (``doppler:proposals=none``,
    :func:`~doppler_lab.placers.registry.parse_placer_spec`). Each spec as given, to its
    placer's name (``doppler:proposals=none`` -> ``doppler``), read once.

    Raises:
        ConfigError: an empty item or a name given twice.
        PlacementError: an unknown placer (naming the choices).
    """
    from ..placers import parse_placer_spec, split_placer_specs

    specs = split_placer_specs(text)
    names = {}
    for spec in specs:
        if not spec:
            raise ConfigError(f"--placer {text!r} has an empty name; expected NAME[,NAME...]")
        names[spec] = parse_placer_spec(spec)[0]
    twice = sorted({s for s in specs if specs.count(s) > 1})
    if twice:
        raise ConfigError(f"--placer {text!r} names {twice[0]!r} twice; give each placer once")
    return names


def learned_loaded() -> bool:
    """Whether the learned placers' module (and so torch) is loaded in this process."""
    from ..placers.registry import LEARNED_MODULE

    return LEARNED_MODULE in sys.modules


def learned_note(name: str, enabled: bool) -> None:
    """One line on stderr before learned placer ``name`` (a registered name, no options)
    first loads (torch and its policy: a few seconds); nothing for the other placers or once
    it is loaded."""
    from ..placers.registry import placer_spec

    if placer_spec(name).kind == "learned" and not learned_loaded():
        note(f"{name}: loading torch and the learned policy (a few seconds) ...", enabled)


def column_unit(values: Sequence[float], time_unit: str) -> tuple[float, str]:
    """One ``(scale, unit)`` for a column of makespans in a graph's ``time_unit``: for seconds
    the largest of s, ms, us, ns that keeps the smallest finite value at 1 or more; any other
    unit (the paper's and random graphs' cost units) as it is."""
    if time_unit != "s":
        return 1.0, time_unit
    finite = [abs(v) for v in values if math.isfinite(v) and v != 0]
    low = min(finite, default=1.0)
    for scale, unit in SECOND_UNITS:
        if low >= scale:
            return scale, unit
    return SECOND_UNITS[-1]


def fixed(value: float, digits: int = 4) -> str:
    """``value`` with ``digits`` significant figures and never an exponent (``83.22``,
    ``1900084``, ``0.0123``); ``nan``/``inf`` as Python writes them."""
    if not math.isfinite(value):
        return str(value)
    if value == 0:
        return "0"
    decimals = max(0, digits - 1 - math.floor(math.log10(abs(value))))
    return f"{value:.{decimals}f}"


def produced_by(result: dict[str, Any]) -> str:
    """What produced a single run's placement, in words: its ``produced_by`` when it has one,
    else the learned placers' winning proposal, the exact solver's verdict; a memory fit; else
    the placer itself."""
    if result.get("produced_by"):  # the placement's own account, where it gives one
        what = str(result["produced_by"])
    elif "source" in result:
        what = source_label(result["source"])
    elif "optimal" in result:
        what = "proven optimal" if result["optimal"] else "not proven optimal"
    else:
        what = f"{result['placer']} placement"
    fit = result.get("memory_fit")
    return f"{what} ({fit} to fit memory)" if fit else what


def table_rows(results: Sequence[dict[str, Any]], time_unit: str) -> list[dict[str, str]]:
    """The comparison table: placer, makespan (one unit, named in the header), ratio to the
    lower bound, the placer's own time (s) and what produced the result."""
    scale, unit = column_unit([r["makespan"] for r in results], time_unit)
    return [
        {
            "placer": r["placer"],
            f"makespan ({unit})": fixed(r["makespan"] / scale),
            "ratio to lower bound": ratio_text(r["ratio_to_lower_bound"]),
            "placer time (s)": fixed(r["runtime_s"], 3),
            "result from": produced_by(r),
        }
        for r in results
    ]


def format_table(rows: Sequence[dict[str, str]]) -> list[str]:
    """Rows as aligned text lines under a header (numbers right-aligned, words left)."""
    cols = list(rows[0])
    width = {c: max(len(c), *(len(r[c]) for r in rows)) for c in cols}
    words = {"placer", "result from"}

    def line(cells: dict[str, str]) -> str:
        return "  ".join(
            cells[c].ljust(width[c]) if c in words else cells[c].rjust(width[c]) for c in cols
        ).rstrip()

    return [line({c: c for c in cols}), *(line(r) for r in rows)]


#: ``place``'s placer options: ``(flag, attribute, the placer option it sets)``
PLACER_FLAGS: tuple[tuple[str, str, str], ...] = (
    ("--budget", "budget", "budget"),
    ("--time-limit", "time_limit", "time_limit"),
    ("--checkpoint", "checkpoint", "checkpoint"),
)
#: ``place``'s own options that also set an option of the placers that take it
COMMAND_PLACER_FLAGS: tuple[tuple[str, str, str], ...] = (
    ("--semantics", "semantics", "semantics"),
    ("--memory-cap", "memory_cap", "memory_cap"),
)


def per_placer_options(
    args: argparse.Namespace, names: Mapping[str, str]
) -> dict[str, dict[str, Any]]:
    """Each placer's share of the placer options (``--budget``, ``--time-limit``,
    ``--checkpoint``, ``-o KEY=VALUE``): the ones it takes, as namespace fields; ``names``
    are :func:`placer_names`' (each spec to its placer).

    Raises:
        ConfigError: an option that no placer of the list takes.
    """
    from ..placers import placer_options

    takes = {spec: set(placer_options(name)) for spec, name in names.items()}
    own: dict[str, dict[str, Any]] = {name: {"option": []} for name in names}
    given = [(flag, attr, key) for flag, attr, key in PLACER_FLAGS if getattr(args, attr, None)]
    given += [(f"-o {item}", None, item.partition("=")[0].strip()) for item in args.option]
    for flag, attr, key in given:
        users = [name for name in names if key in takes[name]]
        if not users:
            raise ConfigError(
                f"{flag}: no placer of --placer {args.placer!r} takes {key!r}; expected it for "
                "at least one of them"
            )
        for name in names:
            if attr is None:
                if name in users:
                    own[name]["option"].append(flag[3:])
            elif name not in users:
                own[name][attr] = None
    return own


def _run_one(run: Callable[[argparse.Namespace], int], args: argparse.Namespace, name: str):
    """``place --placer NAME --json`` on ``args``' graph: its JSON object."""
    sub = argparse.Namespace(**{**vars(args), "placer": name, "json": True, "gantt": None})
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        run(sub)
    return json.loads(out.getvalue())


def _gantt_page(args: argparse.Namespace, graph, results: list[dict[str, Any]], path: str) -> Path:
    """One page: the table, then the placers' Gantt charts stacked on one time axis."""
    import numpy as np

    from ..ir.placement import Placement
    from ..timing.sim import Simulator
    from ..viz.gantt import compare_gantt
    from ..viz.html import HtmlReport

    cluster = resolve_cluster(args, graph)
    if args.memory_cap is not None:
        cluster = cluster.with_memory(args.memory_cap)
    sim = Simulator(graph, cluster, results[0]["semantics"], noise=args.noise)
    traces = {
        r["placer"]: sim.run(
            Placement(np.asarray(r["placement"])), seed=args.seed if args.noise > 0 else None
        )
        for r in results
    }
    title = f"{graph.name} on {cluster.name} ({results[0]['semantics']})"
    report = HtmlReport(f"{title}: {', '.join(traces)}")
    report.table(table_rows(results, graph.time_unit))
    report.figure(compare_gantt(traces, graph, title=title))
    return report.write(path)


def run_compare(args: argparse.Namespace, run: Callable[[argparse.Namespace], int]) -> int:
    """``place`` with several placers: ``run`` (``place``'s own) once per placer with
    ``--json``; then one table, one JSON list or one Gantt page.

    Raises:
        ConfigError: ``--out`` (one placement file) with several placers, or a bad name.
    """
    names = placer_names(args.placer)
    if args.out:
        raise ConfigError(
            f"--out writes one placement, and --placer {args.placer!r} names {len(names)}; "
            "give one placer with --out, or use --json for all of them"
        )
    from ..house.userfiles import guard_outputs, html_page
    from ..placers import check_placer_size, placer_spec
    from ..workloads.specs import graph_from_spec

    guard_outputs(args, {"gantt": html_page})  # never over an input or a file not ours
    graph = graph_from_spec(args.graph)  # once, for every placer
    cluster = resolve_cluster(args, graph)
    for name in names.values():  # each placer's size before any of them runs
        check_placer_size(name, graph, cluster)
    shown = show_progress(args)
    for name in names.values():
        learned_note(name, shown)
    own = per_placer_options(args, names)
    results = []
    for i, (spec, name) in enumerate(names.items(), 1):
        if placer_spec(name).kind in ("search", "exact"):  # the ones that may take a while
            note(f"placing with {spec} ({i} of {len(names)}) ...", shown)
        sub = argparse.Namespace(**{**vars(args), "graph": graph, **own[spec]})
        results.append(_run_one(run, sub, spec))
    if args.gantt:
        page = str(_gantt_page(args, graph, results, args.gantt))
        for r in results:
            r["gantt"] = page
    if args.json:
        print_json(results)
        return 0
    first = results[0]
    scale, unit = column_unit([first["lower_bound"]], graph.time_unit)
    print(
        f"{first['graph']} on {first['cluster']} ({first['semantics']}): lower bound "
        f"{fixed(first['lower_bound'] / scale)} {unit}"
    )
    for line in format_table(table_rows(results, graph.time_unit)):
        print(line)
    if args.gantt:
        print(f"wrote {results[0]['gantt']}")
    return 0
