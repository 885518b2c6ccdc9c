"""Importing PyTorch modules through torch.export: structure, costs, execution on every
backend against the eager model, saved graphs, and one clear error per kind of bad input."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from doppler_lab.executor import Executor, make_backend
from doppler_lab.executor.torch_ops import evaluate, reference_outputs
from doppler_lab.house.errors import ConfigError, ImportModelError
from doppler_lab.importers import from_exported, from_module
from doppler_lab.importers.flop_counts import model_flops
from doppler_lab.io.documents import load_graph, save_graph
from doppler_lab.ir.graph import DataflowGraph
from doppler_lab.placers.registry import get_placer

sys.path.insert(0, str(Path(__file__).parent))
from tiny_models import tiny_block, tiny_mlp  # noqa: E402

MODELS = {"mlp": tiny_mlp, "block": tiny_block}
#: compute nodes per (model, granularity, merge): documented in the README
NODE_COUNTS = {
    ("mlp", "scope", True): 3,
    ("mlp", "scope", False): 5,
    ("mlp", "op", True): 5,
    ("block", "scope", True): 8,
    ("block", "scope", False): 12,
    ("block", "op", True): 26,
}


@pytest.fixture(scope="module")
def imported() -> dict[tuple[str, str, bool], tuple[DataflowGraph, nn.Module, tuple]]:
    out = {}
    for model_name, granularity, merge in NODE_COUNTS:
        model, args = MODELS[model_name]()
        graph = from_module(model, args, granularity=granularity, merge=merge)
        out[(model_name, granularity, merge)] = (graph, model, args)
    return out


def eager(model: nn.Module, args: tuple) -> torch.Tensor:
    with torch.no_grad():
        return model(*args)


@pytest.mark.parametrize("key", list(NODE_COUNTS))
def test_structure_and_flops(imported, key):
    graph, model, args = imported[key]
    assert graph.compute_nodes.size == NODE_COUNTS[key]
    assert len(graph.topo_order) == graph.num_nodes  # acyclic (validated on construction too)
    for v in graph.compute_nodes:  # one output tensor a node, a program of aten steps
        spec = graph.specs[v]
        assert spec.kind == "program" and spec.out_shape == tuple(spec.out_shape)
        assert graph.out_bytes[v] == spec.out_bytes > 0
    assert np.all(graph.flops[graph.is_input] == 0)
    total = model_flops(model, args)
    assert total > 0 and abs(graph.flops.sum() - total) <= 0.01 * total
    # the example inputs and weights travel with the graph; int64 ids stay int64
    stored = graph.stored_inputs
    assert set(stored) == set(np.flatnonzero(graph.is_input).tolist())
    if key[0] == "block":
        assert graph.specs[graph.names.index("ids")].dtype == "int64"


@pytest.mark.parametrize("key", list(NODE_COUNTS))
def test_graph_matches_the_eager_model(imported, key):
    graph, model, args = imported[key]
    (sink,) = evaluate(graph).values()
    assert float((sink - eager(model, args)).abs().max()) <= 1e-5
    (ref,) = reference_outputs(graph).values()
    assert torch.equal(ref, eager(model, args))


def test_scope_depth_and_options(imported):
    model, args = tiny_block()
    whole = from_module(model, args, depth=0)
    assert whole.compute_nodes.size == 1 and len(whole.specs[-1].program.steps) > 20
    top = from_module(model, args, depth=1)
    assert [top.names[v] for v in top.compute_nodes] == [
        "embed/embedding",
        "attn/linear_1",
        "add_1",
        "mlp/linear_3",
        "head/linear_4",
    ]
    assert model.training  # restored after the export in eval mode
    with pytest.raises(ConfigError, match="granularity"):
        from_module(model, args, granularity="layer")
    with pytest.raises(ConfigError, match="depth"):
        from_module(model, args, depth=-1)


@pytest.mark.parametrize("backend", ["cpu", "inline", "dist"])
def test_placed_runs_match_eager_on_every_backend(imported, backend):
    devices = make_backend(backend, 2)  # one worker group for both models
    for model_name in ("mlp", "block"):
        graph, model, args = imported[(model_name, "scope", True)]
        want = eager(model, args)
        with Executor(graph, devices) as ex:
            cluster = ex.cluster
            for placer in ("round-robin", "cp", "heft"):
                placement = get_placer(placer).place(graph, cluster, np.random.default_rng(0))
                result = ex.run(placement, repeats=1, warmup=0, keep_outputs=True)
                assert result.trace.check(graph) == []
                (out,) = result.outputs.values()
                assert float((out - want).abs().max()) <= 1e-5, (model_name, placer)
    devices.close()


def test_keyword_inputs():
    model, (x,) = tiny_mlp()
    graph = from_module(model, {"x": x})
    assert graph.names[0] == "x"
    (out,) = evaluate(graph).values()
    assert float((out - eager(model, (x,))).abs().max()) <= 1e-5


def test_saved_graph_and_saved_program(tmp_path, imported):
    graph, model, args = imported[("block", "scope", True)]
    path = save_graph(graph, tmp_path / "block.json")
    assert (tmp_path / "block.tensors.pt").is_file()
    loaded = load_graph(path)
    assert loaded.names == graph.names and loaded.specs == graph.specs
    (out,) = evaluate(loaded).values()
    assert float((out - eager(model, args)).abs().max()) <= 1e-5
    ep = torch.export.export(model.eval(), args)
    torch.export.save(ep, tmp_path / "block.pt2")
    again = from_exported(tmp_path / "block.pt2", trust=True)
    assert again.compute_nodes.size == graph.compute_nodes.size
    (ref,) = reference_outputs(again).values()
    assert float((ref - eager(model, args)).abs().max()) <= 1e-5


class TwoHeads(nn.Module):
    """Two outputs, one of them also read inside the model."""

    def __init__(self):
        super().__init__()
        self.body = nn.Linear(8, 8)
        self.a = nn.Linear(8, 4)
        self.b = nn.Linear(8, 2)

    def forward(self, x):
        h = torch.tanh(self.body(x))
        return self.a(h), self.b(h).max(dim=-1).values, h


def test_several_outputs_and_tuple_ops():
    torch.manual_seed(0)
    model, args = TwoHeads(), (torch.randn(3, 8),)
    for granularity in ("scope", "op"):
        graph = from_module(model, args, granularity=granularity)
        got = evaluate(graph, keep="all")
        want = eager(model, args)
        outs = [graph.names.index(n) for n in graph.tensors.expected]
        assert len(outs) == 3  # h is an output and an operand: not a sink, still recorded
        for v, w in zip(outs, want):
            assert float((got[v] - w).abs().max()) <= 1e-5


def test_failed_save_leaves_nothing(tmp_path, imported, monkeypatch):
    graph = imported[("mlp", "scope", True)][0]

    def broken(self, path):
        raise OSError("disk full")

    monkeypatch.setattr(type(graph.tensors), "save", broken)
    with pytest.raises(OSError):
        save_graph(graph, tmp_path / "m.json")
    assert list(tmp_path.iterdir()) == []


# -- bad input ---------------------------------------------------------------------------------
class _Linear(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)


class Dropping(_Linear):
    def __init__(self):
        super().__init__()
        self.drop = nn.Dropout(0.5)

    def forward(self, x):
        return self.drop(self.fc(x))


class ForcedDropout(_Linear):
    def forward(self, x):
        return F.dropout(self.fc(x), 0.5, training=True)


class Noisy(_Linear):
    def forward(self, x):
        return self.fc(x) + torch.rand_like(x)


class Counting(_Linear):
    def __init__(self):
        super().__init__()
        self.register_buffer("calls", torch.zeros(()))

    def forward(self, x):
        self.calls.add_(1)
        return self.fc(x)


class InPlace(_Linear):
    def forward(self, x):
        x.mul_(2)
        return self.fc(x)


class ConstantOutput(_Linear):
    def forward(self, x):
        return self.fc(x), self.fc.weight * 2


class InputOutput(_Linear):
    def forward(self, x):
        return self.fc(x), x


class IntOutput(_Linear):
    def forward(self, x):
        return self.fc(x), x.shape[0]


class Masked(nn.Module):
    def forward(self, x):
        return x[x > 0] * 2


def _x() -> torch.Tensor:
    return torch.randn(3, 4)


BAD = {
    "dropout in training mode": (
        lambda: from_exported(torch.export.export(Dropping().train(), (_x(),))),
        r"op aten.native_dropout.default in module 'drop' \(Dropout\): is a random op",
    ),
    "forced dropout": (
        lambda: from_module(ForcedDropout(), (_x(),)),
        r"aten.native_dropout.default in the top-level module \(ForcedDropout\): is a random op",
    ),
    "random op": (
        lambda: from_module(Noisy(), (_x(),)),
        r"op aten.rand_like.default in the top-level module \(Noisy\): is a random op",
    ),
    "batch norm in training mode": (
        lambda: from_exported(torch.export.export(nn.BatchNorm1d(4).train(), (_x(),))),
        r"updates buffer 'running_mean' \(training mode",
    ),
    "buffer mutation": (
        lambda: from_module(Counting(), (_x(),)),
        r"op aten.add.Tensor in the top-level module \(Counting\): updates buffer 'calls'",
    ),
    "in-place op on an input": (
        lambda: from_module(InPlace(), (_x(),)),
        r"\(InPlace\): writes into the input 'x' in place",
    ),
    "constant output": (
        lambda: from_module(ConstantOutput(), (_x(),)),
        r"output 1 \(mul\) does not depend on a user input",
    ),
    "input as output": (
        lambda: from_module(InputOutput(), (_x(),)),
        r"output 1 \(x\) is an input returned as is",
    ),
    "non-tensor output": (
        lambda: from_module(IntOutput(), (_x(),)),
        r"output 1 is 3, not a tensor",
    ),
    "dynamic shapes": (
        lambda: from_exported(
            torch.export.export(
                Dropping().eval(), (_x(),), dynamic_shapes={"x": {0: torch.export.Dim("b")}}
            )
        ),
        r"input 'x' has the dynamic shape \(s\d+, 4\); export with static shapes",
    ),
    "data-dependent shape": (
        lambda: from_module(Masked(), (_x(),)),
        r"op aten.index.Tensor in the top-level module \(Masked\): has the dynamic shape",
    ),
}


@pytest.mark.parametrize("case", list(BAD))
def test_bad_input_is_one_clear_line(case):
    make, pattern = BAD[case]
    with pytest.raises(ImportModelError, match=pattern) as err:
        make()
    assert "\n" not in str(err.value)
