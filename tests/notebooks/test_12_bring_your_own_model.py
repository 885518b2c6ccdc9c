from __future__ import annotations

TINY = dict(
    layers=1,
    hidden=32,
    heads=2,
    seq=8,
    vocab=64,
    placers="cp,heft,local-search,doppler",
    seeds=1,
    search_budget=30,
    repeats=1,
)


def test_bring_your_own_model(run_notebook):
    s = run_notebook("12_bring_your_own_model.ipynb", **TINY)
    assert s["spec"].startswith("hf-llama:layers=1,hidden=32")
    assert s["graph"]["compute_nodes"] > 0 and s["graph"]["total_flops"] > 0
    names = ["cp", "heft", "local-search", "doppler", "doppler:proposals=none"]
    assert [r["placer"] for r in s["placers"]] == names
    made = {r["placer"]: r["produced_by"] for r in s["placers"]}
    assert made["cp"] == [] and made["doppler"] and made["doppler:proposals=none"]
    # the policy alone's placements come from its own rollouts, never a heuristic proposal
    assert all("rollout" in x or x.startswith("sample") for x in made["doppler:proposals=none"])
    assert "policy alone" in s["findings"]
    for r in s["placers"]:
        assert r["ratio_lb"] >= 1 - 1e-9
    assert s["best"] in {r["placer"] for r in s["placers"]}
    assert [r["placement"] for r in s["real"]] == ["round-robin", "cp"]
    for r in s["real"]:
        assert r["outputs_match"] and r["max_abs_error"] <= 1e-5
        assert r["measured_s"] > 0 and r["simulated_preset_s"] > 0
