"""A placer spec in the one spec grammar: ``NAME`` or ``NAME:key=value,...``, and lists of them."""

from __future__ import annotations

import pytest

from doppler_lab.house.errors import ConfigError, PlacementError
from doppler_lab.placers import POLICY_ALONE_SPEC, parse_placer_spec, split_placer_specs


def test_a_spec_is_a_name_and_its_options():
    assert parse_placer_spec("cp") == ("cp", {})
    assert parse_placer_spec("local-search:budget=10,start=heft") == (
        "local-search",
        {"budget": 10, "start": "heft"},
    )
    assert POLICY_ALONE_SPEC == "doppler:proposals=none"
    with pytest.raises(PlacementError, match="unknown placer 'nope'"):
        parse_placer_spec("nope:x=1")
    with pytest.raises(ConfigError, match="'budget' is not of the form key=value"):
        parse_placer_spec("cp:budget")


def test_a_list_keeps_the_options_with_their_placer():
    assert split_placer_specs("cp,heft") == ["cp", "heft"]
    assert split_placer_specs("cp, doppler:proposals=none,samples=4 ,heft") == [
        "cp",
        "doppler:proposals=none,samples=4",
        "heft",
    ]
    # an item with '=' after a plain name is no option of it: the caller names the bad item
    assert split_placer_specs("cp,budget=3") == ["cp", "budget=3"]
    assert split_placer_specs("cp,,heft") == ["cp", "", "heft"]
