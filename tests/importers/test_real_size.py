"""Models at real size without weights: zoo presets, generated weights, the meta-device import.

A preset (``hf-llama:preset=llama2-13b``) is built with its parameters on the meta device and
exported on fake tensors: each parameter is a generated weight (a seeded recipe in the graph
JSON) that the executor makes on the device that reads it. These tests check the recipes, the
sizes and flops against the architecture's formulas, the memory an import takes, that the graph
is the materialised model's, and that a small generated-weights model runs on CPU workers.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch

from doppler_lab.executor import Executor, make_backend
from doppler_lab.executor.torch_ops import evaluate, make_input, output_nodes, reference_outputs
from doppler_lab.house.errors import ConfigError, GraphError, ImportModelError
from doppler_lab.importers import from_exported, from_module
from doppler_lab.importers.zoo import PRESETS, import_model, make_model
from doppler_lab.io.documents import load_graph, save_graph
from doppler_lab.io.stored import generate, generated_recipe
from doppler_lab.ir.placement import round_robin

pytest.importorskip("transformers")


def _inputs(graph):
    return {n: s for n, s in zip(graph.names, graph.specs) if s.kind == "input"}


def _generated(graph):
    return {n: s for n, s in _inputs(graph).items() if s.op != "stored"}


# -- generated tensors -------------------------------------------------------------------------
def test_generate_is_seeded_normal_and_chunk_independent(monkeypatch):
    w = generate("normal", (256, 1024), torch.float32, {"std": 0.02, "seed": 7})
    assert abs(float(w.mean())) < 2e-4 and abs(float(w.std()) - 0.02) < 2e-4
    assert float(w.abs().max()) <= 0.02 * math.sqrt(3) * 2 + 1e-6  # Irwin-Hall: bounded
    again = generate("normal", (256, 1024), torch.float32, {"std": 0.02, "seed": 7})
    other = generate("normal", (256, 1024), torch.float32, {"std": 0.02, "seed": 8})
    assert torch.equal(w, again) and not torch.equal(w, other)
    flat = w.flatten()
    assert abs(float(torch.corrcoef(torch.stack([flat[:-1], flat[1:]]))[0, 1])) < 0.01
    u = generate("uniform", (10_000,), torch.float64, {"low": -1.0, "high": 3.0, "seed": 1})
    assert float(u.min()) >= -1.0 and float(u.max()) < 3.0 and abs(float(u.mean()) - 1.0) < 0.05
    import doppler_lab.io.stored as stored

    half = generate("normal", (3, 100), torch.bfloat16, {"std": 1.0, "seed": 3})
    monkeypatch.setattr(stored, "_CHUNK", 7)
    assert torch.equal(generate("normal", (3, 100), torch.bfloat16, {"std": 1.0, "seed": 3}), half)


@pytest.mark.parametrize(
    "init, seed, params, message",
    [
        ("poisson", 1, {}, "init 'poisson'; expected one of normal, uniform"),
        ("normal", -1, {}, r"seed -1; expected an integer in \[0, 2\*\*53\)"),
        ("normal", 2**60, {}, "expected an integer in"),
        ("normal", 1, {"low": 0.0}, "no param 'low'; expected mean, std"),
        ("uniform", 1, {"high": float("inf")}, "high=inf; expected a finite number"),
    ],
)
def test_bad_recipes_name_the_item_and_the_choices(init, seed, params, message):
    with pytest.raises(GraphError, match=message):
        generated_recipe(init, seed, **params)


# -- presets -----------------------------------------------------------------------------------
#: parameter counts of the published checkpoints (tied GPT-2 embeddings counted once)
PUBLISHED_PARAMS = {
    ("hf-llama", "llama2-7b"): 6_738_415_616,
    ("hf-llama", "llama2-13b"): 13_015_864_320,
    ("hf-llama", "llama3-8b"): 8_030_261_248,
    ("hf-gpt2", "gpt2-xl"): 1_557_611_200,
}


@pytest.mark.parametrize("model, preset", sorted(PUBLISHED_PARAMS))
def test_presets_build_on_meta_with_the_published_sizes(model, preset):
    m, (ids,) = make_model(f"{model}:preset={preset}")
    params = list(m.parameters())
    assert all(p.device.type == "meta" for p in params)
    assert sum(p.numel() for p in params) == PUBLISHED_PARAMS[model, preset]
    dtype = getattr(torch, PRESETS[model][preset]["dtype"])
    assert {p.dtype for p in params} == {dtype}
    config = m.lm.config
    p = PRESETS[model][preset]
    if model == "hf-llama":
        assert (config.hidden_size, config.num_hidden_layers, config.intermediate_size) == (
            p["hidden"],
            p["layers"],
            p["intermediate"],
        )
        assert config.num_key_value_heads == p["kv_heads"]
        assert config.rope_parameters["rope_theta"] == p["rope_theta"]
        # the rotary table is a real buffer in float32, as from_pretrained leaves it
        assert m.lm.model.rotary_emb.inv_freq.dtype == torch.float32
    else:
        assert (config.n_embd, config.n_layer, config.n_head, config.n_positions) == (
            1600,
            48,
            25,
            1024,
        )
    assert ids.dtype == torch.int64


def test_transformers_defaults_agree_with_the_presets():
    from transformers import GPT2Config, LlamaConfig

    llama, gpt2 = LlamaConfig(), GPT2Config()
    p = PRESETS["hf-llama"]["llama2-7b"]
    assert (llama.vocab_size, llama.hidden_size, llama.intermediate_size) == (
        p["vocab"],
        p["hidden"],
        p["intermediate"],
    )
    assert (llama.num_hidden_layers, llama.num_attention_heads) == (p["layers"], p["heads"])
    assert (gpt2.vocab_size, gpt2.n_positions) == (50257, 1024)


@pytest.mark.parametrize(
    "spec, message",
    [
        ("hf-llama:preset=llama9", "preset='llama9' is not one of the choices; expected one of "
         "llama2-7b, llama2-13b, llama3-8b"),
        ("hf-gpt2:preset=llama2-7b", "expected one of gpt2-xl"),
        ("hf-llama:preset=llama2-7b,dtype=float64", "dtype='float64' is not one of the choices; "
         "expected one of float32, float16, bfloat16"),
        ("hf-llama:weights=maybe", "weights='maybe' is not one of the choices; expected one of "
         "stored, none"),
        ("hf-gpt2:preset=gpt2-xl,seq=2048", "seq=2048 is longer than positions=1024"),
        ("mlp:preset=llama2-7b", "model 'mlp' has no parameter 'preset'"),
        ("hf-llama:rope_theta=0", "rope_theta=0; expected a finite number > 0"),
    ],
)  # fmt: skip
def test_bad_preset_specs_are_one_line_errors(spec, message):
    with pytest.raises(ConfigError, match=message) as info:
        make_model(spec)
    assert "\n" not in str(info.value)


# -- a preset-sized import: formulas and memory ---------------------------------------------------
_IMPORT_IN_CHILD = textwrap.dedent(
    """
    import json, resource, sys
    from doppler_lab.importers.zoo import import_model

    def peak_kib():
        # this process's own peak (VmHWM: its memory map's high-water mark, new at exec);
        # ru_maxrss keeps the parent's peak across fork and exec, so a test suite that has
        # grown past the limit would fail the child for the parent's memory
        try:
            with open("/proc/self/status") as f:
                for line in f:
                    if line.startswith("VmHWM:"):
                        return int(line.split()[1])
        except OSError:
            pass
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss

    g = import_model(sys.argv[1])
    specs = [s for s in g.specs if s.kind == "input"]
    gen = [s for s in specs if s.op != "stored"]
    print(json.dumps({
        "flops": g.summary()["total_flops"],
        "generated": len(gen),
        "generated_bytes": sum(s.out_bytes for s in gen),
        "stored": sorted(n for n, s in zip(g.names, g.specs) if s.kind == "input" and s.op == "stored"),
        "sidecar": sorted(g.tensors.inputs),
        "dtypes": sorted({s.dtype for s in gen}),
        "nodes": g.num_nodes,
        "weights": g.meta["weights"],
        "maxrss_kib": peak_kib(),
    }))
    """
)


def test_two_layer_llama3_8b_imports_in_little_memory_with_exact_bytes_and_flops():
    """Two layers of llama3-8b in bfloat16 hold 3.0 GB of weights (its 128256-token embedding
    and head alone 2.1 GB): the import stays far below that, and its weight bytes and flops
    are the architecture's."""
    b, s, layers = 2, 32, 2
    p = PRESETS["hf-llama"]["llama3-8b"]
    h, i, v, nh, nkv = p["hidden"], p["intermediate"], p["vocab"], p["heads"], p["kv_heads"]
    spec = f"hf-llama:preset=llama3-8b,layers={layers},seq={s},batch={b}"
    out = subprocess.run(
        [sys.executable, "-c", _IMPORT_IN_CHILD, spec], capture_output=True, text=True, check=True
    )
    got = json.loads(out.stdout.strip().splitlines()[-1])
    kv = h // nh * nkv
    per_layer = 2 * h * h + 2 * h * kv + 3 * h * i + 2 * h  # q, o; k, v; mlp; two norms
    params = 2 * v * h + layers * per_layer + h  # embedding, head (untied), final norm
    assert got["generated_bytes"] == 2 * params  # bfloat16
    assert got["generated"] == 2 + layers * 9 + 1
    assert got["dtypes"] == ["bfloat16"] and got["weights"] == "none"
    # matmuls 2*m*n*k; attention two batched matmuls of b*heads*s*s*head_dim (no causal saving)
    matmul = 2 * b * s * (2 * h * h + 2 * h * kv + 3 * h * i)
    attention = 2 * 2 * b * s * s * h
    assert got["flops"] == layers * (matmul + attention) + 2 * b * s * h * v
    # the sidecar holds the token ids and the folded rotary/mask constants, no weight
    assert got["sidecar"] == got["stored"] and "input_ids" in got["stored"]
    assert not any(n.endswith(".weight") for n in got["sidecar"])
    assert got["maxrss_kib"] < 1.5 * 2**20, f"peak RSS {got['maxrss_kib'] / 2**20:.2f} GiB"


# -- the same graph as the materialised model ------------------------------------------------------
def _structure(graph):
    return (
        graph.names,
        graph.edge_src.tolist(),
        graph.edge_dst.tolist(),
        graph.flops.tolist(),
        graph.out_bytes.tolist(),
        [(s.out_shape, s.dtype, s.in_shapes) for s in graph.specs],
    )


def test_meta_import_is_the_materialised_llama():
    stored = import_model("hf-llama:layers=2,kv_heads=2")
    meta = import_model("hf-llama:layers=2,kv_heads=2,weights=none")
    assert stored.meta["weights"] == "stored" and meta.meta["weights"] == "none"
    assert _structure(meta) == _structure(stored)
    programs = [s.program for s in stored.specs if s.kind == "program"]
    assert programs == [s.program for s in meta.specs if s.kind == "program"]
    gen = _generated(meta)
    assert set(gen) == set(stored.tensors.inputs) - set(meta.tensors.inputs)
    assert gen["lm.model.layers.0.input_layernorm.weight"].op == "ones"
    assert gen["lm.model.layers.0.mlp.up_proj.weight"].op == "normal"
    assert gen["lm.model.layers.0.mlp.up_proj.weight"].kwargs["std"] == 0.02


def test_meta_gpt2_differs_only_by_the_position_lookup_it_cannot_fold():
    """With stored weights the position-embedding lookup (a parameter indexed by constant
    positions) is folded into a stored input; a generated weight has no value at import, so
    the lookup stays a node. Flops are the same."""
    stored = import_model("hf-gpt2:layers=2")
    meta = import_model("hf-gpt2:layers=2,weights=none")
    assert meta.summary()["total_flops"] == stored.summary()["total_flops"]
    assert meta.num_nodes == stored.num_nodes + 1
    extra = set(meta.names) - set(stored.names)
    assert extra == {"folded/unsqueeze", "lm.transformer.wpe.weight"} | {
        n for n in extra if n.startswith("lm.transformer.wpe/")
    }
    assert set(stored.names) - set(meta.names) == {"folded/embedding_1"}


def test_real_parameters_imported_with_weights_none_equal_the_meta_import():
    model, args = make_model("hf-llama:layers=1")
    a = from_module(model, args, weights="none", seed=3)
    b = import_model("hf-llama:layers=1,weights=none,seed=3")
    assert _structure(a) == _structure(b)
    assert [s.params for s in a.specs] == [s.params for s in b.specs]
    assert all(p.device.type == "cpu" for p in model.parameters())  # put back


# -- generated weights through the graph JSON and the executor -------------------------------------
def test_generated_weights_round_trip_through_the_graph_json(tmp_path):
    graph = import_model("hf-llama:layers=1,weights=none,seed=5")
    path = save_graph(graph, tmp_path / "m.json")
    doc = json.loads(path.read_text())
    recipes = {
        n["name"]: n["spec"] for n in doc["nodes"] if n.get("spec", {}).get("op") == "normal"
    }
    assert recipes and all("seed" in r["params"] and "std" in r["params"] for r in recipes.values())
    back = load_graph(path)
    assert _structure(back) == _structure(graph)
    assert [s.params for s in back.specs] == [s.params for s in graph.specs]
    assert set(back.tensors.inputs) == set(graph.tensors.inputs)  # ids and folded tables only
    assert not set(back.tensors.inputs) & set(_generated(graph))
    before, after = evaluate(graph), evaluate(back)
    assert all(torch.equal(before[k], after[k]) for k in before)


def test_weights_none_runs_on_cpu_workers_and_matches_the_model_on_the_same_weights():
    graph = import_model("hf-llama:layers=2,weights=none")
    assert graph.expected_outputs == {}
    ref = reference_outputs(graph)
    (out,) = output_nodes(graph).tolist()
    # the eager model with the generated weights loaded: the graph computes that model
    model, (ids,) = make_model("hf-llama:layers=2")
    assert torch.equal(ids, graph.tensors.inputs["input_ids"])  # drawn from the seed alone
    state = {}
    for name, spec in zip(graph.names, graph.specs):
        if spec.kind == "input" and spec.op != "stored":
            state[name.removeprefix("lm.")] = make_input(spec, 0)
    missing, unexpected = model.lm.load_state_dict(state, strict=False)
    assert not unexpected and all("rotary" in k for k in missing)
    with torch.no_grad():
        eager = model(ids)
    assert float((eager - ref[out]).abs().max()) <= 1e-5
    backend = make_backend("cpu", 2)
    try:
        with Executor(graph, backend) as ex:
            result = ex.run(round_robin(graph, 2), repeats=1, warmup=0, keep_outputs=True)
    finally:
        backend.close()
    assert result.trace.check(graph) == []
    assert float((result.outputs[out] - ref[out]).abs().max()) <= 1e-5


USER_FILE = """
import torch

class Net(torch.nn.Module):
    def __init__(self, hidden):
        super().__init__()
        self.fc = torch.nn.Linear(hidden, hidden)
        self.norm = torch.nn.LayerNorm(hidden)
        self.head = torch.nn.Linear(hidden, 3)

    def forward(self, x):
        return self.head(self.norm(torch.relu(self.fc(x))))

def make(hidden=8, batch=2):
    return Net(hidden).eval(), (torch.randn(batch, hidden),)
"""


def test_a_user_model_asks_for_generated_weights(tmp_path):
    path = tmp_path / "mine.py"
    path.write_text(USER_FILE)
    graph = import_model(f"{path}:make:hidden=16,weights=none")
    assert {n: s.op for n, s in _generated(graph).items()} == {
        "fc.weight": "normal",
        "fc.bias": "zeros",
        "norm.weight": "ones",
        "norm.bias": "zeros",
        "head.weight": "normal",
        "head.bias": "zeros",
    }
    assert set(graph.tensors.inputs) == {"x"}
    backend = make_backend("inline", 2)
    try:
        with Executor(graph, backend) as ex:
            result = ex.run(round_robin(graph, 2), repeats=1, warmup=0, keep_outputs=True)
    finally:
        backend.close()
    ((out, ref),) = reference_outputs(graph).items()
    assert torch.equal(result.outputs[out], ref)


def test_a_saved_program_can_drop_its_weights(tmp_path):
    model, args = make_model("mlp:layers=2,hidden=16")
    ep = torch.export.export(model, args)
    graph = from_exported(ep, weights="none")
    gen = _generated(graph)
    assert {s.op for s in gen.values()} == {"normal", "zeros"}
    assert set(graph.tensors.inputs) == {"x"}
    assert np.isfinite(evaluate(graph)[output_nodes(graph)[0]].numpy()).all()


def test_meta_buffers_are_refused():
    with torch.device("meta"):
        model = torch.nn.BatchNorm1d(4).eval()
    with pytest.raises(ImportModelError, match="buffer 'running_mean' is on the meta device"):
        from_module(model, (torch.randn(2, 4),))


def test_bad_weights_option_names_the_choices():
    model, args = make_model("mlp:layers=1,hidden=8")
    with pytest.raises(ConfigError, match="weights 'x'; expected one of stored, none"):
        from_module(model, args, weights="x")


def test_a_device_with_an_input_device_makes_its_generated_weights_itself():
    """A session whose devices make their own generated weights (a GPU's) never places a host
    copy of them: only the stored inputs (token ids, folded tables) go through the host."""
    from doppler_lab.executor.cpu import CpuSession
    from doppler_lab.executor.plan import make_plan

    graph = import_model("hf-llama:layers=1,weights=none")
    placed: list[str] = []

    class OnDevice(CpuSession):
        def input_device(self, device):
            return torch.device("cpu")

        def place_input(self, tensor, device, first):
            placed.append(graph.names[next(u for u, t in host.items() if t is tensor)])
            return super().place_input(tensor, device, first)

    host: dict[int, torch.Tensor] = {}
    import doppler_lab.executor.torch_ops as ops

    real = ops.input_value

    def spy(g, u, seed, device="cpu"):
        host[u] = real(g, u, seed, device)
        return host[u]

    backend = make_backend("cpu", 2)
    try:
        session = OnDevice(backend, graph, 0)
        plan = make_plan(graph, round_robin(graph, 2), 2)
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(ops, "input_value", spy)
            bufs = session.resident(plan)
    finally:
        backend.close()
    assert set(placed) == set(graph.tensors.inputs)
    for u, devs in plan.input_devices.items():
        spec = graph.specs[u]
        for k in devs:
            if spec.op != "stored":
                assert torch.equal(bufs[k][u], make_input(spec, 0))


@pytest.mark.gpu
def test_generated_weights_are_bit_identical_on_a_gpu():
    for dtype in (torch.float32, torch.float16, torch.bfloat16):
        recipe = {"std": 0.02, "seed": 2**52 + 1}
        cpu = generate("normal", (4097, 333), dtype, recipe)
        assert torch.equal(generate("normal", (4097, 333), dtype, recipe, "cuda").cpu(), cpu)


@pytest.mark.gpu
def test_weights_none_runs_on_cuda_devices_against_the_cpu_reference():
    graph = import_model("hf-llama:layers=2,weights=none")
    backend = make_backend("cuda-shared", 2)
    try:
        with Executor(graph, backend) as ex:
            result = ex.run(round_robin(graph, 2), repeats=1, warmup=0, keep_outputs=True)
    finally:
        backend.close()
    ((out, ref),) = reference_outputs(graph).items()
    assert float((result.outputs[out].cpu() - ref).abs().max()) <= 1e-4
