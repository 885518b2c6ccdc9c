from __future__ import annotations


def test_quickstart(run_notebook):
    s = run_notebook("00_quickstart.ipynb", scale=0.05, workload="llama_block")
    # the shipped llama_block checkpoint places the (smaller) graph too
    alone = "doppler (policy alone)"
    assert set(s["makespans"]) == {"round-robin", "cp", "doppler", alone}
    assert all(m >= s["lower_bound"] * (1 - 1e-9) for m in s["makespans"].values())
    assert s["best"] in s["makespans"]
    # what produced each learned result is named; the policy alone is one of its own rollouts
    made = s["produced_by"]
    assert made["doppler"] and made[alone].split()[0] in ("greedy", "sample")
    # the placer judges the policy's rollouts with more proposals: never worse than them alone
    assert s["makespans"]["doppler"] <= s["makespans"][alone] * (1 + 1e-12)
    assert "policy alone: makespan below cp's" in [h["label"] for h in s["headline"]]
