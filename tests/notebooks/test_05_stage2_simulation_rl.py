from __future__ import annotations

TINY = dict(
    graph_name="chainmm:matrices=3,scale=0.001",
    init=None,
    imitation_episodes=16,
    episodes=32,
    episodes_per_update=8,
    eval_every=2,
    hidden=16,
    mp_steps=2,
    samples=2,
)


def test_stage2_simulation_rl(run_notebook):
    s = run_notebook("05_stage2_simulation_rl.ipynb", **TINY)
    assert s["start"].startswith("stage I")
    assert {r["label"] for r in s["rows"]} == {"cp", "start", "stage II"}
    assert all(r["ratio_lb"] >= 1 - 1e-9 for r in s["rows"])
    assert s["final"]["sim/greedy_cost"] is not None
    assert s["checkpoint"].endswith("policy.pt")
