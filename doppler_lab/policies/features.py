"""Static node and edge features of a graph, and device-feature normalisation (numpy only).

A learned policy sees the *compute-node subgraph*: input nodes are never placed, so they are
dropped and nodes get local ids ``0..n-1`` (:attr:`GraphFeatures.nodes` maps local to global).

Feature layouts (recorded in every checkpoint, checked on load):

- ``doppler5`` (the released code): node features compute cost, b-level, t-level (including the
  node's own cost), total incoming communication, total outgoing communication, each z-scored
  over the graph; one edge feature (the communication cost of the edge, z-scored), messages in
  both directions; the five device features of :mod:`doppler_lab.timing.schedule`, z-scored over the
  devices at each step.
- ``doppler9`` (ours): the same node and edge features plus an edge direction flag; the five
  device features in units of the graph's lower bound (start/finish times relative to the
  earliest start of the node), plus four: the transfer time the node would wait for on the
  device (incoming edges from other devices), the fraction of its predecessors' compute already
  there, a one-hot of the minimum earliest start, and the co-producer affinity: the mean
  transfer cost of the edges into the node's successors from other producers already on the
  device (a successor is cheapest where its inputs are, so this looks one step ahead).
- ``doppler10`` (ours): ``doppler9`` plus the cluster share: the node's *cluster* is its group
  in the edge-zeroing clustering of :mod:`doppler_lab.placers.clustering` (step 1, run once per
  graph and cluster: the chains of heavy tensors a DAG scheduler keeps together when transfers
  cost as much as compute); the feature is the share of the compute of the node's cluster-mates
  already placed that is on the device (0 everywhere while none is placed). It lets PLC say
  "where my cluster is" with one weight, which the other features could not: a policy without
  it gave the clustering's placements about 0.5-0.7 of its probability however long it imitated
  them. Graphs with more ops than
  :data:`~doppler_lab.placers.clustering.CLUSTER_MAX_OPS` get singleton clusters (the feature
  is 0) rather than the clustering's quadratic cost.
- ``doppler11`` (ours): ``doppler10`` plus the memory headroom: the share of the device's memory
  cap still free if the node went there, ``(cap - bound - need) / cap`` clipped to [-1, 1], the
  bound being the running static bound of the placement so far and ``need`` what the node would
  add (:meth:`~doppler_lab.timing.fit.MemoryGuard.headroom`). 1 on every device where no
  cap can bind (the kernels write 1; a rollout with an active memory guard writes the headroom
  over it), so a widened ``doppler10`` policy places as before on unconstrained graphs.
- ``doppler12`` (ours): ``doppler11`` plus the clustering's device: 1 on the device where the
  whole ``clustering`` placer (:func:`~doppler_lab.placers.clustering.clustering_devices`:
  Sarkar's edge zeroing, then the mapping of the clusters onto the devices; run once per graph
  and cluster) puts the node, 0 elsewhere (0 everywhere above
  :data:`~doppler_lab.placers.clustering.CLUSTER_MAX_OPS` ops). A heuristic in the loop, as in
  PPO-BiHyb and GiPH: the policy can copy the clustering's placement with one weight and leave
  it where its own choices are better. A policy that reads it is not independent of the
  clustering: report it as such. The column is the *hinted heuristic's* device: the
  clustering's by default, or another placer's (:data:`HINTS`: ``partition``, the METIS
  partition placer's placement) when a context is built with ``hint="partition"``; a policy
  trained with several hints (``train-general --hints``) places once with each and once
  without (:func:`~doppler_lab.search.proposals.policy_candidates`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cached_property
from typing import NamedTuple

import numpy as np
from numba import njit

from ..hardware.rules import transfer_time
from ..house.errors import ConfigError
from ..ir.graph import DataflowGraph
from ..placers.clustering import ClusteringModel, cluster_arrays
from ..timing.cost_model import CostModel
from ..timing.schedule import ListScheduleState, graph_parts

NODE_FEATURES: tuple[str, ...] = ("compute", "b_level", "t_level", "in_comm", "out_comm")


@dataclass(frozen=True)
class FeatureLayout:
    """Which features a policy reads; part of a checkpoint's identity.

    Attributes:
        name: the layout's name.
        node: node feature names.
        edge: edge feature names.
        device: device feature names.
        device_norm: ``zscore`` (over devices, per step) or ``scaled`` (lower-bound units).
    """

    name: str
    node: tuple[str, ...]
    edge: tuple[str, ...]
    device: tuple[str, ...]
    device_norm: str

    def __post_init__(self) -> None:
        if self.device_norm not in ("zscore", "scaled"):
            raise ConfigError(
                f"feature layout {self.name!r}: device_norm {self.device_norm!r}, "
                "expected 'zscore' or 'scaled'"
            )

    @property
    def node_dim(self) -> int:
        return len(self.node)

    @property
    def edge_dim(self) -> int:
        return len(self.edge)

    @property
    def device_dim(self) -> int:
        return len(self.device)

    def to_dict(self) -> dict[str, object]:
        return {
            "name": self.name,
            "node": list(self.node),
            "edge": list(self.edge),
            "device": list(self.device),
            "device_norm": self.device_norm,
        }


_DEV5 = ("load", "pred_compute", "pred_min_start", "pred_max_finish", "est")
LAYOUTS: dict[str, FeatureLayout] = {
    "doppler5": FeatureLayout("doppler5", NODE_FEATURES, ("comm",), _DEV5, "zscore"),
    "doppler9": FeatureLayout(
        "doppler9",
        NODE_FEATURES,
        ("comm", "backward"),
        _DEV5 + ("wait_transfer", "pred_share", "is_min_est", "coproducer_comm"),
        "scaled",
    ),
    "doppler10": FeatureLayout(
        "doppler10",
        NODE_FEATURES,
        ("comm", "backward"),
        _DEV5 + ("wait_transfer", "pred_share", "is_min_est", "coproducer_comm", "cluster_share"),
        "scaled",
    ),
    "doppler11": FeatureLayout(
        "doppler11",
        NODE_FEATURES,
        ("comm", "backward"),
        _DEV5
        + ("wait_transfer", "pred_share", "is_min_est", "coproducer_comm", "cluster_share")
        + ("memory_headroom",),
        "scaled",
    ),
    "doppler12": FeatureLayout(
        "doppler12",
        NODE_FEATURES,
        ("comm", "backward"),
        _DEV5
        + ("wait_transfer", "pred_share", "is_min_est", "coproducer_comm", "cluster_share")
        + ("memory_headroom", "clustering_device"),
        "scaled",
    ),
}
#: the device-feature column of the memory headroom (``doppler11``)
MEMORY_HEADROOM = 10


def get_layout(name: str) -> FeatureLayout:
    """The :class:`FeatureLayout` called ``name``."""
    if name not in LAYOUTS:
        raise ConfigError(f"unknown feature layout {name!r}; expected one of {sorted(LAYOUTS)}")
    return LAYOUTS[name]


def zscore(x: np.ndarray, axis: int = 0, eps: float = 1e-6) -> np.ndarray:
    """``(x - mean) / (std + eps)`` along ``axis`` (population std)."""
    mean = x.mean(axis=axis, keepdims=True)
    std = x.std(axis=axis, keepdims=True)
    return (x - mean) / (std + eps)


def _critical_next(n: int, src: np.ndarray, dst: np.ndarray, value: np.ndarray) -> np.ndarray:
    """For each node u, the ``dst`` of its edge (u -> dst) of largest ``value`` (ties: first
    edge); ``n`` for nodes without edges."""
    nxt = np.full(n, n, dtype=np.int64)
    if src.size == 0:
        return nxt
    order = np.lexsort((np.arange(src.size), -value, src))
    first = np.ones(order.size, dtype=bool)
    first[1:] = src[order][1:] != src[order][:-1]
    pick = order[first]
    nxt[src[pick]] = dst[pick]
    return nxt


def pointer_doubling(nxt: np.ndarray) -> list[np.ndarray]:
    """Jump tables for summing along ``nxt`` chains in ``O(log L)`` gathers.

    ``nxt`` has ``n`` entries in ``0..n`` (``n`` = end of chain). Returns ``[j_0, j_1, ...]`` with
    ``j_k[i]`` the node ``2^k`` hops after ``i`` (a sentinel row ``n`` maps to itself), as many as
    the longest chain needs. With ``S_0 = X`` (plus a zero sentinel row) and
    ``S_{k+1} = S_k + S_k[j_k]``, the last ``S`` holds the sum of ``X`` along each chain.
    """
    n = nxt.size
    jump = np.append(nxt, n).astype(np.int64)
    tables = []
    while np.any(jump[:n] != n):
        tables.append(jump.copy())
        jump = jump[jump]
    return tables


@dataclass(frozen=True, eq=False)
class GraphFeatures:
    """Static per-graph arrays of the compute-node subgraph (local ids).

    Attributes:
        graph: the graph.
        nodes: ``(n,)`` global id of each local node.
        local: ``(N,)`` local id of each global node (-1 for inputs).
        x: ``(n, F_node)`` node features, float32, z-scored.
        edge_index: ``(2, E')`` message edges (local ids; both directions).
        edge_attr: ``(E', F_edge)`` edge features, float32.
        b_level: ``(n,)`` raw b-levels (the teacher's priority).
        b_jumps, t_jumps: pointer-doubling tables along each node's b-level (critical) path to a
            sink and its t-level path from a source (see :func:`pointer_doubling`).
        topo: ``(n,)`` local ids in topological order.
        time_unit: the graph's makespan lower bound (raw units), the scale of ``scaled``
            device features.
        extra: what the extended device features read besides the schedule
            (:func:`feature_args`): the mean transfer cost per edge, and for ``doppler10`` each
            node's cluster index ``(N,)`` (-1: input), the clusters' members (CSR ``ptr``,
            ``members``) and the mean compute per node; empty arrays otherwise.
    """

    graph: DataflowGraph
    nodes: np.ndarray
    local: np.ndarray
    x: np.ndarray
    edge_index: np.ndarray
    edge_attr: np.ndarray
    b_level: np.ndarray
    b_jumps: list[np.ndarray]
    t_jumps: list[np.ndarray]
    topo: np.ndarray
    time_unit: float
    layout: FeatureLayout
    extra: tuple = ()

    @property
    def num_nodes(self) -> int:
        return int(self.nodes.size)

    @cached_property
    def fwd_edges(self) -> tuple[np.ndarray, np.ndarray]:
        """Forward (dependency) edges among compute nodes, local ids."""
        g = self.graph
        keep = ~g.is_input[g.edge_src]
        return self.local[g.edge_src[keep]], self.local[g.edge_dst[keep]]


#: the heuristics whose placement a ``doppler12`` context can carry in ``clustering_device``
#: (:func:`hint_name`): the ``clustering`` placer's (the default) and the ``partition`` placer's
HINTS: tuple[str, ...] = ("clustering", "partition")


def hint_name(hint: bool | str | None) -> str | None:
    """The heuristic a context's hint names: True (or 1) -> ``clustering``, False (0), None or
    ``none`` -> None (no hint), a name of :data:`HINTS` -> itself.

    Raises:
        ConfigError: another value, named with the expected ones.
    """
    if isinstance(hint, (bool, np.bool_, int, np.integer)) and hint in (0, 1):
        return "clustering" if hint else None
    if hint is None or hint == "none":
        return None
    if isinstance(hint, str) and hint in HINTS:
        return hint
    raise ConfigError(f"hint {hint!r}: expected one of {', '.join(HINTS)}, none, True or False")


def hint_names(value: object, what: str) -> tuple[str, ...]:
    """``value`` as the hints a policy places with, each a name of :data:`HINTS` once: a list
    or tuple of names, or text, comma- or ``+``-separated (``none``: no hint at all, an empty
    tuple). The one check of hint lists (checkpoints, the ``doppler`` placer's option,
    ``train-general --hints``).

    Raises:
        ConfigError: naming ``what``, the bad name and what was expected.

    Example:
        >>> hint_names("clustering+partition", "hints"), hint_names("none", "hints")
        (('clustering', 'partition'), ())
    """
    names = value
    if isinstance(value, str):
        names = [] if value.strip() == "none" else [t.strip() for t in re.split(r"[,+]", value)]
    if not isinstance(names, (list, tuple)):
        raise ConfigError(
            f"{what} = {value!r}: expected distinct names among {', '.join(HINTS)} (or none)"
        )
    bad = [n for n in names if n not in HINTS]
    if bad or len(set(names)) != len(names):
        why = f"{bad[0]!r} is none of them" if bad else "one is repeated"
        raise ConfigError(
            f"{what} = {value!r}: expected distinct names among {', '.join(HINTS)} (or none); {why}"
        )
    return tuple(names)


def hint_devices(
    graph: DataflowGraph,
    cost: CostModel,
    hint: bool | str | None,
    model: ClusteringModel | None = None,
) -> np.ndarray:
    """``(N,)`` the device the hinted heuristic (:func:`hint_name`) gives each node, -1 everywhere
    without a hint, above :data:`~doppler_lab.placers.clustering.CLUSTER_MAX_OPS` ops, or for
    ``partition`` without ``pymetis`` (said once on stderr). ``partition``: the placer with its
    defaults (the best of 8 METIS partitions under the paper's semantics), as the bench tables
    show it. ``model``: a :class:`~doppler_lab.placers.clustering.ClusteringModel` of the same
    graph and costs to reuse (its clusters)."""
    from ..placers.clustering import CLUSTER_MAX_OPS, clustering_devices

    name = hint_name(hint)
    none = np.full(graph.num_nodes, -1, dtype=np.int64)
    if name is None or int((~graph.is_input).sum()) > CLUSTER_MAX_OPS:
        return none
    if name == "clustering":
        devices = clustering_devices(graph, cost, model=model)[0]
        return np.ascontiguousarray(devices, dtype=np.int64)
    from ..house.deps import available, warn_once
    from ..placers.partition import PartitionPlacer

    if cost.cluster.num_devices > 1 and not available("pymetis"):
        warn_once(
            "the partition hint needs the package 'pymetis' (pip install pymetis), which is not "
            "installed: placing without it"
        )
        return none
    p = PartitionPlacer().place(graph, cost.cluster, np.random.default_rng(0))
    return np.ascontiguousarray(p.device, dtype=np.int64)


def graph_features(
    graph: DataflowGraph,
    cost: CostModel,
    layout: FeatureLayout,
    hint: bool | str | None = True,
) -> GraphFeatures:
    """Node features, message edges and path tables of ``graph`` under ``cost`` (``hint``: see
    :func:`feature_args`).

    Shapes:
        x: ``(n, layout.node_dim)``; edge_attr: ``(2 E_c, layout.edge_dim)`` where ``E_c`` is
        the number of edges between compute nodes.
    """
    g = graph
    nodes = g.compute_nodes.astype(np.int64)
    n = nodes.size
    local = np.full(g.num_nodes, -1, dtype=np.int64)
    local[nodes] = np.arange(n)
    w = cost.mean_compute
    c = cost.mean_edge_cost
    b = g.b_level(w, c)
    t = g.t_level(w, c) + w  # the released t-level includes the node's own cost
    keep = ~g.is_input[g.edge_src]
    es, ed, ec = g.edge_src[keep], g.edge_dst[keep], c[keep]
    in_comm = np.bincount(ed, weights=ec, minlength=g.num_nodes)
    out_comm = np.bincount(es, weights=ec, minlength=g.num_nodes)
    cols = {"compute": w, "b_level": b, "t_level": t, "in_comm": in_comm, "out_comm": out_comm}
    x = np.stack([cols[k][nodes] for k in layout.node], axis=1)
    x = zscore(x).astype(np.float32)
    ls, ld = local[es], local[ed]
    comm = zscore(ec.reshape(-1, 1)) if ec.size else ec.reshape(-1, 1)
    fwd = {"comm": comm[:, 0], "backward": np.zeros(ec.size)}
    bwd = {"comm": comm[:, 0], "backward": np.ones(ec.size)}
    edge_index = np.concatenate([np.stack([ls, ld]), np.stack([ld, ls])], axis=1)
    edge_attr = np.concatenate(
        [np.stack([fwd[k] for k in layout.edge], 1), np.stack([bwd[k] for k in layout.edge], 1)]
    ).astype(np.float32)
    # critical successor (b-level path) and critical predecessor (t-level path), local ids
    b_next = _critical_next(n, ls, ld, ec + b[ed])
    t_val = g.t_level(w, c)[es] + w[es] + ec
    t_next = _critical_next(n, ld, ls, t_val)
    topo_global = g.topo_order[~g.is_input[g.topo_order]]
    return GraphFeatures(
        graph=g,
        nodes=nodes,
        local=local,
        x=x,
        edge_index=edge_index.astype(np.int64),
        edge_attr=edge_attr.reshape(-1, layout.edge_dim),
        b_level=b[nodes],
        b_jumps=pointer_doubling(b_next),
        t_jumps=pointer_doubling(t_next),
        topo=local[topo_global],
        time_unit=max(cost.lower_bound(), 1e-30),
        layout=layout,
        extra=feature_args(g, cost, layout, hint),
    )


def uses_clusters(layout: FeatureLayout) -> bool:
    """Whether ``layout`` reads the clustering (the ``cluster_share`` device feature)."""
    return "cluster_share" in layout.device


def uses_clustering_device(layout: FeatureLayout) -> bool:
    """Whether ``layout`` reads the clustering placer's devices (``clustering_device``)."""
    return "clustering_device" in layout.device


class FeatureArgs(NamedTuple):
    """What :func:`extend_device_features` reads besides the schedule (passed as a plain tuple
    in this field order, :attr:`GraphFeatures.extra`, and named again on entry)."""

    edge_cost: np.ndarray  # (E,) mean transfer cost of each edge
    cluster_of: np.ndarray  # (N,) each node's cluster (-1: input; doppler10, else empty)
    cluster_ptr: np.ndarray  # CSR offsets of each cluster's members (doppler10)
    members: np.ndarray  # the clusters' members (doppler10)
    weight: np.ndarray  # (N,) mean compute per node (doppler10)
    heuristic: np.ndarray  # (N,) the hinted heuristic's device per node (doppler12, else empty)


def feature_args(
    graph: DataflowGraph,
    cost: CostModel,
    layout: FeatureLayout,
    hint: bool | str | None = True,
) -> tuple:
    """What :func:`extend_device_features` reads besides the schedule, a plain tuple in
    :class:`FeatureArgs`' field order (see :attr:`GraphFeatures.extra`). ``hint``: the heuristic
    whose devices a layout with ``clustering_device`` reads (:func:`hint_devices`; False: none,
    the feature is 0 everywhere)."""
    edge_cost = np.ascontiguousarray(cost.mean_edge_cost, dtype=np.float64)
    model = None  # one clustering model for the clusters and the clustering's hint (doppler12)
    if uses_clusters(layout) and uses_clustering_device(layout):
        model = ClusteringModel(graph, cost)
    if uses_clusters(layout):
        of, ptr, members = cluster_arrays(graph, cost, model)
        weight = np.ascontiguousarray(cost.mean_compute, dtype=np.float64)
    else:
        of, ptr, members = (np.zeros(0, dtype=np.int64),) * 3
        weight = np.zeros(0)
    heuristic = np.zeros(0, dtype=np.int64)
    if uses_clustering_device(layout):
        heuristic = hint_devices(graph, cost, hint, model)
    return tuple(FeatureArgs(edge_cost, of, ptr, members, weight, heuristic))


def normalize_device_features(f: np.ndarray, layout: FeatureLayout, time_unit: float) -> np.ndarray:
    """Normalise raw device features ``(..., D, F)`` (float64) for a policy (float32).

    ``zscore``: per feature over the D devices. ``scaled``: times and loads divided by
    ``time_unit``; start/finish times made relative to the smallest earliest start.
    """
    if layout.device_norm == "zscore":
        return zscore(f, axis=-2).astype(np.float32)
    out = np.empty(f.shape, dtype=np.float32)
    if out.size:
        shape = (-1, *f.shape[-2:])
        raw = np.ascontiguousarray(f, dtype=np.float64).reshape(shape)
        scale_device_features(raw, float(time_unit), out.reshape(shape))
    return out


@njit(cache=True)
def scale_device_features(f, time_unit, out):  # pragma: no cover - compiled
    """The ``scaled`` normalisation of raw device features ``f`` ``(B, D, F)`` (float64) into
    ``out`` (float32; see :func:`normalize_device_features`)."""
    ndev, nfeat = f.shape[1], f.shape[2]
    for b in range(f.shape[0]):
        ref = f[b, 0, 4] / time_unit  # the smallest earliest start
        for d in range(1, ndev):
            ref = min(ref, f[b, d, 4] / time_unit)
        for d in range(ndev):
            for j in range(nfeat):
                x = f[b, d, j] / time_unit
                if 2 <= j < 5:
                    x -= ref
                elif j == 6 or j == 7 or j >= 9:
                    x = f[b, d, j]  # shares, flags and the headroom are unit-free
                out[b, d, j] = x


@njit(cache=True)
def _wait_transfer(v, preds, device, edges, out):  # pragma: no cover - compiled
    """The transfer time ``v`` would wait for on each device, into ``out`` ``(D,)``
    (``preds``: :class:`~doppler_lab.timing.schedule.PredArrays`; ``edges``:
    :class:`~doppler_lab.timing.schedule.EdgeCosts`)."""
    pred_ptr, pred_idx, pred_eid, is_input = preds
    fixed, nbytes, lat, inv_bw = edges
    ndev = out.shape[0]
    for d in range(ndev):
        out[d] = 0.0
    for k in range(pred_ptr[v], pred_ptr[v + 1]):
        u = pred_idx[k]
        if is_input[u]:
            continue
        a = device[u]
        e = pred_eid[k]
        for d in range(ndev):
            if d != a:
                out[d] += transfer_time(fixed[e], lat[a, d], nbytes[e], inv_bw[a, d])


@njit(cache=True)
def _coproducers(v, succ_ptr, succ_idx, preds, device, edge_cost, out):  # pragma: no cover
    """The transfer cost of the edges into ``v``'s successors from their other placed
    producers, per device, into ``out`` ``(D,)`` (``preds``:
    :class:`~doppler_lab.timing.schedule.PredArrays`)."""
    pred_ptr, pred_idx, pred_eid, is_input = preds
    for d in range(out.shape[0]):
        out[d] = 0.0
    for k in range(succ_ptr[v], succ_ptr[v + 1]):
        w = succ_idx[k]
        for j in range(pred_ptr[w], pred_ptr[w + 1]):
            u = pred_idx[j]
            if u == v or is_input[u] or device[u] < 0:
                continue
            out[device[u]] += edge_cost[pred_eid[j]]


@njit("float64(float64[:], int64, int64)", cache=True)
def _pairwise_sum(x, lo, n):  # pragma: no cover - compiled
    """numpy's pairwise summation of ``x[lo:lo + n]`` (the order ``ndarray.sum`` adds in)."""
    if n < 8:
        res = 0.0
        for i in range(lo, lo + n):
            res += x[i]
        return res
    if n <= 128:
        r = x[lo : lo + 8].copy()
        i = 8
        while i < n - n % 8:
            for j in range(8):
                r[j] += x[lo + i + j]
            i += 8
        res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]))
        for j in range(lo + i, lo + n):
            res += x[j]
        return res
    half = n // 2
    half -= half % 8
    return _pairwise_sum(x, lo, half) + _pairwise_sum(x, lo + half, n - half)


@njit(cache=True)
def _cluster_share(v, of, ptr, members, weight, device, out):  # pragma: no cover - compiled
    """The share of the compute of ``v``'s placed cluster-mates on each device (by count when
    they compute nothing; 0 everywhere while none is placed)."""
    for d in range(out.shape[0]):
        out[d] = 0.0
    c = of[v]
    total = 0.0
    placed = 0
    for k in range(ptr[c], ptr[c + 1]):
        u = members[k]
        if device[u] >= 0:
            out[device[u]] += weight[u]
            total += weight[u]
            placed += 1
    if placed == 0:
        return
    if total > 0:
        for d in range(out.shape[0]):
            out[d] /= total
        return
    for k in range(ptr[c], ptr[c + 1]):
        u = members[k]
        if device[u] >= 0:
            out[device[u]] += 1.0 / placed


@njit(cache=True)
def extend_device_features(record, extra, v, device, out):  # pragma: no cover - compiled
    """Columns 5-8 of the ``doppler9`` device features of node ``v`` (see
    :func:`extended_device_features`) from its five base features in columns 0-4 of ``out``,
    column 9 (``doppler10``: the cluster share) when ``out`` has it, 1 in column 10
    (``doppler11``: the memory headroom where no cap binds; rollouts with a memory guard write
    the headroom over it) and the clustering's device in column 11 (``doppler12``).

    Args:
        record: the graph and cost arrays (a
            :class:`~doppler_lab.timing.schedule.ScheduleRecord`; its first ten fields are read).
        extra: :class:`FeatureArgs` (:attr:`GraphFeatures.extra`).
        v: the node being placed.
        device: ``(N,)`` current device per node (-1: unassigned).
        out: ``(D, 9)`` to ``(D, 12)``, written in place.
    """
    args = FeatureArgs(*extra)
    preds, succ_ptr, succ_idx, edges = graph_parts(record)
    d = out.shape[0]
    _wait_transfer(v, preds, device, edges, out[:, 5])
    total = 0.0 + _pairwise_sum(out[:, 1], 0, d)  # as numpy adds it (0 + the pairwise sum)
    lowest = out[0, 4]
    for i in range(d):
        out[i, 6] = out[i, 1] / total if total > 0 else 0.0
        lowest = min(lowest, out[i, 4])
    for i in range(d):
        out[i, 7] = 1.0 if out[i, 4] <= lowest * (1 + 1e-9) else 0.0
    _coproducers(v, succ_ptr, succ_idx, preds, device, args.edge_cost, out[:, 8])
    if out.shape[1] > 9:
        of, ptr, members, weight = args.cluster_of, args.cluster_ptr, args.members, args.weight
        _cluster_share(v, of, ptr, members, weight, device, out[:, 9])
    if out.shape[1] > 10:
        for i in range(d):
            out[i, 10] = 1.0
    if out.shape[1] > 11:
        h = args.heuristic[v] if args.heuristic.size else -1
        for i in range(d):
            out[i, 11] = 1.0 if h == i else 0.0


def device_features(
    state: ListScheduleState,
    v: int,
    layout: FeatureLayout,
    est: np.ndarray | None = None,
    extra: tuple | None = None,
) -> np.ndarray:
    """The layout's raw device features of node ``v`` in ``state``, ``(D, F_dev)``.

    ``extra``: :func:`feature_args` of the state's graph and cost (built here when None; pass
    :attr:`GraphFeatures.extra` to skip that: ``doppler10`` runs the clustering for it)."""
    base = state.device_features(v, est)
    if layout.device_dim == 5:
        return base
    if extra is None:
        extra = feature_args(state.graph, state.cost, layout)
    return _extended(state.record, extra, state.device, v, base, layout.device_dim)


def _extended(
    record: tuple, extra: tuple, device: np.ndarray, v: int, base: np.ndarray, dim: int = 9
) -> np.ndarray:
    out = np.empty((base.shape[0], dim))
    out[:, :5] = base
    extend_device_features(record, extra, v, device, out)
    return out


def extended_device_features(
    graph: DataflowGraph, cost: CostModel, device: np.ndarray, v: int, base: np.ndarray
) -> np.ndarray:
    """The ``doppler9`` device features of node ``v``: ``base`` (the five of
    :meth:`~doppler_lab.timing.schedule.ListScheduleState.device_features`, ``(D, 5)``) and four more.

    Args:
        graph: the graph.
        cost: its cost model.
        device: ``(N,)`` current device per node (-1: unassigned).
        v: the node being placed.
        base: its five base features, raw units.

    Returns:
        ``(D, 9)``: base, the transfer time ``v`` would wait for on each device (sum over its
        predecessors on other devices), the share of its predecessors' compute on each device,
        1 where the earliest start is smallest, and the mean transfer cost of the edges into
        ``v``'s successors from their other producers on each device.
    """
    g = graph
    record = (g.pred_ptr, g.pred_idx, g.pred_eid, g.is_input, g.succ_ptr, g.succ_idx)
    record += (cost.edge_fixed, cost.edge_bytes, cost.latency, cost.inv_bandwidth)
    return _extended(record, feature_args(graph, cost, get_layout("doppler9")), device, v, base)
