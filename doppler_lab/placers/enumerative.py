"""A greedy enumerative optimiser, the kind the DOPPLER paper compares against (not released).

Starting from another placer's placement (default ``cp``), one pass visits groups of nodes in
topological order; for each group it enumerates a small set of device choices and keeps the
cheapest (the current choice wins ties). Groups are single nodes (``group="node"``) or the
blocks of one partitioned operation (``group="prefix"``: nodes whose names agree up to the
first ``[``, as the workloads name blocks ``op[i,j]``). Choices for a group of k nodes: all on
device d (for each d), and for k > 1 the round-robin layouts block i -> (i + s) mod D.

Cost: ``sim`` is the simulated makespan (one simulator call per choice, all choices of a group
in one batch); ``load`` is the paper's likely objective: the most loaded device's compute plus
the transfer time of the tensors it receives (no simulator calls). Choices over a device's
memory cost ``inf`` (:mod:`doppler_lab.timing.fit`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from ..hardware.cluster import Cluster
from ..house.progress import progress
from ..ir.graph import DataflowGraph
from ..ir.placement import Placement
from ..timing.cost_model import CostModel
from ..timing.fit import CappedSimulator, capped, caps_bind
from ..timing.memory import memory_caps
from ..timing.sim import SEMANTICS, Simulator
from .placer_base import check_choice, check_positive
from .registry import start_placement


def node_groups(graph: DataflowGraph, group: str) -> list[np.ndarray]:
    """Groups of compute nodes in topological order of their first node."""
    pos = np.empty(graph.num_nodes, dtype=np.int64)
    pos[graph.topo_order] = np.arange(graph.num_nodes)
    comp = graph.compute_nodes[np.argsort(pos[graph.compute_nodes], kind="stable")]
    if group == "node":
        return [np.array([v]) for v in comp]
    by_key: dict[str, list[int]] = {}
    for v in comp:
        by_key.setdefault(graph.names[v].split("[", 1)[0], []).append(int(v))
    return [np.array(vs, dtype=np.int64) for vs in by_key.values()]


def load_cost(cost: CostModel, devices: np.ndarray) -> np.ndarray:
    """Per placement row: max over devices of compute + received transfer time, ``(K,)``."""
    g = cost.graph
    k, d = devices.shape[0], cost.cluster.num_devices
    rows = np.arange(k)[:, None]
    comp_nodes = g.compute_nodes
    load = np.zeros((k, d))
    np.add.at(
        load, (rows, devices[:, comp_nodes]), cost.compute[comp_nodes, devices[:, comp_nodes]]
    )
    src, dst = g.edge_src, g.edge_dst
    live = ~g.is_input[src]
    a, b = devices[:, src[live]], devices[:, dst[live]]
    cut = a != b
    comm = np.where(cut, cost.mean_edge_cost[live][None, :], 0.0)
    np.add.at(load, (np.broadcast_to(rows, b.shape), b), comm)
    return load.max(axis=1)


def group_choices(current: np.ndarray, nodes: np.ndarray, num_devices: int) -> np.ndarray:
    """Other placements for one group, ``(K, N)``, distinct and different from ``current``."""
    layouts = [np.full(nodes.size, d) for d in range(num_devices)]
    if nodes.size > 1:
        layouts += [(np.arange(nodes.size) + s) % num_devices for s in range(num_devices)]
    seen = {tuple(current[nodes])}
    rows = []
    for lay in layouts:
        if tuple(lay) not in seen:
            seen.add(tuple(lay))
            r = current.copy()
            r[nodes] = lay
            rows.append(r)
    return np.stack(rows) if rows else np.empty((0, current.size), dtype=current.dtype)


@dataclass(frozen=True)
class EnumerativePlacer:
    """Greedy per-node (or per-block-group) enumeration of device choices.

    Attributes:
        cost: ``sim`` (simulated makespan) or ``load`` (modelled: max device load).
        group: ``node`` or ``prefix`` (blocks of one operation).
        start: the placer whose placement starts the pass.
        passes: how many passes over all groups.
        budget: simulator calls at most (``cost="sim"``); None: as many as the passes need.
        semantics: simulator semantics (``cost="sim"``).
        progress: show a bar on stderr: over the simulator-call budget when there is one,
            else over the groups of all passes.
    """

    cost: str = "sim"
    group: str = "node"
    start: str = "cp"
    passes: int = 1
    budget: int | None = None
    semantics: str = "paper"
    progress: bool = False
    name: ClassVar[str] = "enumerative"

    def __post_init__(self) -> None:
        check_choice(self.name, "cost", self.cost, ("sim", "load"))
        check_choice(self.name, "group", self.group, ("node", "prefix"))
        check_choice(self.name, "semantics", self.semantics, SEMANTICS)
        check_positive(self.name, "passes", self.passes, integer=True)
        check_positive(self.name, "budget", self.budget, integer=True)

    def place(self, graph: DataflowGraph, cluster: Cluster, rng: np.random.Generator) -> Placement:
        init = start_placement(graph, cluster, self.start, self.name, rng)
        cost = CostModel(graph, cluster)
        sim = (
            capped(Simulator(graph, cluster, self.semantics, cost_model=cost))
            if self.cost == "sim"
            else None
        )
        mem = None if sim is not None else capped_load(graph, cluster)
        ndev = cluster.num_devices
        cur = init.device.copy()
        groups = node_groups(graph, self.group)
        limit = np.inf if self.budget is None else int(self.budget)
        if sim is not None:
            cur_cost, calls = float(sim.makespans(cur[None, :])[0]), 1
        else:
            cur_cost, calls = float(load_cost(cost, cur[None, :])[0]), 0
        by_calls = sim is not None and self.budget is not None
        bar = progress(
            total=int(limit) if by_calls else len(groups) * self.passes,
            desc=f"{self.name} {graph.name}",
            enabled=self.progress,
            unit="call" if by_calls else "group",
        )
        bar.update(calls if by_calls else 0)
        per_group = 0 if by_calls else 1
        for _ in range(int(self.passes)):
            changed = False
            for nodes in groups:
                cand = group_choices(cur, nodes, ndev)
                if cand.shape[0] == 0:
                    bar.update(per_group)
                    continue
                if sim is not None:
                    cand = cand[: int(min(cand.shape[0], limit - calls))]
                    if cand.shape[0] == 0:
                        break
                    costs = sim.makespans(cand)
                    calls += cand.shape[0]
                    bar.update(cand.shape[0] if by_calls else 0)
                else:
                    costs = load_cost(cost, cand)
                    if mem is not None:  # over a memory cap: inf
                        costs = np.where(mem.fits(cand), costs, np.inf)
                j = int(np.argmin(costs))
                if costs[j] < cur_cost:  # strictly better, so the current choice wins ties
                    cur, cur_cost, changed = cand[j].copy(), float(costs[j]), True
                bar.update(per_group)
            if not changed or calls >= limit:
                break
        bar.close()
        meta = {
            "sim_calls": calls,
            "cost": self.cost,
            "group": self.group,
            "start": self.start,
            "objective": cur_cost,
        }
        p = Placement(cur, None, self.name, meta).with_inputs_filled(graph)
        return p  # fitted by the registry


def capped_load(graph: DataflowGraph, cluster: Cluster):
    """The memory check of ``cost="load"`` choices (None when no cap can bind)."""
    caps = memory_caps(cluster)
    if not caps_bind(graph, caps):
        return None
    return CappedSimulator(Simulator(graph, cluster), caps)
