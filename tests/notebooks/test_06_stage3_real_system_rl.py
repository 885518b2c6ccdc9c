from __future__ import annotations

import math

from doppler_lab.lab.reporting.findings import STAGE3_ONE_POLICY

TINY = dict(
    workload="chainmm:matrices=3",
    scale=0.02,
    quick_calibration=True,
    init=None,
    imitation_episodes=16,
    sim_episodes=32,
    rollouts=2,
    fidelity_repeats=1,
    fidelity_rounds=1,
    real_episodes=8,
    repeats=1,
    eval_every=1,
    samples=1,
    measure_repeats=1,
    measure_rounds=2,
    hidden=16,
    mp_steps=2,
)
KEYS = {
    "spearman_calibrated",
    "spearman_preset",
    "median_rel_err_calibrated",
    "median_rel_err_preset",
    "placements",
    "stage2_measured_s",
    "stage3_measured_s",
    "improvement",
    "episodes",
    "parallel_capacity",
}


def test_stage3_real_system_rl(run_notebook):
    s = run_notebook("06_stage3_real_system_rl.ipynb", **TINY)
    assert KEYS <= set(s)
    assert s["stage2_policy"].startswith("stage I")
    # the benchmark's placements and the Stage II policy's greedy + 2 sampled rollouts
    assert s["placements"] == len(s["fidelity"]) >= 30
    groups = [r["group"] for r in s["fidelity"]]
    assert groups.count("policy-greedy") == 1 and groups.count("policy-sample") == 2
    for r in s["fidelity"]:
        assert r["measured_s"] > 0 and r["simulated_calibrated_s"] > 0
    for key in ("spearman_calibrated", "spearman_preset"):
        assert -1 - 1e-9 <= s[key] <= 1 + 1e-9
    for key in ("median_rel_err_calibrated", "median_rel_err_preset"):
        assert math.isfinite(s[key]) and s[key] >= 0
    assert s["stage2_measured_s"] > 0 and s["stage3_measured_s"] > 0
    assert math.isfinite(s["improvement"])
    assert s["episodes"] == 8 and s["stage3_curve"][-1]["episode"] == 8
    assert s["stage3_curve"][0]["episode"] == 0  # the Stage II policy, measured before Stage III
    rows = {r["label"]: r for r in s["side_by_side"]}
    assert set(rows) == {"stage II", "stage III", "cp"}
    assert all(r["runs"] == 2 for r in rows.values())  # same repeats for every placement
    assert 0 < s["parallel_capacity"] <= 2 + 1e-9
    # every timed run of both policies, paired by round, and the page's verdict from them
    runs = s["measured_runs"]
    assert len(runs["stage II"]) == len(runs["stage III"]) == 2
    verdict = {h["label"]: h["value"] for h in s["headline"]}
    assert verdict[STAGE3_ONE_POLICY] == "inconclusive"  # 2 pairs
    assert "paired by measuring round" in s["findings"]
