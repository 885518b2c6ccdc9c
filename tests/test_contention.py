"""Shared GPUs and one host dispatcher in the simulator (``doppler_lab.timing.contention``)."""

from __future__ import annotations

import numpy as np
import pytest

from doppler_lab.executor.profiling import fit_fill_s
from doppler_lab.executor.streams import describe_gpus
from doppler_lab.house.errors import ConfigError
from doppler_lab.ir.graph import GraphBuilder
from doppler_lab.ir.placement import Placement
from doppler_lab.timing.contention import Sharing, contended_makespan, launches_per_op
from doppler_lab.timing.cost_model import CostModel
from doppler_lab.timing.sim import Simulator


def two_chains(length: int = 6, size: int = 1024):
    """Two independent chains of big matmuls (``c0_*``, ``c1_*``)."""
    b = GraphBuilder("two-chains")
    w = b.add_input("w", (size, size))
    for c in range(2):
        prev = b.add_input(f"x{c}", (size, size))
        for i in range(length):
            prev = b.add_einsum(f"c{c}_{i}", "ij,jk->ik", [prev, w])
    return b.build()


def chains_on(graph, devices):
    dev = np.zeros(graph.num_nodes, dtype=np.int64)
    for v in graph.compute_nodes:
        dev[v] = devices[int(graph.names[v][1])]
    return Placement(dev).with_inputs_filled(graph)


def test_separate_gpus_and_a_free_host_change_nothing():
    g = two_chains()
    cluster = describe_gpus([0, 1], ["NVIDIA H200"] * 2, [141e9] * 2)
    cm = CostModel(g, cluster)
    pl = chains_on(g, [0, 1])
    plain = Simulator(g, cluster, "wc", cost_model=cm).run(pl).makespan
    got = contended_makespan(g, cluster, cm, pl, Sharing((0, 1), host_s=0.0), dispatch_s=0.0)
    assert got == pytest.approx(plain, rel=1e-12)


def test_kernels_that_fill_one_gpu_take_turns():
    """Two chains of GPU-filling kernels on two logical devices of one GPU take about as long
    as both on one device; on two GPUs, as long as one."""
    g = two_chains()
    shared = describe_gpus([0, 0], ["NVIDIA H200"] * 2, [141e9] * 2)
    cm = CostModel(g, shared)
    sharing = Sharing((0, 0), host_s=0.0, fill_s=1e-9)
    apart = contended_makespan(g, shared, cm, chains_on(g, [0, 1]), sharing, dispatch_s=0.0)
    together = Simulator(g, shared, "wc", cost_model=cm).run(chains_on(g, [0, 0])).makespan
    independent = Simulator(g, shared, "wc", cost_model=cm).run(chains_on(g, [0, 1])).makespan
    assert independent == pytest.approx(together / 2, rel=0.01)
    assert apart > 0.9 * together


def test_small_kernels_overlap_and_the_host_serialises_launches():
    g = two_chains(size=16)
    shared = describe_gpus([0, 0], ["NVIDIA H200"] * 2, [141e9] * 2)
    cm = CostModel(g, shared)
    pl = chains_on(g, [0, 1])
    free = contended_makespan(g, shared, cm, pl, Sharing((0, 0), host_s=0.0, fill_s=1.0), 0.0)
    independent = Simulator(g, shared, "wc", cost_model=cm).run(pl).makespan
    assert free == pytest.approx(independent, rel=0.01)  # tiny kernels, idle host: no contention
    busy_host = contended_makespan(g, shared, cm, pl, Sharing((0, 0), host_s=1e-3), 0.0)
    assert busy_host > 1.8 * 6 * 1e-3  # 12 launches of 1 ms on one host thread


def test_launches_per_op_counts_program_steps():
    from doppler_lab.importers.zoo import import_model

    g = import_model("mlp")
    launches = launches_per_op(g)
    assert launches[g.is_input].tolist() == [1.0] * int(g.is_input.sum())
    assert launches[g.compute_nodes].max() > 1


def test_fit_fill_s_recovers_the_fill_time():
    host = 10e-6
    rows = []
    for k in (5e-6, 20e-6, 80e-6, 400e-6, 2e-3):
        alpha = min(1.0, k / 100e-6)
        rows.append(
            {
                "n": 0,
                "devices": 4,
                "kernel_s": k,
                "period_alone_s": k + host,
                "period_all_s": max(k * (1 + 3 * alpha) + host, 4 * host),
            }
        )
    assert fit_fill_s(rows, host) == pytest.approx(100e-6, rel=0.1)


@pytest.mark.parametrize(
    "kwargs", [{"host_s": -1.0}, {"host_s": float("nan")}, {"host_s": 0.0, "fill_s": 0.0}]
)
def test_bad_sharing_is_refused(kwargs):
    with pytest.raises(ConfigError, match="sharing"):
        Sharing((0, 0), **kwargs)


def test_described_gpus():
    one = describe_gpus([0], ["NVIDIA H200"], [141e9])
    assert one.name == "cuda1" and one.num_links == 0
    shared = describe_gpus([0, 0, 1, 1], ["NVIDIA H100 80GB HBM3"] * 4, [80e9] * 4)
    assert shared.name == "cuda4-shared"
    # a copy within one GPU is a device-to-device copy; across GPUs, the interconnect
    assert shared.bandwidth_bytes_per_s[0, 1] > shared.bandwidth_bytes_per_s[0, 2]
