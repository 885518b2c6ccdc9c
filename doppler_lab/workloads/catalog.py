"""The graphs the notebooks and benches study: the paper's released files, our generated
workloads at their defaults, the cluster each runs on by default, and a table of their sizes."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from ..hardware.cluster import Cluster, make_cluster
from ..ir.graph import DataflowGraph
from ..timing.cost_model import CostModel

PAPER_GRAPH_NAMES: tuple[str, ...] = (
    "chain_mm_112nodes",
    "ffnn_192nodes",
    "transformer_block_215nodes",
    "full_transformer_layer_261nodes",
)
GENERATED_WORKLOADS: tuple[str, ...] = (
    "chainmm",
    "ffnn",
    "llama_block",
    "llama_layer",
    "moe_layer",
)


def load_paper_graphs(
    directory: str | Path | None, names: Sequence[str] = PAPER_GRAPH_NAMES
) -> dict[str, DataflowGraph]:
    """The paper's released graphs found in ``directory`` (an empty dict when it is absent).

    They ship with the paper's code (github.com/xinyuyao/Doppler, folder ``compute_graph``);
    point ``directory`` at a copy of that folder.
    """
    from .specs import graph_from_spec

    if directory is None or not Path(directory).is_dir():
        return {}
    return {
        n: graph_from_spec(f"paper:{n}", paper_dir=directory)
        for n in names
        if (Path(directory) / f"{n}.txt").exists()
    }


def build_workloads(
    names: Sequence[str] = GENERATED_WORKLOADS, **params: float
) -> dict[str, DataflowGraph]:
    """Our generated workloads at their defaults (``params`` such as ``scale`` apply to all)."""
    from . import build

    return {n: build(n, **params) for n in names}


def default_cluster(graph: DataflowGraph, num_devices: int = 4) -> Cluster:
    """Identical devices for graphs with explicit costs (the paper's files), else ``p100x4``."""
    return (
        make_cluster("uniform", num_devices)
        if graph.compute_cost is not None
        else make_cluster("p100x4")
    )


def graph_table(
    graphs: Mapping[str, DataflowGraph], clusters: Mapping[str, Cluster] | None = None
) -> pd.DataFrame:
    """Sizes and shape of each graph, with its work, critical path and lower bound on its cluster.

    ``parallelism`` is total work / critical path (compute only): how many devices the graph can
    keep busy at best. Times are in the graph's reported units (seconds for generated graphs,
    the paper's units for its files).
    """
    rows = []
    for label, g in graphs.items():
        cluster = (clusters or {}).get(label) or default_cluster(g)
        cm = CostModel(g, cluster)
        fastest = cm.compute.min(axis=1)
        cp = float(g.b_level(fastest, np.zeros(g.num_edges)).max()) * g.time_scale
        work = float(fastest.sum()) * g.time_scale
        s = g.summary()
        rows.append(
            {
                "graph": label,
                "source": "paper" if g.meta.get("source") == "doppler-paper" else "generated",
                "nodes": s["compute_nodes"],
                "inputs": s["inputs"],
                "edges": s["edges"],
                "depth": s["depth"],
                "sinks": s["sinks"],
                "cluster": cluster.name,
                "work": work,
                "critical_path": cp,
                "parallelism": work / cp if cp > 0 else np.nan,
                "lower_bound": cm.lower_bound() * g.time_scale,
                "executable": s["executable"],
            }
        )
    return pd.DataFrame(rows).set_index("graph")
