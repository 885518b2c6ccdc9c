"""Simulator studies for the notebooks: semantics compared, noise, contention, order.

Each function is one step of a notebook story and returns a pandas frame; plotting is left to
:mod:`doppler_lab.viz` or to the frame's own ``.plot``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd

from ..hardware.cluster import Cluster
from ..ir.graph import DataflowGraph
from ..ir.placement import Placement
from ..timing.sim import Simulator


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
