"""The multi-process backend (one process per device, gloo transfers)."""

from __future__ import annotations

import numpy as np
import pytest

from doppler_lab.executor import Executor, make_backend
from doppler_lab.executor.runner import compare_outputs
from doppler_lab.executor.torch_ops import evaluate
from doppler_lab.house.errors import ExecutorError
from doppler_lab.ir.graph import GraphBuilder
from doppler_lab.ir.placement import Placement, random_placement, round_robin

from executor_helpers import toy_graph


@pytest.fixture(scope="module")
def dist2():
    pytest.importorskip("torch.distributed")
    backend = make_backend("dist", 2)
    yield backend
    backend.close()


def test_outputs_traces_and_order(dist2):
    g = toy_graph(layers=4)
    ref = evaluate(g, seed=4)
    with Executor(g, dist2, seed=4) as ex:
        for pl in (round_robin(g, 2), random_placement(g, 2, np.random.default_rng(1))):
            r = ex.run(pl, repeats=2, keep_outputs=True)
            assert compare_outputs(g, r.outputs, ref).ok
            t = r.trace
            assert t.check(g) == [] and t.meta["backend"] == "dist"
            launched, ready = np.array(t.meta["dispatch_order"]), np.array(t.meta["ready_order"])
            comp = g.compute_nodes
            for d in (0, 1):
                on = comp[t.device[comp] == d]
                assert (np.diff(ready[on[np.argsort(launched[on])]]) > 0).all()


def failing_graph(size: int) -> tuple:
    b = GraphBuilder("failing")
    x = b.add_input("x", (size, size))
    w = b.add_input("w", (size, size))
    y = b.add_einsum("y", "ij,jk->ik", [x, w])
    bad = b.add_torch("chol", "torch.linalg.cholesky", [y], (size, size), flops=size**3 / 3)
    b.add_elementwise("z", "tanh", [bad])
    b.add_elementwise("ok", "tanh", [y])
    return b.build()


@pytest.mark.slow
def test_failure_and_timeout_kill_the_workers_and_recover(dist2):
    g = failing_graph(16)  # a random matrix is not positive-definite
    dev = np.zeros(g.num_nodes, dtype=np.int64)
    dev[g.names.index("chol")] = 1
    with pytest.raises(ExecutorError, match=r"'chol'.*device 1.*raised"):
        Executor(g, dist2).run(Placement(dev))
    slow = toy_graph(layers=2, size=2500)  # seconds of matmuls on one core
    with pytest.raises(ExecutorError, match="timed out.*still running"):
        Executor(slow, dist2, timeout_s=0.3).run(round_robin(slow, 2))
    small = toy_graph(layers=2)
    assert Executor(small, dist2).run(round_robin(small, 2)).trace.check(small) == []
