"""The stream dispatcher's per-plan program, its copy events, its host time per op, and the
CUDA stream bookkeeping that a CPU can check (the rest runs under ``gpu-check``)."""

from __future__ import annotations

import numpy as np

from doppler_lab.executor import Executor, make_backend
from doppler_lab.executor.runner import compare_outputs
from doppler_lab.executor.streams import CudaApi, _event_method, _InlineEvent
from doppler_lab.executor.torch_ops import evaluate
from doppler_lab.ir.placement import random_placement, round_robin

from executor_helpers import toy_graph


def test_a_plan_is_prepared_once_and_copies_record_their_senders_events():
    g = toy_graph(layers=3)
    ref = evaluate(g, seed=2)
    backend = make_backend("inline", 3)
    rng = np.random.default_rng(4)
    a, b = random_placement(g, 3, rng), round_robin(g, 3)
    with Executor(g, backend, seed=2) as ex:
        plan_a, plan_b = ex.plan(a), ex.plan(b)
        session = ex._session_()
        for plan in (plan_a, plan_b, plan_a):  # programs share the session's events
            for _ in range(2):
                raw = session.run(plan, 30.0, keep_outputs=True)
                assert compare_outputs(g, raw.outputs, ref).ok
            prog = session._program
            assert prog is not None and prog.plan is plan
            pool = session.events.events
            for u, sends in enumerate(prog.sends):
                for _, _, k in sends:
                    assert all(any(ev is e for e in pool[prog.device[u]]) for ev in prog.ev_copy[k])
            assert len(raw.transfers) == plan.num_transfers
            assert all(0 <= t[4] <= t[5] for t in raw.transfers)


def test_stream_runs_report_the_host_time_of_their_dispatch_loop():
    from doppler_lab.lab.bench.gpu import dispatch_section

    g = toy_graph(layers=2)
    with Executor(g, make_backend("inline", 2)) as ex:
        trace = ex.run(round_robin(g, 2)).trace
    assert 0 < trace.meta["host_loop_s"] < 30
    out = dispatch_section([make_backend("inline", 2)], num_ops=40)
    rows = [r for r in out["rows"] if "busy_devices" in r]
    assert sorted(r["busy_devices"] for r in rows) == [1, 2]
    assert all(r["host_us_per_op"] > 0 for r in out["rows"])
    s = out["summary"]
    assert s["host_us_per_op_busy_devices"] == round(
        max(r["host_us_per_op"] for r in rows if r["busy_devices"] == 2), 2
    )
    assert s["host_target_met"] == (s["host_us_per_op_busy_devices"] <= s["target_us"])


def test_cuda_shared_switches_streams_only_between_devices():
    """``activate`` makes a device's compute stream current only when another stream is
    current on that GPU; a copy leaves its egress stream current, so the next op there switches
    back (no GPU needed: the switches are recorded)."""
    api = CudaApi.__new__(CudaApi)
    api.gpus = [0, 0, 1, 1]
    switches: list[int] = []
    api._make_current = [lambda d=d: switches.append(d) for d in range(4)]
    api._current = {g: d for d, g in enumerate(api.gpus)}  # as begin() leaves it
    for d in (1, 1, 0, 0, 3, 2, 2, 1):
        api.activate(d)
    assert switches == [0, 2, 1]
    api._current[0] = ("egress", 1)  # a copy from device 1 left its egress stream current
    api.activate(1)
    api.activate(1)
    api.activate(0)
    assert switches == [0, 2, 1, 1, 0]


def test_event_calls_fall_back_to_the_events_own_methods():
    class Event:
        def query(self) -> bool:
            return True

    assert _event_method(Event(), "query") is Event.query
    assert _event_method(_InlineEvent(), "__init__") is _InlineEvent.__init__
