"""The quality table: protocol, comparisons, learned placers by checkpoint, report files."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from doppler_lab.house.errors import ConfigError
from doppler_lab.lab.bench.quality import (
    QualityConfig,
    find_checkpoint,
    load_cases,
    placer_plan,
    quality_rows,
    run,
)
from doppler_lab.lab.bench.yardstick import YARDSTICK

TINY = QualityConfig(
    paper_graphs=("chain_mm_112nodes",),
    workloads=("chainmm:scale=tiny",),
    seeds=(0, 1),
    placers=("round-robin", "cp", "heft", "local-search", "exact"),
    search_budget=30,
    exact_time_limit=0.5,
    cp_tie_seeds=3,
)


def test_report_rows_and_protocol(tmp_path):
    record = run(tmp_path, config=TINY)
    assert (tmp_path / "quality.json").exists() and (tmp_path / "quality.md").exists()
    doc = json.loads((tmp_path / "quality.json").read_text())
    assert doc["benchmark"] == "quality"
    rows = [r for t in record["tables"].values() for r in t if "placer" in r and "graph" in r]
    graphs = {r["graph"] for r in rows}
    assert "chainmm" in graphs
    for r in rows:
        assert r["seeds"] == [0, 1]
        assert r["best"] <= r["makespan"] and r["ratio_lb"] >= 1 - 1e-9
        if r["placer"] == "cp":
            assert r["vs_cp"] == 0
        if r["placer"] == "local-search":
            assert r["sim_calls"] <= 30 and r["runs"] == 2 and "budget 30" in r["note"]
        if r["placer"] in ("heft", "exact", "round-robin"):
            assert r["runs"] == 1  # deterministic: placed once, simulated at every seed
    if "chain_mm_112nodes" in graphs:
        chain = [r for r in rows if r["graph"] == "chain_mm_112nodes"]
        for r in chain:
            # below the best known: positive is better, like vs_cp
            assert r["vs_best_known"] == pytest.approx(
                1 - r["makespan"] / YARDSTICK["chain_mm_112nodes"]["best_known"]
            )
            assert r["unit"] == "cost units"
        assert "Paper graphs" in (tmp_path / "quality.md").read_text()


def test_workloads_are_noisy_and_seeded_alike():
    cfg = QualityConfig(
        paper_graphs=(),
        workloads=("ffnn:scale=tiny",),
        seeds=(0, 1, 2),
        placers=("round-robin", "heft"),
    )
    rows, placements, cases, notes = quality_rows(cfg, progress=False)
    assert cases[0].semantics == "wc" and cases[0].noise == 0.1
    rr = next(r for r in rows if r["placer"] == "round-robin")
    assert rr["std"] > 0  # one placement, three noise draws
    assert len(placements[("ffnn", "heft")]) == 1


def test_missing_paper_graphs_are_noted(tmp_path):
    cfg = QualityConfig(paper_dir=str(tmp_path), workloads=())
    cases, notes = load_cases(cfg)
    assert cases == [] and len(notes) == 4 and "github.com/xinyuyao/Doppler" in notes[0]


def test_learned_placers_need_a_checkpoint_for_the_graph(tmp_path):
    (tmp_path / "doppler").mkdir()
    (tmp_path / "doppler" / "chainmm.pt").write_bytes(b"")
    (tmp_path / "gdp" / "ffnn").mkdir(parents=True)
    assert find_checkpoint(tmp_path, "doppler", "chainmm") == tmp_path / "doppler" / "chainmm.pt"
    assert find_checkpoint(tmp_path, "gdp", "ffnn") == tmp_path / "gdp" / "ffnn"
    assert find_checkpoint(tmp_path, "doppler", "ffnn") is None


def test_learned_placers_take_the_first_folder_with_a_checkpoint(tmp_path):
    cases, _ = load_cases(QualityConfig(paper_graphs=(), workloads=("chainmm:scale=tiny",)))
    (tmp_path / "mine" / "doppler").mkdir(parents=True)
    (tmp_path / "mine" / "doppler" / "chainmm.pt").write_bytes(b"")
    cfg = QualityConfig(checkpoints=(str(tmp_path / "none"), str(tmp_path / "mine"), "shipped"))
    plan = dict(placer_plan(cfg, cases[0]))
    # judged by the case's semantics (wc for the workloads), not the placer's default
    assert plan["doppler"] == {
        "checkpoint": str(tmp_path / "mine" / "doppler" / "chainmm.pt"),
        "semantics": "wc",
    }
    assert "gdp" not in plan  # no checkpoint anywhere
    # every doppler row has the policy alone beside it (the same checkpoint, no proposals)
    names = [name for name, _ in placer_plan(cfg, cases[0])]
    assert names[names.index("doppler") + 1] == "doppler:proposals=none"
    assert plan["doppler:proposals=none"] == {**plan["doppler"], "proposals": "none"}
    asked = dict(placer_plan(replace(cfg, placers=("cp", "doppler:samples=2")), cases[0]))
    assert list(asked) == ["cp", "doppler:samples=2"] and asked["doppler:samples=2"]["samples"] == 2
    shipped = dict(placer_plan(QualityConfig(checkpoints=("shipped",)), cases[0]))
    assert shipped["doppler"]["checkpoint"].endswith("doppler/chainmm.pt")


def test_plan_passes_budgets_and_semantics():
    cases, _ = load_cases(QualityConfig(paper_graphs=(), workloads=("chainmm:scale=tiny",)))
    plan = dict(placer_plan(QualityConfig(search_budget=77, exact_time_limit=3.0), cases[0]))
    assert plan["local-search"]["budget"] == 77 and plan["local-search"]["semantics"] == "wc"
    assert plan["enumerative"]["budget"] == 77
    assert plan["exact"] == {"time_limit": 3.0}
    assert plan["cp"] == {}
    with pytest.raises(ConfigError, match="unknown placer"):
        placer_plan(QualityConfig(placers=("nope",)), cases[0])
    with pytest.raises(ConfigError, match="search_budget"):
        QualityConfig(search_budget=0)
