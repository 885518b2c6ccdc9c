"""How many CUDA calls the stream dispatcher makes per op, counted on a CPU through a stand-in
of the CUDA stream and event API (:mod:`fake_cuda`): one event per op, stream switches only
where a GPU changes streams, completions of quiet ops found by one query.

Counts before these changes (the same graphs, ``lag`` 1): 2 records and 2 ``elapsed_time``
per op plus 2 per copy; ``cuda-shared`` fan-out 1.02 stream switches per op, round-robin toy
graph 3.84 (separate GPUs) and 2.6 (shared) per op; ``lag`` 0 fan-out 1.0 query per op.
"""

from __future__ import annotations

import numpy as np
import pytest
from fake_cuda import fake_cuda

from doppler_lab.executor.plan import compile_ops, make_plan
from doppler_lab.executor.runner import compare_outputs
from doppler_lab.executor.streams import CudaApi, StreamBackend, describe_gpus
from doppler_lab.executor.torch_ops import evaluate
from doppler_lab.ir.placement import round_robin

from executor_helpers import fan_graph, toy_graph

GPU = "NVIDIA H100 80GB HBM3"


def _count(monkeypatch, graph, gpus: list[int], lag: int = 1):
    """The calls of one run (after a first one), the plan, and the run."""
    with fake_cuda(monkeypatch, lag) as calls:
        n = len(gpus)
        backend = StreamBackend(CudaApi(n, gpus), describe_gpus(gpus, [GPU] * n, [80e9] * n))
        session = backend.open(graph, 0)
        plan = make_plan(graph, round_robin(graph, n), n, fns=compile_ops(graph))
        session.run(plan, 30.0)
        calls.clear()
        raw = session.run(plan, 30.0, keep_outputs=True)
        return dict(calls), plan, raw


@pytest.mark.parametrize("gpus", [[0, 1], [0, 0]], ids=["cuda", "cuda-shared"])
@pytest.mark.parametrize("graph", [toy_graph(layers=6), fan_graph(40)], ids=["toy", "fan"])
def test_one_event_per_op_and_the_outputs_stay_right(monkeypatch, graph, gpus):
    calls, plan, raw = _count(monkeypatch, graph, gpus)
    ops, copies, nd = plan.num_ops, plan.num_transfers, len(gpus)
    # one event per op, two per copy; per run: a time origin per device and two idle checks
    # of its three streams
    assert calls["record"] == ops + 2 * copies + nd + 2 * 3 * nd
    assert calls["elapsed"] == ops + 2 * copies
    assert compare_outputs(graph, raw.outputs, evaluate(graph, seed=0)).ok
    # the starts the host infers: after the previous op on the device ends, before its own end
    dev = plan.device
    for d in range(nd):
        mine = [v for v in np.argsort(raw.dispatch_order) if raw.dispatch_order[v] >= 0]
        mine = [v for v in mine if dev[v] == d]
        s, e = raw.start_s[mine], raw.end_s[mine]
        assert np.all(s <= e) and np.all(s[1:] >= e[:-1])


@pytest.mark.parametrize(
    ("graph", "gpus", "most"),
    [
        (toy_graph(layers=6), [0, 1], 2.4),  # was 3.84: two switches per copy
        (toy_graph(layers=6), [0, 0], 1.6),  # was 2.6
        (fan_graph(40), [0, 0], 0.6),  # was 1.02: a switch per op
    ],
    ids=["toy-cuda", "toy-shared", "fan-shared"],
)
def test_stream_switches_per_op_fall(monkeypatch, graph, gpus, most):
    calls, plan, _ = _count(monkeypatch, graph, gpus)
    begin_end = 2 * len(gpus)  # begin() sets each compute stream, end() restores
    assert (calls["set_stream"] - begin_end) / plan.num_ops <= most


def test_quiet_ops_are_polled_together(monkeypatch):
    """Events that complete at once (lag 0): fewer queries than ops, where each op was
    polled before (independent ops, no copies)."""
    calls, plan, _ = _count(monkeypatch, fan_graph(40), [0, 1], lag=0)
    idle_checks = 2 * 3 * 2
    assert calls["query"] - idle_checks < plan.num_ops
