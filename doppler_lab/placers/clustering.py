"""Edge-zeroing clustering for graphs whose transfers cost as much as their compute: ``clustering``.

Sarkar's two-step method (V. Sarkar, *Partitioning and Scheduling Parallel Programs for
Multiprocessors*, MIT Press 1989), the classic answer of DAG scheduling to a high
communication-to-computation ratio. A list scheduler (HEFT, CP) puts each op on its
earliest-finish device and pays for the transfers that choice causes later; the paper's graphs
move about four times as much (in time) as they compute, and there it loses to keeping whole
chains of heavy tensors on one device.

1. **Clustering**, on as many virtual devices as there are ops: every op starts alone; the edges
   between ops are visited by decreasing transfer time (the mean over device pairs, edge id on
   ties), and an edge is *zeroed* (its two ends' clusters merged onto one virtual device) when
   the schedule does not get longer. Merges that leave the length equal are taken: they cost
   nothing now and leave fewer clusters to map.
2. **Mapping** onto the D devices: clusters by decreasing compute, each onto the device that
   gives the shortest schedule while the clusters not mapped yet keep virtual devices of their
   own; then, in the same order, whole clusters move to the device that shortens the schedule
   most, pass after pass while one does (at most :data:`MAX_PASSES`).

Step 1 optionally bounds a cluster's work (``cap``: a share of a device's part of the work; a
merge that would exceed it is not tried). Sarkar's step takes every merge that does not lengthen
the schedule on unboundedly many virtual devices, which on a few devices can leave clusters of
nearly a device's work each; the ``doppler`` placer's budget search and its adapter judge the
bounds of :data:`CLUSTER_CAPS` beside the unbounded clustering (:func:`clustering_variants`).

The schedule length is this module's own estimate (:func:`schedule_length`): each device runs
the ops assigned to it one at a time, in the order they become ready (an op is ready when each
input has finished and, from another device, arrived; ties in node id order), transfers start
when their producer finishes and never wait for a link. That is the ``paper`` simulator
semantics: the makespans agree except where two ops become ready on one device at the same
instant, which the simulator orders by its events (``tests/placers/test_clustering.py``; on
the paper's six graphs they agree). Under ``wc`` it is an estimate: no link contention, no
sharing of one tensor's transfer between consumers on a device. Virtual devices compute at the
devices' mean speed and move tensors in the mean transfer time; mapped clusters see their
device's compute time and the real link between two devices. The placer never calls the
simulator: it runs its model once per edge between ops, then ``k x D`` times for ``k`` clusters
per mapping pass (meta ``model_runs``). The model is a clock of its own on the timing wing's
heap (:mod:`doppler_lab.timing.heaps`): the simulator kernels have no virtual devices at the
devices' mean speed, and the schedule state runs ops in assignment order, not ready order.

The ``doppler`` placer judges its placement next to the policy's rollouts and the METIS
partitions (its ``clustering`` option) and takes it where it wins.

Memory: a clustering over a device's memory is repaired, ops moved off the over-full device
(:func:`~doppler_lab.placers.repair.fit_placement`).

Measured makespans and tuning figures: ``reports/notes/clustering_tuning.md``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
from numba import njit

from ..hardware.cluster import Cluster
from ..hardware.rules import transfer_time
from ..house.settings import bad_setting
from ..ir.graph import DataflowGraph
from ..ir.placement import Placement
from ..timing.cost_model import CostModel
from ..timing.heaps import heap_pop, heap_push
from .placer_base import ties

#: most passes of whole-cluster moves after the mapping (each a k x D sweep; the paper's graphs
#: need 1-3)
MAX_PASSES = 8
#: a cluster moves when the schedule gets shorter by more than this share
MOVE_GAIN = 1e-9
#: the bounds on a cluster's work (shares of a device's part) of the bounded clusterings that
#: the ``doppler`` placer's budget search and the adapter judge beside the unbounded one
#: (:func:`clustering_variants`); which bound wins varies from graph to graph, and erratically
#: with the bound, so a ladder of them (figures: ``reports/notes/clustering_tuning.md``)
CLUSTER_CAPS = (0.75, 0.5, 0.4, 1 / 3, 0.3, 0.25, 0.2, 0.15)


#: what a clustering bound is, in its messages
CAP_EXPECTED = (
    "a finite number > 0 (the most work of one cluster, as a share of a device's part of the "
    "work: 0.25 of the mean per device)"
)


def cap_ok(cap: object) -> bool:
    """Whether ``cap`` is a clustering bound: a positive finite number."""
    ok = isinstance(cap, int | float | np.integer | np.floating) and not isinstance(cap, bool)
    return bool(ok and math.isfinite(float(cap)) and float(cap) > 0)  # type: ignore[arg-type]


def check_cap(cap: object, owner: str = "placer 'clustering'", noun: str = "option") -> None:
    """Raise :class:`ConfigError` unless ``cap`` is a clustering bound (the settings parser's
    message form, :func:`doppler_lab.house.settings.bad_setting`)."""
    if not cap_ok(cap):
        raise bad_setting(owner, "cap", cap, CAP_EXPECTED, noun)


@njit(cache=True)
def _length(graph, costs, proc, nproc):  # pragma: no cover - compiled
    """The schedule length of ops on processors ``proc`` (``< D``: a device, ``>= D``: a
    virtual one); see the module docstring. ``graph``: (succ_ptr, succ_idx, succ_eid, indeg0,
    roots) of the edges between ops; ``costs``: (comp, mean_comp, fixed, nbytes, lat, inv_bw,
    mean_edge) (:class:`ClusteringModel`)."""
    succ_ptr, succ_idx, succ_eid, indeg0, roots = graph
    comp, mean_comp, fixed, nbytes, lat, inv_bw, mean_edge = costs
    n = indeg0.shape[0]
    ndev = lat.shape[0]
    indeg = indeg0.copy()
    rdy = np.zeros(n)
    free = np.zeros(nproc)
    hk = np.empty(n)  # the ready ops by (ready time, id)
    hv = np.empty(n, np.int64)
    hp = np.empty(n, np.int64)
    hn = 0
    for v in roots:  # ascending ids, all ready at 0
        hn = heap_push(hk, hv, hp, 0, hn, 0.0, v, v)
    length = 0.0
    while hn > 0:
        r = hk[0]
        v = hp[0]
        hn = heap_pop(hk, hv, hp, 0, hn)
        p = proc[v]
        start = r if r > free[p] else free[p]
        f = start + (comp[v, p] if p < ndev else mean_comp[v])
        free[p] = f
        if f > length:
            length = f
        for k in range(succ_ptr[v], succ_ptr[v + 1]):
            x = succ_idx[k]
            q = proc[x]
            t = f
            if q != p:
                e = succ_eid[k]
                if p < ndev and q < ndev:
                    t += transfer_time(fixed[e], lat[p, q], nbytes[e], inv_bw[p, q])
                else:
                    t += mean_edge[e]
            if t > rdy[x]:
                rdy[x] = t
            indeg[x] -= 1
            if indeg[x] == 0:
                hn = heap_push(hk, hv, hp, 0, hn, rdy[x], x, x)
    return length


@njit(cache=True)
def _zero_edges(edge_order, edge_src, edge_dst, graph, costs, cap):  # pragma: no cover - compiled
    """Step 1: the cluster of each node (a node id) and the number of model runs; a merge whose
    cluster would compute more than ``cap`` (mean compute, raw units) is not tried."""
    n = graph[3].shape[0]
    ndev = costs[4].shape[0]
    cl = np.arange(n)
    work = costs[1].copy()  # each cluster's mean compute, kept at its root
    proc = cl + ndev
    best = _length(graph, costs, proc, n + ndev)
    runs = 1
    trial = proc.copy()
    for e in edge_order:
        a = cl[edge_src[e]]
        b = cl[edge_dst[e]]
        if a == b or work[a] + work[b] > cap:
            continue
        for v in range(n):
            trial[v] = a + ndev if cl[v] == b else proc[v]
        t = _length(graph, costs, trial, n + ndev)
        runs += 1
        if t <= best:
            best = t
            work[a] += work[b]
            for v in range(n):
                if cl[v] == b:
                    cl[v] = a
                    proc[v] = a + ndev
    return cl, runs


class ClusteringModel:
    """A graph's arrays for the estimate and the two steps (module docstring).

    Args:
        graph: the graph.
        cost: its cost model on the cluster.
    """

    def __init__(self, graph: DataflowGraph, cost: CostModel):
        self.graph, self.cost = graph, cost
        comp = ~graph.is_input
        # the CSR successor slots between ops (edges out of inputs cost nothing)
        owner = np.repeat(np.arange(graph.num_nodes), np.diff(graph.succ_ptr))
        slots = np.flatnonzero(comp[owner] & comp[graph.succ_idx])
        ptr = np.zeros(graph.num_nodes + 1, dtype=np.int64)
        np.add.at(ptr, owner[slots] + 1, 1)
        succ_idx = np.ascontiguousarray(graph.succ_idx[slots], dtype=np.int64)
        indeg = np.zeros(graph.num_nodes, dtype=np.int64)
        np.add.at(indeg, succ_idx, 1)
        #: the graph record of the compiled model
        self.arrays = (
            np.cumsum(ptr),
            succ_idx,
            np.ascontiguousarray(graph.succ_eid[slots], dtype=np.int64),
            indeg,
            np.flatnonzero(comp & (indeg == 0)).astype(np.int64),
        )
        compute = np.ascontiguousarray(cost.compute, dtype=np.float64)
        self.mean_comp = compute.mean(axis=1)
        self.between = comp[graph.edge_src] & comp[graph.edge_dst]
        self.mean_edge = np.where(self.between, np.asarray(cost.mean_edge_cost, np.float64), 0.0)
        #: the cost record of the compiled model
        self.costs = (
            compute,
            self.mean_comp,
            np.ascontiguousarray(cost.edge_fixed, dtype=np.float64),
            np.ascontiguousarray(cost.edge_bytes, dtype=np.float64),
            np.ascontiguousarray(cost.latency, dtype=np.float64),
            np.ascontiguousarray(cost.inv_bandwidth, dtype=np.float64),
            self.mean_edge,
        )
        self._step1: dict[float | None, tuple[np.ndarray, int]] = {}  # clusters() by cap

    @property
    def num_devices(self) -> int:
        return self.cost.cluster.num_devices

    def length(self, proc: np.ndarray, num_procs: int | None = None) -> float:
        """The model's schedule length with node v on processor ``proc[v]`` (raw units)."""
        nproc = int(proc.max()) + 1 if num_procs is None else int(num_procs)
        nproc = max(nproc, self.num_devices)
        proc = np.ascontiguousarray(proc, dtype=np.int64)
        return float(_length(self.arrays, self.costs, proc, nproc))

    def clusters(self, cap: float | None = None) -> tuple[np.ndarray, int]:
        """Step 1: ``(N,)`` each node's cluster (the id of one of its nodes; inputs alone)
        and the number of model runs. ``cap``: no cluster computes more than this share of a
        device's part of the work (:meth:`cap_work`; None: unbounded, Sarkar's step). Computed
        once per cap (read-only arrays)."""
        if cap in self._step1:
            return self._step1[cap]
        g = self.graph
        w = self.mean_edge
        order = np.flatnonzero(self.between & (w > 0))
        order = order[np.argsort(-w[order], kind="stable")].astype(np.int64)
        cl, runs = _zero_edges(
            order,
            np.asarray(g.edge_src, dtype=np.int64),
            np.asarray(g.edge_dst, dtype=np.int64),
            self.arrays,
            self.costs,
            self.cap_work(cap),
        )
        cl.setflags(write=False)
        self._step1[cap] = (cl, int(runs))
        return cl, int(runs)

    def cap_work(self, cap: float | None) -> float:
        """The most mean compute (raw units) of one cluster under ``cap``: that share of the
        ops' mean compute over the devices (inf for None). A single op above it stays a
        cluster of its own."""
        if cap is None:
            return math.inf
        check_cap(cap)
        return float(cap) * float(self.mean_comp[self.graph.compute_nodes].sum()) / self.num_devices

    def place(
        self, max_passes: int = MAX_PASSES, cap: float | None = None
    ) -> tuple[np.ndarray, dict]:
        """Both steps: ``(N,)`` a device per node (inputs: 0) and what they did (``cap``: step
        1's bound on a cluster's work, :meth:`clusters`)."""
        g, d = self.graph, self.num_devices
        n = g.num_nodes
        dev = np.zeros(n, dtype=np.int64)
        nodes = g.compute_nodes
        if d <= 1 or nodes.size == 0:
            return dev, {"clusters": int(nodes.size > 0), "model_runs": 0, "passes": 0, "cap": cap}
        cl, runs = self.clusters(cap)
        labels = np.unique(cl[nodes])
        work = np.array([self.mean_comp[nodes[cl[nodes] == c]].sum() for c in labels])
        order = labels[np.argsort(-work, kind="stable")]
        members = [nodes[cl[nodes] == c] for c in order]
        k = len(members)
        proc = np.zeros(n, dtype=np.int64)
        for j, m in enumerate(members):
            proc[m] = d + j
        nproc = d + k
        for m in members:
            best, where = np.inf, 0
            for dd in range(d):
                proc[m] = dd
                t = self.length(proc, nproc)
                runs += 1
                if t < best:
                    best, where = t, dd
            proc[m] = where
        length = self.length(proc, d)
        passes = 0
        while passes < max_passes:
            passes += 1
            moved = False
            for m in members:
                home = int(proc[m[0]])
                best, where = length, home
                for dd in range(d):
                    if dd == home:
                        continue
                    proc[m] = dd
                    t = self.length(proc, d)
                    runs += 1
                    if t < best and length - t > MOVE_GAIN * length:
                        best, where = t, dd
                proc[m] = where
                if where != home:
                    length, moved = best, True
            if not moved:
                break
        dev[nodes] = proc[nodes]
        meta = {"clusters": k, "model_runs": runs, "passes": passes, "model_length": length}
        return dev, {**meta, "cap": cap}


def schedule_length(graph: DataflowGraph, cluster: Cluster, device: np.ndarray) -> float:
    """The clustering's estimate of placement ``device`` on ``cluster``, in the graph's
    reported time units (the ``paper`` simulator's makespan; module docstring)."""
    cost = CostModel(graph, cluster)
    dev = np.asarray(device, dtype=np.int64)
    return ClusteringModel(graph, cost).length(dev, cluster.num_devices) * graph.time_scale


def clustering_devices(
    graph: DataflowGraph,
    cost: CostModel,
    cap: float | None = None,
    model: ClusteringModel | None = None,
) -> tuple[np.ndarray, dict]:
    """``(N,)`` the clustering's device per node (inputs on their first consumer's) and its
    meta (clusters, model runs, mapping passes, ``cap``: step 1's bound on a cluster's work);
    ``model``: a :class:`ClusteringModel` of the same graph and costs to reuse (its step 1)."""
    dev, meta = (model or ClusteringModel(graph, cost)).place(cap=cap)
    return Placement(dev, None, "clustering").with_inputs_filled(graph).device, meta


def clustering_variants(
    graph: DataflowGraph, cost: CostModel, caps: tuple[float, ...] = CLUSTER_CAPS
) -> list[tuple[np.ndarray, dict]]:
    """The unbounded clustering's ``(device, meta)``, then the bounded ones of ``caps`` that
    place differently (each distinct placement once, in that order).

    Sarkar's step 1 takes every merge that does not lengthen the schedule on unboundedly many
    virtual devices, so on a few devices it can leave clusters of nearly a device's work each
    (the paper's full transformer layer: ``reports/notes/clustering_tuning.md``). Bounding a
    cluster's work leaves the mapping smaller pieces to balance. Which bound wins depends on the
    graph (:data:`CLUSTER_CAPS`)."""
    model = ClusteringModel(graph, cost)
    out: list[tuple[np.ndarray, dict]] = []
    seen: set[bytes] = set()
    for cap in (None, *caps):
        dev, meta = model.place(cap=cap)
        dev = Placement(dev, None, "clustering").with_inputs_filled(graph).device
        if dev.tobytes() not in seen:
            seen.add(dev.tobytes())
            out.append((dev, meta))
    return out


@dataclass(frozen=True)
class ClusteringPlacer:
    """Sarkar's edge-zeroing clustering, then its clusters mapped onto the devices (module
    docstring). Deterministic; no simulator call.

    Attributes:
        cap: the most work of one cluster in step 1, as a share of a device's part of the work
            (the ops' mean compute over the devices; None: unbounded, Sarkar's step). The
            ``doppler`` placer judges the bounds of :data:`CLUSTER_CAPS` beside the unbounded
            clustering (:func:`clustering_variants`).
    """

    cap: float | None = None
    name: ClassVar[str] = "clustering"

    def __post_init__(self) -> None:
        if self.cap is not None:
            check_cap(self.cap, f"placer {self.name!r}")

    def place(self, graph: DataflowGraph, cluster: Cluster, rng: np.random.Generator) -> Placement:
        dev, meta = clustering_devices(graph, CostModel(graph, cluster), self.cap)
        return Placement(dev, None, self.name, meta)  # fitted by the registry


#: graphs with more ops get singleton clusters in :func:`cluster_arrays` (the ``doppler10``
#: feature layout): the clustering's step 1 runs its estimate once per edge (its cost:
#: ``reports/notes/clustering_tuning.md``)
CLUSTER_MAX_OPS = 2000


def cluster_arrays(
    graph: DataflowGraph, cost: CostModel, model: ClusteringModel | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The clusters of ``graph``'s ops (step 1 of :mod:`doppler_lab.placers.clustering` under
    ``cost``; singletons above :data:`CLUSTER_MAX_OPS` ops).

    Returns:
        ``(of, ptr, members)``: the cluster index of each node ``(N,)`` (0..k-1; -1 for input
        nodes), and the members of cluster ``c`` at ``members[ptr[c]:ptr[c + 1]]`` (global ids,
        increasing).
    """
    comp = ~graph.is_input
    if int(comp.sum()) <= CLUSTER_MAX_OPS:
        root, _ = (model or ClusteringModel(graph, cost)).clusters()
    else:
        root = np.arange(graph.num_nodes)
    of = np.full(graph.num_nodes, -1, dtype=np.int64)
    _, of[comp] = np.unique(root[comp], return_inverse=True)
    members = np.flatnonzero(comp)
    members = members[np.argsort(of[members], kind="stable")].astype(np.int64)
    ptr = np.zeros(int(of.max()) + 2 if members.size else 1, dtype=np.int64)
    np.add.at(ptr, of[members] + 1, 1)
    return of, np.cumsum(ptr), members


class ClusterLabeller:
    """PLC labels of the cluster rule at the states a policy visits (Stage I with
    ``plc_labels="cluster"``): the device holding the largest share of the placed compute of the
    op's clustering mates (step 1 of this module; ties: every such device), or the Critical
    Path rule's devices (the smallest earliest start) while none of them is placed. How it
    places: ``reports/notes/clustering_tuning.md``.

    Args:
        graph: the graph.
        cost: its cost model on the cluster.
        clusters: ``(of, ptr, members)`` of :func:`cluster_arrays` (built here when None).
    """

    def __init__(self, graph: DataflowGraph, cost: CostModel, clusters: tuple | None = None):
        if clusters is None:
            clusters = cluster_arrays(graph, cost)
        self.of, self.ptr, self.members = clusters[:3]
        self.weight = np.asarray(cost.mean_compute, dtype=np.float64)
        self.calls = 0

    def __call__(self, state, v: int, est: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """The label devices of candidate ``v`` in ``state`` (``rng`` unused: every state is
        labelled)."""
        c = self.of[v]
        mates = self.members[self.ptr[c] : self.ptr[c + 1]]
        mates = mates[state.device[mates] >= 0]
        if mates.size == 0:
            return ties(est, "min", 1e-9)  # the Critical Path rule's devices
        self.calls += 1
        # by count where the mates compute nothing
        weight = self.weight[mates] if self.weight[mates].sum() > 0 else np.ones(mates.size)
        share = np.bincount(state.device[mates], weights=weight, minlength=state.num_devices)
        return ties(share, "max", 1e-9)


class PlacementRuleLabeller:
    """PLC labels of a fixed placement at the states a policy visits (Stage I with
    ``plc_labels="clustering"``: the whole clustering placer's device of each op, the device the
    ``doppler12`` feature ``clustering_device`` marks).

    Unlike :class:`~doppler_lab.train.distill.PlacementLabeller` the label does not follow a
    group its mates were moved to: it names the device the feature names.

    Args:
        device: ``(N,)`` the placement's device per node.
    """

    def __init__(self, device: np.ndarray):
        self.device = np.asarray(device, dtype=np.int64)
        self.calls = 0

    def __call__(self, state, v: int, est: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """The label device of node ``v`` (``state``, ``est``, ``rng`` unused)."""
        self.calls += 1
        return np.array([int(self.device[v])])
