"""Files: a versioned JSON format for graphs, clusters, placements and traces, and a reader for
the DOPPLER paper's ``compute_graph`` text format.

Every JSON document is an object with ``"format"`` (``doppler_lab.ir.graph``, ``doppler_lab.cluster``,
``doppler_lab.ir.placement``, ``doppler_lab.ir.trace``) and ``"version"`` (currently 1). The graph
document::

    {"format": "doppler_lab.graph", "version": 1, "name": "chainmm", "time_scale": 1.0,
     "time_unit": "s",                                     # or "cost units"
     "meta": {...},
     "nodes": [{"name": "A[0,0]", "kind": "input", "flops": 0, "out_bytes": 4096,
                "spec": {"kind": "input", "op": "normal", "out_shape": [32, 32], ...},
                "cost": 1.5 | [1.5, 2.0, ...]},            # "spec" and "cost" optional
               ...],
     "edges": [[0, 5], [1, 5], ...],                       # or [src, dst, cost]
    }

Readers are strict (the checks of :mod:`doppler_lab.house.validate`): a field outside the schema, a
missing one, or a value of the wrong type is a :class:`~doppler_lab.house.errors.FormatError` naming
the file, the item and what was expected; nothing is coerced. Node ids are integers (not ``1.0``,
not ``true``); ``flops`` and ``out_bytes`` are required unless the node has a ``spec`` to derive
them or the graph gives explicit costs (then a missing one reads as 0); costs are all-or-none, for edges as for non-input nodes (inputs are never timed, so their
cost may be left out); JSON must be strict (no ``NaN``/``Infinity``, no key twice in an object).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from ..hardware.cluster import Cluster
from ..house.atomic import atomic_write
from ..house.errors import ClusterError, FormatError, GraphError, PlacementError
from ..house.limits import check_limit
from ..house.validate import (
    Fail,
    is_int,
    is_number,
    one_line,
    read_json_file,
    read_text_file,
    show,
    type_name,
    want_fields,
    want_int,
    want_ints,
    want_list,
    want_number,
    want_numbers,
    want_object,
    want_str,
)
from ..ir.graph import COST_UNITS, INPUT, KIND_CODE, NODE_KINDS, DataflowGraph, cost_graph
from ..ir.graph import TIME_UNITS as GRAPH_TIME_UNITS
from ..ir.ops import OpSpec
from ..ir.placement import Placement
from ..ir.trace import Trace

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
    doc = read_json_file(p)
    if not isinstance(doc, dict) or "format" not in doc:
        raise FormatError("expected a JSON object with a 'format' field", str(p))
    if doc["format"] != expected:
        raise FormatError(f"format is {show(doc['format'])}, expected {expected!r}", str(p))
    version = doc.get("version")
    if not is_int(version) or version != FORMAT_VERSION:
        raise FormatError(
            f"version {show(version)} is not supported (expected {FORMAT_VERSION})", str(p)
        )
    return doc


def _write_json(path: str | Path, doc: Mapping[str, Any]) -> Path:
    return atomic_write(path, json.dumps(doc, indent=1, allow_nan=False))


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
        "time_unit": graph.time_unit,
        "meta": dict(graph.meta),
        "nodes": nodes,
        "edges": edges,
    }


#: fields of a graph document and of one node (anything else is an error: a misspelt field
#: never falls back to a default)
GRAPH_FIELDS = ("format", "version", "name", "time_scale", "time_unit", "meta", "nodes", "edges")


def default_time_unit(meta: Mapping[str, Any]) -> str:
    """The time unit of a graph document written before graphs carried one: cost units for
    the paper's graphs and random DAGs (their provenance in ``meta`` says so), else seconds."""
    if meta.get("source") == "doppler-paper" or meta.get("generator") == "random_dag":
        return COST_UNITS
    return "s"


NODE_FIELDS = ("name", "kind", "flops", "out_bytes", "spec", "cost")


def _check_spec_fields(spec: Any, what: str, fail: Fail) -> Mapping[str, Any]:
    """The types of an op spec's common fields (their values are :class:`OpSpec`'s to check;
    fields of other spec kinds pass through to it)."""
    spec = want_object(spec, what, fail)
    for key in ("kind", "op"):
        if key not in spec:
            raise fail(f"{what} lacks the field {key!r}")
        want_str(spec[key], f"{what} {key}", fail)
    if "dtype" in spec:
        want_str(spec["dtype"], f"{what} dtype", fail)
    if "in_shapes" in spec:
        for j, shape in enumerate(want_list(spec["in_shapes"], f"{what} in_shapes", fail)):
            want_ints(shape, f"{what} in_shapes[{j}]", fail)
    if "out_shape" in spec:
        want_ints(spec["out_shape"], f"{what} out_shape", fail)
    if spec.get("operand_map") is not None:
        want_ints(spec["operand_map"], f"{what} operand_map", fail, minimum=0)
    if "params" in spec:
        want_object(spec["params"], f"{what} params", fail)
    if spec.get("flops") is not None:
        want_number(spec["flops"], f"{what} flops", fail, minimum=0)
    return spec


def _node_cost(cost: Any, what: str, fail: Fail) -> float | list[float] | None:
    if cost is None or is_number(cost):
        return None if cost is None else want_number(cost, f"{what} cost", fail)
    if not isinstance(cost, list | tuple) or not cost:
        raise fail(
            f"{what} cost is {show(cost)} ({type_name(cost)}); expected a number or a "
            "non-empty list of per-device numbers"
        )
    return want_numbers(cost, f"{what} cost", fail)  # type: ignore[return-value]


def graph_from_dict(doc: Mapping[str, Any], source: str = "<dict>") -> DataflowGraph:
    """The graph of a graph document (see the module docstring); every field is checked.

    Raises:
        FormatError: naming ``source``, the node or edge, and what was expected.
    """

    def fail(msg: str) -> FormatError:
        return FormatError(msg, source)

    doc = want_fields(doc, "graph document", fail, ("nodes", "edges"), GRAPH_FIELDS)
    nodes = want_list(doc["nodes"], "graph document 'nodes'", fail)
    edges = want_list(doc["edges"], "graph document 'edges'", fail)
    check_limit(len(nodes), "MAX_NODES", "the number of nodes", fail)
    check_limit(len(edges), "MAX_EDGES", "the number of edges", fail)
    # with explicit costs (a node's "cost"), flops and out_bytes may be left out: read as 0
    explicit = any(isinstance(node, Mapping) and "cost" in node for node in nodes)
    names, kinds, flops, nbytes, specs, costs = [], [], [], [], [], []
    for i, node in enumerate(nodes):
        if not isinstance(node, Mapping) or "name" not in node:
            raise fail(f"node {i} must be an object with a 'name'")
        name = want_str(node["name"], f"node {i} name", fail)
        what = f"node {i} ({name!r})"
        want_fields(node, what, fail, ("name",), NODE_FIELDS)
        kind = node.get("kind", "compute")
        if not isinstance(kind, str) or kind not in KIND_CODE:
            raise fail(f"{what} has unknown kind {show(kind)}; expected one of {NODE_KINDS}")
        names.append(name)
        kinds.append(KIND_CODE[kind])
        spec = None
        if node.get("spec") is not None:
            spec_doc = _check_spec_fields(node["spec"], f"{what} spec", fail)
            try:
                spec = OpSpec.from_dict(spec_doc)
                derived = {"flops": spec.flops, "out_bytes": spec.out_bytes}
            except (GraphError, TypeError, ValueError, ArithmeticError, LookupError) as exc:
                raise fail(f"{what}: {one_line(exc)}") from None
        specs.append(spec)
        for key, out in (("flops", flops), ("out_bytes", nbytes)):
            if key in node:
                out.append(want_number(node[key], f"{what} {key}", fail))
            elif spec is not None:
                out.append(derived[key])
            elif explicit:
                out.append(0.0)
            else:
                raise fail(f"{what} lacks the field {key!r} (required without an op spec or costs)")
        costs.append(_node_cost(node.get("cost"), what, fail))
    n = len(names)
    src, dst, ecost = [], [], []
    for k, e in enumerate(edges):
        if not isinstance(e, list | tuple) or len(e) not in (2, 3):
            raise fail(f"edge {k} must be [src, dst] or [src, dst, cost], got {show(e)}")
        src.append(want_int(e[0], f"edge {k} source", fail, 0, max(n - 1, 0)))
        dst.append(want_int(e[1], f"edge {k} destination", fail, 0, max(n - 1, 0)))
        ecost.append(want_number(e[2], f"edge {k} cost", fail) if len(e) == 3 else None)
    compute_cost = None
    if any(c is not None for c in costs):
        shapes = {np.shape(c) for c in costs if c is not None}
        if len(shapes) != 1:
            raise fail(
                f"node costs mix shapes {sorted(shapes)}; give all scalars or all lists of one length"
            )
        missing = [v for v, c in enumerate(costs) if c is None and kinds[v] != INPUT]
        if missing:
            v = missing[0]
            raise fail(
                f"node {v} ({names[v]!r}) has no cost while other nodes do; give every "
                "non-input node a cost or none (inputs are never timed)"
            )
        width = shapes.pop()
        compute_cost = np.array(
            [c if c is not None else np.zeros(width) for c in costs], dtype=np.float64
        )
    edge_cost = None
    if any(c is not None for c in ecost):
        if any(c is None for c in ecost):
            k = ecost.index(None)
            raise fail(f"edge {k} has no cost while other edges do; give every edge a cost or none")
        edge_cost = np.array(ecost, dtype=np.float64)
    meta = want_object(doc.get("meta", {}), "graph document 'meta'", fail)
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
            time_scale=want_number(doc.get("time_scale", 1.0), "time_scale", fail, above=0),
            name=want_str(doc.get("name", "graph"), "graph name", fail),
            meta=dict(meta),
            time_unit=_time_unit(doc, meta, fail),
        )
    except GraphError as exc:
        raise fail(str(exc)) from None


def _time_unit(doc: Mapping[str, Any], meta: Mapping[str, Any], fail) -> str:
    if "time_unit" not in doc:
        return default_time_unit(meta)
    unit = want_str(doc["time_unit"], "time_unit", fail)
    if unit not in GRAPH_TIME_UNITS:
        raise fail(f"time_unit {unit!r}; expected one of {list(GRAPH_TIME_UNITS)}")
    return unit


def save_graph(graph: DataflowGraph, path: str | Path) -> Path:
    """Write ``graph`` as JSON; a graph with tensors (:attr:`DataflowGraph.tensors`) also
    writes them to a sidecar (``model.json`` -> ``model.tensors.pt``) named in ``meta``."""
    if graph.tensors is None:
        return _write_json(path, graph_to_dict(graph))
    return _save_graph_with_tensors(graph, path)


def _save_graph_with_tensors(graph: DataflowGraph, path: str | Path) -> Path:
    """The sidecar first, then the JSON, each written atomically (:mod:`doppler_lab.house.atomic`):
    a failure leaves no half-written file behind."""
    from .stored import sidecar_path

    p = Path(path)
    sidecar = sidecar_path(p)
    doc = graph_to_dict(graph)
    doc["meta"]["tensors"] = sidecar.name
    text = json.dumps(doc, indent=1, allow_nan=False)
    graph.tensors.save(sidecar)
    return atomic_write(p, text)


def _attach_tensors(graph: DataflowGraph, path: Path) -> DataflowGraph:
    """``graph`` with the sidecar its ``meta["tensors"]`` names (loaded on first use)."""
    import dataclasses

    from .stored import StoredTensors

    name = graph.meta.get("tensors")
    stored = graph.specs is not None and any(
        s is not None and s.kind == "input" and s.op == "stored" for s in graph.specs
    )
    if name is None:
        if stored:
            raise FormatError(
                "the graph has stored inputs but its meta names no 'tensors' sidecar", str(path)
            )
        return graph
    if not isinstance(name, str) or not name or Path(name).name != name:
        raise FormatError(
            f"meta 'tensors' must be a file name next to the graph, got {name!r}", str(path)
        )
    sidecar = path.parent / name
    if not sidecar.is_file():
        raise FormatError(f"the graph's tensors file {name!r} is missing", str(path))
    return dataclasses.replace(graph, tensors=StoredTensors(path=sidecar))


def load_graph(path: str | Path) -> DataflowGraph:
    """A graph from a JSON document or, for ``.txt`` files, the paper's format."""
    p = Path(path)
    if p.suffix == ".txt":
        return read_paper_graph(p)
    return _attach_tensors(graph_from_dict(_read_json(p, "doppler_lab.graph"), str(p)), p)


# -- the paper's compute_graph format ----------------------------------------------------------
_UINT_RE = re.compile(r"[0-9]+")  # ASCII digits only: int() would also take "٣" and "1_0"
_COST_RE = re.compile(r"[0-9]+(\.[0-9]+)?")


def _uint(text: str, path: str, lineno: int, what: str) -> int:
    if not _UINT_RE.fullmatch(text) or len(text) > 18:
        shown = text if len(text) <= 30 else text[:27] + "..."
        raise FormatError(
            f"{what}: {shown!r} is not a non-negative integer below 1e18", path, lineno
        )
    return int(text)


def _ints(line: str, path: str, lineno: int, what: str) -> list[int]:
    parts = [x.strip() for x in line.strip().strip(",").split(",") if x.strip()]
    return [_uint(x, path, lineno, what) for x in parts]


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
    lines = read_text_file(p).splitlines()
    if len(lines) < 4:
        raise FormatError(
            f"has {len(lines)} lines; expected at least 4 (count, inputs, sources, destinations)",
            sp,
        )
    total = _uint(lines[0].strip(), sp, 1, "line 1 should be the total node count")
    check_limit(total, "MAX_NODES", "the node count", lambda msg: FormatError(msg, sp, 1))
    inputs = _ints(lines[1], sp, 2, "input ids")
    src = _ints(lines[2], sp, 3, "edge sources")
    dst = _ints(lines[3], sp, 4, "edge destinations")
    if len(src) != len(dst):
        raise FormatError(
            f"{len(src)} edge sources (line 3) but {len(dst)} destinations (line 4)", sp, 4
        )
    for x in inputs:
        if x >= total:
            raise FormatError(f"input id {x} is not below the node count {total}", sp, 2)
    if len(set(inputs)) != len(inputs):
        dup = next(x for i, x in enumerate(inputs) if x in inputs[:i])
        raise FormatError(f"input id {dup} is listed twice", sp, 2)
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
            if not _COST_RE.fullmatch(f):
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
    profile = load_profile(path)
    if profile is not None:
        return profile.cluster
    doc = _read_json(path, "doppler_lab.cluster")
    try:
        return Cluster.from_dict(doc)
    except ClusterError as exc:
        raise FormatError(str(exc), str(path)) from None


def load_profile(path: str | Path):
    """The calibration profile in ``path`` (a :class:`doppler_lab.timing.calibration.Profile`), or
    ``None`` when the file is some other document (or no JSON at all)."""
    p = Path(path)
    try:
        doc = read_json_file(p)
    except FormatError:
        return None
    if not isinstance(doc, dict) or doc.get("format") != "doppler_lab.profile":
        return None
    from ..timing.calibration import Profile

    return Profile.from_dict(doc, source=str(p))


def save_placement(
    placement: Placement,
    path: str | Path,
    graph: DataflowGraph | None = None,
    num_devices: int | None = None,
) -> Path:
    return _write_json(path, placement.to_dict(graph, num_devices))


PLACEMENT_FIELDS = ("format", "version", "device", "priority", "placer", "meta") + (
    "graph",
    "graph_digest",
    "num_nodes",
    "num_devices",
)


def placement_from_dict(doc: Mapping[str, Any], source: str = "<dict>") -> Placement:
    """The placement of a placement document; every field is checked (device ids are
    integers, never floats or booleans; ``num_nodes`` and ``num_devices``, when present,
    agree with them).

    Raises:
        FormatError: naming ``source`` and the bad field.
    """

    def fail(msg: str) -> FormatError:
        return FormatError(msg, source)

    doc = want_fields(doc, "placement document", fail, ("device",), PLACEMENT_FIELDS)
    device = want_ints(doc["device"], "placement device", fail, minimum=0)
    n = len(device)
    if "num_nodes" in doc and want_int(doc["num_nodes"], "placement num_nodes", fail) != n:
        raise fail(f"placement has {n} devices but says num_nodes {show(doc['num_nodes'])}")
    if "num_devices" in doc:
        d = want_int(doc["num_devices"], "placement num_devices", fail, minimum=1)
        bad = [v for v, x in enumerate(device) if x >= d]
        if bad:
            raise fail(f"node {bad[0]} is on device {device[bad[0]]}, expected 0..{d - 1}")
    if "graph" in doc:
        want_str(doc["graph"], "placement graph", fail)
    if "graph_digest" in doc:
        want_str(doc["graph_digest"], "placement graph_digest", fail)
    priority = doc.get("priority")
    if priority is not None:
        priority = want_numbers(priority, "placement priority", fail, length=n)
    try:
        return Placement(
            np.array(device, dtype=np.int64),
            None if priority is None else np.array(priority, dtype=np.float64),
            want_str(doc.get("placer", ""), "placement placer", fail),
            want_object(doc.get("meta", {}), "placement meta", fail),
        )
    except PlacementError as exc:
        raise fail(str(exc)) from None


def load_placement(path: str | Path, graph: DataflowGraph | None = None) -> Placement:
    """The placement in ``path``; with ``graph``, refused unless it was saved for that graph.

    A placement saved with its graph carries ``graph_digest``
    (:attr:`DataflowGraph.structure_digest`: node names in order, kinds, edges): it must equal
    ``graph``'s. An older file without one is checked by its ``graph`` name, when it has one.

    Raises:
        FormatError: a malformed file.
        PlacementError: made for another graph (one line naming both).
    """
    doc = _read_json(path, "doppler_lab.placement")
    placement = placement_from_dict(doc, str(path))
    if graph is not None:
        check_placement_graph(doc, graph, str(path))
    return placement


def check_placement_graph(doc: Mapping[str, Any], graph: DataflowGraph, source: str) -> None:
    """Raise :class:`PlacementError` unless the placement document ``doc`` was made for
    ``graph`` (see :func:`load_placement`)."""
    saved, name = doc.get("graph_digest"), doc.get("graph")
    label = f"{name!r}" if isinstance(name, str) else "another graph"
    if isinstance(saved, str):
        if saved != graph.structure_digest:
            raise PlacementError(
                f"placement {source} was made for {label} (digest {saved}), not for "
                f"{graph.name!r} (digest {graph.structure_digest}): its node names or edges "
                "differ; place this graph anew"
            )
    elif isinstance(name, str) and name != graph.name:
        raise PlacementError(
            f"placement {source} was made for graph {name!r}, not {graph.name!r} (an older "
            "file without graph_digest, checked by name: remove its 'graph' field to use it "
            "anyway)"
        )


def save_trace(trace: Trace, path: str | Path) -> Path:
    return _write_json(path, trace.to_dict())


TRACE_FIELDS = ("format", "version", "graph", "names", "kinds", "num_devices", "semantics") + (
    "ops",
    "transfers",
    "makespan",
    "link_names",
    "meta",
    "peak_memory_bytes",
)


def trace_from_dict(doc: Mapping[str, Any], source: str = "<dict>") -> Trace:
    """The trace of a trace document; every field is checked.

    Raises:
        FormatError: naming ``source`` and the bad field.
    """

    def fail(msg: str) -> FormatError:
        return FormatError(msg, source)

    doc = want_fields(doc, "trace", fail, TRACE_FIELDS[2:9], TRACE_FIELDS)
    want_str(doc["graph"], "trace graph", fail)
    want_str(doc["semantics"], "trace semantics", fail)
    names = want_list(doc["names"], "trace names", fail)
    n = len(names)
    for v, x in enumerate(names):
        want_str(x, f"trace names[{v}]", fail)
    for v, x in enumerate(want_list(doc["kinds"], "trace kinds", fail, n)):
        want_str(x, f"trace kinds[{v}]", fail, NODE_KINDS)
    d = want_int(doc["num_devices"], "trace num_devices", fail, minimum=1)
    ops = want_fields(doc["ops"], "trace ops", fail, ("device", "start", "end"))
    want_ints(ops["device"], "trace ops device", fail, n, -1, d - 1)
    for key in ("start", "end"):
        want_numbers(ops[key], f"trace ops {key}", fail, n, nullable=True)
    tr = want_fields(doc["transfers"], "trace transfers", fail, TRANSFER_FIELDS)
    t = len(want_list(tr["src"], "trace transfers src", fail))
    for key in ("src", "dst"):
        want_ints(tr[key], f"trace transfers {key}", fail, t, 0, max(n - 1, 0))
    for key in ("src_device", "dst_device"):
        want_ints(tr[key], f"trace transfers {key}", fail, t, 0, d - 1)
    for key in ("start", "end"):
        want_numbers(tr[key], f"trace transfers {key}", fail, t, nullable=True)
    want_ints(tr["link"], "trace transfers link", fail, t, minimum=-1)
    for i, x in enumerate(want_list(doc.get("link_names", []), "trace link_names", fail)):
        want_str(x, f"trace link_names[{i}]", fail)
    want_object(doc.get("meta", {}), "trace meta", fail)
    if doc.get("makespan") is not None:
        want_number(doc["makespan"], "trace makespan", fail)
    if doc.get("peak_memory_bytes") is not None:
        want_numbers(doc["peak_memory_bytes"], "trace peak_memory_bytes", fail, d, minimum=0)
    return Trace.from_dict(doc)


TRANSFER_FIELDS = ("src", "dst", "src_device", "dst_device", "start", "end", "link")


def load_trace(path: str | Path) -> Trace:
    return trace_from_dict(_read_json(path, "doppler_lab.trace"), str(path))
