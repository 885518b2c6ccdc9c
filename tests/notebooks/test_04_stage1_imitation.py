from __future__ import annotations

TINY = dict(
    graph_name="chainmm:matrices=3,scale=0.001",
    episodes=24,
    episodes_per_update=4,
    hidden=16,
    mp_steps=2,
    samples=2,
)


def test_stage1_imitation(run_notebook):
    s = run_notebook("04_stage1_imitation.ipynb", **TINY)
    labels = {r["label"] for r in s["rows"]}
    assert labels == {"cp", "untrained", "imitated"}
    assert all(r["ratio_lb"] >= 1 - 1e-9 for r in s["rows"])
    assert s["final"]["imitation/sel_teacher_prob"] > s["first"]["imitation/sel_teacher_prob"]
    assert s["checkpoint"].endswith("policy.pt")
