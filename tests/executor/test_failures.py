"""Failures surface as ExecutorError naming the op and device; nothing hangs; the executor
stays usable."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

import doppler_lab.executor.plan as plan_module
from doppler_lab.executor import Executor, make_backend
from doppler_lab.executor.runner import compare_outputs
from doppler_lab.executor.streams import make_inline_backend
from doppler_lab.executor.torch_ops import evaluate
from doppler_lab.house.errors import ExecutorError
from doppler_lab.ir.placement import Placement, round_robin

from executor_helpers import toy_graph


class Sabotage:
    """Wraps ``compile_op`` so that node ``name`` misbehaves while ``mode`` is set."""

    def __init__(self, monkeypatch, name: str):
        self.name = name
        self.mode: str | None = None
        self.sleep_s = 1.0
        original = plan_module.compile_op
        graph_names: dict[int, str] = {}

        def compile_op(spec):
            fn = original(spec)
            key = id(spec)
            tag = graph_names.get(key)

            def wrapped(*xs):
                if tag == self.name and self.mode == "raise":
                    raise RuntimeError("sabotaged")
                if tag == self.name and self.mode == "oom":
                    raise MemoryError("DefaultCPUAllocator: can't allocate memory")
                if tag == self.name and self.mode == "sleep":
                    time.sleep(self.sleep_s)
                return fn(*xs)

            return wrapped

        self.graph_names = graph_names
        monkeypatch.setattr(plan_module, "compile_op", compile_op)

    def attach(self, graph) -> None:
        for v, spec in enumerate(graph.specs):
            self.graph_names[id(spec)] = graph.names[v]


@pytest.fixture
def graph():
    return toy_graph(layers=3)


def placement_with(graph, node: str, device: int, d: int = 2) -> Placement:
    dev = round_robin(graph, d).device.copy()
    dev[graph.names.index(node)] = device
    return Placement(dev)


@pytest.mark.parametrize("backend_name", ["cpu", "inline"])
@pytest.mark.parametrize("mode,verb", [("raise", "raised"), ("oom", "ran out of memory")])
def test_failing_op_is_named_and_executor_recovers(monkeypatch, graph, backend_name, mode, verb):
    sabotage = Sabotage(monkeypatch, "a1_1")
    sabotage.attach(graph)
    pl = placement_with(graph, "a1_1", 1)
    with Executor(graph, backend_name, num_devices=2) as ex:
        sabotage.mode = mode
        with pytest.raises(ExecutorError) as info:
            ex.run(pl, repeats=2)
        msg = str(info.value)
        assert "'a1_1'" in msg and "device 1" in msg and verb in msg
        sabotage.mode = None
        result = ex.run(pl, keep_outputs=True)  # the same executor works again
        assert compare_outputs(graph, result.outputs, evaluate(graph)).ok


def test_stuck_op_times_out_and_executor_recovers(monkeypatch, graph):
    sabotage = Sabotage(monkeypatch, "m1_0")
    sabotage.attach(graph)
    sabotage.sleep_s = 2.0
    pl = placement_with(graph, "m1_0", 0)
    backend = make_backend("cpu", 2)
    try:
        ex = Executor(graph, backend, timeout_s=0.2)
        sabotage.mode = "sleep"
        start = time.perf_counter()
        with pytest.raises(ExecutorError, match="timed out") as info:
            ex.run(pl)
        assert time.perf_counter() - start < 1.8  # returned while the op was still stuck
        assert "'m1_0'" in str(info.value) and "device 0" in str(info.value)
        sabotage.mode = None
        ex.timeout_s = 30.0
        assert ex.run(pl).trace.check(graph) == []  # a fresh worker replaced the stuck one
    finally:
        backend.close()
    # the abandoned worker leaves once its op returns
    deadline = time.perf_counter() + 5.0
    while any(t.name.startswith("doppler-") and t.is_alive() for t in threading.enumerate()):
        if time.perf_counter() > deadline:
            break
        time.sleep(0.05)
    stuck = [t.name for t in threading.enumerate() if t.name.startswith(f"doppler-{id(backend):x}")]
    assert stuck == []


def test_stream_dispatcher_times_out_on_events_that_never_complete(graph):
    backend = make_inline_backend(2, lag=10**9)
    ex = Executor(graph, backend, timeout_s=0.2)
    with pytest.raises(ExecutorError, match="timed out.*still running"):
        ex.run(round_robin(graph, 2))
    backend.api.lag = 1
    assert ex.run(round_robin(graph, 2)).trace.check(graph) == []


@pytest.mark.parametrize("window", [1, 3])
@pytest.mark.parametrize("lag", [0, 2])
def test_stream_dispatcher_windows_and_lags(graph, window, lag):
    backend = make_inline_backend(3, lag=lag, window=window)
    ref = evaluate(graph)
    rng = np.random.default_rng(window + lag)
    with Executor(graph, backend) as ex:
        for _ in range(3):
            pl = Placement(rng.integers(0, 3, graph.num_nodes))
            result = ex.run(pl, keep_outputs=True)
            assert compare_outputs(graph, result.outputs, ref).ok
            assert result.trace.check(graph) == []
