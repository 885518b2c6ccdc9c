"""Issue 36, fuzzed: ``--set`` / ``--policy-set`` / ``-o`` values, cluster documents and
checkpoint documents. Whatever the value, the result is a finite object or one DopplerLabError
line: never another exception, never a silent inf or nan."""

from __future__ import annotations

import copy
import dataclasses
import math
import os

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from doppler_lab.hardware.cluster import Cluster, make_cluster
from doppler_lab.house.errors import DopplerLabError
from doppler_lab.house.settings import parse_items
from doppler_lab.ir.graph import cost_graph
from doppler_lab.ir.placement import round_robin
from doppler_lab.placers import get_placer
from doppler_lab.policies.checkpoint import load_policy, make_policy, save_checkpoint
from doppler_lab.policies.policy_config import PolicyConfig
from doppler_lab.search.adapter import AdaptConfig
from doppler_lab.timing.sim import Simulator
from doppler_lab.train.train_config import TrainConfig, preset
from doppler_lab.workloads import build

_EXAMPLES = int(os.environ.get("DOPPLER_FUZZ_EXAMPLES", "100"))
FUZZ = settings(
    max_examples=_EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
FEW = settings(
    max_examples=max(1, _EXAMPLES // 3),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

EXTREME_TEXT = [
    "nan", "NaN", "inf", "-inf", "Infinity", "1e400", "-1e400", "1e308", "-1e308", "5e-324",
    "1e-400", "1e30", "9223372036854775808", "-9223372036854775809", "0", "-0", "1/0", "0/0",
    "1e3", "2.5", "-1", "true", "false", "null", "[1e400]", "[nan]", "[0.5,0.25]", '"x"', "{}",
    "1_000", "٣", "0x10", "", " ", "=", "a=b",
]  # fmt: skip
VALUE_TEXT = st.one_of(
    st.sampled_from(EXTREME_TEXT),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.integers(min_value=-(2**70), max_value=2**70).map(str),
    st.text(max_size=12),
)
EXTREME_NUMBERS = st.sampled_from(
    [5e-324, 1e-300, 0.0, -0.0, -1.0, 1e-9, 1e300, 1e308, 1.7e308, 2**40, 2**63, -(2**63), 10**30]
)


def one_line(exc: DopplerLabError) -> None:
    msg = str(exc)
    assert msg and "\n" not in msg, msg


def all_finite(obj) -> None:
    for f in dataclasses.fields(obj):
        v = getattr(obj, f.name)
        if isinstance(v, float):
            assert math.isfinite(v), (f.name, v)


# -- --set / --policy-set / -o values -----------------------------------------------------------
@FUZZ
@given(
    key=st.sampled_from([f.name for f in dataclasses.fields(TrainConfig)] + ["zzz", "lr-sel"]),
    text=VALUE_TEXT,
)
def test_train_set_values(key, text):
    try:
        cfg = preset("sim", **parse_items([f"{key}={text}"], "train config"))
    except DopplerLabError as exc:
        one_line(exc)
        return
    all_finite(cfg)


@FUZZ
@given(
    key=st.sampled_from([f.name for f in dataclasses.fields(PolicyConfig)] + ["zzz"]),
    text=VALUE_TEXT,
)
def test_policy_set_values(key, text):
    try:
        cfg = PolicyConfig().replace(**parse_items([f"{key}={text}"], "policy config"))
    except DopplerLabError as exc:
        one_line(exc)
        return
    all_finite(cfg)
    assert cfg.mp_steps <= 64 and cfg.hidden <= 16_384


@FUZZ
@given(
    key=st.sampled_from(AdaptConfig.setting_names()),
    text=VALUE_TEXT,
)
def test_adapt_set_values(key, text):
    try:
        cfg = AdaptConfig.from_dict(parse_items([f"{key}={text}"], "adapter config"))
    except DopplerLabError as exc:
        one_line(exc)
        return
    all_finite(cfg)
    assert abs(cfg.anchor_bias) <= 1e3 and cfg.lr <= 1e3


_PLACER_KEYS = {
    "local-search": ["budget", "batch", "temperature", "method", "start"],
    "exact": ["time_limit", "workers", "resolution"],
    "enumerative": ["passes", "budget"],
    "clustering": ["cap"],
}


@FUZZ
@given(
    placer=st.sampled_from(sorted(_PLACER_KEYS)),
    index=st.integers(0, 4),
    text=VALUE_TEXT,
)
def test_placer_option_values(placer, index, text):
    keys = _PLACER_KEYS[placer]
    key = keys[index % len(keys)]
    try:
        get_placer(placer, **parse_items([f"{key}={text}"], f"placer {placer!r}", "option"))
    except DopplerLabError as exc:
        one_line(exc)


# -- cluster documents --------------------------------------------------------------------------
def _numeric_paths(doc, prefix=()):
    if isinstance(doc, dict):
        for k, v in doc.items():
            yield from _numeric_paths(v, (*prefix, k))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            yield from _numeric_paths(v, (*prefix, i))
    elif isinstance(doc, int | float) and not isinstance(doc, bool):
        yield prefix


_CLUSTERS = {name: make_cluster(name).to_dict() for name in ("p100x4", "cpu")}
_CLUSTERS["uniform"] = make_cluster("uniform", 2).to_dict()
_GRAPHS = {
    "modelled": build("chainmm", matrices=3, scale=0.001),
    "costs": cost_graph(
        np.array([10.0, 20.0, 30.0]), np.array([4.0, 8.0, 12.0]), np.array([0, 0]), np.array([1, 2])
    ),
}


@FUZZ
@given(
    name=st.sampled_from(sorted(_CLUSTERS)),
    data=st.data(),
    semantics=st.sampled_from(["paper", "wc", "bsp"]),
    graph=st.sampled_from(sorted(_GRAPHS)),
)
def test_cluster_documents_give_finite_makespans_or_one_line(name, data, semantics, graph):
    doc = copy.deepcopy(_CLUSTERS[name])
    paths = list(_numeric_paths(doc))
    for _ in range(data.draw(st.integers(1, 3))):
        path = data.draw(st.sampled_from(paths))
        parent = doc
        for k in path[:-1]:
            parent = parent[k]
        parent[path[-1]] = data.draw(EXTREME_NUMBERS)
    g = _GRAPHS[graph]
    try:
        cluster = Cluster.from_dict(doc)
        sim = Simulator(g, cluster, semantics)
        m = sim.makespan(round_robin(g, cluster.num_devices))
        lb = sim.lower_bound()
    except DopplerLabError as exc:
        one_line(exc)
        return
    assert math.isfinite(m) and math.isfinite(lb) and m >= 0


# -- checkpoint documents -----------------------------------------------------------------------
@pytest.fixture(scope="module")
def checkpoint_doc(tmp_path_factory):
    path = save_checkpoint(
        tmp_path_factory.mktemp("ck") / "p.pt", make_policy(PolicyConfig(hidden=8, mp_steps=2), 2)
    )
    return torch.load(path, weights_only=True)


@FEW
@given(
    data=st.data(),
    key=st.sampled_from([f.name for f in dataclasses.fields(PolicyConfig)]),
    weight=st.sampled_from([math.nan, math.inf, -math.inf, 3e38, 0.0]),
    what=st.sampled_from(["config", "weights", "devices"]),
)
def test_checkpoint_documents_load_finite_or_one_line(
    tmp_path_factory, checkpoint_doc, data, key, weight, what
):
    doc = copy.deepcopy(checkpoint_doc)
    if what == "config":
        doc["policy"]["config"][key] = data.draw(
            st.one_of(EXTREME_NUMBERS, st.integers(-(2**70), 2**70), st.booleans())
        )
    elif what == "weights":
        names = [k for k, v in doc["state_dict"].items() if v.is_floating_point()]
        name = data.draw(st.sampled_from(names))
        t = doc["state_dict"][name].clone()
        t.view(-1)[0] = weight
        doc["state_dict"][name] = t
    else:
        doc["policy"]["num_devices"] = data.draw(st.one_of(EXTREME_NUMBERS, st.integers(-5, 2**70)))
    path = tmp_path_factory.mktemp("m") / "m.pt"
    torch.save(doc, path)
    try:
        policy, _ = load_policy(path)
    except DopplerLabError as exc:
        one_line(exc)
        return
    assert all(bool(torch.isfinite(p).all()) for p in policy.parameters())


# -- the command line: one line and exit 2, or finite numbers ----------------------------------
@FEW
@given(
    key=st.sampled_from(["scale", "n", "blocks", "matrices", "dtype", "zzz"]),
    text=VALUE_TEXT.filter(lambda t: "," not in t and ":" not in t),
    noise=st.sampled_from(["0", "0.5", "10", "11", "nan", "1e308", "-1", "5e-324"]),
)
def test_cli_simulate_values(capsys, key, text, noise):
    import json

    from doppler_lab.cli import main

    spec = f"chainmm:matrices=3,{key}={text}" if key != "matrices" else f"chainmm:{key}={text}"
    try:
        rc = main(["simulate", spec, "--noise", noise, "--seed", "1", "--json"])
    except SystemExit as exc:  # argparse's own exit (never expected: errors are returned)
        raise AssertionError(f"exit {exc.code}") from None
    out, err = capsys.readouterr()
    if rc == 0:
        doc = json.loads(out)
        for k in ("makespan", "lower_bound", "ratio_to_lower_bound"):
            assert doc[k] is None or math.isfinite(doc[k]), (k, doc[k])
        assert doc["makespan"] is not None
    else:
        assert rc == 2 and err.count("\n") == 1 and "Traceback" not in err, err
