"""The registry: names, options, lazy learned placers, no torch, the baselines."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from doppler_lab.hardware.cluster import make_cluster
from doppler_lab.house.errors import ConfigError, PlacementError
from doppler_lab.placers import (
    BUILTIN_PLACERS,
    LEARNED_PLACERS,
    Placer,
    available_placers,
    get_placer,
    place,
    placer_options,
)
from doppler_lab.placers.registry import _module_exists

from placer_helpers import small_dag

BUILTINS = [
    "random", "round-robin", "single", "cp", "cp-released", "heft", "cpop", "etf", "m-topo",
    "m-sct", "pipeline", "cp-rollout", "partition", "clustering",
    "local-search", "enumerative", "exact",
]  # fmt: skip


def test_every_builtin_is_available_and_places_a_valid_placement():
    assert available_placers()[: len(BUILTINS)] == BUILTINS
    g = small_dag(12, 0, inputs=2)
    c = make_cluster("uniform", 3)
    for name in BUILTINS:
        placer = get_placer(name, **({"budget": 20} if name == "local-search" else {}))
        assert isinstance(placer, Placer) and placer.name == name
        p = placer.place(g, c, np.random.default_rng(0))
        p.validate(g, 3)
        assert p.placer == name
        # input nodes sit with their first consumer
        for v in np.flatnonzero(g.is_input):
            succ = g.successors(int(v))
            if succ.size:
                assert p.device[v] == p.device[succ[0]]


def test_baselines():
    g = small_dag(10, 2)
    c = make_cluster("uniform", 4)
    assert place("round-robin", g, c).device.tolist() == [i % 4 for i in range(10)]
    assert set(place("single", g, c, device=2).device.tolist()) == {2}
    a, b = place("random", g, c, seed=5), place("random", g, c, seed=5)
    np.testing.assert_array_equal(a.device, b.device)
    with pytest.raises(PlacementError, match="device 7"):
        place("single", g, c, device=7)


def test_unknown_names_and_options_are_clear_errors():
    with pytest.raises(PlacementError, match="unknown placer 'hefty'.*heft"):
        get_placer("hefty")
    with pytest.raises(ConfigError, match="no option 'budget'.*estimate"):
        get_placer("cp", budget=10)
    with pytest.raises(ConfigError, match="estimate"):
        get_placer("cp", estimate="fast")
    assert placer_options("local-search")[:3] == ["budget", "method", "start"]


def test_learned_placers_are_reserved_and_lazy():
    assert set(LEARNED_PLACERS) == {"doppler", "placeto", "gdp"}
    assert all(s.needs_checkpoint for s in LEARNED_PLACERS.values())
    assert not set(LEARNED_PLACERS) & set(BUILTIN_PLACERS)
    listed = set(LEARNED_PLACERS) <= set(available_placers())
    assert listed == _module_exists("doppler_lab.search.learned")
    if not listed:
        with pytest.raises(PlacementError, match="needs the learned policies"):
            get_placer("doppler", checkpoint="x.pt")
    assert _module_exists("doppler_lab.placers.heft")
    assert not _module_exists("doppler_lab.placers.nope")
    assert not _module_exists("no_such_package.mod")


def test_placers_never_import_torch():
    code = (
        "import sys, numpy as np\n"
        "from doppler_lab.placers import available_placers, place\n"
        "from doppler_lab.hardware import make_cluster\n"
        "from doppler_lab.ir.graph import GraphBuilder\n"
        "b = GraphBuilder('g'); a = b.add_node('a', cost=1.0); b.add_node('b', cost=1.0, inputs=[a])\n"
        "g = b.build(); c = make_cluster('uniform', 2)\n"
        "for n in ['random','round-robin','single','cp','cp-released','heft','cpop','etf','m-topo','enumerative','exact']:\n"
        "    place(n, g, c, seed=0)\n"
        "place('local-search', g, c, seed=0, budget=5)\n"
        "available_placers()\n"
        "print('torch' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
