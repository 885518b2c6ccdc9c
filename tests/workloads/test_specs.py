"""The one grammar of graph and cluster specs (:mod:`doppler_lab.workloads.specs`): each form
parses to its kind and builds the graph of the path it names, and a bad spec is one line naming
the bad item and what was expected."""

from __future__ import annotations

import argparse

import numpy as np
import pytest

from doppler_lab.cli import main
from doppler_lab.house.errors import ClusterError, ConfigError, ImportModelError
from doppler_lab.house.trust import TRUST_PT2_ENV
from doppler_lab.io.documents import read_paper_graph, save_cluster, save_graph
from doppler_lab.workloads import build
from doppler_lab.workloads.sizing import scale_within, with_scale
from doppler_lab.workloads.specs import (
    MODEL_KINDS,
    GraphSpec,
    cluster_from_spec,
    graph_from_spec,
    paper_cost_graph,
    parse_graph_spec,
)

from paper_graphs import paper_dir_or_skip, paper_graph_path

USER_FILE = """
import torch
from torch import nn

def make(hidden=8, batch=2):
    return nn.Sequential(nn.Linear(hidden, hidden), nn.ReLU()), (torch.randn(batch, hidden),)
"""


def same_graph(a, b) -> None:
    assert (a.name, a.num_nodes, a.num_edges) == (b.name, b.num_nodes, b.num_edges)
    assert a.structure_digest == b.structure_digest
    np.testing.assert_array_equal(a.flops, b.flops)
    np.testing.assert_array_equal(a.out_bytes, b.out_bytes)
    for x, y in ((a.compute_cost, b.compute_cost), (a.edge_cost, b.edge_cost)):
        assert (x is None) == (y is None)
        if x is not None:
            np.testing.assert_array_equal(x, y)


@pytest.mark.parametrize(
    ("text", "kind", "target", "params"),
    [
        ("llama_block:blocks=2,scale=0.1", "workload", "llama_block", {"blocks": 2, "scale": 0.1}),
        (" chainmm : scale = 0.1 ", "workload", "chainmm", {"scale": 0.1}),
        (
            "hf-llama:layers=2,granularity=op",
            "model",
            "hf-llama",
            {"layers": 2, "granularity": "op"},
        ),
        ("model:mlp:layers=2", "model", "mlp", {"layers": 2}),
        ("dir/my model.py:make:hidden=4", "function", "dir/my model.py:make", {"hidden": 4}),
        ("a/b.pt2:granularity=op", "program", "a/b.pt2", {"granularity": "op"}),
        ("out/g.json", "json", "out/g.json", {}),
        ("compute_graph/ffnn_192nodes.txt", "paper_file", "compute_graph/ffnn_192nodes.txt", {}),
        ("paper:ffnn_192nodes", "paper", "ffnn_192nodes", {}),
        ("ffnn_192nodes", "paper", "ffnn_192nodes", {}),
        ("paper_costs:chainmm:scale=0.5", "paper_costs", "chainmm:scale=0.5", {}),
    ],
)
def test_each_form_parses_to_its_kind(text, kind, target, params):
    spec = parse_graph_spec(text)
    assert (spec.kind, spec.target, dict(spec.params)) == (kind, target, params)
    assert str(spec) == text.strip() and isinstance(spec, GraphSpec)


def test_workloads_build_as_the_generators_do():
    for text, name, params in [
        ("chainmm:matrices=3,scale=0.001", "chainmm", {"matrices": 3, "scale": 0.001}),
        ("llama_block:blocks=2,scale=tiny", "llama_block", {"blocks": 2, "scale": "tiny"}),
        ("random_dag:num_nodes=40,seed=3", "random_dag", {"num_nodes": 40, "seed": 3}),
    ]:
        same_graph(graph_from_spec(text), build(name, **params))
    # the same graph as the old command-line path gave (recorded before the old parsers went)
    g = graph_from_spec("chainmm:scale=0.1")
    assert (g.num_nodes, g.num_edges, g.structure_digest) == (100, 144, "sha256:447991c129735011")


def test_paper_graphs_by_file_by_name_and_with_paper_costs():
    path = paper_graph_path("ffnn_192nodes")
    want = read_paper_graph(path)
    folder = paper_dir_or_skip()
    for text in (str(path), "paper:ffnn_192nodes", "ffnn_192nodes"):
        same_graph(graph_from_spec(text, paper_dir=folder), want)
    assert (want.num_nodes, want.structure_digest) == (180, "sha256:d2d14919a3b02f88")
    costed = graph_from_spec("paper_costs:chainmm:scale=0.5")
    same_graph(costed, paper_cost_graph(build("chainmm", scale=0.5)))
    assert costed.compute_cost is not None


def test_json_files_and_missing_files(tmp_path):
    g = build("chainmm", matrices=3, scale=0.01)
    path = save_graph(g, tmp_path / "g.json")
    same_graph(graph_from_spec(str(path)), g)
    with pytest.raises(ConfigError, match="graph file 'missing.json' does not exist"):
        graph_from_spec("missing.json")
    with pytest.raises(ConfigError, match=r"paper graph 'nope' not found in .*data paper-graphs"):
        graph_from_spec("paper:nope", paper_dir=tmp_path)


def test_models_by_name_prefix_file_and_saved_program(tmp_path, monkeypatch):
    torch = pytest.importorskip("torch")
    from doppler_lab.importers import from_exported
    from doppler_lab.importers.zoo import import_model, make_model

    bare = graph_from_spec("mlp:layers=2,hidden=16")
    same_graph(bare, import_model("mlp:layers=2,hidden=16"))
    same_graph(graph_from_spec("model:mlp:layers=2,hidden=16"), bare)  # named after the model
    op = graph_from_spec("mlp:layers=2,hidden=16", granularity="op")
    same_graph(op, import_model("mlp:layers=2,hidden=16", granularity="op"))
    (tmp_path / "mine.py").write_text(USER_FILE)
    fn = f"{tmp_path}/mine.py:make:hidden=4"
    same_graph(graph_from_spec(fn), import_model(fn))
    model, args = make_model("mlp:layers=2,hidden=16")
    saved = tmp_path / "m.pt2"
    torch.export.save(torch.export.export(model, args), saved)
    monkeypatch.delenv(TRUST_PT2_ENV, raising=False)
    with pytest.raises(ImportModelError, match="pass --trust-pt2"):
        graph_from_spec(str(saved))
    same_graph(
        graph_from_spec(str(saved), trust=True), from_exported(saved, name=str(saved), trust=True)
    )
    with pytest.raises(ConfigError, match="import options .*granularity.* apply only"):
        graph_from_spec("chainmm", granularity="op")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("nope", "unknown workload 'nope'; expected a workload (chainmm, "),
        ("nope:x=1", "graph spec 'nope:x=1': unknown workload 'nope'; expected"),
        ("", "graph spec '' is empty; expected a workload NAME"),
        ("chainmm:scale", "workload spec 'chainmm:scale': 'scale' is not of the form key=value"),
        ("chainmm:a=1,a=2", "workload spec 'chainmm:a=1,a=2': parameter 'a' is given twice"),
        ("mlp:layers", "model spec 'mlp:layers': 'layers' is not of the form key=value"),
        ("paper:", "graph spec 'paper:': paper graph name ''; expected paper:NAME"),
        ("paper:a/b", "paper graph name 'a/b'; expected paper:NAME"),
        ("model:chainmm", "graph spec 'model:chainmm': 'chainmm' is a workload; expected model:SPEC"),
        ("model:nope", "unknown model 'nope'; expected a zoo model (hf-llama"),
        ("model:", "graph spec 'model:' names no model; expected model:SPEC"),
        ("paper_costs:", "graph spec 'paper_costs:' names no graph; expected paper_costs:SPEC"),
        ("b.pt2:hidden=3", "a saved program takes only the import options (granularity, depth, merge, weights), got hidden"),
    ],
)  # fmt: skip
def test_bad_graph_specs_are_one_line_naming_the_item(text, message):
    with pytest.raises(ConfigError) as info:
        parse_graph_spec(text)
    assert message in str(info.value) and "\n" not in str(info.value)


def test_kinds_restrict_what_a_caller_takes():
    assert parse_graph_spec("x.py:f", MODEL_KINDS).kind == "function"
    with pytest.raises(ConfigError, match="graph spec 'chainmm' is a workload; expected a zoo"):
        parse_graph_spec("chainmm", MODEL_KINDS)
    with pytest.raises(ConfigError, match="unknown workload 'nope'; expected one of chainmm"):
        parse_graph_spec("nope", ("workload",))
    with pytest.raises(ConfigError, match="'mlp' is a zoo model; expected a workload"):
        parse_graph_spec("mlp", ("workload",))


def test_with_params_drops_and_appends():
    spec = parse_graph_spec("ffnn:scale=0.5,layers=2")
    assert str(spec.with_params(scale="0.25")) == "ffnn:layers=2,scale=0.25"
    assert str(parse_graph_spec("model:mlp").with_params(hidden=8)) == "model:mlp:hidden=8"
    assert str(parse_graph_spec("x.py:f:a=1").with_params(a=2, b=True)) == "x.py:f:a=2,b=true"
    assert str(parse_graph_spec("paper_costs:chainmm").with_params(scale=0.5)) == (
        "paper_costs:chainmm:scale=0.5"
    )
    with pytest.raises(ConfigError, match="'g.json' is a JSON graph, which takes no parameters"):
        parse_graph_spec("g.json").with_params(scale=0.5)
    assert with_scale("ffnn:scale=0.5,layers=2", 0.25) == "ffnn:layers=2,scale=0.25"
    assert scale_within("paper:ffnn_192nodes", lambda g: 0.0) is None


@pytest.mark.parametrize(
    ("text", "devices", "name", "count"),
    [
        ("p100x4", None, "p100x4", 4),
        ("uniform", 3, "uniform3", 3),
        ("uniform:6", None, "uniform6", 6),
        ("cpu:3", 3, "cpu3", 3),
        ("multihost:hosts=2,devices=3", None, "multihost2x3cpu", 6),
    ],
)
def test_cluster_forms(text, devices, name, count):
    c = cluster_from_spec(text, devices)
    assert (c.name, c.num_devices) == (name, count)


def test_cluster_files_and_bad_cluster_specs(tmp_path):
    path = save_cluster(cluster_from_spec("uniform:3"), tmp_path / "c.json")
    assert cluster_from_spec(str(path)).num_devices == 3
    for text, message in [
        ("tpu", "unknown cluster 'tpu'; expected a preset (p100x4"),
        ("tpu:3", "cluster 'tpu:3': no preset 'tpu'; expected"),
        ("p100x4:2", "cluster 'p100x4:2': preset 'p100x4' has a fixed size; expected"),
        ("uniform:x", "cluster 'uniform:x': device count 'x'; expected uniform:N"),
        ("uniform:0", "cluster 'uniform:0': device count '0'; expected uniform:N"),
        ("missing.json", "cluster file 'missing.json' does not exist"),
    ]:
        with pytest.raises(ClusterError) as info:
            cluster_from_spec(text)
        assert message in str(info.value) and "\n" not in str(info.value)
    with pytest.raises(ClusterError, match="cluster 'uniform:4' has 4 devices, not 2"):
        cluster_from_spec("uniform:4", 2)
    with pytest.raises(ClusterError, match="preset 'p100x4' has 4 devices, not 2"):
        cluster_from_spec("p100x4", 2)


def test_every_command_takes_the_new_spellings(capsys):
    import json

    from doppler_lab.commands._common import resolve_cluster

    assert resolve_cluster(argparse.Namespace(cluster="uniform:3", devices=None)).num_devices == 3
    assert main(["simulate", "chainmm:scale=0.1", "--cluster", "cpu:3", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["num_devices"] == 3
    assert main(["simulate", "paper_costs:chainmm:matrices=3,scale=0.1", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["semantics"] == "paper" and out["num_devices"] == 4
    assert main(["import", "chainmm"]) == 2
    assert "graph spec 'chainmm' is a workload; expected a zoo model" in capsys.readouterr().err


def test_docstring_examples():
    import doctest

    import doppler_lab.workloads.specs

    assert doctest.testmod(doppler_lab.workloads.specs).failed == 0


def test_a_list_of_specs_keeps_each_specs_parameters() -> None:
    from doppler_lab.workloads.specs import split_graph_specs

    assert split_graph_specs("chainmm:matrices=3,scale=0.001") == ["chainmm:matrices=3,scale=0.001"]
    assert split_graph_specs("transformer_block_215nodes, ffnn:scale=0.1,layers=2,chainmm") == [
        "transformer_block_215nodes",
        "ffnn:scale=0.1,layers=2",
        "chainmm",
    ]
    with pytest.raises(ConfigError, match="parameter 'scale=1' has no spec before it"):
        split_graph_specs("scale=1,ffnn")
