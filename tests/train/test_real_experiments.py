"""Notebook 06's helpers (doppler_lab.lab.experiments.real): calibration tables, the Stage II
warm start, simulator fidelity, Stage III on CPU workers, the side-by-side measurement."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from doppler_lab.house.errors import ConfigError
from doppler_lab.ir.placement import Placement, round_robin, single_device
from doppler_lab.lab.experiments import (
    STAGE_LABELS,
    PolicyRecipe,
    SideBySideOptions,
    Stage3Options,
    calibrate_workers,
    calibrated_simulator,
    comparison_runs,
    fidelity_scatter,
    fidelity_set,
    fidelity_stats,
    improvement,
    measure_fidelity,
    placement_labels,
    policy_rollouts,
    profile_numbers,
    profile_tables,
    real_key_numbers,
    run_stage3,
    shipped_match,
    side_by_side,
    stage2_policy,
)
from doppler_lab.placers import place
from doppler_lab.workloads import build_from_spec

SMALL = {"hidden": 16, "head_hidden": 16, "mp_steps": 2, "num_bases": 4}


@pytest.fixture(scope="module")
def tiny_graph():
    """A 36-node executable chain of matmuls whose ops take microseconds."""
    return build_from_spec("chainmm:matrices=3,scale=0.01")


@pytest.fixture(scope="module")
def profile(tiny_graph):
    return calibrate_workers(tiny_graph, 2, quick=True)


@pytest.fixture(scope="module")
def warm(tiny_graph, profile, tmp_path_factory):
    out = tmp_path_factory.mktemp("warm")
    recipe = PolicyRecipe(None, 16, 32, eval_every=1, seed=0, policy=SMALL)
    return stage2_policy(tiny_graph, profile, out, recipe)


@pytest.fixture(scope="module")
def stage3(tiny_graph, profile, warm, tmp_path_factory):
    out = tmp_path_factory.mktemp("stage3")
    options = Stage3Options(episodes=8, repeats=1, eval_every=1, seed=0, train={"lr": 1e-3})
    return run_stage3(tiny_graph, profile.cluster, warm, out, options)


@pytest.fixture(scope="module")
def comparison(tiny_graph, profile, warm, stage3):
    policies = {"stage II": warm.policy, "stage III": stage3.result.policy}
    cp = place("cp", tiny_graph, profile.cluster, seed=0)
    options = SideBySideOptions(samples=1, screen_repeats=1, repeats=2, rounds=3, seed=0)
    return side_by_side(tiny_graph, profile, policies, {"cp": cp}, options)


# -- calibration -------------------------------------------------------------------------------
def test_calibration_tables_show_devices_and_links(profile):
    devices, links = profile_tables(profile)
    assert len(devices) == 2 and (devices.gflops_per_s > 0).all()
    assert (devices.launch_overhead_us >= devices.dispatch_us - 1e-9).all()
    assert sorted(zip(links.src, links.dst)) == [(0, 1), (1, 0)]
    assert (links.bandwidth_gb_per_s > 0).all() and (links.latency_us >= 0).all()
    nums = profile_numbers(profile)
    assert 0 < nums["parallel_capacity"] <= 2 + 1e-9
    assert nums["op_signatures"] > 0


def test_calibrate_workers_rejects_a_bad_device_count(tiny_graph):
    with pytest.raises(ConfigError, match="devices = 0"):
        calibrate_workers(tiny_graph, 0)


def test_calibrated_simulator_uses_measured_op_times(tiny_graph, profile):
    sim = calibrated_simulator(tiny_graph, profile)
    expected = profile.cost_model(tiny_graph).compute
    np.testing.assert_allclose(sim.cost.compute, expected)
    assert sim.makespan(round_robin(tiny_graph, 2)) > 0


# -- the Stage II policy -------------------------------------------------------------------------
def test_shipped_match_needs_the_same_graph_and_device_count(tiny_graph):
    full = build_from_spec("chainmm")
    assert shipped_match(full, 4) == "doppler/chainmm"
    assert shipped_match(full, 2) is None  # shipped for 4 devices
    assert shipped_match(tiny_graph, 4) is None  # another node count


def test_stage2_policy_trains_stages_one_and_two_here(warm):
    assert warm.how.startswith("stage I (16 episodes) + stage II (32)")
    assert warm.checkpoint.name == "policy.pt" and warm.checkpoint.exists()
    assert warm.curve.stage.eq("sim").all()
    assert warm.curve.episode.iloc[-1] == 16 + 32  # after Stage I's episodes


def test_stage2_policy_takes_a_doppler_checkpoint_for_another_device_count(
    tiny_graph, profile, tmp_path
):
    """The shipped chainmm policy was trained on 4 devices; the profile has 2."""
    warm = stage2_policy(tiny_graph, profile, tmp_path, PolicyRecipe("doppler/chainmm"))
    assert warm.policy.num_devices == profile.num_devices == 2
    assert warm.how == "checkpoint doppler/chainmm"


# -- fidelity --------------------------------------------------------------------------------------
def test_policy_rollouts_are_the_greedy_one_then_samples(tiny_graph, profile, warm):
    rng = np.random.default_rng(0)
    pls = policy_rollouts(warm.policy, tiny_graph, profile.cluster, 3, rng)
    assert [p.placer for p in pls] == ["policy-greedy"] + ["policy-sample"] * 3
    for p in pls:
        assert p.device.shape == (tiny_graph.num_nodes,) and set(p.device) <= {0, 1}
    # the greedy rollout draws nothing: the same with or without samples after it
    alone = policy_rollouts(warm.policy, tiny_graph, profile.cluster, 0, np.random.default_rng(5))
    assert len(alone) == 1
    np.testing.assert_array_equal(alone[0].device, pls[0].device)
    with pytest.raises(ConfigError, match="samples = -1"):
        policy_rollouts(warm.policy, tiny_graph, profile.cluster, -1, rng)


def test_fidelity_set_adds_the_policy_rollouts(tiny_graph, profile, warm):
    base = fidelity_set(tiny_graph, profile.cluster)
    both = fidelity_set(tiny_graph, profile.cluster, warm.policy, 2)
    assert len(base) >= 30 and len(both) == len(base) + 3
    assert [p.placer for p in both[-3:]] == ["policy-greedy", "policy-sample", "policy-sample"]


def test_placement_labels_are_unique():
    pls = [Placement(np.zeros(3, dtype=np.int64), placer=n) for n in ("a", "r", "r", "b", "r")]
    assert placement_labels(pls) == ["a", "r#1", "r#2", "b", "r#3"]


def test_measure_fidelity_measures_and_simulates_each_placement(tiny_graph, profile):
    pls = [single_device(tiny_graph, 2), round_robin(tiny_graph, 2)]
    pls.append(place("cp", tiny_graph, profile.cluster, seed=0))
    frame = measure_fidelity(tiny_graph, profile, pls, repeats=2, rounds=1)
    assert frame.placement.tolist() == ["single", "round-robin", "cp"]
    cols = ["measured_s", "measured_min_s", "simulated_calibrated_s", "simulated_preset_s"]
    assert (frame[cols] > 0).all().all()
    assert (frame.measured_min_s <= frame.measured_s + 1e-12).all()
    assert frame.attrs["runs"]["runs"] >= 2 * len(pls)
    with pytest.raises(ConfigError, match="at least one placement"):
        measure_fidelity(tiny_graph, profile, [])


def test_fidelity_stats_of_perfect_and_reversed_simulators():
    measured = np.array([1.0, 2.0, 3.0, 4.0])
    frame = pd.DataFrame(
        {
            "placement": list("abcd"),
            "measured_s": measured,
            "simulated_calibrated_s": measured,
            "simulated_preset_s": 10 / measured,
        }
    )
    s = fidelity_stats(frame)
    assert s["placements"] == 4
    assert s["spearman_calibrated"] == pytest.approx(1.0)
    assert s["spearman_preset"] == pytest.approx(-1.0)
    assert s["median_rel_err_calibrated"] == 0.0
    assert s["median_rel_err_preset"] > 0
    with pytest.raises(ConfigError, match="simulated_preset_s"):
        fidelity_stats(frame.drop(columns="simulated_preset_s"))
    fig = fidelity_scatter(frame, title="t")
    assert [t.name for t in fig.data] == ["calibrated", "preset", "simulated = measured"]
    assert fig.layout.xaxis.type == "log"


# -- Stage III and the side-by-side measurement ----------------------------------------------------
def test_stage3_curve_starts_with_the_measured_stage2_policy(stage3):
    c = stage3.curve
    assert stage3.episodes == 8
    assert c.episode.iloc[0] == 0 and c.greedy_cost.iloc[0] == stage3.start_measured_s > 0
    assert c.episode.iloc[-1] == 8 and (c.stage == "real").all()
    assert (c.cost_mean.dropna() > 0).all()
    assert stage3.result.checkpoint.exists()


def test_side_by_side_measures_every_placement_alike(comparison):
    t = comparison.table.set_index("label")
    assert list(t.index) == ["stage II", "stage III", "cp"]
    assert (t.runs == 2 * 3).all()  # same repeats and rounds for each
    assert (t.measured_s > 0).all() and (t.simulated_s > 0).all()
    assert t.at["stage II", "vs_stage_II"] == 0.0
    assert t.at["cp", "picked"] == "fixed"
    assert set(t.loc[list(STAGE_LABELS), "picked"]) <= {"greedy", "sample 1"}
    assert len(comparison.screening) == 2 * 2  # greedy + 1 sample per policy
    assert set(comparison.traces) == set(comparison.placements) == set(t.index)
    runs = comparison_runs(comparison)
    assert (runs.judge == "measured").sum() == 3 * 6 and (runs.judge == "simulated").sum() == 3


def test_side_by_side_rejects_bad_labels(tiny_graph, profile, warm):
    with pytest.raises(ConfigError, match="at least one policy"):
        side_by_side(tiny_graph, profile, {})
    rr = round_robin(tiny_graph, 2)
    with pytest.raises(ConfigError, match="'x' names a policy and a reference"):
        side_by_side(tiny_graph, profile, {"x": warm.policy}, {"x": rr})


def test_improvement_and_key_numbers(profile, stage3, comparison):
    t = comparison.table.set_index("label").measured_s
    expected = (t["stage II"] - t["stage III"]) / t["stage II"]
    assert improvement(comparison.table) == pytest.approx(expected)
    with pytest.raises(ConfigError, match="no row 'gdp'"):
        improvement(comparison.table, "gdp")
    stats = {
        "placements": 3,
        "spearman_calibrated": 0.5,
        "spearman_preset": 0.1,
        "median_rel_err_calibrated": 0.2,
        "median_rel_err_preset": 0.4,
    }
    k = real_key_numbers(profile, stats, stage3, comparison)
    assert k["episodes"] == 8 and k["placements"] == 3
    assert k["stage2_measured_s"] == t["stage II"] and k["stage3_measured_s"] == t["stage III"]
    assert k["improvement"] == pytest.approx(expected)
    runs = k.pop("measured_runs")  # every timed run of both policies, paired by position
    assert runs["stage II"] == comparison.samples["stage II"].tolist()
    assert len(runs["stage II"]) == len(runs["stage III"]) == int(comparison.table.runs.iloc[0])
    assert all(isinstance(v, int | float) and math.isfinite(v) for v in k.values() if v is not None)
