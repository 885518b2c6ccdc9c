"""Graphs and traces for the plotting tests (a helper module, not a conftest, so that
``from paper_graphs import ...`` elsewhere in the suite stays unambiguous)."""

from __future__ import annotations

import numpy as np

from doppler_lab.ir.graph import DataflowGraph, GraphBuilder
from doppler_lab.ir.trace import Trace
from doppler_lab.timing.sim import simulate


def blocked_mlp(blocks: int = 4, layers: int = 3, n: int = 128) -> DataflowGraph:
    """A blocked MLP with einsum, elementwise and reduce nodes and modelled costs."""
    b = GraphBuilder("mlp")
    xs = [b.add_input(f"x{i}", (n, n)) for i in range(blocks)]
    for layer in range(layers):
        ws = [b.add_input(f"w{layer}_{j}", (n, n)) for j in range(blocks)]
        ys = []
        for i in range(blocks):
            parts = [
                b.add_einsum(f"mm{layer}_{i}_{j}", "ij,jk->ik", [xs[(i + j) % blocks], ws[j]])
                for j in range(2)
            ]
            s = b.add_elementwise(f"add{layer}_{i}", "add", parts)
            ys.append(b.add_elementwise(f"relu{layer}_{i}", "relu", [s]))
        xs = ys
    for i, x in enumerate(xs):
        b.add_reduce(f"sum{i}", "sum", x, [1])
    return b.build()


def random_dag(n: int, seed: int = 0, window: int = 30) -> DataflowGraph:
    """A random cost-only DAG of ``n`` ops with explicit compute and edge costs."""
    rng = np.random.default_rng(seed)
    b = GraphBuilder(f"random{n}")
    kinds = ("einsum", "elementwise", "reduce")
    for v in range(n):
        k = 0 if v < 3 else int(rng.integers(1, 3))
        ins = sorted(set(rng.integers(max(0, v - window), v, size=k).tolist())) if v else []
        b.add_node(
            f"op{v}",
            kinds[v % 3],
            flops=1e6,
            out_bytes=1e4,
            inputs=ins,
            cost=float(rng.uniform(1, 10)),
            edge_costs=[float(rng.uniform(1, 5)) for _ in ins],
        )
    return b.build()


def round_robin_wc(graph: DataflowGraph) -> Trace:
    """``graph`` placed round robin on ``p100x4``, simulated with ``wc`` semantics."""
    return simulate(graph, "p100x4", np.arange(graph.num_nodes) % 4, semantics="wc")
