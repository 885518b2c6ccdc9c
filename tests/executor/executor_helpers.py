"""Helpers of the executor tests: small executable graphs, shared backends (imported by the
test modules; not a conftest, so that `from paper_graphs import ...` elsewhere stays unambiguous)."""

from __future__ import annotations

import pytest

from doppler_lab.executor import make_backend
from doppler_lab.graph import DataflowGraph, GraphBuilder

#: the generated workloads, at sizes whose ops take microseconds
TINY_WORKLOADS: tuple[str, ...] = ("chainmm", "ffnn", "llama_block", "llama_layer", "moe_layer")
TINY_SCALE = 0.01


def toy_graph(layers: int = 4, size: int = 16, width: int = 3) -> DataflowGraph:
    """``width`` lanes of matmul -> add(neighbour) -> tanh, ``layers`` deep, two sinks."""
    b = GraphBuilder("toy")
    x = b.add_input("x", (size, size))
    ws = [b.add_input(f"w{j}", (size, size), init="uniform") for j in range(width)]
    layer = [b.add_einsum(f"m0_{j}", "ij,jk->ik", [x, ws[j]]) for j in range(width)]
    for i in range(1, layers):
        new = []
        for j in range(width):
            s = b.add_elementwise(f"a{i}_{j}", "add", [layer[j], layer[(j + 1) % width]])
            t = b.add_elementwise(f"t{i}_{j}", "tanh", [s])
            new.append(b.add_einsum(f"m{i}_{j}", "ij,jk->ik", [t, ws[j]]))
        layer = new
    b.add_reduce("sum", "sum", layer[0], dims=[0])
    b.add_elementwise("out", "add", [layer[1], layer[2]])
    return b.build()


def fan_graph(n: int = 6, size: int = 8) -> DataflowGraph:
    """``n`` independent ops on one input (all ready when the clock starts)."""
    b = GraphBuilder("fan")
    x = b.add_input("x", (size, size))
    for i in range(n):
        b.add_elementwise(f"f{i}", "add_scalar", [x], params={"value": float(i)})
    return b.build()


@pytest.fixture(scope="module")
def cpu2():
    backend = make_backend("cpu", 2)
    yield backend
    backend.close()


@pytest.fixture(scope="module")
def inline3():
    backend = make_backend("inline", 3)
    yield backend
    backend.close()


@pytest.fixture(scope="session")
def toy() -> DataflowGraph:
    return toy_graph()
