"""METIS min-cut partitions: proposals, the ``partition`` placer, degenerate inputs."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from doppler_lab.hardware.cluster import make_cluster
from doppler_lab.house.errors import ConfigError
from doppler_lab.io.documents import read_paper_graph
from doppler_lab.ir.graph import cost_graph
from doppler_lab.placers import get_placer, place
from doppler_lab.placers.partition import VARIANTS, PartitionProblem, map_parts, partition_proposals
from doppler_lab.timing.cost_model import CostModel
from doppler_lab.timing.sim import Simulator

from paper_graphs import paper_graph_path
from placer_helpers import small_dag


def _chains(num: int, length: int, comp=None):
    """``num`` independent chains of ``length`` nodes, each transfer costing 50 compute units."""
    n = num * length
    src = [c * length + i for c in range(num) for i in range(length - 1)]
    comp = np.ones(n) if comp is None else comp
    return cost_graph(comp, np.full(n, 50.0), np.array(src), np.array(src) + 1)


def test_independent_chains_get_a_device_each():
    g, c = _chains(4, 5), make_cluster("uniform", 4)
    dev = place("partition", g, c).device
    per_chain = dev.reshape(4, 5)
    assert all(len(set(row)) == 1 for row in per_chain)  # no transfer at all
    assert sorted(per_chain[:, 0]) == [0, 1, 2, 3]
    assert Simulator(g, c).makespan(dev) == pytest.approx(5.0)  # the lower bound


def test_proposals_are_distinct_valid_and_deterministic():
    g, c = small_dag(40, 3, edge_prob=0.15, inputs=3), make_cluster("uniform", 4)
    cost = CostModel(g, c)
    props = partition_proposals(g, cost, 4, 6)
    assert props.shape[1] == g.num_nodes and 1 <= len(props) <= 6
    assert len({row.tobytes() for row in props}) == len(props)
    comp = g.compute_nodes
    assert props[:, comp].min() >= 0 and props[:, comp].max() <= 3
    assert np.all(props[:, g.is_input] == 0)
    np.testing.assert_array_equal(props, partition_proposals(g, cost, 4, 6))
    assert partition_proposals(g, cost, 4, 0).shape == (0, g.num_nodes)
    # the first proposal is the first variant, whatever the count
    np.testing.assert_array_equal(props[0], partition_proposals(g, cost, 4, 1)[0])
    # every part is used on a graph with more nodes than devices: balanced compute
    loads = [np.bincount(row[comp], minlength=4) for row in props]
    assert all(np.all(load > 0) for load in loads)


def test_degenerate_graphs_and_metis_stays_quiet(capfd):
    c = make_cluster("uniform", 4)
    one = make_cluster("uniform", 1)
    g = small_dag(12, 0, inputs=1)
    assert np.all(partition_proposals(g, CostModel(g, one), 1, 3) == 0)
    tiny = _chains(1, 3)  # fewer compute nodes than devices: one each
    row = partition_proposals(tiny, CostModel(tiny, c), 4, 4)
    assert row.shape == (1, 3) and sorted(row[0]) == [0, 1, 2]
    # one node outweighs the rest: METIS complains on stdout from C ("Cannot bisect a graph
    # with 0 vertices"); the proposals still come, and nothing is printed
    heavy = cost_graph(np.array([1000.0, 1, 1, 1, 1, 1]), np.ones(6), np.arange(5), np.arange(1, 6))
    props = partition_proposals(heavy, CostModel(heavy, c), 4, 4)
    assert props.shape[1] == 6 and props.min() >= 0 and props.max() <= 3
    # no edges at all
    flat = cost_graph(np.ones(10), np.ones(10), np.zeros(0, int), np.zeros(0, int))
    assert np.all(np.bincount(partition_proposals(flat, CostModel(flat, c), 4, 1)[0]) > 0)
    out, err = capfd.readouterr()
    assert out == "" and err == ""


def test_faster_devices_get_more_work():
    # device 0 computes every node in half the time of the others
    comp = np.ones((40, 4))
    comp[:, 0] = 0.5
    src = np.arange(39)
    g = dataclasses.replace(
        cost_graph(np.ones(40), np.full(40, 0.01), src, src + 1), compute_cost=comp
    )
    cost = CostModel(g, make_cluster("uniform", 4))
    problem = PartitionProblem.build(g, cost)
    assert problem.tpwgts is not None and sum(problem.tpwgts) == pytest.approx(1.0)
    assert problem.tpwgts[0] == pytest.approx(0.4)  # speed 2 of 2 + 1 + 1 + 1
    load = np.bincount(problem.devices(4, *VARIANTS[0]), minlength=4)
    assert load[0] > load[1:].max()


def test_placer_options_are_checked():
    with pytest.raises(ConfigError, match="option tries"):
        get_placer("partition", tries=0)
    with pytest.raises(ConfigError, match="semantics 'nope'"):
        get_placer("partition", semantics="nope")
    g, c = small_dag(20, 1), make_cluster("uniform", 3)
    p = place("partition", g, c, tries=3)
    assert p.placer == "partition" and p.meta["sim_calls"] == p.meta["partitions"] <= 3
    sim = Simulator(g, c)
    best = min(sim.makespan(row) for row in partition_proposals(g, CostModel(g, c), 3, 3))
    assert sim.makespan(p) == pytest.approx(best)


def test_paper_ffnn_partition_beats_cp_by_far():
    # the paper's ffnn moves big tiles between layers: keeping each tile's readers with it is
    # what the best known placement does, and what a min-cut partition finds
    g = read_paper_graph(paper_graph_path("ffnn_192nodes"))
    c = make_cluster("uniform", 4)
    sim = Simulator(g, c, "paper")
    cp = sim.makespan(place("cp", g, c, seed=0))
    assert sim.makespan(place("partition", g, c)) < 0.8 * cp


def test_parts_that_talk_most_get_the_fastest_link():
    # parts 0 and 1 exchange 100 bytes, parts 1 and 2 one byte; the link 0-1 is ten times slower
    parts = np.array([0, 1, 2])
    src, dst, nbytes = np.array([0, 1]), np.array([1, 2]), np.array([100.0, 1.0])
    inv = np.ones((3, 3)) - np.eye(3)
    inv[0, 1] = inv[1, 0] = 10.0
    mapped = map_parts(parts, src, dst, nbytes, inv, np.zeros((3, 3)))
    assert sorted(mapped) == [0, 1, 2] and {mapped[0], mapped[1]} != {0, 1}
    # equal links: the identity
    flat = np.ones((3, 3)) - np.eye(3)
    assert map_parts(parts, src, dst, nbytes, flat, np.zeros((3, 3))).tolist() == [0, 1, 2]


def test_partitions_on_a_mixed_topology_use_it():
    from doppler_lab.workloads import build_from_spec

    g, c = build_from_spec("chainmm:matrices=4,blocks=2"), make_cluster("v100x8")
    cost = CostModel(g, c)
    problem = PartitionProblem.build(g, cost)
    assert problem.links is not None  # NVLink pairs and PCIe
    assert PartitionProblem.build(g, CostModel(g, make_cluster("h100x8"))).links is None
    dev = problem.devices(8, *VARIANTS[0])
    plain = dataclasses.replace(problem, links=None).devices(8, *VARIANTS[0])
    # the same parts, relabelled: no more link time than part i on device i
    assert sorted(np.unique(dev[g.compute_nodes])) == sorted(np.unique(plain[g.compute_nodes]))

    def link_time(d):
        s, t = g.edge_src, g.edge_dst
        keep = ~g.is_input[s] & (d[s] != d[t])
        return float((cost.edge_bytes[keep] * cost.inv_bandwidth[d[s[keep]], d[t[keep]]]).sum())

    assert link_time(dev) <= link_time(plain)
