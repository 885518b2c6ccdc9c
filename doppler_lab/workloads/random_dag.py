"""Random layered DAGs with explicit costs: for property tests and simulator benchmarks."""

from __future__ import annotations

import numpy as np

from ..house.errors import ConfigError
from ..house.limits import check_limit
from ..ir.graph import DataflowGraph, cost_graph


def random_dag(
    num_nodes: int = 200,
    width: int = 16,
    max_in_degree: int = 3,
    comm_ratio: float = 1.0,
    integer_costs: bool = True,
    seed: int = 0,
) -> DataflowGraph:
    """A random layered DAG with explicit compute and communication costs.

    Nodes are laid out in layers of about ``width`` nodes; each node after the first layer draws
    1..``max_in_degree`` predecessors from the previous two layers. Compute costs are drawn
    from 1..100, communication costs are ``comm_ratio`` times a second such draw (integers by
    default, so simulated ties are exact).

    Args:
        num_nodes: number of nodes (>= 1).
        width: nodes per layer (>= 1).
        max_in_degree: most predecessors per node (>= 1).
        comm_ratio: scale of communication relative to compute (>= 0).
        integer_costs: round costs to integers.
        seed: generator seed.
    """
    for name, value, lo in (
        ("num_nodes", num_nodes, 1),
        ("width", width, 1),
        ("max_in_degree", max_in_degree, 1),
    ):
        if int(value) != value or value < lo:
            raise ConfigError(f"random_dag: {name}={value!r}, expected an integer >= {lo}")
    if not (np.isfinite(comm_ratio) and comm_ratio >= 0):
        raise ConfigError(f"random_dag: comm_ratio={comm_ratio!r}, expected a finite value >= 0")
    check_limit(num_nodes, "MAX_NODES", "random_dag: num_nodes", ConfigError)
    check_limit(
        num_nodes * max_in_degree, "MAX_EDGES", "random_dag: num_nodes * max_in_degree", ConfigError
    )
    rng = np.random.default_rng(seed)
    n = int(num_nodes)
    layer = np.arange(n) // width
    src: list[np.ndarray] = []
    dst: list[np.ndarray] = []
    for v in range(width, n):
        lo = max(0, (layer[v] - 2) * width)
        hi = layer[v] * width
        k = int(rng.integers(1, max_in_degree + 1))
        preds = np.unique(rng.integers(lo, hi, size=k))
        src.append(preds)
        dst.append(np.full(preds.size, v))
    es = np.concatenate(src) if src else np.zeros(0, np.int64)
    ed = np.concatenate(dst) if dst else np.zeros(0, np.int64)
    comp = rng.uniform(1, 100, n)
    comm = rng.uniform(1, 100, n) * comm_ratio
    if integer_costs:
        comp, comm = np.round(comp), np.round(comm)
    return cost_graph(
        comp,
        comm,
        es,
        ed,
        name=f"random_dag_{n}_s{seed}",
        names=[f"v{i}" for i in range(n)],
        meta={
            "generator": "random_dag",
            "params": {
                "num_nodes": n,
                "width": width,
                "max_in_degree": max_in_degree,
                "comm_ratio": comm_ratio,
                "integer_costs": integer_costs,
                "seed": seed,
            },
        },
    )
