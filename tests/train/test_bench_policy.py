"""``bench policy`` end to end at toy size: tables, the equal-budget protocol, the cache."""

from __future__ import annotations

import json

import pytest

from doppler_lab.house.errors import ConfigError
from doppler_lab.lab.bench import policy as bench
from doppler_lab.policies.checkpoint import load_policy


def _config(tmp_path, **over):
    base = dict(
        paper_graphs=(),
        workloads=("chainmm:matrices=3,scale=0.01",),
        methods=("doppler", "gdp"),
        ablations=("sel-only",),
        ablation_graphs=("chainmm",),
        design_ablations=(),
        design_graphs=(),
        seeds=1,
        workload_seeds=1,
        ablation_seeds=1,
        episodes=6,
        imitation_episodes=2,
        samples=2,
        search_placers=("local-search",),
        speed_sizes=(40,),
        speed_repeats=1,
        jobs=1,
        policy={"hidden": 16, "mp_steps": 1},
        runs_dir=str(tmp_path / "runs"),
    )
    return bench.PolicyBenchConfig(**{**base, **over})


def test_tables_protocol_and_cache(tmp_path):
    # sel-only is in the ablation and the design tables: it trains once and counts once
    cfg = _config(tmp_path, design_ablations=("sel-only",), design_graphs=("chainmm",))
    rec = bench.run(tmp_path / "out", config=cfg)
    assert (tmp_path / "out" / "policy.md").exists()
    assert json.loads((tmp_path / "out" / "policy.json").read_text())["benchmark"] == "policy"
    work = rec["tables"]["Quality: generated workloads (p100x4, wc semantics)"]
    by = {r["method"]: r for r in work}
    assert set(by) == {"cp", "local-search", "doppler", "doppler-est-timing"}
    # the search placer gets exactly the learned method's simulator calls: every training
    # episode plus the greedy and sampled rollouts of the protocol
    assert by["doppler"]["sim_calls"] == 6 + 1 + 2 == by["local-search"]["sim_calls"]
    for r in work:
        assert r["ratio_lb"] >= 1.0 - 1e-9
        assert r["vs_cp"] == pytest.approx(
            (by["cp"]["makespan"] - r["makespan"]) / by["cp"]["makespan"]
        )
    ablation = {
        r["method"] for r in rec["tables"]["Ablations: dual vs one learned half; training stages"]
    }
    assert {"doppler", "sel-only"} <= ablation
    design = rec["tables"]["Design ablations (architecture, features, training)"]
    assert [r["seeds"] for r in design if r["method"] == "sel-only"] == [1]
    (scale,) = rec["tables"]["Speed per node (random DAGs, width 16)"]
    assert scale["nodes"] == 40 and scale["inference_ms"] > 0
    # a second run reuses every finished (graph, method, seed) instead of training again
    results = sorted((tmp_path / "runs").rglob("result.json"))
    assert len(results) == 3  # doppler, doppler-est-timing and sel-only on chainmm
    # the workloads' doppler gets the wc estimate (by semantics), its ablation row est
    ckpt = {p.parent.parent.name: json.loads(p.read_text())["checkpoint"] for p in results}
    estimate = {m: load_policy(c)[0].config.estimate for m, c in ckpt.items()}
    assert estimate == {"doppler": "wc", "doppler-est-timing": "est", "sel-only": "wc"}
    stamps = [p.stat().st_mtime_ns for p in results]
    again = bench.run(tmp_path / "out", config=cfg)
    assert [p.stat().st_mtime_ns for p in results] == stamps
    assert again["tables"]["Quality: generated workloads (p100x4, wc semantics)"] == work


def test_unknown_method_and_bad_budget_are_named():
    with pytest.raises(ConfigError, match="unknown method 'dopler'"):
        bench.PolicyBenchConfig(methods=("dopler",))
    with pytest.raises(ConfigError, match="imitation_episodes 10 must lie in"):
        bench.PolicyBenchConfig(episodes=10, imitation_episodes=10)


def test_a_bench_without_sampled_rollouts_is_refused_not_left_unjudged():
    """With no sampled rollout the protocol would return the greedy rollout unjudged (a makespan
    of NaN): the configuration says so instead."""
    from doppler_lab.house.errors import ConfigError
    from doppler_lab.lab.bench.policy import PolicyBenchConfig

    with pytest.raises(ConfigError, match="samples must be >= 1 .*got 0"):
        PolicyBenchConfig.of_graphs(["ffnn"], methods=["doppler"], samples=0)
