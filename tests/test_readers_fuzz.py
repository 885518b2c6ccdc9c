"""Every reader, fuzzed: whatever the input (random bytes, random JSON, a valid document with one
field replaced, removed or added), the result is a loaded object or one DopplerLabError line,
never another exception and never a silent coercion (floats or booleans as ids, strings as
numbers, missing fields as zeros)."""

from __future__ import annotations

import argparse
import copy
import doctest
import json
import math
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import doppler_lab.house.validate
from doppler_lab.cli import main
from doppler_lab.commands._common import int_arg, number_arg
from doppler_lab.hardware.cluster import Cluster, make_cluster, make_cpu
from doppler_lab.house.errors import DopplerLabError, FormatError
from doppler_lab.house.validate import parse_int_text, parse_number_text, show
from doppler_lab.io.documents import (
    graph_from_dict,
    graph_to_dict,
    load_cluster,
    load_graph,
    load_placement,
    load_trace,
    placement_from_dict,
    read_paper_graph,
    trace_from_dict,
)
from doppler_lab.ir.graph import GraphBuilder, cost_graph
from doppler_lab.ir.placement import Placement
from doppler_lab.policies.checkpoint import load_policy, make_policy, save_checkpoint
from doppler_lab.policies.policy_config import PolicyConfig
from doppler_lab.timing.calibration import Profile
from doppler_lab.timing.sim import simulate
from doppler_lab.workloads import build_from_spec, parse_spec

# DOPPLER_FUZZ_EXAMPLES=2000 fuzzes deeper (a few minutes); the default keeps this file fast
_EXAMPLES = int(os.environ.get("DOPPLER_FUZZ_EXAMPLES", "40"))
FUZZ = settings(
    max_examples=_EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
FEW = settings(
    max_examples=max(1, _EXAMPLES // 3),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)


def loads_or_one_line(read: Callable[..., Any], *args: Any) -> Any:
    """``read(*args)``'s object, or None after checking its DopplerLabError is one clean line."""
    try:
        return read(*args)
    except DopplerLabError as exc:
        msg = str(exc)
        assert msg and "\n" not in msg, msg
        assert "np." not in msg and "array(" not in msg, msg  # values shown as written
        return None


# -- valid documents ---------------------------------------------------------------------------
def executable_doc() -> dict[str, Any]:
    b = GraphBuilder("exe", meta={"k": 1})
    x = b.add_input("x", (4, 8))
    w = b.add_input("w", (8, 2), init="uniform")
    y = b.add_einsum("y", "ij,jk->ik", [x, w])
    b.add_reduce("s", "sum", y, dims=[1], keepdim=True)
    b.add_elementwise("e", "exp", [y])
    b.add_torch("sm", "torch.softmax", [y], (4, 2), flops=40.0, params={"dim": -1})
    return graph_to_dict(b.build())


def cost_graph_small():
    return cost_graph(
        np.array([10.0, 20.0, 30.0]), np.array([4.0, 8.0, 12.0]), np.array([0, 0]), np.array([1, 2])
    )


def cost_doc() -> dict[str, Any]:
    return graph_to_dict(cost_graph_small())


def cluster_doc() -> dict[str, Any]:
    return make_cluster("p100x4").to_dict()


def placement_doc() -> dict[str, Any]:
    return Placement(np.array([0, 1, 1]), priority=[2, 0, 1], placer="t").to_dict(
        cost_graph_small(), 2
    )


def trace_doc() -> dict[str, Any]:
    g = cost_graph_small()
    return simulate(g, make_cluster("uniform", 2), Placement(np.array([0, 1, 1]))).to_dict()


def profile_doc() -> dict[str, Any]:
    c = make_cpu(2)
    return Profile(
        name="p",
        backend="cpu",
        devices=c.devices,
        bandwidth_bytes_per_s=c.bandwidth_bytes_per_s,
        latency_s=c.latency_s,
        routes=c.routes,
        link_names=c.link_names,
        op_scale={"einsum:ij,jk->ik": 1.2},
        op_times={"einsum:x": [1e-5, None]},
        dispatch_s=(1e-6, 2e-6),
        meta={"machine": "test"},
    ).to_dict()


# -- strategies --------------------------------------------------------------------------------
FIELD_NAMES = (
    "format version name nodes edges kind flops out_bytes spec cost op in_shapes out_shape dtype "
    "params operand_map devices bandwidth_bytes_per_s latency_s routes link_names device "
    "priority placer meta num_devices num_nodes time_scale backend op_times op_scale dispatch_s"
).split()
WEIRD = st.sampled_from(
    [
        None,
        True,
        False,
        0,
        1,
        -1,
        2,
        1.0,
        1.5,
        -2.0,
        1e300,
        10**30,
        "",
        "x",
        "1",
        "nan",
        [],
        {},
        [1],
        [1.5],
        [[1, 2]],
        {"a": 1},
        float("nan"),
        float("inf"),
    ]  # fmt: skip
)
SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=6)
)
KEYS = st.sampled_from(FIELD_NAMES) | st.text(max_size=6)
JSON_VALUES = st.recursive(
    SCALARS,
    lambda c: st.lists(c, max_size=4) | st.dictionaries(KEYS, c, max_size=5),
    max_leaves=25,
)
REPLACEMENTS = WEIRD | JSON_VALUES


def _paths(doc: Any, prefix: tuple = ()) -> list[tuple]:
    out = [prefix]
    if isinstance(doc, dict):
        for k, v in doc.items():
            out += _paths(v, prefix + (k,))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            out += _paths(v, prefix + (i,))
    return out


@st.composite
def mutated(draw: st.DrawFn, make: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """A valid document with one field replaced by another value, removed, or one added."""
    doc = copy.deepcopy(make())
    path = draw(st.sampled_from(_paths(doc)[1:]))
    parent = doc
    for key in path[:-1]:
        parent = parent[key]
    last = path[-1]
    action = draw(st.sampled_from(["replace", "replace", "remove", "add"]))
    if action == "replace":
        parent[last] = draw(REPLACEMENTS)
    elif action == "remove":
        del parent[last]
    elif isinstance(parent[last], dict):
        parent[last][draw(KEYS)] = draw(REPLACEMENTS)
    elif isinstance(parent[last], list):
        parent[last].append(draw(REPLACEMENTS))
    else:
        parent[last] = [parent[last], draw(REPLACEMENTS)]
    return doc


@pytest.fixture(scope="module")
def scratch(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("fuzz")


def _write(folder: Path, name: str, data: bytes | str) -> Path:
    p = folder / name
    p.write_bytes(data if isinstance(data, bytes) else data.encode("utf-8", "surrogatepass"))
    return p


# -- graph documents ---------------------------------------------------------------------------
@FUZZ
@given(doc=mutated(executable_doc) | mutated(cost_doc))
def test_mutated_graph_documents(doc):
    g = loads_or_one_line(graph_from_dict, doc, "doc")
    if g is not None:  # loaded: ids were integers, numbers were numbers, as written
        assert all(type(x) is int for e in doc["edges"] for x in e[:2])
        for node in doc["nodes"]:
            assert all(type(node[k]) in (int, float) for k in ("flops", "out_bytes") if k in node)


@FUZZ
@given(doc=JSON_VALUES | st.dictionaries(KEYS, JSON_VALUES, max_size=7))
def test_random_graph_documents(doc):
    loads_or_one_line(graph_from_dict, doc, "doc")


@FUZZ
@given(data=st.binary(max_size=300) | st.text(max_size=300).map(str.encode))
def test_graph_files_of_random_bytes(scratch, data):
    for name in ("g.json", "g.txt"):
        loads_or_one_line(load_graph, _write(scratch, name, data))


@FUZZ
@given(doc=mutated(executable_doc) | mutated(cost_doc))
def test_mutated_graph_files_round_trip_or_fail(scratch, doc):
    text = json.dumps(doc, allow_nan=True)
    loads_or_one_line(load_graph, _write(scratch, "m.json", text))


# -- cluster, placement, trace, profile documents ------------------------------------------------
@FUZZ
@given(doc=mutated(cluster_doc))
def test_mutated_clusters(scratch, doc):
    path = _write(scratch, "c.json", json.dumps(doc, allow_nan=True))
    cluster = loads_or_one_line(load_cluster, path)
    assert cluster is None or isinstance(cluster, Cluster)


@FUZZ
@given(doc=mutated(placement_doc))
def test_mutated_placements(doc):
    p = loads_or_one_line(placement_from_dict, doc, "doc")
    if p is not None:  # every device id it holds was written as an integer
        assert all(type(x) is int and x >= 0 for x in doc["device"])


@FUZZ
@given(doc=mutated(trace_doc))
def test_mutated_traces(doc):
    loads_or_one_line(trace_from_dict, doc, "doc")


@FUZZ
@given(doc=mutated(profile_doc) | st.dictionaries(KEYS, JSON_VALUES, max_size=8))
def test_mutated_profiles(doc):
    prof = loads_or_one_line(Profile.from_dict, doc, "doc")
    if prof is not None:
        prof.cluster  # noqa: B018 - a loaded profile gives a valid cluster


@FEW
@given(data=st.binary(max_size=200))
def test_json_files_of_random_bytes(scratch, data):
    path = _write(scratch, "r.json", data)
    for read in (load_cluster, load_placement, load_trace, Profile.load):
        loads_or_one_line(read, path)


# -- the paper's text format -------------------------------------------------------------------
GOOD_PAPER = "5\n3, 4\n0, 0, 1\n1, 2, 2\n10,40\n20,80\n30,120,einsummable\n"


@st.composite
def mutated_text(draw: st.DrawFn, text: str) -> str:
    chars = list(text)
    for _ in range(draw(st.integers(1, 4))):
        i = draw(st.integers(0, len(chars)))
        piece = draw(
            st.sampled_from(["0", "9", ",", "\n", " ", "-", ".", "x", "٣", "1" * 30, "", "1e3"])
        )
        how = draw(st.sampled_from(["insert", "replace", "delete"]))
        if how == "insert" or i == len(chars):
            chars.insert(i, piece)
        elif how == "replace":
            chars[i] = piece
        else:
            del chars[i]
    return "".join(chars)


@FUZZ
@given(text=mutated_text(GOOD_PAPER) | st.text(max_size=80))
def test_paper_text_files(scratch, text):
    path = _write(scratch, "p.txt", text)
    g = loads_or_one_line(read_paper_graph, path)
    if g is not None:
        assert np.all(np.isfinite(g.compute_cost)) and np.all(g.compute_cost >= 0)


# -- checkpoints -------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def checkpoint_doc(tmp_path_factory) -> dict[str, Any]:
    cfg = PolicyConfig(hidden=8, head_hidden=8, mp_steps=1, num_bases=2)
    path = save_checkpoint(tmp_path_factory.mktemp("ck") / "p.pt", make_policy(cfg, 2))
    return torch.load(path, weights_only=True)


def _ck_paths(doc: Any, prefix: tuple = ()) -> list[tuple]:
    out = [prefix]
    if isinstance(doc, dict):
        for k, v in doc.items():
            if k != "state_dict" or not prefix:
                out += _ck_paths(v, prefix + (k,))
        if "state_dict" in doc and not prefix:
            out += [("state_dict", k) for k in list(doc["state_dict"])[:3]]
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            out += _ck_paths(v, prefix + (i,))
    return out


@FEW
@given(data=st.data())
def test_mutated_checkpoints(scratch, checkpoint_doc, data):
    doc = copy.deepcopy(checkpoint_doc)
    path = data.draw(st.sampled_from(_ck_paths(doc)[1:]))
    parent = doc
    for key in path[:-1]:
        parent = parent[key]
    if data.draw(st.booleans()):
        parent[path[-1]] = data.draw(WEIRD)
    else:
        del parent[path[-1]]
    torch.save(doc, scratch / "m.pt")
    loads_or_one_line(load_policy, scratch / "m.pt")


@FEW
@given(data=st.binary(max_size=300), cut=st.integers(0, 5000))
def test_checkpoint_files_of_random_or_truncated_bytes(scratch, checkpoint_doc, data, cut):
    torch.save(checkpoint_doc, scratch / "full.pt")
    full = (scratch / "full.pt").read_bytes()
    for blob in (data, full[:cut]):
        (scratch / "b.pt").write_bytes(blob)
        loads_or_one_line(load_policy, scratch / "b.pt")


# -- specs and command-line numbers ------------------------------------------------------------
SPEC_VALUES = st.sampled_from(
    [
        "1",
        "2",
        "3",
        "0",
        "-1",
        "2.0",
        "1e3",
        "1e400",
        "nan",
        "inf",
        "true",
        "1_0",
        "٣",
        "1/0",
        "0.5",
        "tiny",
        "x",
        "",
        "=",
        "1/3",
        " 2 ",
    ]  # fmt: skip
)


@FUZZ
@given(
    name=st.sampled_from(["chainmm", "random_dag", "nope", ""]),
    items=st.lists(
        st.tuples(
            st.sampled_from(
                [
                    "matrices",
                    "blocks",
                    "scale",
                    "num_nodes",
                    "seed",
                    "order",
                    "comm_ratio",
                    "integer_costs",
                    "dtype",
                    "n",
                    "bad",
                ]
            ),
            SPEC_VALUES,
        ),
        max_size=3,
    ),  # fmt: skip
)
def test_workload_specs(name, items):
    spec = name + ":" + ",".join(f"{k}={v}" for k, v in items)
    small = {"matrices": "3", "blocks": "2", "num_nodes": "20", "scale": "tiny"}
    if any(k in small and v.strip() not in ("1", "2", "3") for k, v in items):
        return  # building is only for small sizes; parsing alone is checked below
    loads_or_one_line(build_from_spec, spec)


@FUZZ
@given(text=st.text(max_size=40))
def test_spec_parsing_of_any_text(text):
    parsed = loads_or_one_line(parse_spec, text)
    if parsed is not None:
        for v in parsed[1].values():
            assert not isinstance(v, float) or math.isfinite(v)


@FUZZ
@given(text=st.text(max_size=20) | SPEC_VALUES | st.integers().map(str) | st.floats().map(str))
def test_command_line_numbers(text):
    for parse in (int_arg(0), int_arg(1), number_arg(minimum=0), number_arg(above=0)):
        try:
            value = parse(text)
        except argparse.ArgumentTypeError as exc:
            assert "\n" not in str(exc)
            continue
        assert type(value) in (int, float) and math.isfinite(value) and value >= 0
    n = parse_int_text(text)
    if n is not None:  # ASCII digits only: "1_0" and "٣" are not integers
        assert text.strip().lstrip("+-").replace("e", "").replace("E", "").isascii()
    x = parse_number_text(text)
    assert x is None or math.isfinite(x)


# -- the four bugs of issue 13, and coercions that must not happen ---------------------------------
def _doc_with(**changes: Any) -> dict[str, Any]:
    doc = cost_doc()
    for path, value in changes.items():
        *keys, last = path.split("__")
        parent = doc
        for k in keys:
            parent = parent[int(k) if k.isdigit() else k]
        if value is _REMOVE:
            del parent[int(last) if last.isdigit() else last]
        else:
            parent[int(last) if last.isdigit() else last] = value
    return doc


_REMOVE = object()


@pytest.mark.parametrize(
    ("changes", "match"),
    [
        ({"edges__0": [0, 1, "x"]}, r"edge 0 cost is 'x' \(a string\); expected a finite number"),
        ({"edges__0": [0, 1.5, 1]}, r"edge 0 destination is 1.5 \(a float\); expected an integer"),
        ({"edges__0": [0, True, 4]}, r"edge 0 destination is true \(a boolean\)"),
        ({"edges__0": [0.0, 1, 4]}, r"edge 0 source is 0.0 \(a float\)"),
        ({"nodes__1__cost": None}, r"node 1 \('n1'\) has no cost while other nodes do"),
        ({"nodes__0__cost": -2}, r"node 'n0' has compute_cost -2; expected a finite value >= 0"),
        ({"nodes__0__cost": "1"}, r"node 0 \('n0'\) cost is '1' \(a string\)"),
        ({"nodes__0__name": 5}, r"node 0 name is 5 \(an integer\); expected a string"),
        ({"nodes__0__cots": 5}, r"node 0 \('n0'\) has an unknown field 'cots'"),
        ({"version": True}, r"version true"),
        ({"time_scale": 0}, r"time_scale is 0"),
        ({"edges__1": [0, 2, None]}, r"edge 1 cost is null"),
    ],
)
def test_graph_documents_are_not_coerced(tmp_path, changes, match):
    with pytest.raises(FormatError, match=match):
        path = tmp_path / "g.json"
        path.write_text(json.dumps(_doc_with(**changes)))
        load_graph(path)


@pytest.mark.parametrize(
    "text",
    ['{"a": NaN}', '{"a": 1e999}', '{"a": 1, "a": 2}', b"\xff\xfe{}", "[" * 5000],
)
def test_strict_json(tmp_path, text):
    path = _write(tmp_path, "x.json", text)
    with pytest.raises(FormatError, match=r"x\.json: (not|JSON nested)"):
        load_graph(path)


def test_placements_and_clusters_are_not_coerced():
    doc = placement_doc()
    for bad in ([0, 1.0, 1], [0, True, 1], [0, "1", 1]):
        with pytest.raises(FormatError, match=r"placement device\[1\] is"):
            placement_from_dict({**doc, "device": bad})
    with pytest.raises(FormatError, match="node 2 is on device 5, expected 0..1"):
        placement_from_dict({**doc, "device": [0, 1, 5]})
    doc = cluster_doc()
    doc["devices"][0]["memory_bytes"] = "16e9"
    with pytest.raises(DopplerLabError, match=r"cluster device 0 memory_bytes is '16e9'"):
        Cluster.from_dict(doc)


def test_shown_values():
    assert show(np.float64(-2.0)) == "-2" and show(-2.5) == "-2.5" and show(2.0) == "2.0"
    assert show(True) == "true" and show(None) == "null" and show("x") == "'x'"
    assert doctest.testmod(doppler_lab.house.validate).failed == 0


# -- the command line --------------------------------------------------------------------------
@pytest.mark.parametrize(
    "text",
    [
        '{"format": "doppler_lab.graph", "version": 1, "nodes": [], "edges": [[0, 1, "x"]]}',
        '{"format": "doppler_lab.graph", "version": 1, "nodes": [{"name": "a"}], "edges": []}',
        "[1, 2",
        b"\x80\x81",
    ],
)
def test_cli_bad_graph_file_exits_2_with_one_line(tmp_path, capsys, text):
    path = _write(tmp_path, "bad.json", text)
    assert main(["simulate", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("doppler-lab simulate: error:") and "\n" not in err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--noise", "nan"], "--noise must be a finite number, got 'nan'"),
        (["--seed", "1.5"], "--seed must be an integer, got '1.5'"),
        (["--devices", "true"], "--devices must be an integer, got 'true'"),
        (["--devices", "-2"], "--devices must be >= 1, got '-2'"),
    ],
)
def test_cli_bad_numbers_exit_2_with_one_line(capsys, argv, message):
    assert main(["simulate", "chainmm:scale=tiny", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and "\n" not in err


def test_cli_in_a_subprocess_has_no_traceback(tmp_path):
    bad = _write(tmp_path, "bad.json", '{"format": "doppler_lab.graph", "version": 1, "nodes": [')
    run = subprocess.run(
        [sys.executable, "-m", "doppler_lab.cli", "simulate", str(bad), "--devices", "2"],
        capture_output=True,
        text=True,
    )
    assert run.returncode == 2, run.stderr
    assert "Traceback" not in run.stderr and len(run.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (["-o", "samples=true"], "placer 'doppler': option samples=true; expected an integer"),
        (["-o", "noise=NaN"], "placer 'doppler': option noise=NaN; expected a finite number"),
        (["-o", "budget=true"], "placer 'doppler': option budget=true; expected an integer"),
        (["-o", "bogus=3"], "placer 'doppler' has no option 'bogus'"),
    ],
)
def test_cli_placer_options_are_not_coerced(capsys, options, message):
    argv = ["place", "chainmm:scale=tiny", "--placer", "doppler", "--checkpoint", "x.pt"]
    assert main([*argv, *options]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and "\n" not in err
