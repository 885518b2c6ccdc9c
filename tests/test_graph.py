"""The dataflow IR: construction, validation errors, derived quantities, conversions."""

from __future__ import annotations

import numpy as np
import pytest

from doppler_lab.house.errors import GraphError
from doppler_lab.ir.graph import KIND_CODE, DataflowGraph, GraphBuilder
from doppler_lab.ir.ops import OpSpec


def diamond(costs=(2.0, 3.0, 4.0, 1.0), comm=(1.0, 1.0, 1.0, 0.0)) -> DataflowGraph:
    """a -> b, a -> c, b -> d, c -> d with explicit costs (comm is per source node)."""
    b = GraphBuilder("diamond")
    a = b.add_node("a", cost=costs[0])
    bb = b.add_node("b", cost=costs[1], inputs=[a], edge_costs=[comm[0]])
    c = b.add_node("c", cost=costs[2], inputs=[a], edge_costs=[comm[0]])
    b.add_node("d", cost=costs[3], inputs=[bb, c], edge_costs=[comm[1], comm[2]])
    return b.build()


def test_levels_and_critical_path_by_hand():
    g = diamond()
    # b-level(d)=1; b(c)=4+1+1=6; b(b)=3+1+1=5; b(a)=2+1+max(5,6)=9
    np.testing.assert_allclose(g.b_level(), [9, 5, 6, 1])
    # t-level(a)=0; t(b)=t(c)=2+1=3; t(d)=max(3+3+1, 3+4+1)=8
    np.testing.assert_allclose(g.t_level(), [0, 3, 3, 8])
    assert g.critical_path().tolist() == [0, 2, 3]
    assert g.topo_order.tolist() == [0, 1, 2, 3]
    assert g.depth.tolist() == [0, 1, 1, 2]


def test_predecessors_are_in_operand_order():
    b = GraphBuilder("ops")
    x = b.add_input("x", (2, 3))
    w = b.add_input("w", (3, 4))
    y = b.add_einsum("y", "ij,jk->ik", [x, w])
    z = (
        b.add_elementwise("z", "add", [y, y], params=None)
        if False
        else b.add_elementwise("z", "relu", [y])
    )
    g = b.build()
    assert g.predecessors(y).tolist() == [x, w]
    assert g.specs[y].out_shape == (2, 4)
    assert g.flops[y] == 2 * 2 * 3 * 4
    assert g.out_bytes[z] == 2 * 4 * 4
    assert g.is_input.tolist() == [True, True, False, False]
    assert g.compute_nodes.tolist() == [y, z]
    assert g.is_executable


def test_cycle_error_names_a_node_on_the_cycle():
    with pytest.raises(GraphError, match=r"cycle through node 'n[123]'.*n\d -> n\d -> n\d -> n\d"):
        DataflowGraph(
            names=("n0", "n1", "n2", "n3"),
            kinds=np.full(4, KIND_CODE["compute"]),
            flops=np.ones(4),
            out_bytes=np.ones(4),
            edge_src=np.array([0, 1, 2, 3]),
            edge_dst=np.array([1, 2, 3, 1]),
        )


def test_self_loop_is_a_cycle():
    with pytest.raises(GraphError, match="depends on itself"):
        DataflowGraph(("a",), [5], [1.0], [1.0], [0], [0])


@pytest.mark.parametrize(
    ("src", "dst", "match"),
    [([0], [7], "destination 7, expected a node id in 0..1"), ([-1], [1], "source -1")],
)
def test_dangling_edges(src, dst, match):
    with pytest.raises(GraphError, match=match):
        DataflowGraph(("a", "b"), [5, 5], [1.0, 1.0], [1.0, 1.0], src, dst)


@pytest.mark.parametrize("bad", [-1.0, np.nan, np.inf])
def test_bad_costs_are_named(bad):
    with pytest.raises(GraphError, match=r"node 'b' has compute_cost"):
        DataflowGraph(("a", "b"), [5, 5], [1.0, 1.0], [1.0, 1.0], [0], [1], compute_cost=[1.0, bad])
    with pytest.raises(GraphError, match=r"edge 'a' -> 'b' has edge_cost"):
        DataflowGraph(("a", "b"), [5, 5], [1.0, 1.0], [1.0, 1.0], [0], [1], edge_cost=[bad])
    with pytest.raises(GraphError, match=r"node 'a' has flops"):
        DataflowGraph(("a", "b"), [5, 5], [bad, 1.0], [1.0, 1.0], [0], [1])


def test_per_device_cost_lists_must_agree():
    b = GraphBuilder("het")
    b.add_node("a", cost=[1.0, 2.0, 3.0])
    b.add_node("b", cost=[1.0, 2.0])
    with pytest.raises(
        GraphError,
        match=r"node 'b' has a per-device cost list of length 2, expected a list of 3 per-device costs",
    ):
        b.build()
    b2 = GraphBuilder("mixed")
    b2.add_node("a", cost=[1.0, 2.0])
    b2.add_node("b")
    with pytest.raises(GraphError, match="node 'b' has no explicit cost"):
        b2.build()


def test_unknown_kinds_and_ops():
    with pytest.raises(GraphError, match="unknown kind 'matmul'"):
        GraphBuilder().add_node("a", kind="matmul")
    with pytest.raises(GraphError, match="unknown kind code 9"):
        DataflowGraph(("a",), [9], [1.0], [1.0], [], [])
    with pytest.raises(GraphError, match="unknown elementwise op"):
        OpSpec("elementwise", "frobnicate", ((2,),), (2,))
    with pytest.raises(GraphError, match="unknown op kind"):
        OpSpec("conv", "x")
    with pytest.raises(GraphError, match="index 'j' has sizes 3 and 5"):
        OpSpec("einsum", "ij,jk->ik", ((2, 3), (5, 4)), (2, 4))
    with pytest.raises(GraphError, match="needs flops_override"):
        OpSpec("torch", "torch.nn.functional.softmax", ((2, 3),), (2, 3))


def test_duplicate_edges_and_inputs_with_predecessors():
    with pytest.raises(GraphError, match="appears twice"):
        DataflowGraph(("a", "b"), [5, 5], [1.0, 1.0], [1.0, 1.0], [0, 0], [1, 1])
    with pytest.raises(GraphError, match="input node 'b' has a predecessor 'a'"):
        DataflowGraph(("a", "b"), [5, 0], [1.0, 0.0], [1.0, 1.0], [0], [1])


def test_operand_shape_mismatch_is_caught():
    b = GraphBuilder("bad")
    x = b.add_input("x", (2, 3))
    spec = OpSpec("elementwise", "relu", ((4,),), (4,))
    b.add_node("y", "elementwise", spec.flops, spec.out_bytes, [x], spec)
    with pytest.raises(
        GraphError, match=r"operand 0 comes from 'x' of shape \(2, 3\), expected \(4,\)"
    ):
        b.build()


def test_operand_map_lets_one_tensor_feed_two_operands():
    b = GraphBuilder("sq")
    x = b.add_input("x", (3, 3))
    spec = OpSpec("einsum", "ij,jk->ik", ((3, 3), (3, 3)), (3, 3), operand_map=(0, 0))
    b.add_node("xx", "einsum", spec.flops, spec.out_bytes, [x], spec)
    g = b.build()
    assert g.num_edges == 1


def test_conversions():
    g = diamond()
    nxg = g.to_networkx()
    assert nxg.number_of_nodes() == 4 and nxg.number_of_edges() == 4
    assert nxg.nodes[2]["cost"] == 4.0 and nxg.edges[0, 2]["cost"] == 1.0
    data = g.to_pyg()
    assert data.edge_index.shape == (2, 4) and data.num_nodes == 4
    assert data.node_cost.tolist() == [2.0, 3.0, 4.0, 1.0]


def test_arrays_are_frozen():
    g = diamond()
    with pytest.raises(ValueError):
        g.flops[0] = 3.0
    with pytest.raises(AttributeError):
        g.name = "other"  # type: ignore[misc]
