"""The Gymnasium environment: API contract, candidates, device features, reward."""

from __future__ import annotations

import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

from doppler_lab.hardware.cluster import make_cluster
from doppler_lab.house.errors import ConfigError, PlacementError
from doppler_lab.io.documents import read_paper_graph
from doppler_lab.policies.env import PlacementEnv
from doppler_lab.timing.sim import Simulator
from doppler_lab.workloads import build_from_spec

from paper_graphs import paper_graph_path


@pytest.fixture(scope="module")
def graph():
    return build_from_spec("chainmm:matrices=3,scale=0.001")


@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.parametrize(
    "kw", [{}, {"layout": "doppler9", "noise": 0.2, "semantics": "wc"}, {"estimate": "additive"}]
)
def test_check_env(graph, kw):
    check_env(PlacementEnv(graph, "p100x4", **kw))


def _run_teacher(env, seed):
    obs, info = env.reset(seed=seed)
    total, steps, done = 0.0, 0, False
    while not done:
        a = env.teacher_action()
        assert obs["candidates"][a[0]] == 1
        obs, r, done, trunc, info = env.step(a)
        total += r
        steps += 1
    return total, steps, info


def test_teacher_episode(graph):
    env = PlacementEnv(graph, "p100x4", semantics="wc")
    total, steps, info = _run_teacher(env, 0)
    assert steps == graph.compute_nodes.size
    sim = Simulator(graph, make_cluster("p100x4"), "wc")
    assert info["cost"] == pytest.approx(sim.makespan(info["placement"]))
    assert total == 0.0  # the first episode is its own baseline
    _, _, info2 = _run_teacher(env, 1)
    assert info2["baseline"] == pytest.approx(np.mean([info["cost"], info2["cost"]]))


def test_observation_is_dopplers_state(graph):
    env = PlacementEnv(graph, "p100x4")
    obs, info = env.reset(seed=0)
    cand = np.flatnonzero(obs["candidates"])
    np.testing.assert_array_equal(cand, info["candidates"])
    assert not obs["candidates"][graph.is_input].any()
    assert (obs["assignment"] == -1).all()
    v = int(cand[0])
    np.testing.assert_allclose(obs["device_features"][v], env.episode.device_features(v), rtol=1e-6)
    others = np.setdiff1d(np.arange(graph.num_nodes), cand)
    assert not obs["device_features"][others].any()
    obs, *_ = env.step([v, 2])
    assert obs["assignment"][v] == 2 and obs["candidates"][v] == 0


def test_reset_seed_determinism_with_noise(graph):
    env = PlacementEnv(graph, "p100x4", semantics="wc", noise=0.3, reward="negative_cost")
    a = _run_teacher(env, 7)
    b = _run_teacher(env, 7)
    assert a[0] == b[0] and a[0] == -a[2]["cost"]


def test_invalid_actions(graph):
    env = PlacementEnv(graph, "p100x4")
    obs, _ = env.reset(seed=0)
    not_cand = int(np.flatnonzero(obs["candidates"] == 0)[0])
    obs2, r, done, trunc, info = env.step([not_cand, 0])
    assert "not a candidate" in info["invalid_action"] and r == 0 and not done
    np.testing.assert_array_equal(obs2["candidates"], obs["candidates"])
    _, _, _, _, info = env.step([int(np.flatnonzero(obs["candidates"])[0]), 9])
    assert "device 9" in info["invalid_action"]
    strict = PlacementEnv(graph, "p100x4", invalid_action="raise")
    strict.reset(seed=0)
    with pytest.raises(PlacementError, match="not a candidate"):
        strict.step([not_cand, 0])


def test_pluggable_cost(graph):
    calls = []

    def cost(placement):
        calls.append(placement)
        return 42.0

    env = PlacementEnv(graph, "p100x4", cost=cost, reward="negative_cost")
    total, _, info = _run_teacher(env, 0)
    assert total == -42.0 and len(calls) == 1 and info["cost"] == 42.0


def test_paper_graph_cp_matches_the_cp_placer():
    from doppler_lab.placers import get_placer

    g = read_paper_graph(paper_graph_path("chain_mm_112nodes"))
    cluster = make_cluster("uniform", 4)
    env = PlacementEnv(g, cluster)  # est estimate, as the cp placer's default
    env.reset(seed=3)
    steps, done = [], False
    while not done:
        node, device = (int(x) for x in env.teacher_action())
        steps.append((node, device))
        _, _, done, _, info = env.step([node, device])
    # the placer with the same seed: its ties drawn from the same stream as the env's np_random
    cp = get_placer("cp").run(g, cluster, np.random.default_rng(3))
    assert steps == [(d.node, d.device) for d in cp.decisions]
    np.testing.assert_array_equal(info["placement"].device, cp.placement.device)
    sim = Simulator(g, cluster)
    assert info["cost"] == sim.makespan(cp.placement) >= sim.lower_bound()


def test_bad_options(graph):
    with pytest.raises(ConfigError, match="reward"):
        PlacementEnv(graph, "p100x4", reward="nope")
    with pytest.raises(ConfigError, match="semantics"):
        PlacementEnv(graph, "p100x4", semantics="nope")
