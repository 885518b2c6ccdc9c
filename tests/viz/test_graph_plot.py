"""Pictures of dataflow graphs."""

from __future__ import annotations

import numpy as np
import pytest

from doppler_lab.house.errors import PlacementError
from doppler_lab.ir.graph import DataflowGraph
from doppler_lab.viz import layered_layout, plot_graph

from viz_helpers import blocked_mlp, random_dag


@pytest.fixture(scope="module")
def mlp() -> DataflowGraph:
    return blocked_mlp()


def node_traces(fig):
    return [t for t in fig.data if t.name != "edges"]


def test_every_node_is_drawn_once(mlp: DataflowGraph) -> None:
    fig = plot_graph(mlp)
    nodes = node_traces(fig)
    assert sum(len(t.x) for t in nodes) == mlp.num_nodes
    assert {t.name for t in nodes} == {"input", "einsum", "elementwise", "reduce"}
    names = [row[0] for t in nodes for row in t.customdata]
    assert sorted(names) == sorted(mlp.names)
    edges = next(t for t in fig.data if t.name == "edges")
    assert len(edges.x) == 3 * mlp.num_edges  # one line trace, None between edges


def test_inputs_can_be_left_out(mlp: DataflowGraph) -> None:
    fig = plot_graph(mlp, show_inputs=False)
    assert sum(len(t.x) for t in node_traces(fig)) == mlp.compute_nodes.size
    internal = (~mlp.is_input[mlp.edge_src]).sum()
    assert len(next(t for t in fig.data if t.name == "edges").x) == 3 * internal


def test_colour_by_device(mlp: DataflowGraph) -> None:
    placement = np.arange(mlp.num_nodes) % 3
    fig = plot_graph(mlp, placement)
    groups = {t.name: len(t.x) for t in node_traces(fig)}
    assert groups["input (resident)"] == int(mlp.is_input.sum())
    for d in range(3):
        assert groups[f"device {d}"] == int(((placement == d) & ~mlp.is_input).sum())
    with pytest.raises(PlacementError, match="needs a placement"):
        plot_graph(mlp, color_by="device")
    with pytest.raises(PlacementError, match=r"one device per node \(68,\)"):
        plot_graph(mlp, np.zeros(5, dtype=int))


def test_layers_follow_depth(mlp: DataflowGraph) -> None:
    x, y = layered_layout(mlp)
    comp = mlp.compute_nodes
    assert np.array_equal(x[comp], mlp.depth[comp])
    assert (x[mlp.is_input] % 1 == 0.5).all()  # inputs sit half a layer before a consumer
    for layer in np.unique(x):
        ys = y[x == layer]
        assert len(np.unique(ys)) == ys.size and abs(ys.mean()) < 1e-9


def test_thousands_of_nodes_use_webgl() -> None:
    g = random_dag(3000, seed=2)
    fig = plot_graph(g)
    assert all(t.type == "scattergl" for t in fig.data)
    assert sum(len(t.x) for t in node_traces(fig)) == 3000


def test_labels_are_short_and_take_turns(mlp: DataflowGraph) -> None:
    """Few ops: each is named by a short label (inputs are not), above and below by turns, so
    that neighbours do not overlap; many ops: no labels, names on hover."""
    from doppler_lab.viz.graph_plot import short_label

    small = blocked_mlp(blocks=2, layers=2)
    assert small.compute_nodes.size <= 40 and small.is_input.any()
    fig = plot_graph(small)
    shown = [(text, pos, name) for t in node_traces(fig) for text, pos, name in
             zip(t.text, t.textposition, (row[0] for row in t.customdata))]  # fmt: skip
    ops = {small.names[v] for v in small.compute_nodes}
    assert all((text == "") == (name not in ops) for text, _, name in shown)
    assert all(len(text) <= 40 for text, _, _ in shown)
    assert {pos for text, pos, _ in shown if text} == {"top center", "bottom center"}
    assert short_label("lm.model.layers.0.self_attn.k_proj/linear_1", 20) == "k_proj/linear_1"
    assert short_label("a" * 30, 8) == "aaaaaaa…"
    assert all(t.text is None for t in node_traces(plot_graph(mlp)))  # 52 ops
