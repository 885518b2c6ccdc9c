"""The zoo models imported, placed, run on the executor backends and checked against eager.

Each model is imported once per module (scope granularity), placed by round-robin, cp and heft
on 2 CPU devices, and executed on the ``cpu`` and ``inline`` backends (every placement) and on
``dist`` (one placement a model in the default tier, the others ``slow``): the outputs equal the
eager model's within 1e-5 (float32) and the trace is a valid schedule.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from doppler_lab.executor import Executor, make_backend
from doppler_lab.executor.backend import make_cpu_cluster
from doppler_lab.executor.torch_ops import output_nodes
from doppler_lab.importers import from_module
from doppler_lab.importers.zoo import import_model, make_model
from doppler_lab.ir.placement import round_robin
from doppler_lab.placers import place

#: the models of the checks, small enough for the default tier
SPECS: dict[str, str] = {
    "mlp": "mlp",
    "hf-llama": "hf-llama:layers=2",
    "hf-gpt2": "hf-gpt2:layers=2",
    "resnet": "resnet",
}
PLACERS = ("round-robin", "cp", "heft")
#: the placement each model runs under on ``dist`` in the default tier (the others are slow)
DIST_DEFAULT = {"mlp": "heft", "hf-llama": "cp", "hf-gpt2": "round-robin", "resnet": "cp"}
TOL = 1e-5


@pytest.fixture(scope="module")
def graphs():
    cache = {}

    def get(name):
        if name not in cache:
            cache[name] = import_model(SPECS[name])
        return cache[name]

    return get


@pytest.fixture(scope="module")
def placements(graphs):
    cluster = make_cpu_cluster(2)
    cache = {}

    def get(name, placer):
        if (name, placer) not in cache:
            g = graphs(name)
            cache[name, placer] = (
                round_robin(g, 2) if placer == "round-robin" else place(placer, g, cluster, seed=0)
            )
        return cache[name, placer]

    return get


@pytest.fixture(scope="module")
def backends():
    made = {}

    def get(kind):
        if kind not in made:
            if kind == "dist":
                pytest.importorskip("torch.distributed")
            made[kind] = make_backend(kind, 2)
        return made[kind]

    yield get
    for b in made.values():
        b.close()


def eager_outputs(name: str) -> torch.Tensor:
    model, args = make_model(SPECS[name])
    with torch.no_grad():
        return model(*args)


def run_and_check(graph, placement, backend, eager: torch.Tensor) -> None:
    with Executor(graph, backend) as ex:
        result = ex.run(placement, repeats=1, warmup=0, keep_outputs=True)
    assert result.trace.check(graph) == []
    (out,) = output_nodes(graph).tolist()
    got = result.outputs[out]
    assert got.shape == eager.shape and got.dtype == torch.float32
    err = float((got - eager).abs().max())
    assert err <= TOL, f"{graph.name}: max abs error {err:.3g} > {TOL}"


@pytest.mark.parametrize("placer", PLACERS)
@pytest.mark.parametrize("kind", ["cpu", "inline"])
@pytest.mark.parametrize("name", list(SPECS))
def test_outputs_match_eager(name, kind, placer, graphs, placements, backends):
    g = graphs(name)
    run_and_check(g, placements(name, placer), backends(kind), eager_outputs(name))


@pytest.mark.parametrize(
    "name, placer",
    [
        pytest.param(n, p, marks=() if DIST_DEFAULT[n] == p else pytest.mark.slow)
        for n in SPECS
        for p in PLACERS
    ],
)
def test_outputs_match_eager_on_dist(name, placer, graphs, placements, backends):
    g = graphs(name)
    run_and_check(g, placements(name, placer), backends("dist"), eager_outputs(name))


@pytest.mark.parametrize("name", list(SPECS))
def test_graph_shape(name, graphs):
    g = graphs(name)
    assert g.is_executable and g.name == SPECS[name]
    assert len(output_nodes(g)) == 1  # the logits / class scores
    assert g.topo_order.size == g.num_nodes  # acyclic
    comp = g.compute_nodes
    assert (g.out_bytes[comp] > 0).all()


@pytest.mark.parametrize("name", list(SPECS))
def test_flops_within_one_percent_of_flop_counter(name, graphs):
    """FlopCounterMode over the eager model; torch 2.13 has no flop formula for CPU SDPA, so the
    Hugging Face models are counted with their matmul ("eager") attention, the same math."""
    model, args = make_model(SPECS[name])
    if name.startswith("hf-"):
        model.lm.config._attn_implementation = "eager"
    with FlopCounterMode(display=False) as counter, torch.no_grad():
        model(*args)
    expected = counter.get_total_flops()
    total = float(graphs(name).flops.sum())
    assert expected > 0
    assert abs(total - expected) <= 0.01 * expected, (total, expected)


def test_the_same_spec_gives_the_same_graph(graphs):
    a, b = graphs("mlp"), import_model(SPECS["mlp"])
    assert a.names == b.names
    assert np.array_equal(a.flops, b.flops) and np.array_equal(a.edge_src, b.edge_src)


def test_from_module_on_a_zoo_model_equals_import_model(graphs):
    model, args = make_model("mlp")
    g = from_module(model, args, name="mlp")
    assert g.names == graphs("mlp").names


#: (model, granularity) -> (nodes, compute nodes, inputs, edges) of the zoo's default sizes;
#: the README's model-zoo table shows the same numbers
NODE_COUNTS = {
    ("mlp", "scope"): (13, 4, 9, 12),
    ("mlp", "op"): (16, 7, 9, 15),
    ("hf-llama", "scope"): (52, 25, 27, 62),
    ("hf-llama", "op"): (132, 105, 27, 161),
    ("hf-gpt2", "scope"): (45, 15, 30, 50),
    ("hf-gpt2", "op"): (116, 86, 30, 129),
    ("resnet", "scope"): (42, 9, 33, 43),
    ("resnet", "op"): (55, 22, 33, 56),
}


def sizes(g) -> tuple[int, int, int, int]:
    s = g.summary()
    return s["nodes"], s["compute_nodes"], s["inputs"], s["edges"]


@pytest.mark.parametrize("name", list(SPECS))
def test_node_counts_per_granularity_are_stable(name, graphs):
    assert sizes(graphs(name)) == NODE_COUNTS[name, "scope"]
    op = import_model(f"{SPECS[name]}{',' if ':' in SPECS[name] else ':'}granularity=op")
    assert sizes(op) == NODE_COUNTS[name, "op"]
    assert op.flops.sum() == pytest.approx(graphs(name).flops.sum(), rel=1e-9)


def test_import_command_writes_the_graph_and_reads_a_saved_program(graphs, tmp_path, capsys):
    import json

    from doppler_lab.cli import main
    from doppler_lab.io.documents import load_graph

    out = tmp_path / "mlp.json"
    assert main(["import", "mlp", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert f"wrote {out}" in text and "13 nodes (9 input, 4 program)" in text and "FLOP" in text
    assert "e+" not in text and "of op outputs" in text  # SI units, never 2.068e+05
    assert load_graph(out).names == graphs("mlp").names
    model, args = make_model("mlp")
    torch.export.save(torch.export.export(model, args), tmp_path / "mlp.pt2")
    pt2 = str(tmp_path / "mlp.pt2")
    assert main(["import", pt2, "--granularity", "op", "--json", "--trust-pt2"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert (report["nodes"], report["compute_nodes"]) == NODE_COUNTS["mlp", "op"][:2]
    assert main(["import", "mlp:granularity=op", "--granularity", "scope"]) == 2
    assert "is given twice" in capsys.readouterr().err


def test_zoo_specs_are_graphs_for_every_command(capsys):
    from doppler_lab.cli import main

    assert main(["simulate", "mlp:granularity=op", "--placement", "cp", "--json"]) == 0
    assert '"makespan"' in capsys.readouterr().out
    assert main(["execute", "mlp", "--devices", "2", "--placement", "heft", "--check"]) == 0
    assert "match" in capsys.readouterr().out
