"""Files: a versioned JSON format for graphs, clusters, placements and traces, and a reader for
the DOPPLER paper's ``compute_graph`` text format.

Every JSON document is an object with ``"format"`` (``doppler_lab.graph``, ``doppler_lab.cluster``,
``doppler_lab.placement``, ``doppler_lab.trace``) and ``"version"`` (currently 1). The graph
document::

    {"format": "doppler_lab.graph", "version": 1, "name": "chainmm", "time_scale": 1.0,
     "meta": {...},
     "nodes": [{"name": "A[0,0]", "kind": "input", "flops": 0, "out_bytes": 4096,
                "spec": {"kind": "input", "op": "normal", "out_shape": [32, 32], ...},
                "cost": 1.5 | [1.5, 2.0, ...]},            # "spec" and "cost" optional
               ...],
     "edges": [[0, 5], [1, 5], ...],                       # or [src, dst, cost]
    }
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from .errors import FormatError, GraphError
from .graph import KIND_CODE, NODE_KINDS, DataflowGraph, cost_graph
from .hardware import Cluster
from .ops import OpSpec
from .placement import Placement
from .trace import Trace

FORMAT_VERSION = 1
PAPER_TIME_SCALE = 1e-10  # the released code divides makespans by 1e10
PAPER_NODE_TYPES = (
    "input",
    "formation",
    "complexer",
    "squeezer",
    "fill",
    "select",
    "einsummable",
    "unknown",
)


# -- generic JSON ------------------------------------------------------------------------------
def _read_json(path: str | Path, expected: str) -> dict[str, Any]:
    p = Path(path)
    try:
        text = p.read_text()
    except OSError as exc:
        raise FormatError(f"cannot read: {exc.strerror}", str(p)) from None
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise FormatError(f"not valid JSON: {exc.msg}", str(p), exc.lineno) from None
    if not isinstance(doc, dict) or "format" not in doc:
        raise FormatError("expected a JSON object with a 'format' field", str(p))
    if doc["format"] != expected:
        raise FormatError(f"format is {doc['format']!r}, expected {expected!r}", str(p))
    version = doc.get("version")
    if version != FORMAT_VERSION:
        raise FormatError(
            f"version {version!r} is not supported (expected {FORMAT_VERSION})", str(p)
        )
    return doc


def _write_json(path: str | Path, doc: Mapping[str, Any]) -> Path:
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(json.dumps(doc, indent=1, allow_nan=False))
    return p


# -- graphs ------------------------------------------------------------------------------------
def graph_to_dict(graph: DataflowGraph) -> dict[str, Any]:
    nodes = []
    for v in range(graph.num_nodes):
        node: dict[str, Any] = {
            "name": graph.names[v],
            "kind": NODE_KINDS[int(graph.kinds[v])],
            "flops": float(graph.flops[v]),
            "out_bytes": float(graph.out_bytes[v]),
        }
        if graph.specs is not None and graph.specs[v] is not None:
            node["spec"] = graph.specs[v].to_dict()
        if graph.compute_cost is not None:
            cc = graph.compute_cost[v]
            node["cost"] = cc.tolist() if np.ndim(cc) else float(cc)
        nodes.append(node)
    if graph.edge_cost is not None:
        edges = [
            [int(u), int(v), float(c)]
            for u, v, c in zip(graph.edge_src, graph.edge_dst, graph.edge_cost)
        ]
    else:
        edges = [[int(u), int(v)] for u, v in zip(graph.edge_src, graph.edge_dst)]
    return {
        "format": "doppler_lab.graph",
        "version": FORMAT_VERSION,
        "name": graph.name,
        "time_scale": graph.time_scale,
        "meta": dict(graph.meta),
        "nodes": nodes,
        "edges": edges,
    }


def graph_from_dict(doc: Mapping[str, Any], source: str = "<dict>") -> DataflowGraph:
    try:
        nodes = doc["nodes"]
        edges = doc["edges"]
    except KeyError as exc:
        raise FormatError(f"graph document lacks the field {exc.args[0]!r}", source) from None
    names, kinds, flops, nbytes, specs, costs = [], [], [], [], [], []
    for i, node in enumerate(nodes):
        if not isinstance(node, Mapping) or "name" not in node:
            raise FormatError(f"node {i} must be an object with a 'name'", source)
        kind = node.get("kind", "compute")
        if kind not in KIND_CODE:
            raise FormatError(
                f"node {i} ({node['name']!r}) has unknown kind {kind!r}; expected one of {NODE_KINDS}",
                source,
            )
        names.append(node["name"])
        kinds.append(KIND_CODE[kind])
        spec = None
        if node.get("spec") is not None:
            try:
                spec = OpSpec.from_dict(node["spec"])
            except GraphError as exc:
                raise FormatError(f"node {i} ({node['name']!r}): {exc}", source) from None
        specs.append(spec)
        flops.append(node.get("flops", spec.flops if spec else 0.0))
        nbytes.append(node.get("out_bytes", spec.out_bytes if spec else 0.0))
        costs.append(node.get("cost"))
    src, dst, ecost = [], [], []
    for k, e in enumerate(edges):
        if not isinstance(e, list | tuple) or len(e) not in (2, 3):
            raise FormatError(f"edge {k} must be [src, dst] or [src, dst, cost], got {e!r}", source)
        src.append(e[0])
        dst.append(e[1])
        ecost.append(e[2] if len(e) == 3 else None)
    compute_cost = None
    if any(c is not None for c in costs):
        shapes = {np.shape(c) for c in costs if c is not None}
        if len(shapes) != 1:
            raise FormatError(
                f"node costs mix shapes {sorted(shapes)}; give all scalars or all lists of one length",
                source,
            )
        width = shapes.pop()
        compute_cost = np.array(
            [c if c is not None else np.zeros(width) for c in costs], dtype=np.float64
        )
    edge_cost = None
    if any(c is not None for c in ecost):
        if any(c is None for c in ecost):
            raise FormatError("some edges have a cost and others not", source)
        edge_cost = np.array(ecost, dtype=np.float64)
    try:
        return DataflowGraph(
            names=tuple(names),
            kinds=np.array(kinds, dtype=np.int8),
            flops=np.array(flops, dtype=np.float64),
            out_bytes=np.array(nbytes, dtype=np.float64),
            edge_src=np.array(src, dtype=np.int64),
            edge_dst=np.array(dst, dtype=np.int64),
            specs=tuple(specs) if any(s is not None for s in specs) else None,
            compute_cost=compute_cost,
            edge_cost=edge_cost,
            time_scale=float(doc.get("time_scale", 1.0)),
            name=doc.get("name", "graph"),
            meta=doc.get("meta", {}),
        )
    except (GraphError, TypeError, ValueError) as exc:
        if isinstance(exc, FormatError):
            raise
        raise FormatError(str(exc), source) from None


def save_graph(graph: DataflowGraph, path: str | Path) -> Path:
    return _write_json(path, graph_to_dict(graph))


def load_graph(path: str | Path) -> DataflowGraph:
    """A graph from a JSON document or, for ``.txt`` files, the paper's format."""
    p = Path(path)
    if p.suffix == ".txt":
        return read_paper_graph(p)
    return graph_from_dict(_read_json(p, "doppler_lab.graph"), str(p))


# -- the paper's compute_graph format ----------------------------------------------------------
_INT_RE = re.compile(r"-?\d+")


def _ints(line: str, path: str, lineno: int, what: str) -> list[int]:
    parts = [x.strip() for x in line.strip().strip(",").split(",") if x.strip()]
    out = []
    for x in parts:
        if not re.fullmatch(r"\d+", x):
            raise FormatError(f"{what}: {x!r} is not a non-negative integer", path, lineno)
        out.append(int(x))
    return out


def read_paper_graph(path: str | Path, name: str | None = None) -> DataflowGraph:
    """Read one of the DOPPLER paper's ``compute_graph/*.txt`` files.

    Line 1 is the total node count (inputs included), line 2 the input ids, lines 3 and 4 the
    edge sources and destinations, then one ``compute,communication[,type]`` line per non-input
    node. As in the released loader, inputs are dropped and edge endpoints are ids of non-input
    nodes. A repeated (source, destination) pair is one dependency (kept once). Costs stay raw
    integers; ``time_scale = 1e-10`` reports makespans as the paper does.
    """
    p = Path(path)
    sp = str(p)
    try:
        lines = p.read_text().splitlines()
    except OSError as exc:
        raise FormatError(f"cannot read: {exc.strerror}", sp) from None
    if len(lines) < 4:
        raise FormatError(
            f"has {len(lines)} lines; expected at least 4 (count, inputs, sources, destinations)",
            sp,
        )
    head = lines[0].strip()
    if not re.fullmatch(r"\d+", head):
        raise FormatError(f"line 1 should be the total node count, got {head!r}", sp, 1)
    total = int(head)
    inputs = _ints(lines[1], sp, 2, "input ids")
    src = _ints(lines[2], sp, 3, "edge sources")
    dst = _ints(lines[3], sp, 4, "edge destinations")
    if len(src) != len(dst):
        raise FormatError(
            f"{len(src)} edge sources (line 3) but {len(dst)} destinations (line 4)", sp, 4
        )
    n = total - len(inputs)
    if n <= 0:
        raise FormatError(f"{total} nodes and {len(inputs)} inputs leave no operations", sp, 2)
    cost_lines = [(i + 5, ln) for i, ln in enumerate(lines[4:]) if ln.strip()]
    if len(cost_lines) != n:
        raise FormatError(
            f"expected {n} cost lines (total {total} - {len(inputs)} inputs), found {len(cost_lines)}",
            sp,
            4 + len(cost_lines) if len(cost_lines) < n else cost_lines[n][0],
        )
    comp = np.empty(n)
    comm = np.empty(n)
    types = []
    for i, (lineno, ln) in enumerate(cost_lines):
        fields = [f.strip() for f in ln.split(",")]
        if len(fields) not in (2, 3):
            raise FormatError(
                f"expected 'compute,communication[,type]', got {ln.strip()!r}", sp, lineno
            )
        for j, f in enumerate(fields[:2]):
            if not re.fullmatch(r"\d+(\.\d+)?", f):
                raise FormatError(
                    f"{('compute', 'communication')[j]} cost {f!r} is not a non-negative number",
                    sp,
                    lineno,
                )
        comp[i] = float(fields[0])
        comm[i] = float(fields[1])
        t = fields[2] if len(fields) == 3 else "unknown"
        if t not in PAPER_NODE_TYPES:
            raise FormatError(
                f"unknown node type {t!r}; expected one of {PAPER_NODE_TYPES}", sp, lineno
            )
        types.append(t)
    for k, (u, v) in enumerate(zip(src, dst)):
        for end, lineno in ((u, 3), (v, 4)):
            if end >= n:
                raise FormatError(
                    f"edge {k} ({u} -> {v}) names node {end}; expected ids 0..{n - 1}", sp, lineno
                )
    pairs = list(dict.fromkeys(zip(src, dst)))  # first occurrence order, duplicates dropped
    es = np.array([u for u, _ in pairs], dtype=np.int64)
    ed = np.array([v for _, v in pairs], dtype=np.int64)
    try:
        return cost_graph(
            comp,
            comm,
            es,
            ed,
            name=name or p.stem,
            time_scale=PAPER_TIME_SCALE,
            meta={
                "source": "doppler-paper",
                "file": p.name,
                "total_nodes": total,
                "input_nodes": len(inputs),
                "duplicate_edges_dropped": len(src) - len(pairs),
                "paper_types": sorted(set(types)),
            },
        )
    except GraphError as exc:
        raise FormatError(str(exc), sp) from None


# -- clusters, placements, traces ------------------------------------------------------------
def save_cluster(cluster: Cluster, path: str | Path) -> Path:
    return _write_json(path, cluster.to_dict())


def load_cluster(path: str | Path) -> Cluster:
    """A cluster from a cluster JSON, or the cluster of a calibration profile JSON."""
    from .errors import ClusterError

    profile = load_profile(path)
    if profile is not None:
        return profile.cluster
    doc = _read_json(path, "doppler_lab.cluster")
    try:
        return Cluster.from_dict(doc)
    except ClusterError as exc:
        raise FormatError(str(exc), str(path)) from None


def load_profile(path: str | Path):
    """The calibration profile in ``path`` (a :class:`doppler_lab.calibration.Profile`), or
    ``None`` when the file is some other document."""
    p = Path(path)
    try:
        doc = json.loads(p.read_text())
    except (OSError, json.JSONDecodeError):
        return None
    if not isinstance(doc, dict) or doc.get("format") != "doppler_lab.profile":
        return None
    from .calibration import Profile

    return Profile.from_dict(doc, source=str(p))


def save_placement(
    placement: Placement,
    path: str | Path,
    graph: DataflowGraph | None = None,
    num_devices: int | None = None,
) -> Path:
    return _write_json(path, placement.to_dict(graph, num_devices))


def load_placement(path: str | Path) -> Placement:
    from .errors import PlacementError

    doc = _read_json(path, "doppler_lab.placement")
    try:
        return Placement.from_dict(doc)
    except PlacementError as exc:
        raise FormatError(str(exc), str(path)) from None


def save_trace(trace: Trace, path: str | Path) -> Path:
    return _write_json(path, trace.to_dict())


def load_trace(path: str | Path) -> Trace:
    doc = _read_json(path, "doppler_lab.trace")
    return Trace.from_dict(doc)
