"""Stuck seeds: the failure-rate arithmetic of ``bench stuck`` and SEL's temperature schedule."""

from __future__ import annotations

import csv

import pytest
import torch

from doppler_lab.hardware.cluster import make_cluster
from doppler_lab.house.errors import ConfigError
from doppler_lab.lab.bench.stuck import (
    StuckBenchConfig,
    cell_rows,
    failure_rates,
    mark_failures,
    paired_change,
    stage_diagnostics,
)
from doppler_lab.policies.policy_config import PolicyConfig
from doppler_lab.train import Trainer, preset, read_rows, train
from doppler_lab.train.loop import temperature_at
from doppler_lab.train.train_config import TrainConfig
from doppler_lab.workloads import build_from_spec

SMALL = PolicyConfig(hidden=16, head_hidden=16, mp_steps=2, num_bases=4)


def _r(graph, variant, seed, makespan, arm="today"):
    return {"graph": graph, "variant": variant, "seed": seed, "makespan": makespan, "arm": arm}


# -- the failure rate on synthetic results ---------------------------------------------------
def test_a_seed_fails_when_more_than_five_percent_above_its_cells_best():
    results = [
        _r("g", "dual", 0, 100.0),
        _r("g", "dual", 1, 104.9),  # less than 5% above: not a failure
        _r("g", "dual", 2, 105.5),  # above by more: a failure
        _r("g", "dual", 3, 130.0),
        _r("h", "dual", 0, 10.0),  # another graph: its own cell
        _r("h", "dual", 1, 10.2),
        _r("g", "plc-only", 0, 140.0),  # another variant: its own cell (best 140)
        _r("g", "plc-only", 1, 141.0),
        _r("g", "dual", 0, 200.0, arm="fix"),  # another arm: its own cell
        _r("g", "dual", 1, 250.0, arm="fix"),
    ]
    marked = mark_failures(results)
    assert [m["failed"] for m in marked] == [
        False, False, True, True, False, False, False, False, False, True,
    ]  # fmt: skip
    assert marked[2]["cell_best"] == 100.0
    assert marked[2]["above_best"] == pytest.approx(0.055)
    assert marked[6]["cell_best"] == 140.0
    rates = {(r["arm"], r["variant"]): r for r in failure_rates(marked)}
    dual = rates[("today", "dual")]
    assert (dual["seeds"], dual["failures"]) == (6, 2)
    assert dual["failure_rate"] == pytest.approx(2 / 6)
    assert 0.0 <= dual["rate_low"] < 2 / 6 < dual["rate_high"] <= 1.0
    assert rates[("today", "plc-only")]["failure_rate"] == 0.0
    assert rates[("fix", "dual")]["failures"] == 1
    # a stricter threshold fails more seeds
    assert sum(m["failed"] for m in mark_failures(results, threshold=0.01)) > sum(
        m["failed"] for m in marked
    )


def test_cells_show_the_distance_to_the_best_known_placement():
    results = [_r("ffnn_192nodes", "dual", s, 56.696 * (1 + 0.1 * s)) for s in range(3)]
    results.append(_r("not_a_paper_graph", "dual", 0, 3.0))
    cells = {c["graph"]: c for c in cell_rows(mark_failures(results))}
    ffnn = cells["ffnn_192nodes"]
    assert ffnn["best_over_best_known"] == pytest.approx(0.0, abs=1e-9)
    assert ffnn["mean_over_best_known"] == pytest.approx(0.1)
    assert ffnn["mean_low"] <= ffnn["makespan"] <= ffnn["mean_high"]
    assert ffnn["failures"] == 2
    assert cells["not_a_paper_graph"]["mean_over_best_known"] is None


def test_paired_change_pairs_by_graph_and_seed():
    results = [_r("g", "dual", s, 100.0 + s) for s in range(4)]
    results += [_r("g", "dual", s, (100.0 + s) * 0.9, arm="fix") for s in range(4)]
    (row,) = paired_change(mark_failures(results))
    assert row["pairs"] == 4 and row["change"] == pytest.approx(-0.1)
    assert (row["arm"], row["against"], row["verdict"]) == ("fix", "today", "better")
    # every other arm against the base, each with the interval's verdict
    results += [_r("g", "dual", s, 100.0 + s + (1 if s % 2 else -1), arm="short") for s in range(4)]
    rows = {r["arm"]: r for r in paired_change(mark_failures(results))}
    assert (
        rows["short"]["verdict"] == "cannot tell"
        and rows["short"]["low"] < 0 < rows["short"]["high"]
    )
    worse = {r["arm"]: r for r in paired_change(mark_failures(results), base="fix")}
    assert worse["today"]["verdict"] == "worse" and worse["today"]["against"] == "fix"


@pytest.mark.parametrize(
    ("sel", "plc", "word"),
    [(1.10, 1.05, "supports"), (0.90, 0.95, "contradicts"), (1.10, [1.05, 0.95], "inconclusive")],
)
def test_the_dual_policy_is_judged_against_each_half_per_arm(sel, plc, word):
    from doppler_lab.lab.bench.stuck import dual_against_halves

    results = []
    for arm in ("today", "short"):
        for g in ("a", "b"):
            for s in range(8):
                base = 100.0 + s + (3 if g == "b" else 0)
                p = plc[s % 2] if isinstance(plc, list) else plc
                results += [
                    _r(g, "dual", s, base, arm=arm),
                    _r(g, "sel-only", s, base * sel * (1 + 0.001 * s), arm=arm),
                    _r(g, "plc-only", s, base * p * (1 + 0.001 * s), arm=arm),
                ]
    rows = dual_against_halves(mark_failures(results))
    assert [(r["arm"], r["comparison"]) for r in rows] == [
        (a, f"dual vs {h}") for a in ("today", "short") for h in ("sel-only", "plc-only")
    ]
    by = {(r["arm"], r["comparison"]): r for r in rows}
    assert all(r["pairs"] == 16 for r in rows)  # paired by graph and seed
    sel_row = by[("short", "dual vs sel-only")]
    assert sel_row["verdict"] == ("contradicts" if sel < 1 else "supports")
    assert sel_row["lower_by"] == pytest.approx(1 - 1 / sel, abs=0.01)
    assert by[("today", "dual vs plc-only")]["verdict"] == word
    assert sel_row["wins"] + sel_row["losses"] == 16


def test_seeds_all_stuck_at_one_place_fail_against_the_best_known():
    """A cell whose seeds all stop at the teacher's 84.18 on the FFNN (best known 56.696) has
    no failure by its own best, but every seed fails against the best known placement."""
    results = [_r("ffnn_192nodes", "dual", s, 84.18) for s in range(4)]
    results += [_r("ffnn_192nodes", "dual", s, 56.70, arm="short") for s in range(4)]
    marked = mark_failures(results)
    assert not any(m["failed"] for m in marked)
    rates = {r["arm"]: r for r in failure_rates(marked)}
    assert rates["today"]["failures"] == 0 and rates["today"]["failures_above_known"] == 4
    assert rates["short"]["failures_above_known"] == 0
    assert marked[0]["above_known"] == pytest.approx(84.18 / 56.696 - 1)
    other = failure_rates(mark_failures([_r("not_a_paper_graph", "dual", 0, 1.0)] * 2))
    assert other[0]["failures_above_known"] is None


def test_an_arm_gives_stage_one_its_share_of_the_budget():
    from doppler_lab.lab.bench.stuck import ARMS, SHORT_IMITATION_SHARE, _policy_config
    from doppler_lab.lab.bench.stuck_split import SPLIT_CONFIG

    today = _policy_config(SPLIT_CONFIG, "today")
    short = _policy_config(SPLIT_CONFIG, "short-imitation")
    assert (today.episodes, today.imitation_episodes) == (4000, 2000)  # the paper's split
    assert (short.episodes, short.imitation_episodes) == (4000, 400)
    assert short.imitation_episodes == round(SHORT_IMITATION_SHARE * 4000)
    assert _policy_config(SPLIT_CONFIG, "fix").train == ARMS["fix"].train
    with pytest.raises(ConfigError, match="'long'.*today, fix, short-imitation"):
        StuckBenchConfig(arms=("today", "long"))


def test_bench_stuck_split_quick_pairs_the_two_arms(tmp_path, monkeypatch):
    from doppler_lab.lab.bench import stuck_split

    monkeypatch.chdir(tmp_path)
    record = stuck_split.run(tmp_path / "out", quick=True, progress=False)
    assert (tmp_path / "out" / "stuck-split.md").exists()
    rates = {r["arm"] for r in record["tables"]["Failure rate per arm and variant"]}
    assert rates == {"today", "short-imitation"}
    (pair,) = record["tables"]["Each arm against today, paired by graph and seed (arm / today - 1)"]
    assert pair["pairs"] == 2 and pair["verdict"] in ("better", "worse", "cannot tell")
    halves = [t for k, t in record["tables"].items() if k.startswith("The dual policy against")]
    assert halves == [[]]  # the quick run trains the dual policy alone: nothing to pair
    seeds = record["tables"]["Per seed, with Stage II diagnostics"]
    assert {(r["arm"], r["seed"]) for r in seeds} == {
        (a, s) for a in ("today", "short-imitation") for s in (0, 1)
    }


def test_stage_diagnostics_read_the_stage_curves(tmp_path):
    path = tmp_path / "metrics.csv"
    cols = [
        "update",
        "sim/sel_entropy",
        "sim/plc_entropy",
        "sim/grad_norm_sel",
        "sim/grad_norm_plc",
    ]
    with path.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(cols)
        for u in range(20):
            w.writerow([u + 1, 2.0 - 0.1 * u, 1.0, 2.0 if u < 5 else 0.5, ""])
    d = stage_diagnostics(path)
    assert d["sel_entropy_start"] == pytest.approx(1.95)  # the first tenth: updates 1-2
    assert d["sel_entropy_end"] == pytest.approx(0.15)
    assert d["sel_clipped"] == pytest.approx(0.25)
    assert d["plc_grad"] is None and d["plc_entropy_end"] == 1.0
    assert stage_diagnostics(tmp_path / "absent.csv") == {}


def test_bench_config_names_the_bad_value():
    with pytest.raises(ConfigError, match="'triple'"):
        StuckBenchConfig(variants=("dual", "triple"))
    with pytest.raises(ConfigError, match="seeds = 1"):
        StuckBenchConfig(seeds=1)


# -- SEL's temperature schedule ----------------------------------------------------------------
def test_sel_temperature_end_is_validated_and_named():
    with pytest.raises(ConfigError, match="sel_temperature_end.*-0.5"):
        TrainConfig(sel_temperature_end=-0.5)
    with pytest.raises(ConfigError, match="sel_temperature_end"):
        TrainConfig(sel_temperature_end="cold")  # type: ignore[arg-type]
    assert TrainConfig().sel_temperature_end is None  # off by default: today's numbers


def test_temperature_schedule():
    assert temperature_at(1.0, None, 0.7) == 1.0
    assert temperature_at(1.0, 0.25, 0.0) == 1.0
    assert temperature_at(1.0, 0.25, 1.0) == 0.25
    assert temperature_at(1.0, 0.25, 0.5) == pytest.approx(0.625)


@pytest.fixture(scope="module")
def task():
    """A tiny chain-matmul graph on four simulated P100s."""
    return build_from_spec("chainmm:matrices=3,scale=0.001"), make_cluster("p100x4")


def _fixed(**kw):
    return preset(
        "sim",
        **{
            "episodes": 24,
            "episodes_per_update": 4,
            "semantics": "wc",
            "sel_temperature_end": 0.25,
            "checkpoint_every": 2,
            **kw,
        },
    )


def test_sel_follows_its_schedule(task):
    graph, cluster = task
    t = Trainer(_fixed(), [graph], cluster, SMALL, progress=False)
    assert t._modes(0.0)[0].temperature == 1.0
    assert t._modes(1.0)[0].temperature == 0.25
    assert t._modes(1.0)[1].temperature == 1.5  # PLC keeps its own
    plain = Trainer(_fixed(sel_temperature_end=None), [graph], cluster, SMALL, progress=False)
    assert plain._modes(1.0)[0].temperature == 1.0
    # the schedule changes what is sampled (and so what is learned)
    a = train(_fixed(), [graph], cluster, SMALL, progress=False)
    b = train(_fixed(sel_temperature_end=None), [graph], cluster, SMALL, progress=False)
    assert a.rows != b.rows


class _Stop(Exception):
    pass


def test_with_the_fix_a_run_is_deterministic_by_seed_and_resumes_exactly(tmp_path, task):
    graph, cluster = task
    cfg = _fixed()
    full = train(cfg, [graph], cluster, SMALL, out_dir=tmp_path / "full", progress=False)
    again = train(cfg, [graph], cluster, SMALL, progress=False)
    assert again.rows == full.rows
    other = train(cfg.replace(seed=1), [graph], cluster, SMALL, progress=False)
    assert [r["sim/cost_mean"] for r in other.rows] != [r["sim/cost_mean"] for r in full.rows]

    def stop_after_3(trainer, row):
        if row["update"] == 3:
            raise _Stop

    with pytest.raises(_Stop):
        train(
            cfg, [graph], cluster, SMALL, tmp_path / "cut", callbacks=[stop_after_3], progress=False
        )
    resumed = Trainer(cfg, [graph], cluster, SMALL, tmp_path / "cut", progress=False)
    assert resumed.update == 2
    done = resumed.run()
    assert read_rows(tmp_path / "cut" / "metrics.csv") == read_rows(
        tmp_path / "full" / "metrics.csv"
    )
    for k, v in full.policy.state_dict().items():
        torch.testing.assert_close(done.policy.state_dict()[k], v, rtol=0, atol=0, msg=k)


def test_train_command_flag_sets_sels_schedule_in_the_rl_stages_only(tmp_path, capsys):
    import json

    from doppler_lab.cli import main

    args = ["train", "--stage", "imitation,sim", "--graph", "chainmm:matrices=3,scale=0.001"]
    args += ["--episodes", "4", "--episodes-per-update", "4", "--out", str(tmp_path)]
    args += ["--no-progress", "--policy-set", "hidden=16", "--policy-set", "mp_steps=2"]
    assert main(args + ["--sel-temperature-end", "0.25"]) == 0
    sim = json.loads((tmp_path / "2_sim" / "config.json").read_text())["train"]
    imit = json.loads((tmp_path / "1_imitation" / "config.json").read_text())["train"]
    assert sim["sel_temperature_end"] == 0.25 and "sel_temperature_end" not in imit  # default
    assert main(args[:-9] + ["--out", str(tmp_path / "x"), "--sel-temperature-end", "-1"]) == 2
    assert "-1" in capsys.readouterr().err


def test_sel_temperature_end_is_left_out_of_saved_configs_at_its_default():
    """Runs saved before the field existed keep the same config (and so resume)."""
    assert "sel_temperature_end" not in TrainConfig().to_dict()
    assert TrainConfig(sel_temperature_end=0.25).to_dict()["sel_temperature_end"] == 0.25
    assert TrainConfig.from_dict(TrainConfig().to_dict()) == TrainConfig()
