"""Helpers of the executor tests: small executable graphs, shared backends (imported by the
test modules; not a conftest, so that `from paper_graphs import ...` elsewhere stays unambiguous)."""

from __future__ import annotations

import pytest

from doppler_lab.executor import make_backend
from doppler_lab.ir.graph import DataflowGraph, GraphBuilder

#: zoo models at sizes whose ops take microseconds
ZOO_SPECS: tuple[str, ...] = (
    "hf-llama:layers=1,hidden=32,heads=2,seq=8,vocab=64",
    "hf-gpt2:layers=1,hidden=32,heads=2,seq=8,vocab=64",
    "mlp",
    "resnet",
)
#: a ``FILE.py:FUNC`` model whose forward makes constants (``torch.arange``, ``torch.ones``)
USER_MODEL_SOURCE = (
    "import torch\n"
    "class M(torch.nn.Module):\n"
    "    def __init__(self):\n"
    "        super().__init__()\n"
    "        self.a = torch.nn.Linear(8, 8)\n"
    "        self.b = torch.nn.Linear(8, 8)\n"
    "    def forward(self, x):\n"
    "        pos = torch.arange(x.shape[0], dtype=torch.float32)[:, None]\n"
    "        return self.b(torch.relu(self.a(x) + pos)) + torch.ones(8)\n"
    "def build():\n"
    "    torch.manual_seed(0)\n"
    "    return M().eval(), (torch.randn(4, 8),)\n"
)
#: placements every graph runs under in the device tiers (the placers on the backend's cluster)
PLACEMENTS: tuple[str, ...] = ("single", "round-robin", "random", "cp", "heft", "doppler")

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


def placements_of(graph, backend) -> dict:
    """Each of :data:`PLACEMENTS` of ``graph`` on ``backend``'s devices."""
    import numpy as np

    from doppler_lab.ir.placement import random_placement, round_robin, single_device
    from doppler_lab.placers import place

    d = backend.num_devices
    out = {
        "single": single_device(graph, d, d - 1),
        "round-robin": round_robin(graph, d),
        "random": random_placement(graph, d, np.random.default_rng(1)),
    }
    for name in ("cp", "heft", "doppler"):
        out[name] = place(name, graph, backend.cluster, seed=0)
    return out


def check_all(graph, backend, seed: int = 3) -> None:
    """Every placement of ``graph`` runs on ``backend``; outputs equal the reference, traces
    are valid."""
    from doppler_lab.executor import Executor
    from doppler_lab.executor.runner import compare_outputs
    from doppler_lab.executor.torch_ops import reference_outputs

    ref = reference_outputs(graph, seed=seed)
    with Executor(graph, backend, seed=seed) as ex:
        for label, pl in placements_of(graph, backend).items():
            r = ex.run(pl, keep_outputs=True)
            check = compare_outputs(graph, r.outputs, ref)
            assert check.ok, f"{graph.name} {label} on {backend.num_devices} devices: {check}"
            assert r.trace.check(graph) == [], r.trace.check(graph)[:3]
