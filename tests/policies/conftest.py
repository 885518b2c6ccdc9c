"""Small graphs and clusters for the policy tests."""

from __future__ import annotations

import pytest
from policies.torch_threads import one_thread

from doppler_lab.hardware.cluster import make_cluster
from doppler_lab.io.documents import read_paper_graph
from doppler_lab.workloads import build_from_spec

from paper_graphs import paper_graph_path


@pytest.fixture(scope="session")
def small_graph():
    """A 36-node executable chain of matmuls (inputs included)."""
    return build_from_spec("chainmm:matrices=3,scale=0.001")


@pytest.fixture(scope="session")
def paper_chain():
    return read_paper_graph(paper_graph_path("chain_mm_112nodes"))


@pytest.fixture(scope="session")
def cluster4():
    return make_cluster("p100x4")


one_torch_thread = pytest.fixture(autouse=True, scope="module")(one_thread)
