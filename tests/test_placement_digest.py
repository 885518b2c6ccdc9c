"""Placements carry the digest of their graph's structure (node names in order, kinds, edges):
loading one for another graph of the same size is refused by name; older files without a digest
are checked by their graph name."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from doppler_lab.cli import main
from doppler_lab.house.errors import PlacementError
from doppler_lab.io.documents import load_placement, save_graph, save_placement
from doppler_lab.ir.placement import round_robin
from doppler_lab.workloads import build_from_spec


@pytest.fixture(scope="module")
def graph():
    return build_from_spec("chainmm:matrices=3,scale=0.001")


def _renamed(graph, v=-1, name="other"):
    names = list(graph.names)
    names[v] = name
    return dataclasses.replace(graph, names=tuple(names))


def test_the_digest_follows_structure_not_costs_or_labels(graph):
    d = graph.structure_digest
    assert d.startswith("sha256:") and len(d) == len("sha256:") + 16
    assert dataclasses.replace(graph, name="renamed").structure_digest == d
    assert dataclasses.replace(graph, flops=graph.flops * 2).structure_digest == d
    assert _renamed(graph).structure_digest != d
    src = graph.edge_src.copy()
    src[0] = (src[0] + 1) % graph.num_nodes
    if (src[0], graph.edge_dst[0]) not in set(zip(graph.edge_src, graph.edge_dst)):
        other = dataclasses.replace(graph, edge_src=src)
        assert other.structure_digest != d


def test_a_placement_for_another_graph_of_the_same_size_is_refused(tmp_path, graph):
    path = save_placement(round_robin(graph, 4), tmp_path / "p.json", graph, 4)
    doc = json.loads(path.read_text())
    assert doc["graph_digest"] == graph.structure_digest
    assert np.array_equal(load_placement(path, graph).device, round_robin(graph, 4).device)
    other = dataclasses.replace(_renamed(graph), name="twin")
    with pytest.raises(PlacementError) as info:
        load_placement(path, other)
    msg = str(info.value)
    assert "\n" not in msg and str(path) in msg and "'chainmm'" in msg and "'twin'" in msg
    assert graph.structure_digest in msg and other.structure_digest in msg
    load_placement(path)  # without a graph: no check


def test_older_files_without_a_digest_are_checked_by_name(tmp_path, graph):
    path = save_placement(round_robin(graph, 4), tmp_path / "old.json", graph, 4)
    doc = json.loads(path.read_text())
    del doc["graph_digest"]
    path.write_text(json.dumps(doc))
    load_placement(path, graph)  # same name: loads
    with pytest.raises(PlacementError, match="made for graph 'chainmm', not 'twin'"):
        load_placement(path, dataclasses.replace(graph, name="twin"))
    del doc["graph"]
    path.write_text(json.dumps(doc))
    load_placement(path, dataclasses.replace(graph, name="twin"))  # nothing to check


def test_simulate_refuses_a_placement_of_another_graph(tmp_path, graph, capsys):
    a = save_graph(graph, tmp_path / "a.json")
    b = save_graph(_renamed(graph), tmp_path / "b.json")
    p = tmp_path / "p.json"
    assert main(["place", str(a), "--placer", "round-robin", "--out", str(p), "--no-progress"]) == 0
    capsys.readouterr()
    assert main(["simulate", str(a), "--placement", str(p), "--no-progress"]) == 0
    capsys.readouterr()
    assert main(["simulate", str(b), "--placement", str(p), "--no-progress"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "node names or edges differ" in err and str(p) in err
