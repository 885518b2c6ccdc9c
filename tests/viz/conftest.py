"""Fixtures for the plotting tests: small graphs and traces."""

from __future__ import annotations

import numpy as np
import pytest
from viz_helpers import blocked_mlp, random_dag

from doppler_lab.graph import DataflowGraph
from doppler_lab.io import read_paper_graph
from doppler_lab.sim import simulate
from doppler_lab.trace import Trace


@pytest.fixture(scope="session")
def mlp() -> DataflowGraph:
    return blocked_mlp()


@pytest.fixture(scope="session")
def mlp_wc(mlp: DataflowGraph) -> Trace:
    return simulate(mlp, "p100x4", np.arange(mlp.num_nodes) % 4, semantics="wc")


@pytest.fixture(scope="session")
def big() -> tuple[DataflowGraph, Trace]:
    g = random_dag(10_000)
    placement = np.random.default_rng(1).integers(0, 4, g.num_nodes)
    return g, simulate(g, "uniform", placement, semantics="paper")


@pytest.fixture(scope="session")
def ffnn(paper_dir) -> DataflowGraph:
    path = paper_dir / "ffnn_192nodes.txt"
    if not path.exists():
        pytest.skip(f"paper graph {path} not found")
    return read_paper_graph(path)
