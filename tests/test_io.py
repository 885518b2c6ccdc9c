"""Files: the paper's text format, and JSON round trips with clear errors."""

from __future__ import annotations

import json

import networkx as nx
import numpy as np
import pytest

from doppler_lab.hardware.cluster import make_cluster
from doppler_lab.house.errors import FormatError
from doppler_lab.io.documents import (
    PAPER_TIME_SCALE,
    graph_from_dict,
    graph_to_dict,
    load_graph,
    load_placement,
    load_trace,
    read_paper_graph,
    save_graph,
    save_placement,
    save_trace,
)
from doppler_lab.ir.graph import GraphBuilder
from doppler_lab.ir.placement import Placement
from doppler_lab.timing.sim import simulate

from paper_graphs import paper_graph_path

# name: (nodes without inputs, inputs, edges, depth, sinks, sources), counted by hand from the
# files' line 1-4 and cross-checked with networkx below
PAPER_FACTS = {
    "chain_mm_112nodes": (76, 36, 80, 6, 8, 31),
    "ffnn_192nodes": (180, 12, 208, 12, 16, 16),
    "transformer_block_215nodes": (182, 33, 234, 49, 1, 4),
    "full_transformer_layer_261nodes": (229, 32, 284, 63, 5, 7),
    "8gpu_transformer_block": (302, 54, 398, 49, 2, 8),
    "8gpu_full_transformer": (367, 50, 470, 63, 9, 13),
}


@pytest.mark.parametrize("name", sorted(PAPER_FACTS))
def test_paper_reader_facts(name):
    g = read_paper_graph(paper_graph_path(name))
    nodes, inputs, edges, depth, sinks, sources = PAPER_FACTS[name]
    assert (g.num_nodes, g.meta["input_nodes"], g.num_edges) == (nodes, inputs, edges)
    assert g.meta["total_nodes"] == nodes + inputs
    assert int(g.depth.max()) + 1 == depth
    assert int((g.out_degree == 0).sum()) == sinks and int((g.in_degree == 0).sum()) == sources
    nxg = g.to_networkx()
    assert nx.dag_longest_path_length(nxg) + 1 == depth
    # costs are raw integers, and the edge cost is the source's communication cost
    assert np.all(g.compute_cost == np.round(g.compute_cost))
    np.testing.assert_array_equal(g.edge_cost, g.out_bytes[g.edge_src])
    assert g.time_scale == PAPER_TIME_SCALE


def _write(tmp_path, text: str):
    p = tmp_path / "g.txt"
    p.write_text(text)
    return p


GOOD = "5\n3, 4\n0, 0, 1\n1, 2, 2\n10,40\n20,80\n30,120\n"


def test_small_paper_file_and_duplicates(tmp_path):
    g = read_paper_graph(_write(tmp_path, GOOD))
    assert g.num_nodes == 3 and g.num_edges == 3
    dup = read_paper_graph(
        _write(tmp_path, "4\n3\n0, 0, 1\n1, 1, 2\n10,40\n20,80\n30,120,einsummable\n")
    )
    assert dup.num_edges == 2 and dup.meta["duplicate_edges_dropped"] == 1


@pytest.mark.parametrize(
    ("text", "line", "match"),
    [
        ("x\n\n\n\n", 1, "total node count"),
        ("5\n3, 4\n0, 0\n1, 2, 2\n10,40\n20,80\n30,120\n", 4, "2 edge sources"),
        ("5\n3, 4\n0, 0, 1\n1, 2, 2\n10,40\n20,80\n", 6, "expected 3 cost lines"),
        ("5\n3, 4\n0, 0, 1\n1, 2, 2\n10,40\n-20,80\n30,120\n", 6, "compute cost '-20'"),
        ("5\n3, 4\n0, 0, 1\n1, 2, 9\n10,40\n20,80\n30,120\n", 4, "names node 9"),
        ("5\n3, 4\n0, 0, 1\n1, 2, 2\n10,40\n20,80,warp\n30,120\n", 6, "unknown node type 'warp'"),
        ("5\n3, x\n0, 0, 1\n1, 2, 2\n10,40\n20,80\n30,120\n", 2, "input ids: 'x'"),
    ],
)
def test_malformed_paper_files_name_file_and_line(tmp_path, text, line, match):
    with pytest.raises(FormatError, match=rf"g\.txt, line {line}: .*{match}"):
        read_paper_graph(_write(tmp_path, text))


def test_paper_cycle_is_reported(tmp_path):
    with pytest.raises(FormatError, match="cycle"):
        read_paper_graph(_write(tmp_path, "3\n\n0, 1\n1, 0\n10,40\n20,80\n"))


def executable_graph():
    b = GraphBuilder("exe", meta={"k": 1})
    x = b.add_input("x", (4, 8))
    w = b.add_input("w", (8, 2), init="uniform")
    y = b.add_einsum("y", "ij,jk->ik", [x, w])
    b.add_reduce("s", "sum", y, dims=[1], keepdim=True)
    b.add_torch("sm", "torch.softmax", [y], (4, 2), flops=40.0, params={"dim": -1})
    return b.build()


def test_graph_json_round_trip(tmp_path):
    g = executable_graph()
    g2 = load_graph(save_graph(g, tmp_path / "g.json"))
    assert g2.names == g.names and g2.meta == g.meta
    assert g2.specs == g.specs
    np.testing.assert_array_equal(g2.flops, g.flops)
    np.testing.assert_array_equal(g2.edge_src, g.edge_src)
    paper = read_paper_graph(_write(tmp_path, GOOD))
    p2 = load_graph(save_graph(paper, tmp_path / "p.json"))
    np.testing.assert_array_equal(p2.compute_cost, paper.compute_cost)
    np.testing.assert_array_equal(p2.edge_cost, paper.edge_cost)
    assert p2.time_scale == paper.time_scale


def test_a_graph_knows_its_time_unit_and_saves_it(tmp_path):
    """Makespans carry their unit from the graph: seconds for generated and imported graphs,
    cost units for the paper's graphs and random DAGs; saved in JSON, old files get the unit
    their provenance implies."""
    from doppler_lab.house.errors import GraphError
    from doppler_lab.ir.graph import COST_UNITS, DataflowGraph
    from doppler_lab.workloads.random_dag import random_dag

    g, paper, dag = executable_graph(), read_paper_graph(_write(tmp_path, GOOD)), random_dag(12)
    assert (g.time_unit, paper.time_unit, dag.time_unit) == ("s", COST_UNITS, COST_UNITS)
    assert paper.with_costs(paper.compute_cost, paper.edge_cost).time_unit == COST_UNITS
    for graph in (g, paper, dag):
        doc = graph_to_dict(graph)
        assert doc["time_unit"] == graph.time_unit
        assert load_graph(save_graph(graph, tmp_path / "x.json")).time_unit == graph.time_unit
        del doc["time_unit"]  # a file written before graphs carried a unit
        assert graph_from_dict(doc).time_unit == graph.time_unit
    doc = graph_to_dict(g) | {"time_unit": "ms"}
    with pytest.raises(FormatError, match="time_unit 'ms'; expected one of"):
        graph_from_dict(doc, "g.json")
    with pytest.raises(GraphError, match="time_unit 'hours'"):
        DataflowGraph(("a",), [5], [1.0], [1.0], [], [], time_unit="hours")


def test_json_errors(tmp_path):
    p = tmp_path / "g.json"
    p.write_text("{bad json")
    with pytest.raises(FormatError, match=r"g\.json, line 1: not valid JSON"):
        load_graph(p)
    doc = graph_to_dict(executable_graph())
    doc["version"] = 99
    p.write_text(json.dumps(doc))
    with pytest.raises(FormatError, match="version 99 is not supported"):
        load_graph(p)
    doc["version"] = 1
    doc["nodes"][2]["kind"] = "warp"
    with pytest.raises(FormatError, match="node 2 .'y'. has unknown kind 'warp'"):
        graph_from_dict(doc, "doc")
    doc["nodes"][2]["kind"] = "einsum"
    doc["edges"].append([3, 0])
    with pytest.raises(FormatError, match="input node 'x' has a predecessor"):
        graph_from_dict(doc, "doc")


def test_placement_and_trace_round_trip(tmp_path):
    g = read_paper_graph(_write(tmp_path, GOOD))
    pl = Placement(np.array([0, 1, 1]), priority=[2, 0, 1], placer="test", meta={"x": np.int64(3)})
    p2 = load_placement(save_placement(pl, tmp_path / "p.json", g, 2))
    np.testing.assert_array_equal(p2.device, pl.device)
    np.testing.assert_array_equal(p2.priority, pl.priority)
    assert p2.placer == "test" and p2.meta == {"x": 3}
    tr = simulate(g, make_cluster("uniform", 2), pl)
    t2 = load_trace(save_trace(tr, tmp_path / "t.json"))
    assert t2.makespan == tr.makespan and t2.num_transfers == tr.num_transfers
    np.testing.assert_array_equal(t2.start, tr.start)
