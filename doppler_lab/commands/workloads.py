"""``doppler-lab workloads list|build``: the workload generators and their default sizes, and
the model zoo (:mod:`doppler_lab.importers.zoo`)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from ..house.errors import ConfigError
from ..house.userfiles import add_force_output_argument, guard_outputs, json_document
from ._common import print_json

NAME = "workloads"
HELP = "list the workload generators, or build one into a graph JSON file"


def add_arguments(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="action", metavar="ACTION")
    sub.required = True
    lp = sub.add_parser(
        "list", help="names, summaries and default sizes (nodes, edges, depth); the model zoo"
    )
    lp.add_argument("--json", action="store_true", help="print JSON instead of a table")
    bp = sub.add_parser("build", help="build a workload and write its graph JSON")
    bp.add_argument(
        "name",
        metavar="NAME",
        help="a workload spec: NAME or NAME:key=value,... (README, 'Graph and cluster specs')",
    )
    bp.add_argument(
        "--param",
        "-p",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a generator parameter (repeatable)",
    )
    bp.add_argument(
        "--out", required=True, metavar="FILE.json", help="where to write the graph (a .json file)"
    )
    add_force_output_argument(bp)


def _sizes(spec: str) -> dict[str, Any]:
    from ..workloads.specs import graph_from_spec

    s = graph_from_spec(spec).summary()
    return {k: s[k] for k in ("nodes", "compute_nodes", "inputs", "edges", "depth")}


def _list(as_json: bool) -> int:
    from ..importers.zoo import IMPORT_OPTIONS, describe_models
    from ..workloads import describe

    rows = [{**entry, **_sizes(entry["name"])} for entry in describe()]
    models = describe_models()
    if as_json:
        print_json({"workloads": rows, "models": models, "import_options": list(IMPORT_OPTIONS)})
        return 0
    header = ("name", "nodes", "inputs", "edges", "depth", "summary")
    width = max(len(r["name"]) for r in rows)
    print(f"{header[0]:<{width}}  " + "".join(f"{h:>7}" for h in header[1:5]) + f"  {header[5]}")
    for r in rows:
        print(
            f"{r['name']:<{width}}  "
            + "".join(f"{r[h]:>7}" for h in header[1:5])
            + f"  {r['summary']}"
        )
    print(
        "\nmodels (imported through torch.export; sizes: `doppler-lab import NAME`; "
        f"import options: {', '.join(IMPORT_OPTIONS)})"
    )
    width = max(len("FILE.py:FUNC"), *(len(m["name"]) for m in models))
    for m in models:
        params = ",".join(f"{k}={v}" for k, v in m["params"].items())
        print(f"{m['name']:<{width}}  {m['summary']}\n{'':<{width}}    {params}")
    print(f"{'FILE.py:FUNC':<{width}}  a function in your file returning (model, example_args)")
    return 0


def _build(name: str, items: list[str], out: str) -> int:
    from ..io.documents import save_graph
    from ..workloads import build, parse_param
    from ..workloads.specs import parse_graph_spec

    if not out.endswith(".json"):
        raise ConfigError(f"--out {out!r} must name a .json file")
    spec = parse_graph_spec(name, ("workload",))
    workload, params = spec.target, dict(spec.params)
    for item in items:
        key, value = parse_param(item, "--param ")
        if key in params:
            raise ConfigError(f"parameter {key!r} is given twice")
        params[key] = value
    graph = build(workload, **params)
    path = save_graph(graph, Path(out))
    s = graph.summary()
    print(
        f"wrote {path}: {workload} ({s['nodes']} nodes, {s['inputs']} inputs, {s['edges']} edges, "
        f"depth {s['depth']}, {s['total_flops']:.3g} flops)"
    )
    return 0


def run(args: argparse.Namespace) -> int:
    if args.action == "list":
        return _list(args.json)
    guard_outputs(args, {"out": json_document("doppler_lab.graph")})
    return _build(args.name, args.param, args.out)
