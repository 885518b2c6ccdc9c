from __future__ import annotations

TINY = dict(
    paper_graphs="chain_mm_112nodes",
    workloads="chainmm,llama_block",
    scale="tiny",
    seeds=2,
    search_budget=40,
    exact_time_limit=1.0,
    gantt_graph="llama_block",
    cp_tie_seeds=3,
    learned_graphs="chain_mm_112nodes",
    learned_seeds=2,
    learned_episodes=8,
    learned_imitation_episodes=2,
    jobs=1,
)


def test_baselines(run_notebook, tmp_path):
    s = run_notebook("03_baselines.ipynb", **TINY, runs_dir=str(tmp_path / "runs"))
    assert {"cp", "heft", "local-search", "exact"} <= set(s["placers"])
    assert {"chainmm", "llama_block"} <= set(s["graphs"])
    # DOPPLER, GDP and PLACETO trained with the same seeds, each cell with its interval
    learned = s["learned"]
    assert {(c["method"], c["seeds"]) for c in learned["cells"]} == {
        ("doppler", 2),
        ("gdp", 2),
        ("placeto", 2),
    }
    assert all(c["vs_cp_low"] <= c["vs_cp"] <= c["vs_cp_high"] for c in learned["cells"])
    assert [p["comparison"] for p in learned["paired"]] == ["doppler vs gdp", "doppler vs placeto"]
    assert {r["seed"] for r in learned["runs"]} == {0, 1}
    for r in s["rows"]:
        assert r["ratio_lb"] >= 1 - 1e-9
        if r["placer"] in ("local-search", "enumerative"):
            assert r["sim_calls"] <= 40
    cp = {r["graph"]: r for r in s["rows"] if r["placer"] == "cp"}
    assert all(cp[g]["vs_cp"] == 0 for g in cp)
    assert len(s["gantt"]) == 2 and s["gantt"][0].startswith("best")
    # every graph with a doppler row (a shipped checkpoint) has the policy alone beside it
    doppler = {r["graph"] for r in s["rows"] if r["placer"] == "doppler"}
    alone = {r["graph"] for r in s["rows"] if r["placer"] == "doppler:proposals=none"}
    assert doppler and alone == doppler


def test_baselines_without_paper_files(run_notebook, tmp_path):
    s = run_notebook(
        "03_baselines.ipynb",
        **{
            **TINY,
            "paper_graphs_dir": str(tmp_path / "nowhere"),
            "runs_dir": str(tmp_path / "runs"),
        },
    )
    assert "chain_mm_112nodes" not in s["graphs"] and "chainmm" in s["graphs"]
    assert any("not found" in n for n in s["notes"])
    assert s["cp_vs_yardstick"] == []
    assert s["learned"]["runs"] == [] and s["learned"]["paired"] == []  # no paper graph to train on
