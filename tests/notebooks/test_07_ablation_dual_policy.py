from __future__ import annotations

TINY = dict(
    graphs="chainmm:matrices=3,scale=0.001",
    seeds=2,
    episodes=24,
    imitation_episodes=8,
    samples=2,
    hidden=16,
    mp_steps=2,
    jobs=1,
    best_graphs="chainmm:matrices=3,scale=0.001",
    best_imitation_episodes=4,
)


def test_ablation_dual_policy(run_notebook, tmp_path):
    s = run_notebook("07_ablation_dual_policy.ipynb", **TINY, runs_dir=str(tmp_path / "runs"))
    methods = {r["method"] for r in s["rows"]}
    assert {"doppler", "sel-only", "plc-only", "doppler-II-only", "doppler-I-only", "cp"} <= methods
    assert len(s["runs"]) == 5 * 2
    # cached where asked: 5 methods x 2 seeds, and the best learner's 3 methods x 2 seeds
    assert len(list((tmp_path / "runs").rglob("result.json"))) == 5 * 2 + 3 * 2
    assert all(r["ratio_lb"] >= 1 - 1e-9 for r in s["rows"])
    # every (graph, method) cell: a mean inside its interval, over its seeds
    assert len(s["cells"]) == 5 and all(c["seeds"] == 2 for c in s["cells"])
    assert all(c["vs_cp_low"] <= c["vs_cp"] <= c["vs_cp_high"] for c in s["cells"])
    assert {p["comparison"] for p in s["paired"]} == {
        f"doppler vs {m}" for m in ("sel-only", "plc-only", "doppler-II-only", "doppler-I-only")
    }
    assert all(p["pairs"] == 2 and p["verdict"] == "inconclusive" for p in s["paired"])
    # the best learner: the dual policy and its halves with a shorter Stage I, judged alike
    best = s["best_learner"]
    assert (best["imitation_episodes"], best["sim_episodes"]) == (4, 20)
    assert {r["method"] for r in best["runs"]} == {"doppler", "sel-only", "plc-only"}
    assert {p["comparison"] for p in best["paired"]} == {
        "doppler vs sel-only",
        "doppler vs plc-only",
    }
