"""The CUDA backend (skipped without CUDA; ``doppler-lab gpu-check`` runs these on a GPU).

With one GPU, ``cuda-shared`` puts several logical devices on it (each with its own streams), so
transfers, copy streams and cross-stream memory handling are exercised too.
"""

from __future__ import annotations

import time

import numpy as np
import pytest
import torch

import doppler_lab.executor.plan as plan_module
from doppler_lab.executor import Executor, ExecutorCost, make_backend
from doppler_lab.executor.runner import compare_outputs
from doppler_lab.executor.torch_ops import evaluate
from doppler_lab.house.errors import ExecutorError
from doppler_lab.ir.placement import Placement, random_placement, round_robin, single_device

from executor_helpers import (
    TINY_SCALE,
    TINY_WORKLOADS,
    USER_MODEL_SOURCE,
    ZOO_SPECS,
    check_all,
    fan_graph,
    toy_graph,
)

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def shared3():
    backend = make_backend("cuda-shared", 3)
    yield backend
    backend.close()


@pytest.fixture(scope="module")
def all_gpus():
    backend = make_backend("cuda")
    yield backend
    backend.close()


def some_placements(graph, d: int) -> list[Placement]:
    rng = np.random.default_rng(0)
    return [single_device(graph, d, d - 1), round_robin(graph, d), random_placement(graph, d, rng)]


@pytest.mark.parametrize("name", TINY_WORKLOADS)
def test_outputs_match_reference_on_logical_devices(shared3, name):
    from doppler_lab.workloads import build

    g = build(name, scale=TINY_SCALE)
    ref = evaluate(g, seed=3)
    with Executor(g, shared3, seed=3) as ex:
        for pl in some_placements(g, 3):
            r = ex.run(pl, repeats=2, warmup=1, keep_outputs=True)
            check = compare_outputs(g, r.outputs, ref)
            assert check.ok, f"{name} {pl.placer}: {check}"
            t = r.trace
            assert t.check(g) == [], t.check(g)[:3]
            assert (t.end[g.compute_nodes] >= t.start[g.compute_nodes]).all()
            assert (t.transfer_end >= t.transfer_start).all()


@pytest.mark.parametrize("name", ["ffnn", "llama_block"])
def test_outputs_match_on_every_visible_gpu(all_gpus, name):
    from doppler_lab.workloads import build

    g = build(name, scale=0.05)
    ref = evaluate(g)
    with Executor(g, all_gpus) as ex:
        for pl in some_placements(g, all_gpus.num_devices):
            r = ex.run(pl, keep_outputs=True)
            assert compare_outputs(g, r.outputs, ref).ok
            assert r.trace.check(g) == []


@pytest.mark.parametrize("kind", ["cuda", "cuda-shared"])
@pytest.mark.parametrize("name", TINY_WORKLOADS)
def test_every_generator_under_every_placement_on_cuda(kind, name):
    """single, round-robin, random, cp, heft and doppler placements (the CPU tier's
    ``inline-strict`` runs the same on CPU: tests/executor/test_device_residency.py)."""
    from doppler_lab.workloads import build

    backend = make_backend(kind, 3 if kind == "cuda-shared" else None)
    try:
        check_all(build(name, scale=TINY_SCALE), backend)
    finally:
        backend.close()


@pytest.mark.parametrize("spec", ZOO_SPECS)
def test_every_zoo_model_under_every_placement_on_cuda(shared3, spec):
    from doppler_lab.importers.zoo import import_model

    check_all(import_model(spec), shared3)


def test_a_user_file_model_under_every_placement_on_cuda(shared3, tmp_path):
    from doppler_lab.importers.zoo import import_model

    src = tmp_path / "user_model.py"
    src.write_text(USER_MODEL_SOURCE)
    check_all(import_model(f"{src}:build"), shared3)


def test_one_gpu_cluster_is_valid():
    backend = make_backend("cuda", 1)
    try:
        assert backend.num_devices == 1 and backend.cluster.num_links == 0
    finally:
        backend.close()


def test_fifo_and_priority_dispatch_on_streams(shared3):
    g = fan_graph(6)
    comp = g.compute_nodes
    prio = np.zeros(g.num_nodes)
    prio[comp] = [3, 5, 0, 4, 1, 2]
    pl = Placement(np.zeros(g.num_nodes, dtype=np.int64), priority=prio)
    with Executor(g, shared3) as ex:
        launched = np.array(ex.run(pl, dispatch="priority").trace.meta["dispatch_order"])
        assert list(comp[np.argsort(launched[comp])]) == list(comp[np.argsort(prio[comp])])
        launched = np.array(ex.run(pl).trace.meta["dispatch_order"])
        assert list(comp[np.argsort(launched[comp])]) == list(comp)


def test_timings_are_device_times(shared3):
    """Ops are timed with device events: one device's ops never overlap and fill the run."""
    from doppler_lab.ir.graph import GraphBuilder

    b = GraphBuilder("mm")
    x = b.add_input("x", (2048, 2048))
    w = b.add_input("w", (2048, 2048))
    y = b.add_einsum("y", "ij,jk->ik", [x, w])
    b.add_elementwise("z", "tanh", [y])
    g = b.build()
    with Executor(g, shared3) as ex:
        t = ex.run(single_device(g, 3), repeats=3, warmup=1).trace
    d = t.end - t.start
    assert d[g.names.index("y")] > 0 and t.makespan >= np.nansum(d) * 0.99


class _Sabotage:
    def __init__(self, monkeypatch, node: str, graph):
        self.mode: str | None = None
        original = plan_module.compile_op
        target = id(graph.specs[graph.names.index(node)])

        def compile_op(spec):
            fn = original(spec)
            if id(spec) != target:
                return fn

            def wrapped(*xs):
                if self.mode == "raise":
                    raise RuntimeError("sabotaged")
                if self.mode == "oom":  # far more than any GPU has
                    torch.empty(1 << 46, dtype=torch.uint8, device=xs[0].device)
                if self.mode == "spin":
                    torch.cuda._sleep(int(1e10))  # about 5 s of device time at 2 GHz
                return fn(*xs)

            return wrapped

        monkeypatch.setattr(plan_module, "compile_op", compile_op)


@pytest.mark.parametrize("mode,verb", [("raise", "raised"), ("oom", "ran out of memory")])
def test_failures_name_op_and_device_and_recover(shared3, monkeypatch, mode, verb):
    g = toy_graph(layers=3, size=64)
    sabotage = _Sabotage(monkeypatch, "a1_1", g)
    dev = round_robin(g, 3).device.copy()
    dev[g.names.index("a1_1")] = 2
    pl = Placement(dev)
    with Executor(g, shared3) as ex:
        sabotage.mode = mode
        with pytest.raises(ExecutorError) as info:
            ex.run(pl)
        msg = str(info.value)
        assert "'a1_1'" in msg and "device 2" in msg and verb in msg
        sabotage.mode = None
        r = ex.run(pl, keep_outputs=True)
        assert compare_outputs(g, r.outputs, evaluate(g)).ok


def test_a_stuck_kernel_times_out_and_the_next_run_waits_for_it(shared3, monkeypatch):
    g = toy_graph(layers=2, size=32)
    sabotage = _Sabotage(monkeypatch, "m1_0", g)
    with Executor(g, shared3, timeout_s=0.5) as ex:
        sabotage.mode = "spin"
        start = time.perf_counter()
        with pytest.raises(ExecutorError, match="timed out"):
            ex.run(round_robin(g, 3))
        assert time.perf_counter() - start < 3.0  # returned while the kernel still ran
        sabotage.mode = None
        ex.timeout_s = 60.0
        assert ex.run(round_robin(g, 3)).trace.check(g) == []


def test_executor_cost_on_gpu(shared3):
    g = toy_graph(layers=3, size=128)
    with ExecutorCost(g, shared3, repeats=3, warmup=1) as cost:
        assert cost(round_robin(g, 3)) > 0 and cost.calls == 1


def test_calibration_on_gpu(shared3, tmp_path):
    from doppler_lab.executor.profiling import calibrate
    from doppler_lab.timing.calibration import Profile
    from doppler_lab.timing.sim import Simulator

    g = toy_graph(layers=3, size=128)
    prof = calibrate(shared3, [g], quick=True)
    back = Profile.load(prof.save(tmp_path / "gpu.json"))
    assert back.backend == "cuda" and back.coverage(g) == 1.0
    sim = Simulator(g, back.cluster, "wc", cost_model=back.cost_model(g))
    assert sim.makespan(round_robin(g, 3)) > 0
