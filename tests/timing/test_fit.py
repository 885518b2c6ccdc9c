"""Memory in the timing wing: the guard judges by liveness, the registry fits every placer's
result once, and caps keep a runtime reserve per device."""

from __future__ import annotations

import numpy as np
import pytest

from doppler_lab.hardware.cluster import (
    RESERVE_FIXED_BYTES,
    RESERVE_SHARE,
    Device,
    make_cluster,
)
from doppler_lab.house.errors import ClusterError
from doppler_lab.ir.graph import GraphBuilder
from doppler_lab.ir.placement import Placement
from doppler_lab.placers import get_placer, place
from doppler_lab.placers.registry import FittedPlacer
from doppler_lab.timing.fit import MemoryGuard, fits_one_device, static_bounds
from doppler_lab.timing.memory import memory_caps, memory_reserves
from doppler_lab.timing.sim import SEMANTICS, Simulator

#: memory-aware placers: none splits a chain that fits one device (each split it over all 4
#: devices by the static bound before)
WHOLE = ("cp", "heft", "cpop", "etf", "m-topo", "m-sct", "pipeline")


def chain(n: int = 12, out: float = 1e9):
    """A chain of ``n`` ops, each ``out`` bytes: the static bound on one device is ``n *
    out``, the simulated peak about two outputs."""
    b = GraphBuilder("chain")
    prev = b.add_node("x", kind="input", out_bytes=1e8)
    for i in range(n):
        prev = b.add_node(f"v{i}", inputs=[prev], flops=2e12, out_bytes=out)
    return b.build()


@pytest.fixture
def fitting():
    """A model whose static bound (12.1 GB) exceeds the 3 GB caps, its simulated peak (2.1 GB)
    does not: it fits one device."""
    g = chain()
    cluster = make_cluster("uniform", 4).with_memory(3e9, 0.0)
    one = np.zeros(g.num_nodes, dtype=np.int64)
    assert static_bounds(g, one[None, :], 4)[0, 0] > 3e9
    assert fits_one_device(g, cluster)
    return g, cluster


def test_guard_binds_but_stays_inactive_where_the_model_fits_one_device(fitting):
    g, cluster = fitting
    guard = MemoryGuard(g, cluster, "heft")
    assert guard.binds and not guard.active
    tight = make_cluster("uniform", 4).with_memory(2.05e9, 0.0)  # 2.1 GB peak: must split
    assert MemoryGuard(g, tight, "heft").active


@pytest.mark.parametrize("name", WHOLE)
def test_memory_aware_placers_do_not_split_a_model_that_fits_one_device(fitting, name):
    g, cluster = fitting
    p = place(name, g, cluster, seed=0)
    one = Simulator(g, cluster, "wc").run(np.zeros(g.num_nodes, dtype=np.int64)).makespan
    comp = g.compute_nodes
    for s in SEMANTICS:
        assert np.all(Simulator(g, cluster, s).run(p).peak_memory_bytes <= 3e9)
    assert np.unique(p.device[comp]).size == 1
    assert Simulator(g, cluster, "wc").run(p).makespan <= 1.1 * one


class _AllOnZero:
    """A placer that ignores memory: every op on device 0."""

    name = "all-on-zero"

    def place(self, graph, cluster, rng):
        return Placement(np.zeros(graph.num_nodes, dtype=np.int64), placer=self.name)


def test_the_registry_fits_what_a_placer_returns():
    g = chain(3, 1e9)
    cluster = make_cluster("uniform", 4).with_memory(2.05e9, 0.0)  # 2.1 GB peak on one
    raw = _AllOnZero().place(g, cluster, np.random.default_rng(0))
    assert Simulator(g, cluster, "wc").run(raw).peak_memory_bytes[0] > 2.05e9
    p = FittedPlacer(_AllOnZero()).place(g, cluster, np.random.default_rng(0))
    assert p.meta["memory_fit"] in ("repaired", "packed", "pipeline")
    for s in SEMANTICS:
        assert np.all(Simulator(g, cluster, s).run(p).peak_memory_bytes <= 2.05e9)
    assert isinstance(get_placer("heft"), FittedPlacer)
    assert get_placer("heft").name == "heft"
    # a schedule only where the placer gives one (``place`` asks ``hasattr(placer, "schedule")``)
    assert hasattr(get_placer("heft"), "schedule")
    assert not hasattr(get_placer("pipeline"), "schedule")


def test_default_reserve_of_a_gpu_and_none_on_cpus_or_without_sizes():
    gpus = make_cluster("uniform", 2).with_memory(32e9)
    want = RESERVE_FIXED_BYTES + RESERVE_SHARE * 32e9
    np.testing.assert_allclose(memory_reserves(gpus), [want, want])
    np.testing.assert_allclose(memory_caps(gpus), [32e9 - want] * 2)
    assert 31.88e9 > memory_caps(gpus)[0]  # 31.88 GB no longer packs onto a 32 GB V100
    assert memory_reserves(gpus.with_memory(None)).tolist() == [0.0, 0.0]
    assert memory_reserves(gpus.with_memory(60e6)).tolist() == [0.0, 0.0]  # not a GPU's size
    cpu = Device("cpu:0", "cpu", {"float32": 1e11}, memory_bytes=64e9)
    assert cpu.runtime_reserve() == 0.0


def test_explicit_reserve_and_its_errors():
    c = make_cluster("uniform", 2).with_memory(8e9, 0.5e9)
    np.testing.assert_allclose(memory_caps(c), [7.5e9, 7.5e9])
    assert make_cluster("uniform", 2).with_memory(8e9, 0.0).devices[0].runtime_reserve() == 0
    with pytest.raises(ClusterError, match=r"memory reserve = 9000000000.0, expected bytes >= 0"):
        make_cluster("uniform", 2).with_memory(8e9, 9e9)
    with pytest.raises(ClusterError, match="memory reserve = -1"):
        make_cluster("uniform", 2).with_memory(8e9, -1)


def test_reserve_round_trips_through_the_cluster_document():
    c = make_cluster("uniform", 2).with_memory(8e9, 0.25e9)
    d = c.devices[0].to_dict()
    assert d["memory_reserve_bytes"] == 0.25e9
    assert Device.from_dict(d).runtime_reserve() == 0.25e9
    assert "memory_reserve_bytes" not in make_cluster("uniform", 2).devices[0].to_dict()


def test_old_path_warns_and_holds_both_homes():
    import importlib
    import sys

    sys.modules.pop("doppler_lab.placers.memory_fit", None)
    with pytest.warns(DeprecationWarning, match="timing.fit"):
        old = importlib.import_module("doppler_lab.placers.memory_fit")
    assert old.MemoryGuard is MemoryGuard
    assert callable(old.fit_placement) and callable(old.repair)


def test_the_list_scheduling_state_carries_the_guard():
    from doppler_lab.timing.cost_model import CostModel
    from doppler_lab.timing.episode import Episode

    g = chain(4, 1e9)
    cluster = make_cluster("uniform", 4).with_memory(2.05e9, 0.0)
    guard = MemoryGuard(g, cluster, "cp")
    assert guard.active
    state = Episode(g, CostModel(g, cluster), "est", guard)
    v = int(state.candidates()[0])
    state.assign(v, 0)
    assert guard.footprint.device[v] == 0
    fork = state.copy()
    w = int(fork.candidates()[0])
    fork.assign(w, 1)
    assert fork.guard.footprint.device[w] == 1 and guard.footprint.device[w] == -1
    np.testing.assert_array_equal(state.room(w), guard.room(w))


def test_place_reports_the_reserve_and_rejects_a_bad_one(capsys):
    import json

    from doppler_lab.cli import main

    argv = ["place", "chainmm:scale=0.1", "--cluster", "p100x4", "--placer", "heft", "--json"]
    assert main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    want = RESERVE_FIXED_BYTES + RESERVE_SHARE * 16e9
    assert out["memory_bytes"] == [16e9] * 4
    assert out["memory_reserve_bytes"] == pytest.approx([want] * 4)
    assert main([*argv, "--memory-cap", "8GB", "--memory-reserve", "0.5GB"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["memory_bytes"] == [8e9] * 4 and out["memory_reserve_bytes"] == [0.5e9] * 4
    assert main([*argv, "--memory-cap", "8GB", "--memory-reserve", "9GB"]) == 2
    err = capsys.readouterr().err
    assert "--memory-reserve 9 GB: device" in err and "less than its memory" in err
    assert err.count("\n") == 1
    assert main([*argv, "--memory-reserve", "-1"]) == 2
    assert "--memory-reserve must be a number of bytes >= 0" in capsys.readouterr().err


@pytest.mark.parametrize("name", ["heft", "etf", "m-sct"])
def test_list_schedulers_leave_the_runtime_reserve_free(name):
    """Eight layers of 0.45 GB weights on 3 x 2 GB GPUs: four layers (1.8 GB) fit a device's
    memory but not its memory less the default reserve (0.308 GB)."""
    b = GraphBuilder("layers")
    prev = b.add_node("x", kind="input", out_bytes=1e6)
    for i in range(8):
        w = b.add_node(f"w{i}", kind="input", out_bytes=0.45e9)
        prev = b.add_node(f"l{i}", inputs=[prev, w], flops=1e9, out_bytes=1e6)
    g = b.build()
    cluster = make_cluster("uniform", 3).with_memory(2e9)
    caps = memory_caps(cluster)
    assert caps[0] == pytest.approx(2e9 - RESERVE_FIXED_BYTES - RESERVE_SHARE * 2e9)
    p = place(name, g, cluster, seed=0)
    for s in SEMANTICS:
        assert np.all(Simulator(g, cluster, s).run(p).peak_memory_bytes <= caps)
    free = place(name, g, make_cluster("uniform", 3).with_memory(2e9, 0.0), seed=0)
    peak = Simulator(g, cluster, "wc").run(free).peak_memory_bytes
    assert peak.max() > caps[0]  # without the reserve the same placer packs into it
