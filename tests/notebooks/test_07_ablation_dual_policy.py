from __future__ import annotations

TINY = dict(
    graphs="chainmm:matrices=3,scale=0.001",
    seeds=2,
    episodes=24,
    imitation_episodes=8,
    samples=2,
    hidden=16,
    mp_steps=2,
)


def test_ablation_dual_policy(run_notebook, tmp_path):
    s = run_notebook("07_ablation_dual_policy.ipynb", **TINY, runs_dir=str(tmp_path / "runs"))
    methods = {r["method"] for r in s["rows"]}
    assert {"doppler", "sel-only", "plc-only", "doppler-II-only", "doppler-I-only", "cp"} <= methods
    assert len(s["runs"]) == 5 * 2
    assert len(list((tmp_path / "runs").rglob("result.json"))) == 5 * 2  # cached where asked
    assert all(r["ratio_lb"] >= 1 - 1e-9 for r in s["rows"])
