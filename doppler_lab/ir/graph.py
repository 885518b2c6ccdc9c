"""The dataflow-graph IR: :class:`DataflowGraph` and :class:`GraphBuilder`.

A graph is frozen and array-backed (numpy, no torch). Nodes are operations (or ``input`` tensors
that exist before the run); edges are unique ``(src, dst)`` dependencies, and the order of a
node's incoming edges is the order of its operands. Costs come from the cost model
(:mod:`doppler_lab.hardware`) unless the graph carries explicit ones: ``compute_cost`` of shape
``(N,)`` (same on every device) or ``(N, D)`` (one value per device), and ``edge_cost`` of shape
``(E,)`` (the time an edge's tensor takes between two different devices).

Input nodes are never placed or timed: their tensors are resident on every device that consumes
them when the clock starts (the DOPPLER paper's convention; its released graphs drop them).
Explicit costs are in raw units; ``time_scale`` converts them to reported time (the paper's
files use ``1e-10``, so raw integer costs stay exact in the simulator). ``time_unit`` says what
that reported time is: seconds (``"s"``: generated and imported graphs, whose costs come from
the cost model) or abstract :data:`COST_UNITS` (the paper's graphs and random DAGs); tables,
chart axes and findings take a makespan's unit from it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np
from numba import njit

from ..house.deps import require
from ..house.errors import GraphError
from ..house.limits import LIMITS, MAX_EDGES, MAX_NODES
from ..house.validate import show
from .ops import OpSpec, broadcast_shape

#: the unit of reported time of graphs with abstract costs (the paper's graphs, random DAGs)
COST_UNITS = "cost units"
#: the units a graph's reported time can be in
TIME_UNITS: tuple[str, ...] = ("s", COST_UNITS)

NODE_KINDS: tuple[str, ...] = (
    "input",
    "einsum",
    "elementwise",
    "reduce",
    "torch",
    "compute",
    "program",
)
KIND_CODE: dict[str, int] = {k: i for i, k in enumerate(NODE_KINDS)}
INPUT = KIND_CODE["input"]


def _readonly(a: np.ndarray) -> np.ndarray:
    a.setflags(write=False)
    return a


def _csr(n: int, key: np.ndarray, other: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """CSR grouping edges by ``key`` (stable: edge-id order within a group)."""
    order = np.argsort(key, kind="stable")
    ptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(key, minlength=n), out=ptr[1:])
    return (
        _readonly(ptr),
        _readonly(other[order].astype(np.int64)),
        _readonly(order.astype(np.int64)),
    )


@njit(cache=True)
def _kahn(n, succ_ptr, succ_idx, indeg):  # pragma: no cover - compiled
    deg = indeg.copy()
    order = np.empty(n, np.int64)
    # a FIFO seeded in id order: deterministic, and breadth-first within a layer
    head = 0
    tail = 0
    for v in range(n):
        if deg[v] == 0:
            order[tail] = v
            tail += 1
    while head < tail:
        u = order[head]
        head += 1
        for k in range(succ_ptr[u], succ_ptr[u + 1]):
            w = succ_idx[k]
            deg[w] -= 1
            if deg[w] == 0:
                order[tail] = w
                tail += 1
    return order[:tail]


@njit(cache=True)
def _t_levels(topo, pred_ptr, pred_idx, pred_eid, node_cost, edge_cost):  # pragma: no cover
    t = np.zeros(node_cost.shape[0])
    for v in topo:
        best = 0.0
        for k in range(pred_ptr[v], pred_ptr[v + 1]):
            u = pred_idx[k]
            val = t[u] + node_cost[u] + edge_cost[pred_eid[k]]
            if val > best:
                best = val
        t[v] = best
    return t


@njit(cache=True)
def _b_levels(topo, succ_ptr, succ_idx, succ_eid, node_cost, edge_cost):  # pragma: no cover
    b = np.zeros(node_cost.shape[0])
    for i in range(topo.shape[0] - 1, -1, -1):
        v = topo[i]
        best = 0.0
        for k in range(succ_ptr[v], succ_ptr[v + 1]):
            val = edge_cost[succ_eid[k]] + b[succ_idx[k]]
            if val > best:
                best = val
        b[v] = node_cost[v] + best
    return b


@dataclass(frozen=True, eq=False)
class DataflowGraph:
    """A frozen, array-backed dataflow graph.

    Attributes:
        names: a unique name per node.
        kinds: node kind codes (indices into :data:`NODE_KINDS`), shape ``(N,)``.
        flops: floating-point operations per node, shape ``(N,)``.
        out_bytes: size of each node's output tensor, shape ``(N,)``.
        edge_src, edge_dst: edge endpoints, shape ``(E,)``; unique pairs; a node's operands are
            its incoming edges in edge order.
        specs: an executable :class:`OpSpec` per node, or ``None`` (cost-only graph).
        compute_cost: explicit compute cost, ``(N,)`` or ``(N, D)``, raw units; or ``None``.
        edge_cost: explicit transfer cost per edge between different devices, raw units; or None.
        time_scale: reported time of one raw cost unit.
        time_unit: the unit of reported time (makespans): ``"s"`` or :data:`COST_UNITS`.
        name: the graph's name.
        meta: free-form provenance (generator parameters, source file).
        tensors: values that travel with the graph (a :class:`~doppler_lab.io.stored.StoredTensors`:
            stored inputs, expected outputs), or ``None``.
    """

    names: tuple[str, ...]
    kinds: np.ndarray
    flops: np.ndarray
    out_bytes: np.ndarray
    edge_src: np.ndarray
    edge_dst: np.ndarray
    specs: tuple[OpSpec | None, ...] | None = None
    compute_cost: np.ndarray | None = None
    edge_cost: np.ndarray | None = None
    time_scale: float = 1.0
    name: str = "graph"
    meta: Mapping[str, Any] = field(default_factory=dict)
    tensors: Any = None
    time_unit: str = "s"

    # -- construction and validation --------------------------------------------------------
    def __post_init__(self) -> None:
        set_ = object.__setattr__
        set_(self, "names", tuple(str(n) for n in self.names))
        n = len(self.names)
        set_(self, "kinds", _readonly(np.array(self.kinds, dtype=np.int8).reshape(-1)))
        set_(self, "flops", _readonly(np.array(self.flops, dtype=np.float64).reshape(-1)))
        set_(self, "out_bytes", _readonly(np.array(self.out_bytes, dtype=np.float64).reshape(-1)))
        set_(self, "edge_src", _readonly(np.array(self.edge_src, dtype=np.int64).reshape(-1)))
        set_(self, "edge_dst", _readonly(np.array(self.edge_dst, dtype=np.int64).reshape(-1)))
        if self.compute_cost is not None:
            set_(self, "compute_cost", _readonly(np.array(self.compute_cost, dtype=np.float64)))
        if self.edge_cost is not None:
            set_(
                self, "edge_cost", _readonly(np.array(self.edge_cost, dtype=np.float64).reshape(-1))
            )
        if self.specs is not None:
            set_(self, "specs", tuple(self.specs))
        set_(self, "meta", dict(self.meta))
        self._validate(n)

    def _validate(self, n: int) -> None:
        if n == 0:
            raise GraphError(f"graph {self.name!r} has no nodes")
        if len(set(self.names)) != n:
            seen: set[str] = set()
            dup = next(x for x in self.names if x in seen or seen.add(x))  # type: ignore[func-returns-value]
            raise GraphError(f"graph {self.name!r}: node name {dup!r} is used twice")
        for attr in ("kinds", "flops", "out_bytes"):
            if getattr(self, attr).shape[0] != n:
                raise GraphError(
                    f"graph {self.name!r}: {attr} has {getattr(self, attr).shape[0]} entries, expected {n}"
                )
        bad = np.flatnonzero((self.kinds < 0) | (self.kinds >= len(NODE_KINDS)))
        if bad.size:
            raise GraphError(
                f"node {self.names[bad[0]]!r} has unknown kind code {int(self.kinds[bad[0]])}; "
                f"expected 0..{len(NODE_KINDS) - 1} ({', '.join(NODE_KINDS)})"
            )
        for attr in ("flops", "out_bytes"):
            self._check_costs(getattr(self, attr), attr)
        if self.time_unit not in TIME_UNITS:
            raise GraphError(
                f"graph {self.name!r}: time_unit {self.time_unit!r}; expected one of {TIME_UNITS}"
            )
        if not (np.isfinite(self.time_scale) and self.time_scale > 0):
            raise GraphError(
                f"graph {self.name!r}: time_scale {show(self.time_scale)} must be finite and > 0"
            )
        e = self.edge_src.shape[0]
        if self.edge_dst.shape[0] != e:
            raise GraphError(
                f"graph {self.name!r}: {e} edge sources but {self.edge_dst.shape[0]} edge destinations"
            )
        for ends, label in ((self.edge_src, "source"), (self.edge_dst, "destination")):
            bad = np.flatnonzero((ends < 0) | (ends >= n))
            if bad.size:
                k = int(bad[0])
                raise GraphError(
                    f"graph {self.name!r}: edge {k} ({int(self.edge_src[k])} -> {int(self.edge_dst[k])}) "
                    f"has {label} {int(ends[k])}, expected a node id in 0..{n - 1}"
                )
        loops = np.flatnonzero(self.edge_src == self.edge_dst)
        if loops.size:
            v = int(self.edge_src[loops[0]])
            raise GraphError(
                f"graph {self.name!r} has a cycle: node {self.names[v]!r} depends on itself"
            )
        if e:
            keys = self.edge_src * n + self.edge_dst
            uniq, counts = np.unique(keys, return_counts=True)
            if uniq.size != e:
                k = int(uniq[np.argmax(counts > 1)])
                raise GraphError(
                    f"graph {self.name!r}: edge {self.names[k // n]!r} -> {self.names[k % n]!r} appears "
                    "twice; edges are unique dependencies (an op that reads one tensor twice uses "
                    "OpSpec.operand_map)"
                )
        inputs_with_preds = np.flatnonzero(self.kinds[self.edge_dst] == INPUT)
        if inputs_with_preds.size:
            k = int(inputs_with_preds[0])
            raise GraphError(
                f"input node {self.names[int(self.edge_dst[k])]!r} has a predecessor "
                f"{self.names[int(self.edge_src[k])]!r}; inputs exist before the run"
            )
        if self.compute_cost is not None:
            cc = self.compute_cost
            if cc.ndim not in (1, 2) or cc.shape[0] != n:
                raise GraphError(
                    f"graph {self.name!r}: compute_cost has shape {cc.shape}, expected ({n},) or ({n}, D)"
                )
            self._check_costs(cc, "compute_cost")
        if self.edge_cost is not None:
            if self.edge_cost.shape[0] != e:
                raise GraphError(
                    f"graph {self.name!r}: edge_cost has {self.edge_cost.shape[0]} entries, expected {e}"
                )
            self._check_costs(self.edge_cost, "edge_cost", edges=True)
        if len(self.topo_order) != n:
            self._raise_cycle()
        if self.specs is not None:
            self._validate_specs(n)
            self._validate_stored()

    def _check_costs(self, values: np.ndarray, label: str, edges: bool = False) -> None:
        bad = ~np.isfinite(values) | (values < 0)
        if bad.any():
            idx = np.argwhere(bad)[0]
            k = int(idx[0])
            item = (
                f"edge {self.names[int(self.edge_src[k])]!r} -> {self.names[int(self.edge_dst[k])]!r}"
                if edges
                else f"node {self.names[k]!r}"
            )
            extra = f" (device {int(idx[1])})" if values.ndim == 2 else ""
            raise GraphError(
                f"graph {self.name!r}: {item}{extra} has {label} {show(values[tuple(idx)])}; "
                "expected a finite value >= 0"
            )

    def _raise_cycle(self) -> None:
        n = self.num_nodes
        on = np.ones(n, dtype=bool)
        on[self.topo_order] = False  # nodes not reached by Kahn lie on or after a cycle
        start = int(np.flatnonzero(on)[0])
        # walk predecessors that are also unreached until a node repeats: it lies on a cycle
        path: list[int] = []
        index: dict[int, int] = {}
        v = start
        while v not in index:
            index[v] = len(path)
            path.append(v)
            preds = self.pred_idx[self.pred_ptr[v] : self.pred_ptr[v + 1]]
            v = int(next(u for u in preds if on[u]))
        cycle = path[index[v] :][::-1]
        names = " -> ".join(self.names[u] for u in cycle + [cycle[0]])
        raise GraphError(f"graph {self.name!r} has a cycle through node {self.names[v]!r}: {names}")

    def _validate_specs(self, n: int) -> None:
        assert self.specs is not None
        if len(self.specs) != n:
            raise GraphError(f"graph {self.name!r}: {len(self.specs)} op specs for {n} nodes")
        for v, spec in enumerate(self.specs):
            if spec is None:
                continue
            if spec.kind != NODE_KINDS[self.kinds[v]]:
                raise GraphError(
                    f"node {self.names[v]!r} is of kind {NODE_KINDS[self.kinds[v]]!r} "
                    f"but its op spec is {spec.kind!r}"
                )
            preds = self.pred_idx[self.pred_ptr[v] : self.pred_ptr[v + 1]]
            omap = spec.operand_map or tuple(range(len(spec.in_shapes)))
            if spec.operand_map is None and len(preds) != len(spec.in_shapes):
                raise GraphError(
                    f"node {self.names[v]!r}: {len(preds)} predecessors feed an op of "
                    f"{len(spec.in_shapes)} operands"
                )
            if any(i < 0 or i >= len(preds) for i in omap) or set(omap) != set(range(len(preds))):
                raise GraphError(
                    f"node {self.names[v]!r}: operand_map {omap} must use each of its "
                    f"{len(preds)} predecessors, by index"
                )
            for j, i in enumerate(omap):
                pspec = self.specs[int(preds[i])]
                if pspec is not None and pspec.out_shape != spec.in_shapes[j]:
                    raise GraphError(
                        f"node {self.names[v]!r}: operand {j} comes from {self.names[int(preds[i])]!r} "
                        f"of shape {pspec.out_shape}, expected {spec.in_shapes[j]}"
                    )

    def _validate_stored(self) -> None:
        """Operand dtypes agree with their producers; stored inputs have values (when the
        tensors are in memory: a file-backed store is checked when it is read)."""
        assert self.specs is not None
        for v, spec in enumerate(self.specs):
            if spec is None or spec.in_dtypes is None:
                continue
            preds = self.predecessors(v)
            omap = spec.operand_map or tuple(range(len(preds)))
            for j, i in enumerate(omap):
                pspec = self.specs[int(preds[i])]
                if pspec is not None and pspec.dtype != spec.in_dtypes[j]:
                    raise GraphError(
                        f"node {self.names[v]!r}: operand {j} comes from {self.names[int(preds[i])]!r} "
                        f"of dtype {pspec.dtype}, expected {spec.in_dtypes[j]}"
                    )
        stored = [
            v
            for v, s in enumerate(self.specs)
            if s is not None and s.kind == "input" and s.op == "stored"
        ]
        if not stored or self.tensors is None or not self.tensors.loaded:
            return  # values attached later (a builder, a reader) or read lazily from a file
        values = self.tensors.inputs
        for v in stored:
            t = values.get(self.names[v])
            spec = self.specs[v]
            if t is None:
                raise GraphError(
                    f"graph {self.name!r}: stored input {self.names[v]!r} has no value "
                    "(the graph carries no tensor of that name)"
                )
            if (
                tuple(t.shape) != spec.out_shape
                or str(t.dtype).removeprefix("torch.") != spec.dtype
            ):
                raise GraphError(
                    f"graph {self.name!r}: stored input {self.names[v]!r} is {tuple(t.shape)} "
                    f"{str(t.dtype).removeprefix('torch.')}, expected {spec.out_shape} {spec.dtype}"
                )

    @property
    def stored_inputs(self) -> dict[int, Any]:
        """Values of the stored input nodes, node id -> tensor (empty when there are none)."""
        return self._by_id(self.tensors.inputs if self.tensors is not None else {})

    @property
    def expected_outputs(self) -> dict[int, Any]:
        """Expected values of output nodes recorded at import, node id -> tensor."""
        return self._by_id(self.tensors.expected if self.tensors is not None else {})

    def _by_id(self, values: Mapping[str, Any]) -> dict[int, Any]:
        return {v: values[n] for v, n in enumerate(self.names) if n in values}

    # -- sizes and adjacency ----------------------------------------------------------------
    @property
    def num_nodes(self) -> int:
        return len(self.names)

    @property
    def num_edges(self) -> int:
        return int(self.edge_src.shape[0])

    @cached_property
    def structure_digest(self) -> str:
        """``sha256:`` and 16 hex digits identifying the graph a placement fits: the node names
        in order, their kinds and the set of edges. Costs, flops, sizes, specs, the graph's
        name and meta are left out, so a recalibrated or renamed graph keeps its placements
        while one with other nodes, another order or other edges does not."""
        import hashlib
        import json

        edges = sorted({(int(u), int(v)) for u, v in zip(self.edge_src, self.edge_dst)})
        doc = {
            "names": list(self.names),
            "kinds": [NODE_KINDS[int(k)] for k in self.kinds],
            "edges": edges,
        }
        text = json.dumps(doc, separators=(",", ":"), ensure_ascii=True)
        return "sha256:" + hashlib.sha256(text.encode()).hexdigest()[:16]

    @cached_property
    def is_input(self) -> np.ndarray:
        """Boolean mask of input nodes."""
        return _readonly(self.kinds == INPUT)

    @cached_property
    def compute_nodes(self) -> np.ndarray:
        """Ids of the nodes that are placed and timed (every node but inputs)."""
        return _readonly(np.flatnonzero(~self.is_input))

    @property
    def is_executable(self) -> bool:
        """True when every node has an op spec."""
        return self.specs is not None and all(s is not None for s in self.specs)

    @cached_property
    def _succ(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        return _csr(self.num_nodes, self.edge_src, self.edge_dst)

    @cached_property
    def _pred(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        return _csr(self.num_nodes, self.edge_dst, self.edge_src)

    @property
    def succ_ptr(self) -> np.ndarray:
        """CSR row pointer of successors (out-edges of ``v`` in edge-id order)."""
        return self._succ[0]

    @property
    def succ_idx(self) -> np.ndarray:
        return self._succ[1]

    @property
    def succ_eid(self) -> np.ndarray:
        """Edge id of each CSR successor slot."""
        return self._succ[2]

    @property
    def pred_ptr(self) -> np.ndarray:
        return self._pred[0]

    @property
    def pred_idx(self) -> np.ndarray:
        return self._pred[1]

    @property
    def pred_eid(self) -> np.ndarray:
        return self._pred[2]

    def predecessors(self, v: int) -> np.ndarray:
        """Predecessors of ``v`` in operand order."""
        return self.pred_idx[self.pred_ptr[v] : self.pred_ptr[v + 1]]

    def successors(self, v: int) -> np.ndarray:
        return self.succ_idx[self.succ_ptr[v] : self.succ_ptr[v + 1]]

    @cached_property
    def in_degree(self) -> np.ndarray:
        return _readonly(np.diff(self.pred_ptr))

    @cached_property
    def out_degree(self) -> np.ndarray:
        return _readonly(np.diff(self.succ_ptr))

    @cached_property
    def topo_order(self) -> np.ndarray:
        """A topological order (Kahn, FIFO seeded in id order); shorter than N iff cyclic."""
        order = _kahn(self.num_nodes, self.succ_ptr, self.succ_idx, self.in_degree)
        return _readonly(order)

    @cached_property
    def depth(self) -> np.ndarray:
        """Longest number of edges from a source to each node, counting only compute nodes."""
        ones = (~self.is_input).astype(np.float64)
        zeros = np.zeros(self.num_edges)
        t = _t_levels(self.topo_order, self.pred_ptr, self.pred_idx, self.pred_eid, ones, zeros)
        return _readonly(t.astype(np.int64))

    # -- costs ------------------------------------------------------------------------------
    def node_cost(self) -> np.ndarray:
        """Default per-node cost for structural analysis: explicit compute cost (mean over
        devices) if present, else flops. Input nodes cost 0."""
        if self.compute_cost is not None:
            c = self.compute_cost if self.compute_cost.ndim == 1 else self.compute_cost.mean(axis=1)
        else:
            c = self.flops
        return np.where(self.is_input, 0.0, c)

    def edge_comm_cost(self) -> np.ndarray:
        """Default per-edge cost: explicit edge cost if present, else the source's output bytes.
        Edges out of input nodes cost 0 (inputs are resident where consumed)."""
        c = self.edge_cost if self.edge_cost is not None else self.out_bytes[self.edge_src]
        return np.where(self.is_input[self.edge_src], 0.0, c)

    def t_level(
        self, node_cost: np.ndarray | None = None, edge_cost: np.ndarray | None = None
    ) -> np.ndarray:
        """Longest path from a source to each node, excluding the node's own cost.

        ``t(v) = max over preds u of t(u) + w(u) + c(u, v)``; defaults from :meth:`node_cost`
        and :meth:`edge_comm_cost`.
        """
        w, c = self._costs(node_cost, edge_cost)
        return _t_levels(self.topo_order, self.pred_ptr, self.pred_idx, self.pred_eid, w, c)

    def b_level(
        self, node_cost: np.ndarray | None = None, edge_cost: np.ndarray | None = None
    ) -> np.ndarray:
        """Longest path from each node to a sink, including the node's own cost.

        ``b(v) = w(v) + max over succs s of c(v, s) + b(s)``.
        """
        w, c = self._costs(node_cost, edge_cost)
        return _b_levels(self.topo_order, self.succ_ptr, self.succ_idx, self.succ_eid, w, c)

    def critical_path(
        self, node_cost: np.ndarray | None = None, edge_cost: np.ndarray | None = None
    ) -> np.ndarray:
        """Node ids of a longest source-to-sink path (ties: smallest id)."""
        w, c = self._costs(node_cost, edge_cost)
        b = _b_levels(self.topo_order, self.succ_ptr, self.succ_idx, self.succ_eid, w, c)
        comp = self.compute_nodes
        v = int(comp[np.argmax(b[comp])])  # b-levels only grow towards sources
        path = [v]
        while self.succ_ptr[v + 1] > self.succ_ptr[v]:
            lo, hi = self.succ_ptr[v], self.succ_ptr[v + 1]
            vals = c[self.succ_eid[lo:hi]] + b[self.succ_idx[lo:hi]]
            v = int(self.succ_idx[lo + int(np.argmax(vals))])
            path.append(v)
        return np.array(path, dtype=np.int64)

    def _costs(
        self, node_cost: np.ndarray | None, edge_cost: np.ndarray | None
    ) -> tuple[np.ndarray, np.ndarray]:
        w = self.node_cost() if node_cost is None else np.asarray(node_cost, dtype=np.float64)
        c = self.edge_comm_cost() if edge_cost is None else np.asarray(edge_cost, dtype=np.float64)
        if w.shape != (self.num_nodes,):
            raise GraphError(f"node_cost has shape {w.shape}, expected ({self.num_nodes},)")
        if c.shape != (self.num_edges,):
            raise GraphError(f"edge_cost has shape {c.shape}, expected ({self.num_edges},)")
        return w, c

    # -- conversions ------------------------------------------------------------------------
    def kind_name(self, v: int) -> str:
        return NODE_KINDS[int(self.kinds[v])]

    def summary(self) -> dict[str, Any]:
        """Sizes and structure, for tables."""
        comp = self.compute_nodes
        w = self.node_cost()
        return {
            "name": self.name,
            "nodes": self.num_nodes,
            "compute_nodes": int(comp.size),
            "inputs": int(self.is_input.sum()),
            "edges": self.num_edges,
            "depth": int(self.depth.max()) + 1 if comp.size else 0,
            "sinks": int(np.sum((self.out_degree == 0) & ~self.is_input)),
            "total_flops": float(self.flops[comp].sum()),
            "critical_path_len": int(self.critical_path(w, np.zeros(self.num_edges)).size),
            "executable": self.is_executable,
        }

    def to_networkx(self):
        """A ``networkx.DiGraph`` with node attributes (name, kind, flops, out_bytes[, cost])
        and edge attributes (eid[, cost])."""
        nx = require("networkx", "DataflowGraph.to_networkx")

        g = nx.DiGraph(name=self.name)
        for v in range(self.num_nodes):
            attrs: dict[str, Any] = {
                "name": self.names[v],
                "kind": self.kind_name(v),
                "flops": float(self.flops[v]),
                "out_bytes": float(self.out_bytes[v]),
            }
            if self.compute_cost is not None:
                attrs["cost"] = (
                    self.compute_cost[v].tolist()
                    if self.compute_cost.ndim == 2
                    else float(self.compute_cost[v])
                )
            g.add_node(v, **attrs)
        for k in range(self.num_edges):
            attrs = {"eid": k}
            if self.edge_cost is not None:
                attrs["cost"] = float(self.edge_cost[k])
            g.add_edge(int(self.edge_src[k]), int(self.edge_dst[k]), **attrs)
        return g

    def to_pyg(self):
        """A ``torch_geometric.data.Data`` with ``edge_index``, ``flops``, ``out_bytes``,
        ``kind`` and ``node_cost`` (imports torch lazily)."""
        import torch

        require("torch_geometric.data", "DataflowGraph.to_pyg")
        from torch_geometric.data import Data

        return Data(
            edge_index=torch.from_numpy(np.stack([self.edge_src, self.edge_dst]).copy()),
            num_nodes=self.num_nodes,
            flops=torch.from_numpy(self.flops.copy()),
            out_bytes=torch.from_numpy(self.out_bytes.copy()),
            kind=torch.from_numpy(self.kinds.astype(np.int64)),
            node_cost=torch.from_numpy(self.node_cost()),
        )

    def with_costs(
        self,
        compute_cost: np.ndarray | None = None,
        edge_cost: np.ndarray | None = None,
        time_scale: float | None = None,
    ) -> DataflowGraph:
        """A copy with other explicit costs."""
        return DataflowGraph(
            names=self.names,
            kinds=self.kinds,
            flops=self.flops,
            out_bytes=self.out_bytes,
            edge_src=self.edge_src,
            edge_dst=self.edge_dst,
            specs=self.specs,
            compute_cost=compute_cost,
            edge_cost=edge_cost,
            time_scale=self.time_scale if time_scale is None else time_scale,
            name=self.name,
            meta=self.meta,
            tensors=self.tensors,
            time_unit=self.time_unit,
        )

    def __repr__(self) -> str:
        return (
            f"DataflowGraph(name={self.name!r}, nodes={self.num_nodes}, "
            f"inputs={int(self.is_input.sum())}, edges={self.num_edges})"
        )


def cost_graph(
    compute_cost: np.ndarray,
    comm_cost: np.ndarray,
    edge_src: np.ndarray,
    edge_dst: np.ndarray,
    name: str = "graph",
    names: Sequence[str] | None = None,
    time_scale: float = 1.0,
    meta: Mapping[str, Any] | None = None,
    time_unit: str = COST_UNITS,
) -> DataflowGraph:
    """A cost-only graph in the paper's style: node v computes for ``compute_cost[v]`` and its
    output costs ``comm_cost[v]`` to move to another device (every out-edge of v costs that).
    ``flops`` and ``out_bytes`` mirror the two costs so structural tools have something to read.
    Its makespans are in abstract :data:`COST_UNITS` unless ``time_unit`` says seconds.
    """
    comp = np.asarray(compute_cost, dtype=np.float64)
    comm = np.asarray(comm_cost, dtype=np.float64)
    src = np.asarray(edge_src, dtype=np.int64)
    n = comp.shape[0]
    if comm.shape != (n,):
        raise GraphError(f"graph {name!r}: comm_cost has shape {comm.shape}, expected ({n},)")
    return DataflowGraph(
        names=tuple(names) if names is not None else tuple(f"n{i}" for i in range(n)),
        kinds=np.full(n, KIND_CODE["compute"], dtype=np.int8),
        flops=comp.copy(),
        out_bytes=comm.copy(),
        edge_src=src,
        edge_dst=np.asarray(edge_dst, dtype=np.int64),
        compute_cost=comp,
        edge_cost=comm[src] if src.size else np.zeros(0),
        time_scale=time_scale,
        name=name,
        meta=meta or {},
        time_unit=time_unit,
    )


class GraphBuilder:
    """Builds a :class:`DataflowGraph` node by node, inferring shapes, flops and bytes.

    Example:
        >>> b = GraphBuilder("tiny")
        >>> x = b.add_input("x", (4, 8))
        >>> w = b.add_input("w", (8, 2))
        >>> y = b.add_einsum("y", "ij,jk->ik", [x, w])
        >>> g = b.build()
        >>> g.num_nodes, float(g.flops[y])
        (3, 128.0)
    """

    def __init__(self, name: str = "graph", meta: Mapping[str, Any] | None = None):
        self.name = name
        self.meta = dict(meta or {})
        self._names: list[str] = []
        self._index: dict[str, int] = {}
        self._kinds: list[int] = []
        self._flops: list[float] = []
        self._bytes: list[float] = []
        self._specs: list[OpSpec | None] = []
        self._costs: list[Any] = []
        self._src: list[int] = []
        self._dst: list[int] = []
        self._edge_costs: list[float | None] = []

    def __len__(self) -> int:
        return len(self._names)

    def node_id(self, name: str) -> int:
        return self._index[name]

    def spec(self, v: int) -> OpSpec | None:
        return self._specs[v]

    def add_node(
        self,
        name: str,
        kind: str = "compute",
        flops: float = 0.0,
        out_bytes: float = 0.0,
        inputs: Sequence[int] = (),
        spec: OpSpec | None = None,
        cost: float | Sequence[float] | None = None,
        edge_costs: Sequence[float] | None = None,
    ) -> int:
        """Add a node fed by ``inputs`` (node ids, in operand order); returns its id."""
        if kind not in KIND_CODE:
            raise GraphError(f"node {name!r}: unknown kind {kind!r}; expected one of {NODE_KINDS}")
        if name in self._index:
            raise GraphError(f"graph {self.name!r}: node name {name!r} is used twice")
        v = len(self._names)
        if v >= MAX_NODES or len(self._src) + len(inputs) > MAX_EDGES:
            limit = "MAX_NODES" if v >= MAX_NODES else "MAX_EDGES"
            raise GraphError(
                f"graph {self.name!r} grows past {LIMITS[limit]} "
                f"{'nodes' if v >= MAX_NODES else 'edges'} (doppler_lab.house.limits.{limit})"
            )
        for u in inputs:
            if not 0 <= u < v:
                raise GraphError(
                    f"node {name!r}: input id {u} is not an existing node (0..{v - 1})"
                )
        if edge_costs is not None and len(edge_costs) != len(inputs):
            raise GraphError(
                f"node {name!r}: {len(edge_costs)} edge costs for {len(inputs)} inputs"
            )
        self._names.append(name)
        self._index[name] = v
        self._kinds.append(KIND_CODE[kind])
        self._flops.append(float(flops))
        self._bytes.append(float(out_bytes))
        self._specs.append(spec)
        self._costs.append(cost)
        for j, u in enumerate(inputs):
            self._src.append(int(u))
            self._dst.append(v)
            self._edge_costs.append(None if edge_costs is None else float(edge_costs[j]))
        return v

    def add_edge(self, src: int, dst: int, cost: float | None = None) -> None:
        """Add a dependency between existing nodes (for cost-only graphs)."""
        n = len(self._names)
        if not (0 <= src < n and 0 <= dst < n):
            raise GraphError(f"edge {src} -> {dst}: expected node ids in 0..{n - 1}")
        if len(self._src) >= MAX_EDGES:
            raise GraphError(
                f"graph {self.name!r} grows past {MAX_EDGES} edges (doppler_lab.house.limits.MAX_EDGES)"
            )
        self._src.append(int(src))
        self._dst.append(int(dst))
        self._edge_costs.append(None if cost is None else float(cost))

    def _add_spec(self, name: str, spec: OpSpec, inputs: Sequence[int]) -> int:
        return self.add_node(name, spec.kind, spec.flops, spec.out_bytes, inputs, spec)

    def _shape(self, u: int) -> tuple[int, ...]:
        s = self._specs[u]
        if s is None:
            raise GraphError(f"node {self._names[u]!r} has no op spec, so its shape is unknown")
        return s.out_shape

    def _dtype(self, inputs: Sequence[int], dtype: str | None) -> str:
        if dtype is not None:
            return dtype
        return self._specs[inputs[0]].dtype if inputs and self._specs[inputs[0]] else "float32"

    def add_input(
        self, name: str, shape: Sequence[int], dtype: str = "float32", init: str = "normal"
    ) -> int:
        return self._add_spec(name, OpSpec("input", init, (), tuple(shape), dtype), ())

    def add_einsum(
        self, name: str, equation: str, inputs: Sequence[int], dtype: str | None = None
    ) -> int:
        from .ops import parse_einsum

        try:
            operands, out = parse_einsum(equation)
        except ValueError as exc:
            raise GraphError(f"node {name!r}: {exc}") from None
        shapes = [self._shape(u) for u in inputs]
        if len(operands) != len(shapes):
            raise GraphError(
                f"node {name!r}: equation {equation!r} takes {len(operands)} operands, got {len(shapes)}"
            )
        sizes: dict[str, int] = {}
        for term, shape in zip(operands, shapes):
            if len(term) != len(shape):
                raise GraphError(f"node {name!r}: operand {term!r} does not fit shape {shape}")
            sizes.update(zip(term, shape))
        out_shape = tuple(sizes[c] for c in out)
        spec = OpSpec("einsum", equation, tuple(shapes), out_shape, self._dtype(inputs, dtype))
        return self._add_spec(name, spec, inputs)

    def add_elementwise(
        self,
        name: str,
        op: str,
        inputs: Sequence[int],
        params: Mapping[str, Any] | None = None,
        dtype: str | None = None,
    ) -> int:
        shapes = [self._shape(u) for u in inputs]
        try:
            out_shape = broadcast_shape(shapes)
        except ValueError as exc:
            raise GraphError(f"node {name!r}: {exc}") from None
        spec = OpSpec(
            "elementwise", op, tuple(shapes), out_shape, self._dtype(inputs, dtype), params or {}
        )
        return self._add_spec(name, spec, inputs)

    def add_reduce(
        self, name: str, op: str, inp: int, dims: Sequence[int], keepdim: bool = False
    ) -> int:
        shape = self._shape(inp)
        dd = {int(d) % len(shape) for d in dims}
        out = (
            tuple(1 if i in dd else s for i, s in enumerate(shape))
            if keepdim
            else tuple(s for i, s in enumerate(shape) if i not in dd)
        )
        spec = OpSpec(
            "reduce",
            op,
            (shape,),
            out,
            self._dtype([inp], None),
            {"dims": list(dims), "keepdim": keepdim},
        )
        return self._add_spec(name, spec, [inp])

    def add_torch(
        self,
        name: str,
        op: str,
        inputs: Sequence[int],
        out_shape: Sequence[int],
        flops: float,
        params: Mapping[str, Any] | None = None,
        dtype: str | None = None,
    ) -> int:
        shapes = tuple(self._shape(u) for u in inputs)
        spec = OpSpec(
            "torch",
            op,
            shapes,
            tuple(out_shape),
            self._dtype(inputs, dtype),
            params or {},
            None,
            flops,
        )
        return self._add_spec(name, spec, inputs)

    def build(self, time_scale: float = 1.0) -> DataflowGraph:
        if not self._names:
            raise GraphError(f"graph {self.name!r} has no nodes")
        specs = tuple(self._specs) if any(s is not None for s in self._specs) else None
        compute_cost = None
        if any(c is not None for c in self._costs):
            missing = [
                self._names[v]
                for v, c in enumerate(self._costs)
                if c is None and self._kinds[v] != INPUT
            ]
            if missing:
                raise GraphError(
                    f"graph {self.name!r}: node {missing[0]!r} has no explicit cost while others do; "
                    "give every non-input node a cost or none"
                )
            first = next(v for v, c in enumerate(self._costs) if c is not None)
            width = np.size(self._costs[first]) if np.ndim(self._costs[first]) else None
            for v, c in enumerate(self._costs):
                if c is None:
                    continue
                w = np.size(c) if np.ndim(c) else None
                if w != width:
                    expected = f"a list of {width} per-device costs" if width else "a scalar cost"
                    got = f"a per-device cost list of length {w}" if w else "a scalar cost"
                    raise GraphError(
                        f"graph {self.name!r}: node {self._names[v]!r} has {got}, expected {expected} "
                        f"like node {self._names[first]!r}"
                    )
            zero = 0.0 if width is None else [0.0] * width
            compute_cost = np.array(
                [zero if c is None else c for c in self._costs], dtype=np.float64
            )
        edge_cost = None
        if any(c is not None for c in self._edge_costs):
            if any(c is None for c in self._edge_costs):
                k = self._edge_costs.index(None)
                raise GraphError(
                    f"graph {self.name!r}: edge {self._names[self._src[k]]!r} -> {self._names[self._dst[k]]!r} "
                    "has no explicit cost while others do"
                )
            edge_cost = np.array(self._edge_costs, dtype=np.float64)
        return DataflowGraph(
            names=tuple(self._names),
            kinds=np.array(self._kinds, dtype=np.int8),
            flops=np.array(self._flops),
            out_bytes=np.array(self._bytes),
            edge_src=np.array(self._src, dtype=np.int64),
            edge_dst=np.array(self._dst, dtype=np.int64),
            specs=specs,
            compute_cost=compute_cost,
            edge_cost=edge_cost,
            time_scale=time_scale,
            name=self.name,
            meta=self.meta,
        )
