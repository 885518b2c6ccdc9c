"""The registry: build by name or spec, parameter parsing and checking, descriptions."""

from __future__ import annotations

import pytest

from doppler_lab.house.errors import ConfigError
from doppler_lab.workloads import (
    WORKLOADS,
    build,
    build_from_spec,
    describe,
    parse_param,
    parse_spec,
)


def test_registry_lists_every_generator():
    assert set(WORKLOADS) == {
        "chainmm",
        "ffnn",
        "llama_block",
        "llama_layer",
        "moe_layer",
        "random_dag",
    }
    with pytest.raises(TypeError):
        WORKLOADS["x"] = build  # type: ignore[index]


def test_parse_spec_types():
    name, params = parse_spec(
        "llama_block: heads=8, seq=512,eps=1e-6,scale=1/256,dtype=bfloat16,flag=true"
    )
    assert name == "llama_block"
    assert params == {
        "heads": 8,
        "seq": 512,
        "eps": 1e-6,
        "scale": 1 / 256,
        "dtype": "bfloat16",
        "flag": True,
    }
    assert parse_spec("chainmm") == ("chainmm", {})
    assert parse_param("n=64") == ("n", 64)


@pytest.mark.parametrize("spec", ["chainmm:n", "chainmm:=3", "chainmm:n=1,n=2", "chainmm:n="])
def test_malformed_specs(spec):
    with pytest.raises(ConfigError, match="chainmm"):
        parse_spec(spec)


def test_build_from_spec_equals_build():
    a = build_from_spec("chainmm:matrices=3,n=1e3,scale=0.01")
    b = build("chainmm", matrices=3, n=1000, scale=0.01)
    assert a.names == b.names and a.meta == b.meta
    assert a.meta["params"]["n"] == 1000 and isinstance(a.meta["params"]["n"], int)


def test_unknown_names_and_parameters_list_what_is_valid():
    with pytest.raises(ConfigError, match="unknown workload 'llama'.*llama_block"):
        build("llama")
    with pytest.raises(ConfigError, match="no parameter 'head'.*heads"):
        build_from_spec("llama_block:head=8")
    with pytest.raises(ConfigError, match="parameter heads='many'; expected an integer"):
        build("llama_block", heads="many")
    with pytest.raises(ConfigError, match="parameter scale=true"):
        build("chainmm", scale=True)


def test_describe():
    entries = {e["name"]: e for e in describe()}
    assert set(entries) == set(WORKLOADS)
    assert entries["llama_block"]["params"]["heads"] == 32
    assert entries["random_dag"]["params"]["num_nodes"] == 200
    assert all(e["summary"] and e["summary"].endswith(".") for e in entries.values())


def test_random_dag_is_registered():
    g = build_from_spec("random_dag:num_nodes=30,seed=2")
    assert g.num_nodes == 30
