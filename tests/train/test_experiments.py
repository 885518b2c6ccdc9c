"""The experiment helpers of notebooks 08-10 and the demo (doppler_lab.lab.experiments)."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pandas as pd
import pytest
import torch

from doppler_lab.house.errors import ConfigError
from doppler_lab.ir.placement import round_robin, single_device
from doppler_lab.lab.experiments import (
    FIXED_COST_SETTLED,
    STAGE_VARIANTS,
    VARIANT_RUNS,
    PolicyRecipe,
    ScalingSetup,
    StageAblationConfig,
    TransferCase,
    TransferResult,
    convergence_stats,
    convergence_table,
    cpu_cluster,
    episodes_to_reach,
    executor_comparison,
    fitted_from,
    match_row,
    mean_std_table,
    measure_placements,
    parse_transfer_cases,
    run_stage_ablation,
    scaling_fit,
    scaling_key_numbers,
    scaling_rows,
    short_finetune,
    spec_with,
    speedup_rows,
    stage_curve,
    stage_table,
    start_point,
    torch_threads,
    transfer_table,
)
from doppler_lab.lab.experiments.stages import _needed_runs
from doppler_lab.workloads import build_from_spec

SMALL = {"hidden": 16, "head_hidden": 16, "mp_steps": 2, "num_bases": 4}


@pytest.fixture(scope="module")
def tiny_graph():
    """A 36-node executable chain of matmuls whose ops take microseconds."""
    return build_from_spec("chainmm:matrices=3,scale=0.01")


# -- curves and statistics ------------------------------------------------------------------
def test_stage_curve_offsets_episodes_and_keeps_labels():
    rows = [
        {"episode": 8, "sim/cost_mean": 2.0, "sim/cost_min": 1.5, "sim/greedy_cost": None},
        {"episode": 16, "sim/cost_mean": 1.8, "sim/cost_min": 1.2, "sim/greedy_cost": 1.4},
    ]
    f = stage_curve(rows, "sim", offset=100, variant="I+II", seed=3)
    assert list(f.columns[:2]) == ["variant", "seed"]
    assert f.episode.tolist() == [108, 116] and f.stage_episode.tolist() == [8, 16]
    assert math.isnan(f.greedy_cost[0]) and f.greedy_cost[1] == 1.4
    assert (f.stage == "sim").all() and (f.seed == 3).all()
    assert stage_curve([], "real").empty


def test_start_point_is_episode_zero_with_only_a_greedy_cost():
    f = start_point(2.5, "sim", run="scratch")
    assert f.episode.tolist() == [0] and f.greedy_cost.tolist() == [2.5]
    assert math.isnan(f.cost_mean[0]) and f.run[0] == "scratch"


def test_episodes_to_reach():
    assert episodes_to_reach([0, 10, 20], [5.0, 3.0, 2.0], 3.0) == 10
    assert episodes_to_reach([0, 10, 20], [np.nan, 1.0, 2.0], 3.0) == 10
    assert episodes_to_reach([0, 10], [5.0, 4.0], 3.0) is None


def test_convergence_stats_of_a_curve_that_drops_then_stays():
    e = np.arange(1, 21) * 4
    c = np.r_[np.linspace(10, 5, 10), np.full(10, 5.0)]
    s = convergence_stats(e, c, tail=0.2, tol=0.05, smoothing=0.0)
    assert s["first"] == pytest.approx(c[:4].mean()) and s["final"] == 5.0
    assert s["improvement"] == pytest.approx((s["first"] - 5.0) / s["first"])
    assert s["settle_episode"] == e[9]  # the first point within 5% of the final level
    assert s["tail_cv"] == 0.0


def test_convergence_stats_flat_settles_at_once_and_a_last_jump_never_settles():
    flat = convergence_stats([1, 2, 3], [2.0, 2.0, 2.0])
    assert flat["settle_episode"] == 1 and flat["improvement"] == 0
    jump = convergence_stats(range(10), [1.0] * 9 + [9.0], tail=0.5, smoothing=0.0)
    assert jump["settle_episode"] is None
    with pytest.raises(ConfigError, match="finite cost"):
        convergence_stats([1, 2], [np.nan, np.nan])
    with pytest.raises(ConfigError, match="tail"):
        convergence_stats([1], [1.0], tail=0)


def test_mean_std_table_orders_groups_and_counts_seeds():
    f = pd.DataFrame(
        {"variant": ["b", "a", "b", "a"], "seed": [0, 0, 1, 1], "x": [1.0, 2.0, 3.0, 6.0]}
    )
    t = mean_std_table(f, ["variant"], ["x"], order=["a", "b"])
    assert t.variant.tolist() == ["a", "b"]
    assert t.x.tolist() == [4.0, 2.0] and t.x_std.tolist() == [2.0, 1.0]
    assert t.seeds.tolist() == [2, 2]


def test_torch_threads_restores_the_count():
    before = torch.get_num_threads()
    with torch_threads(1):
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == before


def test_spec_with():
    assert spec_with("chainmm", scale=0.1) == "chainmm:scale=0.1"
    assert spec_with("llama_block:scale=0.1", layers=3) == "llama_block:scale=0.1,layers=3"
    assert spec_with("ffnn") == "ffnn"


# -- stage ablation -------------------------------------------------------------------------
def test_stage_ablation_config_validates_and_sets_budgets():
    with pytest.raises(ConfigError, match="'IV'"):
        StageAblationConfig(variants=("I", "IV"))
    with pytest.raises(ConfigError, match="real_episodes"):
        StageAblationConfig(real_episodes=0)
    cfg = StageAblationConfig(imitation_episodes=10, sim_episodes=30, real_episodes=5, repeats=2)
    runs = cfg.stage_configs(seed=7)
    assert runs["II alone"].episodes == 40 and runs["II"].episodes == 30
    assert runs["III"].stage == runs["III alone"].stage == "real"
    assert runs["III"].repeats == 2 and runs["III"].eval_every == cfg.eval_every
    assert {c.seed for c in runs.values()} == {7}
    assert {c.semantics for c in runs.values()} == {"wc"}


def test_needed_runs_train_warm_starts_first():
    assert _needed_runs(["III"]) == ["III alone"]
    assert _needed_runs(["I+II+III", "II"]) == ["I", "II", "III", "II alone"]
    assert _needed_runs(list(STAGE_VARIANTS)) == ["I", "II", "III", "II alone", "III alone"]
    assert set(VARIANT_RUNS) == set(STAGE_VARIANTS)
    assert all(len(VARIANT_RUNS[v]) == len(STAGE_VARIANTS[v]) for v in STAGE_VARIANTS)


def test_stage_table_improvements_over_cp():
    runs = pd.DataFrame(
        [
            {"variant": "I+II", "seed": 0, "makespan": 8.0, "measured": 4.0, "sim_episodes": 9},
            {"variant": "I+II", "seed": 1, "makespan": 6.0, "measured": 2.0, "sim_episodes": 9},
            {"variant": "cp", "seed": 0, "makespan": 10.0, "measured": 4.0},
            {"variant": "cp", "seed": 1, "makespan": 10.0, "measured": 2.0},
        ]
    )
    t = stage_table(runs, ["I+II"]).set_index("variant")
    assert t.at["I+II", "makespan"] == 7.0 and t.at["I+II", "makespan_std"] == 1.0
    assert t.at["I+II", "vs_cp"] == pytest.approx(0.3)
    assert t.at["I+II", "measured_vs_cp"] == 0.0
    assert t.at["I+II", "sim_episodes"] == 9 and t.at["cp", "vs_cp"] == 0


def test_convergence_table_keeps_each_variants_last_rl_stage():
    rows = []
    for variant, stages in (("I+II", ["imitation", "sim"]), ("I", ["imitation"])):
        for stage in stages:
            for ep in (4, 8):
                rows.append(
                    {
                        "variant": variant,
                        "seed": 0,
                        "stage": stage,
                        "stage_episode": ep,
                        "cost_mean": 1.0,
                    }
                )
    t = convergence_table(pd.DataFrame(rows))
    assert t[["variant", "stage"]].values.tolist() == [["I+II", "sim"]]


def test_run_stage_ablation_tiny_and_cached(tmp_path):
    cfg = StageAblationConfig(
        workload="chainmm:matrices=3,scale=0.01",
        calibrate=False,
        variants=("I", "III"),
        imitation_episodes=8,
        sim_episodes=8,
        real_episodes=4,
        seeds=1,
        seed=5,
        samples=1,
        repeats=1,
        measure_repeats=1,
        measure_rounds=1,
        policy=SMALL,
    )
    a = run_stage_ablation(cfg, tmp_path)
    (seed_dir,) = tmp_path.glob("seed5-*")  # keyed by the configuration
    assert sorted(p.name for p in seed_dir.iterdir()) == ["I", "III_alone"]
    assert set(a.runs.variant) == {"I", "III", "cp", "single"}
    assert (a.runs.measured > 0).all() and (a.runs.ratio_lb >= 1 - 1e-9).all()
    assert set(a.traces) == {"I", "III", "cp", "single"}
    real = a.curves[a.curves.variant == "III"]
    assert (real.stage == "real").all() and real.stage_episode.max() == 4
    b = run_stage_ablation(cfg, tmp_path)  # cached: same training, same evaluation
    cols = ["variant", "seed", "makespan", "greedy", "train_s"]
    pd.testing.assert_frame_equal(a.runs[cols], b.runs[cols])
    # changed settings train anew beside the old run (not a resume-check error)
    run_stage_ablation(dataclasses.replace(cfg, real_train={"lr": 1e-3}), tmp_path)
    assert len(list(tmp_path.glob("seed5-*"))) == 2


def test_stage_ablation_keeps_its_calibration_and_keys_its_runs_by_the_cluster(
    tmp_path, monkeypatch
):
    """A rebuild trains on the calibration its cached runs were trained on (kept in the run
    folder); a run trained on another calibration (say one measured on a loaded machine) is
    never taken for one on this."""
    import json

    from doppler_lab.house.errors import FormatError
    from doppler_lab.lab.experiments import stages

    measured = []

    def stand_in(graph, devices, calibrate, progress=False):
        measured.append(devices)
        return cpu_cluster(graph, devices, calibrate=False)[0], "measured stand-in"

    monkeypatch.setattr(stages, "cpu_cluster", stand_in)
    cfg = StageAblationConfig(
        workload="chainmm:matrices=3,scale=0.01",
        calibrate=True,
        variants=("I",),
        imitation_episodes=8,
        seeds=1,
        samples=1,
        repeats=1,
        measure_repeats=1,
        measure_rounds=1,
        policy=SMALL,
    )
    a = run_stage_ablation(cfg, tmp_path)
    assert measured == [2] and a.cluster_how == "measured stand-in"
    (kept,) = tmp_path.glob("workers-*.json")
    b = run_stage_ablation(cfg, tmp_path)  # repeated: the kept calibration, the cached run
    assert measured == [2] and "(kept in workers-" in b.cluster_how
    assert len(list(tmp_path.glob("seed0-*"))) == 1
    pd.testing.assert_frame_equal(a.runs[["variant", "makespan"]], b.runs[["variant", "makespan"]])
    doc = json.loads(kept.read_text())
    doc["cluster"]["devices"][0]["flops_per_s"]["float32"] *= 0.5
    kept.write_text(json.dumps(doc))
    run_stage_ablation(cfg, tmp_path)  # another calibration: trained anew beside the first
    assert len(list(tmp_path.glob("seed0-*"))) == 2
    kept.write_text(json.dumps({"how": "no cluster"}))
    with pytest.raises(FormatError, match=r"workers-.*remove it to calibrate again"):
        run_stage_ablation(cfg, tmp_path)


# -- real runs ------------------------------------------------------------------------------
def test_measure_placements_interleaves_rounds(tiny_graph):
    cluster, how = cpu_cluster(tiny_graph, 2, calibrate=False)
    assert "uncalibrated" in how
    pls = {"rr": round_robin(tiny_graph, 2), "single": single_device(tiny_graph, 2)}
    samples, traces = measure_placements(tiny_graph, cluster, pls, repeats=2, rounds=2)
    assert {k: v.size for k, v in samples.items()} == {"rr": 4, "single": 4}
    assert all((v > 0).all() for v in samples.values())
    assert traces["single"].semantics == "measured"
    with pytest.raises(ConfigError, match="repeats"):
        measure_placements(tiny_graph, cluster, pls, repeats=0)


def test_executor_comparison_checks_outputs(tiny_graph):
    res = executor_comparison(tiny_graph, 2, ("round-robin", "single"), repeats=1, calibrate=False)
    assert [r["placement"] for r in res.rows] == ["round-robin", "single"]
    for r in res.rows:
        assert r["outputs_match"] and r["measured_s"] > 0 and r["simulated_preset_s"] > 0
    assert res.rows[1]["transfers"] == 0 and set(res.traces) == {"round-robin", "single"}


# -- transfer -------------------------------------------------------------------------------
def test_parse_transfer_cases():
    a, b = parse_transfer_cases(
        "ffnn@p100x4 -> llama_block@p100x4;llama_block -> llama_block@v100x8;"
    )
    assert a == TransferCase("ffnn", "p100x4", "llama_block", "p100x4")
    assert b.source_cluster is None and b.target_cluster == "v100x8"
    assert b.label == "llama_block -> llama_block@v100x8"
    for bad, what in (
        ("ffnn", "expected 'SOURCE"),
        ("ffnn@ -> llama_block", "GRAPH@CLUSTER"),
        ("a -> b -> c", "expected 'SOURCE"),
        (" ; ", "no transfer case"),
    ):
        with pytest.raises(ConfigError, match=what):
            parse_transfer_cases(bad)


def _curve(points: list[tuple[int, float]], run: str) -> pd.DataFrame:
    return pd.DataFrame(
        [{"episode": e, "greedy_cost": c, "cost_mean": np.nan, "run": run} for e, c in points]
    )


def test_match_row_counts_episodes_until_scratch_is_reached():
    scratch = _curve([(0, 9.0), (50, 6.0), (100, 5.0)], "scratch")
    ft = _curve([(0, 7.0), (50, 5.5), (100, 4.9)], "fine-tune")
    m = match_row(ft, scratch, 100, case="x", seed=0)
    assert m["finetune_episodes_to_match"] == 100 and m["fraction_of_budget"] == 1.0
    assert m["zero_shot_greedy"] == 7.0 and m["scratch_final_greedy"] == 5.0
    assert m["finetune_final_matches"]
    dip = match_row(_curve([(0, 7.0), (50, 4.0), (100, 6.0)], "fine-tune"), scratch, 100)
    assert dip["finetune_episodes_to_match"] == 50 and not dip["finetune_final_matches"]
    never = match_row(_curve([(0, 7.0), (100, 6.0)], "fine-tune"), scratch, 100)
    assert never["finetune_episodes_to_match"] is None and never["fraction_of_budget"] is None


def test_transfer_table_means_over_matched_seeds():
    matches = pd.DataFrame(
        [
            {
                "case": "a -> b",
                "seed": 0,
                "budget": 100,
                "finetune_episodes_to_match": 20,
                "finetune_final_matches": False,
            },
            {
                "case": "a -> b",
                "seed": 1,
                "budget": 100,
                "finetune_episodes_to_match": None,
                "finetune_final_matches": False,
            },
        ]
    )
    table = pd.DataFrame(
        [
            {"case": "a -> b", "label": k, "vs_cp": v}
            for k, v in (("zero-shot", -0.1), ("fine-tuned", 0.2), ("scratch", 0.1))
        ]
    )
    res = TransferResult(pd.DataFrame(), pd.DataFrame(), table, matches, {})
    (row,) = transfer_table(res).to_dict(orient="records")
    assert row["matched"] == 1 and row["seeds"] == 2 and row["episodes_to_match"] == 20
    assert row["final_matched"] == 0
    assert row["fraction_of_budget"] == 0.2 and row["fine-tuned_vs_cp"] == 0.2


# -- scaling --------------------------------------------------------------------------------
def _rows(method: str, power: float) -> list[dict]:
    return [
        {
            "method": method,
            "nodes": n,
            "inference_ms": 1e-3 * n**power,
            "train_ms": 3e-3 * n**power,
            "inference_us_per_node": n ** (power - 1),
            "train_us_per_node": 3 * n ** (power - 1),
        }
        for n in (100, 1000, 10000)
        if method != "placeto" or n <= 1000
    ]


def test_scaling_fit_recovers_exponents_and_speedups():
    rows = _rows("doppler", 1.0) + _rows("placeto", 2.0)
    fit = {f["method"]: f for f in scaling_fit(rows)}
    assert fit["doppler"]["inference_exponent"] == pytest.approx(1.0)
    assert fit["placeto"]["train_exponent"] == pytest.approx(2.0)
    assert fit["doppler"]["inference_per_node_spread"] == pytest.approx(1.0)
    sp = speedup_rows(rows)
    assert [s["nodes"] for s in sp] == [100, 1000]
    assert sp[1]["inference_speedup"] == pytest.approx(1000.0)
    keys = scaling_key_numbers(rows)
    assert keys["doppler largest graph nodes"] == 10000
    assert keys["inference speed-up over placeto"] == pytest.approx(1000.0)
    assert "inference speed-up over placeto-recompute" not in keys
    dense = [{**r, "method": "placeto-recompute", "inference_ms": 2 * r["inference_ms"]}
             for r in rows if r["method"] == "placeto"]  # fmt: skip
    keys = scaling_key_numbers(rows + dense)
    assert keys["inference speed-up over placeto-recompute"] == pytest.approx(2000.0)
    assert keys["inference speed-up over placeto"] == pytest.approx(1000.0)


def test_the_scaling_fit_starts_where_fixed_costs_stop_dominating():
    """time = 50 ms fixed + 0.1 ms per node: the per-node cost falls by >= 10% per doubling up
    to 3,200 nodes, so the fit starts there and comes close to the linear part (the fit over
    every size is far below 1, the fixed cost flattening it)."""
    nodes = [100, 200, 400, 800, 1600, 3200, 6400]
    rows = [
        {"method": "doppler", "nodes": n, "inference_ms": 50 + 0.1 * n, "train_ms": 3 * n,
         "inference_us_per_node": 1e3 * (50 + 0.1 * n) / n, "train_us_per_node": 3e3}
        for n in nodes
    ]  # fmt: skip
    (fit,) = scaling_fit(rows)
    assert fitted_from([184.1, 130.3, 134.0, 131.7]) == 1 and fitted_from([9, 4, 2]) == 1
    assert fit["inference_fit_from_nodes"] == 3200 and fit["train_fit_from_nodes"] == 100
    assert fit["inference_exponent_all_sizes"] < 0.7 < 0.85 < fit["inference_exponent"] < 1.0
    assert fit["train_exponent"] == pytest.approx(1.0)
    assert fit["fixed_cost_settled"] == FIXED_COST_SETTLED


def test_scaling_rows_small_sizes_and_caps():
    setup = ScalingSetup(
        "chainmm:scale=tiny",
        "matrices",
        [2, 3],
        methods=("doppler", "placeto", "placeto-recompute"),
        max_nodes={"placeto": 20},
        repeats=1,
        batch=2,
        policy=SMALL,
    )
    rows = scaling_rows(setup)
    assert [(r["method"], r["size"]) for r in rows] == [  # placeto's cap holds for both
        ("doppler", 2),
        ("placeto", 2),
        ("placeto-recompute", 2),
        ("doppler", 3),
    ]
    assert rows[0]["nodes"] == rows[2]["nodes"] < rows[3]["nodes"]
    assert math.isnan(rows[1]["train_batched_ms"]) and rows[0]["train_batched_ms"] > 0
    assert all(r["inference_ms"] > 0 and r["simulate_ms"] > 0 for r in rows)
    with pytest.raises(ConfigError, match="'bogus'"):
        scaling_rows(ScalingSetup(methods=("bogus",)))
    with pytest.raises(ConfigError, match="increasing"):
        scaling_rows(ScalingSetup(sizes=(3, 2)))


# -- demo -----------------------------------------------------------------------------------
def test_short_finetune_from_stage_one(tmp_path, tiny_graph):
    from doppler_lab.hardware.cluster import make_cluster

    recipe = PolicyRecipe(None, imitation_episodes=8, sim_episodes=32, eval_every=2)
    res = short_finetune(tiny_graph, make_cluster("p100x4"), "wc", tmp_path, recipe, samples=1)
    assert res.start_how.startswith("stage I") and res.episodes == 32
    assert [r["label"] for r in res.rows] == ["cp", "start", "stage II"]
    assert res.curve.episode.iloc[0] == 0 and res.curve.episode.iloc[-1] == 32
    assert set(res.traces) == {"cp", "start", "stage II"}
