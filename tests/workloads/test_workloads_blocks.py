"""The block-tensor helper: every block op equals the dense torch op on the assembled tensors."""

from __future__ import annotations

import pytest
import torch

from doppler_lab.executor.torch_ops import evaluate
from doppler_lab.house.errors import ConfigError, GraphError
from doppler_lab.workloads._blocks import BlockBuilder, BlockTensor, concat, split_sizes, tree
from doppler_lab.workloads.assemble import dense_inputs, dense_outputs

DT = "float64"


def _run(bb: BlockBuilder, inputs: dict[str, BlockTensor], outputs: dict[str, BlockTensor]):
    graph = bb.build(
        {
            "inputs": {k: t.to_meta() for k, t in inputs.items()},
            "outputs": {k: t.to_meta() for k, t in outputs.items()},
        }
    )
    return graph, dense_inputs(graph, seed=1), dense_outputs(graph, evaluate(graph, seed=1))


def test_split_sizes_and_errors():
    assert split_sizes(10, 4) == (3, 3, 2, 2)
    assert split_sizes(5, 1) == (5,)
    with pytest.raises(ConfigError, match="size 3 into 4 blocks"):
        split_sizes(3, 4)


def test_tree_is_balanced_and_names_the_root():
    calls = []

    def combine(name, a, b):
        calls.append(name)
        return f"({a}+{b})"

    assert tree("s", ["a", "b", "c", "d", "e"], combine) == "(((a+b)+(c+d))+e)"
    assert calls[-1] == "s" and len(calls) == 4
    assert tree("s", ["a"], combine) == "a"


@pytest.mark.parametrize("k_blocks", [1, 2, 3])
def test_einsum_aggregates_split_contracted_index(k_blocks):
    bb = BlockBuilder("mm")
    a = bb.input("a", (5, 7), (2, k_blocks), DT)
    b = bb.input("b", (7, 4), (k_blocks, 2), DT)
    c = bb.einsum("c", "ij,jk->ik", [a, b])
    graph, x, y = _run(bb, {"a": a, "b": b}, {"c": c})
    torch.testing.assert_close(y["c"], x["a"] @ x["b"])
    matmuls = sum(s.kind == "einsum" for s in graph.specs)
    adds = sum(s.kind == "elementwise" for s in graph.specs)
    assert (matmuls, adds) == (4 * k_blocks, 4 * (k_blocks - 1))
    assert graph.flops.sum() == pytest.approx(2 * 5 * 7 * 4 + (k_blocks - 1) * 5 * 4)


def test_einsum_with_a_repeated_operand_uses_operand_map():
    bb = BlockBuilder("sq")
    x = bb.input("x", (3, 6), (1, 2), DT)
    s = bb.einsum("ss", "ij,ij->i", [x, x])
    graph, xs, ys = _run(bb, {"x": x}, {"s": s})
    torch.testing.assert_close(ys["s"], (xs["x"] ** 2).sum(1))
    assert any(spec.operand_map == (0, 0) for spec in graph.specs)


def test_einsum_rejects_mismatched_partitions_and_dtypes():
    bb = BlockBuilder("bad")
    a = bb.input("a", (4, 4), (1, 2), DT)
    b = bb.input("b", (4, 4), (1, 1), DT)
    with pytest.raises(GraphError, match="index 'j' is partitioned"):
        bb.einsum("c", "ij,jk->ik", [a, b])
    f = bb.input("f", (4, 4), (2, 1), "float32")
    with pytest.raises(GraphError, match="mix dtypes"):
        bb.einsum("d", "ij,jk->ik", [a, f])


def test_elementwise_broadcasts_blocks():
    bb = BlockBuilder("ew")
    x = bb.input("x", (2, 6, 4), (2, 3, 1), DT)
    row = bb.input("row", (6, 1), (3, 1), DT)
    y = bb.elementwise("y", "mul", [x, row])
    _, xs, ys = _run(bb, {"x": x, "row": row}, {"y": y})
    torch.testing.assert_close(ys["y"], xs["x"] * xs["row"])
    bad = bb.input("bad", (6, 4), (2, 1), DT)
    with pytest.raises(GraphError, match="partitioned"):
        bb.elementwise("z", "add", [x, bad])


@pytest.mark.parametrize("op", ["sum", "max", "mean"])
@pytest.mark.parametrize("keepdim", [False, True])
def test_reduce_over_a_split_dimension(op, keepdim):
    bb = BlockBuilder("red")
    x = bb.input("x", (3, 10), (1, 3), DT)
    r = bb.reduce("r", op, x, -1, keepdim=keepdim)
    _, xs, ys = _run(bb, {"x": x}, {"r": r})
    ref = {"sum": torch.sum, "mean": torch.mean, "max": torch.amax}[op](
        xs["x"], dim=-1, keepdim=keepdim
    )
    torch.testing.assert_close(ys["r"], ref)


@pytest.mark.parametrize("blocks", [1, 3])
def test_softmax_log_softmax_and_logsumexp(blocks):
    bb = BlockBuilder("sm")
    x = bb.input("x", (2, 9), (2, blocks), DT, std=3.0)
    outs = {
        "softmax": bb.softmax("p", x, -1),
        "log_softmax": bb.log_softmax("lp", x, 1),
        "lse": bb.logsumexp("lse", x, -1),
    }
    _, xs, ys = _run(bb, {"x": x}, outs)
    torch.testing.assert_close(ys["softmax"], torch.softmax(xs["x"], -1))
    torch.testing.assert_close(ys["log_softmax"], torch.log_softmax(xs["x"], -1))
    torch.testing.assert_close(ys["lse"], torch.logsumexp(xs["x"], -1, keepdim=True))


def test_take_concat_cast_and_embedding():
    bb = BlockBuilder("misc")
    x = bb.input("x", (6, 4), (3, 2), DT)
    picked = concat([x.take(0, [2]), x.take(0, [0])], 0)
    assert picked.shape == (4, 4) and picked.grid == (2, 2)
    table = bb.input("table", (11, 4), (1, 2), DT)
    ids = bb.input("ids", (3, 5), (1, 2), "int64", "uniform", low=0.0, high=11.0)
    emb = bb.embedding("emb", ids, table)
    half = bb.cast("half", x, "float32")
    neg = bb.elementwise("neg", "neg", [picked])
    graph, xs, ys = _run(
        bb, {"x": x, "table": table, "ids": ids}, {"emb": emb, "half": half, "y": neg}
    )
    torch.testing.assert_close(ys["emb"], xs["table"][xs["ids"]])
    assert ys["half"].dtype == torch.float32
    torch.testing.assert_close(ys["y"], -torch.cat([xs["x"][4:], xs["x"][:2]]))
    with pytest.raises(GraphError, match="take"):
        x.take(0, [3])
    with pytest.raises(GraphError, match="concat"):
        concat([x, ids], 0)
