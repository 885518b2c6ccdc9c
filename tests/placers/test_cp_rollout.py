"""The rollout over deterministic CP: never worse than its base, deterministic, its call count."""

from __future__ import annotations

import numpy as np
import pytest

from doppler_lab.hardware.cluster import make_cluster
from doppler_lab.house.errors import ConfigError
from doppler_lab.placers import place
from doppler_lab.placers.cp_rollout import cp_complete
from doppler_lab.placers.critical_path import CriticalPathTeacher
from doppler_lab.timing.cost_model import CostModel
from doppler_lab.timing.episode import Episode
from doppler_lab.timing.schedule import estimate_for
from doppler_lab.timing.sim import Simulator

from placer_helpers import small_dag


def _det_cp(g, c, semantics):
    cost = CostModel(g, c)
    ep = Episode(g, cost, estimate_for(semantics))
    return cp_complete(ep, CriticalPathTeacher(g, cost)).placement()


@pytest.mark.parametrize("semantics", ["paper", "wc"])
@pytest.mark.parametrize("seed", [3, 11])
def test_never_worse_than_deterministic_cp_and_deterministic(semantics, seed):
    g = small_dag(36, seed, edge_prob=0.1, inputs=2)
    c = make_cluster("uniform" if semantics == "paper" else "p100x4", 4)
    sim = Simulator(g, c, semantics)
    p = place("cp-rollout", g, c, seed=0, semantics=semantics)
    p.validate(g, 4)
    assert sim.makespan(p) <= sim.makespan(_det_cp(g, c, semantics)) * (1 + 1e-12)
    q = place("cp-rollout", g, c, seed=99, semantics=semantics)
    np.testing.assert_array_equal(p.device, q.device)
    assert p.meta["sim_calls"] == g.compute_nodes.size * 4
    assert p.meta["semantics"] == semantics


def test_beats_cp_where_cp_leaves_room():
    # a wide random DAG on 4 devices: the rollout is strictly better than every CP tie draw
    g = small_dag(40, 11, edge_prob=0.08, inputs=2)
    c = make_cluster("uniform", 4)
    sim = Simulator(g, c, "paper")
    cp = min(sim.makespan(place("cp", g, c, seed=k, semantics="paper")) for k in range(8))
    assert sim.makespan(place("cp-rollout", g, c, semantics="paper")) < cp


def test_state_copy_is_independent():
    g = small_dag(20, 5, inputs=2)
    cost = CostModel(g, make_cluster("p100x4"))
    ep = Episode(g, cost, "wc")
    teacher = CriticalPathTeacher(g, cost)
    v = int(ep.candidates()[0])
    ep.assign(v, 1)
    snap = (ep.device.copy(), ep.finish.copy(), ep.link_free.copy(), list(ep.order))
    done = cp_complete(ep.copy(), teacher)
    assert done.done and not ep.done
    np.testing.assert_array_equal(ep.device, snap[0])
    np.testing.assert_array_equal(ep.finish, snap[1])
    np.testing.assert_array_equal(ep.link_free, snap[2])
    assert ep.order == snap[3]
    # the original completes to the same schedule as its copy did
    np.testing.assert_array_equal(cp_complete(ep, teacher).device, done.device)


def test_bad_options_are_clear_errors():
    with pytest.raises(ConfigError, match="semantics"):
        place("cp-rollout", small_dag(5, 0), make_cluster("uniform", 2), semantics="fast")
    with pytest.raises(ConfigError, match="tie_rtol"):
        place("cp-rollout", small_dag(5, 0), make_cluster("uniform", 2), tie_rtol=2.0)
