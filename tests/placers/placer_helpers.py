"""Helpers for the placer tests: small graphs, the Topcuoglu example, a brute-force oracle and a
schedule checker that are independent of the code under test."""

from __future__ import annotations

import itertools

import numpy as np

from doppler_lab.ir.graph import DataflowGraph, GraphBuilder
from doppler_lab.timing.cost_model import CostModel

# Topcuoglu, Hariri and Wu (IEEE TPDS 2002), Fig. 2 / Table 1: compute cost per task on P1..P3
TOPCUOGLU_W = [
    [14, 16, 9],
    [13, 19, 18],
    [11, 13, 19],
    [13, 8, 17],
    [12, 13, 10],
    [13, 16, 9],
    [7, 15, 11],
    [5, 11, 14],
    [18, 12, 20],
    [21, 7, 16],
]
# edges (1-based task ids) -> communication cost
TOPCUOGLU_E = {
    (1, 2): 18, (1, 3): 12, (1, 4): 9, (1, 5): 11, (1, 6): 14, (2, 8): 19, (2, 9): 16,
    (3, 7): 23, (4, 8): 27, (4, 9): 23, (5, 9): 13, (6, 8): 15, (7, 10): 17, (8, 10): 11,
    (9, 10): 13,
}  # fmt: skip


def topcuoglu_graph() -> DataflowGraph:
    """The 10-task example with per-processor costs and explicit edge costs."""
    b = GraphBuilder("topcuoglu2002")
    for i in range(1, 11):
        ins = [(u, c) for (u, v), c in TOPCUOGLU_E.items() if v == i]
        b.add_node(
            f"n{i}",
            cost=TOPCUOGLU_W[i - 1],
            inputs=[u - 1 for u, _ in ins],
            edge_costs=[c for _, c in ins],
        )
    return b.build()


def small_dag(
    n: int,
    seed: int,
    num_devices: int | None = None,
    edge_prob: float = 0.4,
    inputs: int = 0,
) -> DataflowGraph:
    """A random DAG of ``n`` compute nodes with integer costs (per device if ``num_devices``)
    and explicit integer edge costs; ``inputs`` input nodes feed random compute nodes."""
    rng = np.random.default_rng(seed)
    b = GraphBuilder(f"dag{n}_{seed}")
    ins = [b.add_node(f"in{i}", kind="input", out_bytes=8.0) for i in range(inputs)]
    ids: list[int] = []
    for i in range(n):
        preds = [u for u in ids if rng.random() < edge_prob]
        feeds = [u for u in ins if rng.random() < 0.5]
        cost = (
            rng.integers(1, 10, num_devices).astype(float).tolist()
            if num_devices
            else float(rng.integers(1, 10))
        )
        ecost = [float(rng.integers(0, 8)) for _ in preds] + [0.0] * len(feeds)
        ids.append(
            b.add_node(f"v{i}", inputs=preds + feeds, cost=cost, edge_costs=ecost, out_bytes=4.0)
        )
    return b.build()


def _topological_orders(n: int, preds: list[list[int]]):
    placed = [False] * n

    def rec(prefix: list[int]):
        if len(prefix) == n:
            yield list(prefix)
            return
        for v in range(n):
            if not placed[v] and all(placed[u] for u in preds[v]):
                placed[v] = True
                prefix.append(v)
                yield from rec(prefix)
                prefix.pop()
                placed[v] = False

    yield from rec([])


def brute_force_delay_model(graph: DataflowGraph, cost: CostModel) -> float:
    """The optimal makespan of the delay model by enumeration (raw units).

    Every semi-active schedule is the append-mode list schedule of some placement and some
    topological order, so the minimum over all of them is the optimum.
    """
    comp = [int(v) for v in graph.compute_nodes]
    index = {v: i for i, v in enumerate(comp)}
    n, d = len(comp), cost.cluster.num_devices
    preds: list[list[int]] = [[] for _ in range(n)]
    pred_edges: list[list[tuple[int, int]]] = [[] for _ in range(n)]
    for e, (u, v) in enumerate(zip(graph.edge_src, graph.edge_dst)):
        if not graph.is_input[u]:
            preds[index[int(v)]].append(index[int(u)])
            pred_edges[index[int(v)]].append((index[int(u)], e))
    orders = list(_topological_orders(n, preds))
    best = np.inf
    for dev in itertools.product(range(d), repeat=n):
        for order in orders:
            free = [0.0] * d
            fin = [0.0] * n
            for i in order:
                a = dev[i]
                t = free[a]
                for u, e in pred_edges[i]:
                    t = max(t, fin[u] + cost.transfer_time(e, dev[u], a))
                fin[i] = t + cost.compute[comp[i], a]
                free[a] = fin[i]
            best = min(best, max(fin))
    return float(best)


def assert_valid_schedule(
    graph: DataflowGraph, cost: CostModel, device, start, finish, scale=None
) -> None:
    """Durations match, precedence + transfer delays hold, no overlap on a device."""
    scale = graph.time_scale if scale is None else scale
    eps = 1e-9 * max(1.0, float(np.nanmax(finish)))
    comp = graph.compute_nodes
    np.testing.assert_allclose(finish[comp] - start[comp], cost.compute[comp, device[comp]] * scale)
    for e, (u, v) in enumerate(zip(graph.edge_src, graph.edge_dst)):
        if graph.is_input[u]:
            continue
        delay = cost.transfer_time(e, int(device[u]), int(device[v])) * scale
        assert start[v] >= finish[u] + delay - eps, f"edge {u}->{v} violated"
    for d in np.unique(device[comp]):
        on = comp[device[comp] == d]
        order = on[np.argsort(start[on], kind="stable")]
        assert np.all(start[order[1:]] >= finish[order[:-1]] - eps), f"overlap on device {d}"
