"""The workload generators: dense equivalence at tiny size, paper-like default sizes, scale-up."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from _workloads_dense import chainmm as dense_chainmm
from _workloads_dense import ffnn as dense_ffnn
from _workloads_dense import llama_block as dense_llama_block
from _workloads_dense import llama_layer as dense_llama_layer
from _workloads_dense import moe_layer as dense_moe_layer

from doppler_lab.executor.torch_ops import evaluate, output_nodes
from doppler_lab.house.errors import ConfigError
from doppler_lab.io.documents import load_graph, save_graph
from doppler_lab.workloads import WORKLOADS, build
from doppler_lab.workloads.assemble import dense_inputs, dense_outputs

DENSE = {
    "chainmm": dense_chainmm,
    "ffnn": dense_ffnn,
    "llama_block": dense_llama_block,
    "llama_layer": dense_llama_layer,
    "moe_layer": dense_moe_layer,
}
EINSUM_WORKLOADS = tuple(DENSE)
VARIANTS = [
    ("chainmm", {}),
    ("chainmm", {"order": "left", "blocks": 3, "matrices": 4}),
    ("ffnn", {}),
    ("ffnn", {"layers": 3, "activation": "relu", "batch_blocks": 3}),
    ("llama_block", {}),
    ("llama_block", {"layers": 2, "seq_blocks": 2, "kv_heads": 8, "batch": 3}),
    ("llama_layer", {"seq_blocks": 2}),
    ("moe_layer", {}),
    ("moe_layer", {"layers": 2, "top_k": 3, "seq_blocks": 2}),
]
# the paper's released 4-GPU graphs: (compute nodes, nodes with inputs), see DOPPLER.md
PAPER_SIZES = {
    "chainmm": (76, 112),
    "ffnn": (180, 192),
    "llama_block": (182, 215),
    "llama_layer": (229, 261),
}


def tiny(name: str, **params) -> object:
    return build(name, scale="tiny", **params)


def run_both(graph, seed: int = 0):
    """(block graph outputs, dense model outputs) on the same inputs."""
    got = dense_outputs(graph, evaluate(graph, seed=seed))
    ref = DENSE[graph.meta["generator"]](dense_inputs(graph, seed=seed), graph.meta)
    return got, ref


@pytest.mark.parametrize(
    ("name", "params"), VARIANTS, ids=[f"{n}-{i}" for i, (n, _) in enumerate(VARIANTS)]
)
def test_block_graph_equals_dense_model(name, params):
    graph = tiny(name, dtype="float64", **params)
    got, ref = run_both(graph, seed=3)
    assert set(got) == set(ref)
    for key in ref:
        torch.testing.assert_close(got[key], ref[key], rtol=1e-5, atol=1e-5)  # tables are float32


@pytest.mark.parametrize("name", EINSUM_WORKLOADS)
def test_float32_and_bfloat16_stay_close_to_float64(name):
    for dtype, tol in (("float32", 1e-4), ("bfloat16", 0.1)):
        graph = tiny(name, dtype=dtype)
        got = dense_outputs(graph, evaluate(graph, seed=0))
        inputs = {
            k: v.double() if v.is_floating_point() else v
            for k, v in dense_inputs(graph, seed=0).items()
        }
        ref = DENSE[name](inputs, graph.meta)
        for key in ref:
            assert got[key].dtype == getattr(torch, dtype)
            err = (got[key].double() - ref[key]).norm() / ref[key].norm()
            assert err < tol, (dtype, key, float(err))


@pytest.mark.parametrize("name", EINSUM_WORKLOADS)
def test_meta_describes_inputs_outputs_and_params(name):
    graph = build(name)
    meta = graph.meta
    assert meta["generator"] == name
    assert set(meta["params"]) == set(
        WORKLOADS[name].__code__.co_varnames[: WORKLOADS[name].__code__.co_argcount]
    )
    in_ids = np.concatenate([np.ravel(e["ids"]) for e in meta["inputs"].values()])
    assert sorted(in_ids.tolist()) == np.flatnonzero(graph.is_input).tolist()
    out_ids = np.concatenate([np.ravel(e["ids"]) for e in meta["outputs"].values()])
    assert sorted(out_ids.tolist()) == output_nodes(graph).tolist()
    for entry in meta["inputs"].values():
        assert [sum(p) for p in entry["parts"]] == entry["shape"]
    assert graph.is_executable


@pytest.mark.parametrize("name", sorted(PAPER_SIZES))
def test_default_sizes_match_the_paper(name):
    graph = build(name)
    compute, total = PAPER_SIZES[name]
    assert abs(graph.compute_nodes.size - compute) <= 0.15 * compute
    assert abs(graph.num_nodes - total) <= 0.15 * total


# counted by hand from the generators' docstrings, e.g. llama_block: RMSNorm 5 per batch block,
# rotary tables 11, q/k/v 3 x 8 blocks, rotary 16, scores/mask/softmax 8 + 2 + 8 + 8, attention
# x values 8, output projection 8 + 6 adds, residuals 2 + 2, MLP norm 10, SwiGLU 8 x 4 + 8 + 6 adds
DEFAULT_SIZES = {  # compute nodes, inputs, depth
    "chainmm": (72, 28, 6),
    "ffnn": (188, 28, 17),
    "llama_block": (169, 32, 27),
    "llama_layer": (211, 38, 38),
    "moe_layer": (273, 49, 27),
}


@pytest.mark.parametrize("name", sorted(DEFAULT_SIZES))
def test_default_sizes_are_the_documented_ones(name):
    s = build(name).summary()
    assert (s["compute_nodes"], s["inputs"], s["depth"]) == DEFAULT_SIZES[name]


def test_default_moe_size():
    graph = build("moe_layer")
    assert 150 <= graph.compute_nodes.size and graph.num_nodes <= 400


@pytest.mark.parametrize("name", EINSUM_WORKLOADS)
def test_scale_keeps_the_structure(name):
    big, small = build(name), tiny(name)
    assert big.names == small.names
    np.testing.assert_array_equal(big.edge_src, small.edge_src)
    np.testing.assert_array_equal(big.edge_dst, small.edge_dst)
    assert big.flops.sum() > 1e4 * small.flops.sum()


def test_chainmm_flops_and_bytes_are_analytic():
    graph = build("chainmm")
    n, blocks, products = 8192, 2, 6
    # per product: 2 n^3 in block matmuls, (blocks - 1) n^2 in the adds of the split index
    assert graph.flops.sum() == products * (2 * n**3 + (blocks - 1) * n**2)
    assert np.all(graph.out_bytes == (n // blocks) ** 2 * 4)
    assert graph.summary()["depth"] == 6


def test_chainmm_weights_keep_long_chains_sane():
    y = run_both(build("chainmm", matrices=16, order="left", n=64))[0]["Y"]
    assert 0.3 < float(y.std()) < 3.0


def test_llama_stack_stays_finite_and_scaled():
    y = run_both(tiny("llama_block", layers=3))[0]["y"]
    assert torch.isfinite(y).all() and 1.0 < float(y.std()) < 10.0


def test_parameters_scale_past_10k_nodes():
    graph = build("llama_block", layers=64)
    assert graph.num_nodes > 10_000
    assert graph.is_executable
    assert graph.meta["params"]["layers"] == 64


def test_moe_routing_is_seeded_and_recorded():
    a, b, c = build("moe_layer", seed=1), build("moe_layer", seed=1), build("moe_layer", seed=2)
    plan = a.meta["routing"]["l0"]
    assert plan == b.meta["routing"]["l0"] != c.meta["routing"]["l0"]
    assert len(plan) == 4 and all(len(set(p)) == 2 for p in plan)


def test_json_round_trip_preserves_everything(tmp_path):
    graph = tiny("moe_layer", seq_blocks=2)
    back = load_graph(save_graph(graph, tmp_path / "moe.json"))
    assert back.names == graph.names and back.name == graph.name
    for attr in ("kinds", "flops", "out_bytes", "edge_src", "edge_dst"):
        np.testing.assert_array_equal(getattr(back, attr), getattr(graph, attr))
    assert back.specs == graph.specs
    assert back.meta == graph.meta
    got, ref = run_both(back)
    torch.testing.assert_close(got["y"], ref["y"])


@pytest.mark.parametrize(
    ("name", "params", "bad"),
    [
        ("chainmm", {"blocks": 0}, "blocks"),
        ("chainmm", {"order": "right"}, "order"),
        ("chainmm", {"n": "big"}, "n"),
        ("ffnn", {"activation": "swish"}, "activation"),
        ("ffnn", {"blocks": 5, "d_model": 4}, "blocks"),
        ("llama_block", {"heads": 5}, "heads"),
        ("llama_block", {"kv_heads": 5}, "kv_heads"),
        ("llama_block", {"blocks": 64}, "blocks"),
        ("llama_block", {"dtype": "int8"}, "dtype"),
        ("llama_block", {"seq": 2, "seq_blocks": 4}, "seq_blocks"),
        ("llama_block", {"bogus": 1}, "bogus"),
        ("llama_layer", {"vocab": 0}, "vocab"),
        ("moe_layer", {"top_k": 9}, "top_k"),
        ("moe_layer", {"scale": -1.0}, "scale"),
        ("ffnn", {"scale": "huge"}, "scale"),
        ("nope", {}, "nope"),
    ],
)
def test_bad_parameters_name_the_parameter(name, params, bad):
    with pytest.raises(ConfigError, match=bad):
        build(name, **params)
