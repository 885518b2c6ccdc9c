"""``doppler-lab bench memory``: its verdicts and targets, the placer table on a small capped
graph, the cap sweep, and a quick smoke run (slow)."""

from __future__ import annotations

import json

import pytest

from doppler_lab.cli import main
from doppler_lab.hardware.cluster import make_cluster
from doppler_lab.lab.bench.memory_bound import (
    PlacerRun,
    best_by_cap,
    cap_sweep,
    case_facts,
    compare_placers,
    target_rows,
    verdict_row,
)
from doppler_lab.timing.memory import tensor_bytes
from doppler_lab.workloads.specs import graph_from_spec


def _row(placer, ms, fits=True, **extra):
    return {"placer": placer, "makespan_s": ms, "fits": fits, **extra}


def test_verdicts_and_targets():
    rows = [
        _row("m-etf", 2.0), _row("m-sct", 1.5, fits=False), _row("pipeline", None, fits=False),
        _row("doppler", 2.0, source="etf", policy_s=2.5), _row("doppler-budget", 1.9),
    ]  # fmt: skip
    v = verdict_row("a", rows)
    assert v["best_baseline"] == "m-etf" and v["best_baseline_s"] == 2.0  # m-SCT does not fit
    assert v["doppler_no_worse"] and v["doppler-budget_no_worse"] and not v["policy_no_worse"]
    worse = verdict_row("b", [_row("m-etf", 2.0), _row("doppler", 2.0 * (1 + 1e-6))])
    assert not worse["doppler_no_worse"] and not worse["doppler-budget_fits"]
    none = verdict_row("c", [_row("pipeline", None, fits=False), _row("doppler", 3.0)])
    assert none["best_baseline"] == "none fits" and none["doppler_no_worse"]
    t = {r["target"]: r for r in target_rows([v, worse, none, v, v])}
    fits, zero, budget, alone = t.values()
    assert fits["passed"] and fits["value"] == "5 of 5"
    assert zero["passed"] and zero["value"] == "4 of 5"  # 80%
    assert not budget["passed"] and budget["value"] == "3 of 5"
    assert not target_rows([v, worse])[1]["passed"]  # 1 of 2 < 80%
    # the policy alone (issue 45): its best rollout, on every case; inf or nan: none fits
    assert alone["target"].startswith("the policy alone") and not alone["passed"]
    own = [verdict_row("d", [_row("m-etf", 2.0), _row("doppler", 2.0, policy_s=x)])
           for x in (2.0, 1.5, float("inf"), float("nan"))]  # fmt: skip
    assert [o["policy_no_worse"] for o in own] == [True, True, False, False]
    alone_none = verdict_row("e", [_row("pipeline", None, fits=False),
                                   _row("doppler", 3.0, policy_s=float("inf"))])  # fmt: skip
    assert not alone_none["policy_no_worse"]  # nothing fits, not even the policy's rollouts
    t = {r["target"]: r for r in target_rows(own[:2])}
    assert list(t.values())[3]["passed"] and list(t.values())[3]["value"] == "2 of 2"


def test_placer_table_and_cap_sweep_on_a_small_capped_graph():
    g = graph_from_spec("chainmm:matrices=3,scale=0.001")
    total = float(tensor_bytes(g).sum())
    cluster = make_cluster("p100x4").with_memory(0.4 * total)
    facts = case_facts(g, cluster)
    assert not facts["fits_one_device"] and facts["one_device_peak_gb"] > facts["cap_gb"]
    runs = (
        PlacerRun("m-etf", "etf"),
        PlacerRun("single", "single"),
        PlacerRun("exact", "exact"),  # within EXACT_MAX_OPS: runs
        PlacerRun("local-search", "local-search", {"budget": 10}),
    )
    rows, placements = compare_placers(g, cluster, runs)
    by = {r["placer"]: r for r in rows}
    assert by["m-etf"]["fits"] and by["m-etf"]["vs_best_baseline"] == 0.0
    assert by["single"]["makespan_s"] is None and "does not fit" in by["single"]["note"]
    assert by["local-search"]["sim_calls"] <= 10 and set(placements) == {
        "m-etf",
        "exact",
        "local-search",
    }
    sweep = cap_sweep(g, make_cluster("p100x4"), [total * 2, 0.4 * total, 1.0], runs[:2])
    best = best_by_cap(sweep)
    assert [b["cap_gb"] for b in best] == sorted((b["cap_gb"] for b in best), reverse=True)
    assert best[0]["placers_fit"] == 2 and best[-1]["best"] == "none fits"
    assert best[-1]["changed"] and not best[0]["changed"]


@pytest.mark.slow
def test_bench_memory_quick(tmp_path):
    argv = ["bench", "memory", "--quick", "--no-progress", "--out", str(tmp_path)]
    assert main([*argv, "--checkpoint", "doppler/general-hint"]) == 0
    record = json.loads((tmp_path / "memory.json").read_text())
    assert "--checkpoint doppler/general-hint" in (tmp_path / "memory.md").read_text()
    assert any("the policy doppler/general-hint" in n for n in record["notes"])
    cases = record["tables"]["Cases"]
    # the quick memory-bound cases, and one that fits one device (the one-device target)
    assert [c["fits_one_device"] for c in cases] == [False, False, True]
    assert len(record["tables"]["Targets"]) == 5


def test_rows_hold_the_ratio_to_one_device_under_a_ratio_name():
    """compare_placers writes ``ratio_vs_one_device`` (makespan / the one-device makespan) itself;
    the report renders it as a ratio without renaming a ``vs_*`` column."""
    g = graph_from_spec("chainmm:matrices=3,scale=0.001")
    cluster = make_cluster("p100x4")
    one = case_facts(g, cluster)["one_device_makespan_s"]
    rows, _ = compare_placers(g, cluster, (PlacerRun("m-etf", "etf"),), one_device_s=one)
    (row,) = rows
    assert "vs_one_device" not in row
    assert row["ratio_vs_one_device"] == pytest.approx(row["makespan_s"] / one)
