from __future__ import annotations

import math

TINY = dict(
    workload="chainmm:matrices=3",
    scale=0.02,
    imitation_episodes=16,
    sim_episodes=32,
    real_episodes=8,
    seeds=2,
    repeats=1,
    samples=2,
    measure_rounds=1,
    hidden=16,
    mp_steps=2,
)
VARIANTS = {"I+II+III", "I+II", "II", "I", "III"}


def test_ablation_training_stages(run_notebook):
    s = run_notebook("08_ablation_training_stages.ipynb", **TINY)
    rows = {r["variant"]: r for r in s["rows"]}
    assert VARIANTS | {"cp", "single"} == set(rows)
    assert len(s["runs"]) == len(VARIANTS) * 2 + 2 + 1  # variants and cp per seed, single once
    for r in s["rows"]:
        assert r["ratio_lb"] >= 1 - 1e-9
        assert math.isfinite(r["measured"]) and r["measured"] > 0
    # episode budgets: II alone gets Stage I's share too; the real ones only where Stage III ran
    assert rows["I+II+III"]["sim_episodes"] == rows["II"]["sim_episodes"] == 48
    assert rows["I"]["sim_episodes"] == 16 and rows["III"]["sim_episodes"] == 0
    assert rows["I+II+III"]["real_episodes"] == rows["III"]["real_episodes"] == 8
    assert rows["I+II"]["real_episodes"] == 0
    stages = {(c["variant"], c["stage"]) for c in s["convergence"]}
    assert stages == {("I+II+III", "real"), ("III", "real"), ("I+II", "sim"), ("II", "sim")}
    assert set(s["key_numbers"]["measured_s"]) == VARIANTS | {"cp", "single"}
    # the verdict on "I+II+III beats its subsets": each subset paired by seed, with its
    # interval; two seeds are too few for any verdict
    verdict = {h["label"]: h["value"] for h in s["headline"]}
    assert verdict["I+II+III against its subsets (95% intervals)"] == "inconclusive"
    assert "Paired by seed" in s["findings"] and "a verdict needs 5 or more seeds" in s["findings"]
