"""Tables for the notebooks: graphs side by side, semantics compared, noise, contention, order.

Each function is one step of a notebook story and returns a pandas frame; plotting is left to
:mod:`doppler_lab.viz` or to the frame's own ``.plot``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from .graph import DataflowGraph
from .hardware import Cluster, CostModel, make_cluster
from .placement import Placement
from .sim import Simulator

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
    from .io import read_paper_graph

    if directory is None or not Path(directory).is_dir():
        return {}
    return {
        n: read_paper_graph(Path(directory) / f"{n}.txt")
        for n in names
        if (Path(directory) / f"{n}.txt").exists()
    }


def build_workloads(
    names: Sequence[str] = GENERATED_WORKLOADS, **params: float
) -> dict[str, DataflowGraph]:
    """Our generated workloads at their defaults (``params`` such as ``scale`` apply to all)."""
    from .workloads import build

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


def compare_semantics(
    graph: DataflowGraph,
    cluster: Cluster,
    placements: Mapping[str, Placement],
    semantics: Sequence[str] = ("paper", "wc", "bsp"),
) -> pd.DataFrame:
    """Makespan of each placement under each semantics (rows: placement, columns: semantics),
    plus the lower bound for scale."""
    sims = {s: Simulator(graph, cluster, s) for s in semantics}
    rows = []
    for label, pl in placements.items():
        row: dict[str, object] = {"placement": label}
        for s, sim in sims.items():
            row[s] = sim.makespan(pl)
        rows.append(row)
    df = pd.DataFrame(rows).set_index("placement")
    df["lower_bound"] = next(iter(sims.values())).lower_bound()
    return df


def noise_spread(
    graph: DataflowGraph,
    cluster: Cluster,
    placements: Mapping[str, Placement],
    sigmas: Sequence[float] = (0.0, 0.05, 0.1, 0.2, 0.4),
    seeds: int = 50,
    semantics: str = "wc",
    seed: int = 0,
) -> pd.DataFrame:
    """Makespans of each placement over ``seeds`` noise draws per sigma (long format:
    placement, sigma, seed, makespan). The draws of one (sigma, seed) are shared by all
    placements (common random numbers), so differences between placements are not noise."""
    rows = []
    for sigma in sigmas:
        sim = Simulator(graph, cluster, semantics, noise=sigma)
        for label, pl in placements.items():
            ms = (
                sim.makespans([pl] * seeds, rng=np.random.default_rng(seed))
                if sigma > 0
                else np.full(seeds, sim.makespan(pl))
            )
            rows += [
                {"placement": label, "sigma": sigma, "seed": i, "makespan": m}
                for i, m in enumerate(ms)
            ]
    return pd.DataFrame(rows)


def spread_summary(frame: pd.DataFrame) -> pd.DataFrame:
    """Mean, spread and tail of a :func:`noise_spread` frame per placement and sigma."""
    g = frame.groupby(["placement", "sigma"])["makespan"]
    out = g.agg(
        mean="mean",
        std="std",
        p05=lambda x: np.quantile(x, 0.05),
        p95=lambda x: np.quantile(x, 0.95),
    )
    out["cv"] = out["std"] / out["mean"]
    return out.reset_index()


def contention_table(
    graph: DataflowGraph, clusters: Mapping[str, Cluster], placements: Mapping[str, Placement]
) -> pd.DataFrame:
    """Makespan without link contention (``paper`` semantics: unlimited parallel transfers)
    and with it (``wc``), per cluster and placement; ``slowdown`` = wc / paper."""
    rows = []
    for cname, cluster in clusters.items():
        free = Simulator(graph, cluster, "paper")
        wc = Simulator(graph, cluster, "wc")
        for label, pl in placements.items():
            a, b = free.makespan(pl), wc.run(pl)
            rows.append(
                {
                    "cluster": cname,
                    "placement": label,
                    "no contention": a,
                    "with contention": b.makespan,
                    "slowdown": b.makespan / a,
                    "transfers": b.num_transfers,
                }
            )
    return pd.DataFrame(rows)


def order_effect(
    graph: DataflowGraph, cluster: Cluster, placement: Placement, orders: int = 200, seed: int = 0
) -> pd.DataFrame:
    """Same devices, different dispatch orders: FIFO, the placement's own priority (if any), and
    ``orders`` random priorities. Shows how much the order alone moves the makespan."""
    sim = Simulator(graph, cluster, "wc")
    rng = np.random.default_rng(seed)
    rows = [{"order": "fifo", "makespan": sim.makespan(placement)}]
    if placement.priority is not None:
        rows.append(
            {"order": "placer priority", "makespan": sim.makespan(placement, dispatch="priority")}
        )
    randoms = [
        Placement(placement.device, rng.permutation(graph.num_nodes).astype(float))
        for _ in range(orders)
    ]
    ms = sim.makespans(randoms, dispatch="priority")
    rows += [{"order": "random", "makespan": m} for m in ms]
    return pd.DataFrame(rows)
