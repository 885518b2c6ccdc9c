"""The IR that imported models need: program op specs, stored inputs with their sidecar,
per-operand dtypes, strict validation of program steps."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from doppler_lab.executor import Executor
from doppler_lab.executor.torch_ops import evaluate, reference_outputs
from doppler_lab.house.errors import FormatError, GraphError
from doppler_lab.io.documents import graph_from_dict, graph_to_dict, load_graph, save_graph
from doppler_lab.io.stored import StoredTensors
from doppler_lab.ir.graph import DataflowGraph, GraphBuilder
from doppler_lab.ir.ops import OpSpec
from doppler_lab.ir.placement import round_robin
from doppler_lab.ir.program import Program


def program_graph() -> tuple[DataflowGraph, dict[str, torch.Tensor]]:
    """x @ w + 2 inf clamped to 3, then rows picked by an int64 index and cast to float64."""
    b = GraphBuilder("prog")
    x = b.add_node("x", "input", spec=OpSpec("input", "stored", (), (4, 8)))
    idx = b.add_node("idx", "input", spec=OpSpec("input", "stored", (), (4,), "int64"))
    w = b.add_node("w", "input", spec=OpSpec("input", "stored", (), (8, 8)))
    mm = Program.make(
        [
            ("aten.mm.default", [{"in": 0}, {"in": 1}], {}),
            ("aten.add.Tensor", [{"step": 0}, {"float": "-inf"}], {"alpha": 2}),
            ("aten.clamp.default", [{"step": 1}], {"min": -3.0}),
        ],
        2,
    )
    spec = OpSpec("program", "mm", ((4, 8), (8, 8)), (4, 8), flops_override=512.0, program=mm)
    y = b.add_node("y", "program", spec.flops, spec.out_bytes, [x, w], spec)
    sel = Program.make(
        [
            ("aten.index_select.default", [{"in": 0}, 0, {"in": 1}], {}),
            ("aten._to_copy.default", [{"step": 0}], {"dtype": {"dtype": "float64"}}),
        ],
        1,
    )
    spec = OpSpec(
        "program",
        "sel",
        ((4, 8), (4,)),
        (4, 8),
        "float64",
        flops_override=0.0,
        program=sel,
        in_dtypes=("float32", "int64"),
    )
    b.add_node("z", "program", spec.flops, spec.out_bytes, [y, idx], spec)
    values = {"x": torch.randn(4, 8), "idx": torch.tensor([3, 2, 1, 0]), "w": torch.randn(8, 8)}
    expected = {"z": torch.full((4, 8), -3.0, dtype=torch.float64)}
    return dataclasses.replace(b.build(), tensors=StoredTensors(values, expected)), values


def test_program_runs_and_round_trips(tmp_path):
    g, _ = program_graph()
    z = g.names.index("z")
    out = evaluate(g)[z]
    assert out.dtype == torch.float64 and torch.all(out == -3.0)
    path = save_graph(g, tmp_path / "m.json")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.json", "m.tensors.pt"]
    g2 = load_graph(path)
    assert g2.meta["tensors"] == "m.tensors.pt"
    assert g2.specs == g.specs
    assert torch.equal(evaluate(g2)[z], out)
    assert torch.equal(reference_outputs(g2)[z], out)


@pytest.mark.parametrize("backend", ["cpu", "inline", "dist"])
def test_program_on_every_backend(tmp_path, backend):
    g, _ = program_graph()
    g = load_graph(save_graph(g, tmp_path / "m.json"))  # dist workers read the sidecar
    z = g.names.index("z")
    with Executor(g, backend, num_devices=2) as ex:
        r = ex.run(round_robin(g, 2), repeats=1, warmup=0, keep_outputs=True)
    assert torch.equal(r.outputs[z], evaluate(g)[z])


def _doc(tmp_path):
    g, _ = program_graph()
    path = save_graph(g, tmp_path / "m.json")
    return path, json.loads(path.read_text())


@pytest.mark.parametrize(
    "mutate, words",
    [
        (lambda s: s["steps"][1]["args"].__setitem__(0, {"step": 1}), "expected an earlier step"),
        (lambda s: s["steps"][0]["args"].__setitem__(1, {"in": 5}), "reads operand 5"),
        (lambda s: s["steps"][0].__setitem__("op", "mm"), "not 'getitem'"),
        (lambda s: s.__setitem__("output", 7), "not a step index"),
        (lambda s: s["steps"][0]["args"].__setitem__(1, {"tensor": 1}), "exactly one key"),
    ],
)
def test_bad_program_steps_name_the_node(tmp_path, mutate, words):
    path, doc = _doc(tmp_path)
    mutate(doc["nodes"][3]["spec"]["program"])
    path.write_text(json.dumps(doc))
    with pytest.raises(FormatError, match="'y'") as err:
        load_graph(path)
    assert words in str(err.value)


def test_missing_sidecar_and_mismatched_dtypes(tmp_path):
    path, doc = _doc(tmp_path)
    (tmp_path / "m.tensors.pt").unlink()
    with pytest.raises(FormatError, match="tensors file 'm.tensors.pt' is missing"):
        load_graph(path)
    doc["meta"].pop("tensors")
    path.write_text(json.dumps(doc))
    with pytest.raises(FormatError, match="stored inputs"):
        load_graph(path)
    g, _ = program_graph()
    specs = list(g.specs)
    specs[4] = dataclasses.replace(specs[4], in_dtypes=("float32", "int32"))
    with pytest.raises(GraphError, match="dtype int64, expected int32"):
        dataclasses.replace(g, specs=tuple(specs))
    bad = StoredTensors({**g.tensors.inputs, "w": torch.zeros(8, 8, dtype=torch.float64)})
    with pytest.raises(GraphError, match="stored input 'w'"):
        dataclasses.replace(g, tensors=bad)


_JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-3, 9)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.sampled_from(["aten.mm.default", "getitem", "x", "int64", "inf"]),
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(
            st.sampled_from(["in", "step", "dtype", "float", "device", "op"]), inner, max_size=2
        )
    ),
    max_leaves=6,
)


def _leaves(doc: Any, path: tuple = ()) -> list[tuple]:
    out = [path] if path else []
    items = (
        doc.items() if isinstance(doc, dict) else enumerate(doc) if isinstance(doc, list) else ()
    )
    for k, v in items:
        out.extend(_leaves(v, (*path, k)))
    return out


@settings(max_examples=80, deadline=None)
@given(data=st.data())
def test_program_reader_fuzzed(data):
    """A program spec with any one field replaced reads as a graph or fails as one FormatError."""
    doc = graph_to_dict(program_graph()[0])
    node = data.draw(st.sampled_from([3, 4]))
    spec = doc["nodes"][node]["spec"]
    path = data.draw(st.sampled_from(_leaves(spec)))
    target = spec
    for k in path[:-1]:
        target = target[k]
    target[path[-1]] = data.draw(_JSON)
    try:
        graph_from_dict(doc)
    except FormatError as exc:
        assert "\n" not in str(exc)
