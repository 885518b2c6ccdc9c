"""``doppler-lab import``: a PyTorch model (zoo name, ``FILE.py:FUNC`` or saved ``.pt2``) into a
graph JSON file, through ``torch.export``."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import numpy as np

from ..house.errors import ConfigError
from ..house.progress import show_progress, timer
from ..house.userfiles import (
    add_force_output_argument,
    check_output,
    guard_outputs,
    json_document,
    spec_files,
)
from ..ir.graph import NODE_KINDS, DataflowGraph
from ..timing.memory import format_bytes
from ._common import int_arg, print_json

NAME = "import"
HELP = "import a PyTorch model (zoo name, FILE.py:FUNC or a saved .pt2) into a graph JSON file"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "spec",
        metavar="SPEC",
        help="a model spec: hf-llama, hf-gpt2, mlp or resnet (NAME:key=value,...), "
        "FILE.py:FUNC[:key=value,...] (FUNC returns (model, example_args)), or a saved "
        "ExportedProgram FILE.pt2 (README, 'Graph and cluster specs')",
    )
    p.add_argument(
        "--out", metavar="FILE.json", help="where to write the graph (its stored inputs go beside)"
    )
    p.add_argument(
        "--granularity",
        choices=("op", "scope"),
        help="a node per aten op, or per contiguous run of one module scope (default: scope)",
    )
    p.add_argument(
        "--depth",
        type=int_arg(minimum=1),
        metavar="N",
        help="cut module scopes to their first N levels",
    )
    p.add_argument(
        "--no-merge",
        dest="merge",
        action="store_const",
        const=False,
        default=None,
        help="keep matmul-free scope groups as nodes (default: fold them into their consumer)",
    )
    p.add_argument("--json", action="store_true", help="print one JSON object")
    add_force_output_argument(p)


def guard_graph_outputs(args: argparse.Namespace) -> None:
    """``--out`` and its tensors sidecar (``m.json`` -> ``m.tensors.pt``) may be written: new,
    or a graph ``import`` wrote before (its sidecar with it), or ``--force``; never an input."""
    from ..io.stored import sidecar_path

    own_graph = json_document("doppler_lab.graph")
    guard_outputs(args, {"out": own_graph})
    if args.out is not None:
        check_output(
            sidecar_path(args.out),
            what=f"--out's tensors file (beside {args.out})",
            inputs=spec_files(args.spec),
            own=lambda _: own_graph(Path(args.out)),
            force=args.force,
        )


def graph_report(graph: DataflowGraph) -> dict[str, Any]:
    """Sizes of an imported graph: nodes by kind, edges, depth, flops and bytes."""
    s = graph.summary()
    counts = np.bincount(graph.kinds, minlength=len(NODE_KINDS))
    comp, inputs = graph.compute_nodes, graph.is_input
    return {
        "name": graph.name,
        "nodes": s["nodes"],
        "compute_nodes": s["compute_nodes"],
        "inputs": s["inputs"],
        "nodes_by_kind": {k: int(c) for k, c in zip(NODE_KINDS, counts) if c},
        "edges": s["edges"],
        "depth": s["depth"],
        "total_flops": s["total_flops"],
        "output_bytes": float(graph.out_bytes[comp].sum()),
        "input_bytes": float(graph.out_bytes[inputs].sum()),
    }


def run(args: argparse.Namespace) -> int:
    from ..workloads.specs import MODEL_KINDS, graph_from_spec, parse_graph_spec

    if args.out is not None and not args.out.endswith(".json"):
        raise ConfigError(f"--out {args.out!r} must name a .json file")
    guard_graph_outputs(args)
    # torch.export and its decompositions take seconds a layer: a line counts them
    with timer(f"import {args.spec}", enabled=show_progress(args)):
        graph = graph_from_spec(
            parse_graph_spec(args.spec, MODEL_KINDS),
            granularity=args.granularity,
            depth=args.depth,
            merge=args.merge,
        )
    report = graph_report(graph)
    if args.out is not None:
        from ..io.documents import save_graph

        report["path"] = str(save_graph(graph, Path(args.out)))
        if graph.tensors is not None:
            from ..io.stored import sidecar_path

            report["tensors_path"] = str(sidecar_path(args.out))
    if args.json:
        print_json(report)
        return 0
    kinds = ", ".join(f"{c} {k}" for k, c in report["nodes_by_kind"].items())
    where = f"wrote {report['path']}: " if args.out is not None else ""
    if "tensors_path" in report:
        where = f"wrote {report['path']} (its tensors in {report['tensors_path']}): "
    print(
        f"{where}{graph.name}: {report['nodes']} nodes ({kinds}), {report['edges']} edges, "
        f"depth {report['depth']}"
    )
    print(
        f"  {_flop_text(report['total_flops'])}, {format_bytes(report['output_bytes'])} of op "
        f"outputs, {format_bytes(report['input_bytes'])} of inputs (parameters, buffers, "
        "constants, arguments)"
    )
    return 0


def _flop_text(flops: float) -> str:
    """``268.4 MFLOP``: SI-scaled, never in scientific notation (``--json`` keeps the number)."""
    for prefix, size in (("P", 1e15), ("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(flops) >= size:
            return f"{flops / size:.4g} {prefix}FLOP"
    return f"{flops:.4g} FLOP"
