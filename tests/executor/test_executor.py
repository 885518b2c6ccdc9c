"""The executor runs placements for real: outputs, traces, dispatch order, the cost function."""

from __future__ import annotations

import threading

import numpy as np
import pytest
import torch

from doppler_lab.executor import Executor, ExecutorCost, execute, make_backend, make_plan
from doppler_lab.executor.runner import compare_outputs
from doppler_lab.executor.torch_ops import evaluate
from doppler_lab.house.errors import ConfigError, GraphError, PlacementError
from doppler_lab.ir.graph import GraphBuilder
from doppler_lab.ir.placement import Placement, random_placement, round_robin, single_device
from doppler_lab.ir.trace import Trace

from executor_helpers import TINY_SCALE, TINY_WORKLOADS, cpu2, fan_graph, inline3, toy, toy_graph  # noqa: F401


def placements(graph, d: int, seed: int = 0) -> list[Placement]:
    rng = np.random.default_rng(seed)
    return [
        single_device(graph, d, d - 1),
        round_robin(graph, d),
        random_placement(graph, d, rng),
        random_placement(graph, d, rng),
    ]


def expected_transfers(graph, placement: Placement) -> set[tuple[int, int]]:
    dev = placement.device
    return {
        (int(u), int(dev[w]))
        for u, w in zip(graph.edge_src, graph.edge_dst)
        if not graph.is_input[u] and dev[u] != dev[w]
    }


@pytest.fixture(scope="module", params=TINY_WORKLOADS)
def workload(request):
    workloads = pytest.importorskip("doppler_lab.workloads")
    g = workloads.build(request.param, scale=TINY_SCALE)
    return g, evaluate(g, seed=7)


@pytest.mark.parametrize("backend_name", ["cpu2", "inline3"])
def test_outputs_match_reference_on_every_workload(workload, backend_name, request):
    graph, reference = workload
    backend = request.getfixturevalue(backend_name)
    with Executor(graph, backend, seed=7) as ex:
        for pl in placements(graph, backend.num_devices):
            result = ex.run(pl, keep_outputs=True)
            check = compare_outputs(graph, result.outputs, reference)
            assert check.ok, f"{graph.name} {pl.placer}: {check}"
            trace = result.trace
            assert trace.check(graph) == []
            assert trace.semantics == "measured"
            pairs = set(zip(trace.transfer_src.tolist(), trace.transfer_dst_device.tolist()))
            assert pairs == expected_transfers(graph, pl)
            assert trace.num_transfers == len(pairs)  # one copy per (tensor, device)


@pytest.mark.parametrize("d", [1, 2, 3])
def test_toy_graph_any_device_count(toy, d):  # noqa: F811
    reference = evaluate(toy, seed=1)
    with Executor(toy, "cpu", num_devices=d, seed=1) as ex:
        for pl in placements(toy, d, seed=d):
            result = ex.run(pl, repeats=2, warmup=1, keep_outputs=True)
            assert compare_outputs(toy, result.outputs, reference).ok
            assert result.trace.check(toy) == []
            assert result.makespans_s.shape == (2,)
            assert result.makespan == pytest.approx(float(np.median(result.makespans_s)))


def test_trace_records(toy, cpu2):  # noqa: F811
    pl = round_robin(toy, 2)
    trace = Executor(toy, cpu2).run(pl, repeats=3).trace
    comp = toy.compute_nodes
    assert np.isnan(trace.start[toy.is_input]).all() and (trace.device[toy.is_input] == -1).all()
    assert (trace.start[comp] >= 0).all() and (trace.end[comp] >= trace.start[comp]).all()
    assert (trace.device[comp] == pl.device[comp]).all()
    assert (trace.transfer_end >= trace.transfer_start).all()
    assert trace.makespan == pytest.approx(trace.meta["makespans_s"][trace.meta["repeat_shown"]])
    assert trace.meta["backend"] == "cpu" and trace.meta["repeats"] == 3
    back = Trace.from_dict(trace.to_dict())
    assert back.makespan == trace.makespan and back.semantics == "measured"


@pytest.mark.parametrize("backend_name", ["cpu2", "inline3"])
def test_fifo_dispatch_follows_readiness(toy, backend_name, request):  # noqa: F811
    """Work-conserving FIFO: on every device, ops are launched in the order they became ready."""
    backend = request.getfixturevalue(backend_name)
    rng = np.random.default_rng(3)
    with Executor(toy, backend) as ex:
        for _ in range(3):
            trace = ex.run(random_placement(toy, backend.num_devices, rng)).trace
            ready = np.array(trace.meta["ready_order"])
            launched = np.array(trace.meta["dispatch_order"])
            comp = toy.compute_nodes
            assert sorted(ready[comp]) == list(range(comp.size))
            for d in range(backend.num_devices):
                on = comp[trace.device[comp] == d]
                by_launch = on[np.argsort(launched[on])]
                assert (np.diff(ready[by_launch]) > 0).all()
                if backend_name == "cpu2":  # one lane per device: launched = started in order
                    assert (np.diff(trace.start[by_launch]) >= 0).all()


def test_initial_ready_ops_start_in_node_order(cpu2):  # noqa: F811
    g = fan_graph(6)
    trace = Executor(g, cpu2).run(single_device(g, 2)).trace
    comp = g.compute_nodes
    assert list(comp[np.argsort(trace.start[comp])]) == list(comp)


@pytest.mark.parametrize("backend_name", ["cpu2", "inline3"])
def test_priority_dispatch(backend_name, request):
    backend = request.getfixturevalue(backend_name)
    g = fan_graph(6)
    comp = g.compute_nodes
    prio = np.zeros(g.num_nodes)
    prio[comp] = [3, 5, 0, 4, 1, 2]
    dev = np.zeros(g.num_nodes, dtype=np.int64)
    dev[comp[3:]] = 1
    pl = Placement(dev, priority=prio)
    with Executor(g, backend) as ex:
        trace = ex.run(pl, dispatch="priority").trace
        fifo = ex.run(pl, dispatch="fifo").trace
    launched = np.array(trace.meta["dispatch_order"])
    for d in (0, 1):
        on = comp[dev[comp] == d]
        assert list(on[np.argsort(launched[on])]) == list(on[np.argsort(prio[on])])
        launched_fifo = np.array(fifo.meta["dispatch_order"])
        assert list(on[np.argsort(launched_fifo[on])]) == list(on)


def test_priority_dispatch_needs_a_priority(toy, cpu2):  # noqa: F811
    with pytest.raises(PlacementError, match="priority"):
        Executor(toy, cpu2).run(round_robin(toy, 2), dispatch="priority")


def test_same_inputs_for_every_placement_and_seed_matters(toy):  # noqa: F811
    with Executor(toy, "cpu", num_devices=2, seed=5) as ex:
        a = ex.run(single_device(toy, 2), keep_outputs=True).outputs
        b = ex.run(round_robin(toy, 2), keep_outputs=True).outputs
    with Executor(toy, "cpu", num_devices=2, seed=6) as ex:
        c = ex.run(single_device(toy, 2), keep_outputs=True).outputs
    v = int(np.flatnonzero(np.array(toy.names) == "out")[0])
    assert torch.allclose(a[v], b[v], rtol=1e-5, atol=1e-6)
    assert not torch.allclose(a[v], c[v])


def test_input_placement_entries_are_ignored(toy, cpu2):  # noqa: F811
    pl = round_robin(toy, 2)
    dev = pl.device.copy()
    dev[toy.is_input] = 99  # never used: inputs are resident where consumed
    out = Executor(toy, cpu2).run(Placement(dev), keep_outputs=True).outputs
    assert compare_outputs(toy, out, evaluate(toy)).ok


def test_plan_structure(toy):  # noqa: F811
    pl = round_robin(toy, 2)
    plan = make_plan(toy, pl, 2)
    assert plan.num_ops == toy.compute_nodes.size
    assert plan.num_transfers == len(expected_transfers(toy, pl))
    for u, devs in plan.input_devices.items():
        assert set(devs) == {int(pl.device[w]) for w in toy.successors(u)}
    assert all(plan.need[v] == 0 for d in range(2) for v in plan.initial[d])


def test_bad_inputs_are_named():
    b = GraphBuilder("cost-only")
    b.add_node("a", cost=1.0)
    with pytest.raises(GraphError, match="not executable"):
        Executor(b.build(), "cpu")
    g = toy_graph(layers=2)
    with pytest.raises(PlacementError, match="device 5"):
        Executor(g, "cpu", num_devices=2).run(np.full(g.num_nodes, 5))
    with pytest.raises(ConfigError, match="unknown backend"):
        Executor(g, "tpu")
    with pytest.raises(ConfigError, match="repeats"):
        Executor(g, "cpu", num_devices=2).run(round_robin(g, 2), repeats=0)
    with pytest.raises(ConfigError, match="dispatch"):
        Executor(g, "cpu", num_devices=2).run(round_robin(g, 2), dispatch="lifo")
    with pytest.raises(ConfigError, match="timeout"):
        Executor(g, "cpu", timeout_s=0)


def workers_alive() -> set[threading.Thread]:
    return {t for t in threading.enumerate() if t.name.startswith("doppler-") and t.is_alive()}


def test_execute_function_and_worker_cleanup(toy):  # noqa: F811
    before = workers_alive()
    trace = execute(toy, round_robin(toy, 2), "cpu", num_devices=2, repeats=2)
    assert trace.check(toy) == [] and trace.meta["repeats"] == 2
    assert workers_alive() <= before  # execute() made its backend, so it stopped its workers


def test_executor_cost(toy, cpu2):  # noqa: F811
    with ExecutorCost(toy, cpu2, repeats=3, warmup=1) as cost:
        a = cost(round_robin(toy, 2))
        b = cost(single_device(toy, 2).device)  # a bare array is fine
        assert a > 0 and b > 0 and cost.calls == 2
        assert cost.last_trace is not None and cost.last_trace.meta["repeats"] == 3
        assert cost.num_devices == 2
    ex = Executor(toy, cpu2)
    for stat in ("mean", "min"):
        assert ExecutorCost(toy, ex, stat=stat)(round_robin(toy, 2)) > 0
    with pytest.raises(ConfigError, match="stat"):
        ExecutorCost(toy, ex, stat="max")
    with pytest.raises(ConfigError, match="runs graph"):
        ExecutorCost(fan_graph(), ex)


def test_make_backend_specs(tmp_path):
    from doppler_lab.hardware.cluster import make_cpu
    from doppler_lab.io.documents import save_cluster

    assert make_backend("cpu", 3).num_devices == 3
    assert make_backend(make_cpu(2)).name == "cpu"
    path = save_cluster(make_cpu(3), tmp_path / "c.json")
    backend = make_backend(str(path))
    assert backend.num_devices == 3 and backend.name == "cpu"
    assert make_backend(backend) is backend
    with pytest.raises(ConfigError):
        make_backend(backend, num_devices=5)
    with pytest.raises(ConfigError, match="does not exist"):
        make_backend(str(tmp_path / "missing.json"))


@pytest.mark.parametrize("backend_name", ["cpu2", "inline3"])
def test_a_graph_of_inputs_only_runs_nothing(backend_name, request):
    backend = request.getfixturevalue(backend_name)
    b = GraphBuilder("inputs")
    b.add_input("x", (2,))
    g = b.build()
    trace = Executor(g, backend).run(np.zeros(1, dtype=np.int64)).trace
    assert trace.makespan == 0.0 and trace.num_transfers == 0


def test_stream_devices_share_one_time_origin(toy, monkeypatch):  # noqa: F811
    """A host that stalls while the run starts (here: the first records of every run take
    30 ms, as if the thread were preempted) must not shift the devices' timelines apart: a
    consumer would seem to start before its input arrived."""
    import time

    from doppler_lab.executor.streams import InlineApi

    begin, record = InlineApi.begin, InlineApi.record
    calls = [0]

    def counting_begin(self):
        calls[0] = 0
        begin(self)

    def stalling_record(self, ev, d):
        calls[0] += 1
        if calls[0] <= self.num_devices:
            time.sleep(0.03)
        record(self, ev, d)

    monkeypatch.setattr(InlineApi, "begin", counting_begin)
    monkeypatch.setattr(InlineApi, "record", stalling_record)
    with Executor(toy, make_backend("inline", 3), seed=1) as ex:
        for pl in placements(toy, 3, seed=5):
            assert ex.run(pl, warmup=0).trace.check(toy) == []


def test_compare_interleaves_a_and_b_and_gives_a_verdict():
    """A B A B ...: each timed pair is one run of each, in that order, after the warm-ups."""
    g = toy_graph()
    a, b = round_robin(g, 2), single_device(g, 2, 0)
    with Executor(g, "inline", num_devices=2) as ex:
        session = ex._session_()
        dev_a = ex.plan(a).device
        order: list[str] = []
        real_run = session.run

        def spy(plan, *args, **kwargs):
            order.append("A" if np.array_equal(plan.device, dev_a) else "B")
            return real_run(plan, *args, **kwargs)

        session.run = spy  # type: ignore[method-assign]
        runs = ex.compare(a, b, pairs=3, warmup=1)
    assert order == ["A", "B"] * 4
    assert runs.makespans_a_s.shape == runs.makespans_b_s.shape == (3,)
    assert runs.stats.n == 3 and runs.stats.verdict == "cannot tell"  # too few pairs to judge
    with pytest.raises(ConfigError, match="pairs"):
        Executor(g, "inline", num_devices=2).compare(a, b, pairs=0)
