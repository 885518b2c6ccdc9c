"""``bench general`` end to end at toy size: the three tables, the targets, the files beside
the report, the cache of finished cases, and the CLI's options."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest

from doppler_lab.cli import main
from doppler_lab.house.errors import ConfigError
from doppler_lab.lab.bench import general as bench
from doppler_lab.policies.checkpoint import make_policy, save_checkpoint
from doppler_lab.train.general_policy import Task, general_policy_config

#: the doppler placer's budget option came with the general policy (absent: an empty column)
METHODS = (
    bench.BUDGET_METHODS
    if bench.doppler_takes_budget()
    else tuple(m for m in bench.BUDGET_METHODS if m != "doppler")
)
TASKS = (
    Task("chainmm:matrices=3,scale=0.01", "p100x4", "wc", "generator"),
    Task("ffnn:layers=2,scale=0.01", "uniform:3", "wc", "cluster"),
)


@pytest.fixture(scope="module")
def tiny_checkpoint(tmp_path_factory):
    # saved for 2 devices: the tasks have 4 and 3 (a DOPPLER policy runs on any count)
    pol = make_policy(general_policy_config().replace(hidden=16, mp_steps=1), 2, seed=3)
    return str(save_checkpoint(tmp_path_factory.mktemp("ckpt") / "general.pt", pol))


def _config(tmp_path, checkpoint, **over):
    cfg = replace(bench.quick_config(), checkpoint=checkpoint, runs_dir=str(tmp_path / "runs"))
    small = {"tasks": TASKS, "cp_seeds": 1, "samples": 1, "budget": 10, "curve": (5, 10)}
    return replace(cfg, **{**small, "finetune_episodes": 16, "scratch_episodes": 20, **over})


def test_quick_run_writes_every_table_and_a_rerun_skips_finished_cases(tmp_path, tiny_checkpoint):
    cfg = _config(tmp_path, tiny_checkpoint)
    rec = bench.run(tmp_path / "out", quick=True, config=cfg, progress=False)
    out = tmp_path / "out"
    for name in ("general.md", "general.json", "general/budget_curve.json"):
        assert (out / name).exists(), name
    assert (out / "general" / "budget_curve.html").stat().st_size > 0
    assert not list(out.glob("general_*.json"))  # reports/bench/*.json are benchmark records
    tables = rec["tables"]
    zero = next(v for k, v in tables.items() if k.startswith("Zero-shot"))
    assert [r["task"] for r in zero] == [t.name for t in TASKS] + ["geometric mean"]
    for r in zero[:-1]:
        assert r["cp"] > 0 and r["heft"] > 0 and r["general"] > 0 and r["ms"] > 0
        assert r["cp_rollout"] > 0 and r["cp_rollout_s"] >= 0
        assert r["vs_cp"] == pytest.approx((r["cp"] - r["general"]) / r["cp"])
        assert r["ratio_lb"] >= 1 - 1e-9 and r["vs_best_known"] is None  # not a paper graph
        # the placer's best of rollouts, the clustering and partitions; each of them alone
        assert r["general"] <= min(r["policy"], r["clustering"], r["partition"]) * (1 + 1e-9)
        assert r["policy_vs_cp"] == pytest.approx((r["cp"] - r["policy"]) / r["cp"])
        assert 0 <= r["from_partition"] + r["from_clustering"] <= cfg.seeds
    ratios = [r["general"] / r["cp"] for r in zero[:-1]]
    assert zero[-1]["vs_cp"] == pytest.approx(1 - (ratios[0] * ratios[1]) ** 0.5)
    # budget table: one row per task at the table's budget, then the win/tie/loss count
    budget = next(v for k, v in tables.items() if k.startswith("Budget 10 "))
    assert [r["task"] for r in budget[:-1]] == [t.name for t in TASKS]
    results = [r["result"] for r in budget[:-1]]
    assert budget[-1]["result"] == " / ".join(str(results.count(k)) for k in ("win", "tie", "loss"))
    # beside them, the same search as doppler's from HEFT's and from the clustering's
    # placement, without the policy
    for start, label in (("heft", "HEFT"), ("clustering", "the clustering")):
        col = f"ils_{start}"
        for r in budget[:-1]:
            assert r[col] > 0
            assert r[f"doppler_vs_{col}"] == pytest.approx((r[col] - r["doppler"]) / r[col])
        adds = rec["summary"][f"budget 10: doppler vs the same search from {label} (ils-{start})"]
        assert adds.endswith(f" of 2; geometric mean of doppler / ils-{start} " + format(
            (budget[0]["doppler"] / budget[0][col] * budget[1]["doppler"] / budget[1][col])
            ** 0.5, ".3f"))  # fmt: skip
    # and the doppler search from the policy alone (no heuristic proposal among its starts)
    assert all(r["policy_alone"] > 0 for r in budget[:-1])
    curve = json.loads((out / "general" / "budget_curve.json").read_text())["curve"]
    gm = [c for c in curve if c["task"] == "geometric mean"]
    assert {(c["method"], c["sim_calls"]) for c in gm} == {(m, n) for m in METHODS for n in (5, 10)}
    # fine-tuning vs scratch on the first task (no paper graph here), with its curves
    train = next(v for k, v in tables.items() if k.startswith("Fine-tuning"))
    # the network fine-tuned for as many episodes as scratch, beside the short fine-tuning
    assert [r["method"] for r in train] == [
        "zero-shot", "fine-tuned", "fine-tuned, network", "scratch"
    ]  # fmt: skip
    assert [r["episodes"] for r in train] == [0, 16, 20, 20]
    assert all(r["train_s"] > 0 for r in train[1:])
    # found: the best placement simulated on the way (the adapter's policy settles on it)
    assert all(r["found"] is not None for r in train[1:])
    assert train[1]["makespan"] <= train[1]["found"] * (1 + 1e-9)
    pair = [r["makespan"] for r in train[2:]]
    long = rec["summary"]["equal episodes: network fine-tuned (20) vs scratch"]
    assert long.startswith(f"{int(pair[0] <= pair[1] * 1.01)} of 1 at most 1% worse")
    assert long.endswith(f"fine-tuned / scratch {pair[0] / pair[1]:.3f}")
    curves = json.loads((out / "general" / "training_curves.json").read_text())["curves"]
    assert {c["run"] for c in curves} == {"finetune", "finetune-long", "scratch"}
    assert min(c["episode"] for c in curves) == 0
    targets = {t["target"]: t for t in tables["Targets"]}
    assert len(targets) == 9 and all(t["passed"] in (True, False, None) for t in targets.values())
    alone = targets["zero-shot, the policy's rollouts alone: geometric mean below CP"]
    assert alone["value"] == pytest.approx(zero[-1]["policy_vs_cp"])
    # a rerun computes nothing: every case's result.json stays as it was
    done = sorted((tmp_path / "runs_quick").rglob("result.json"))
    assert len(done) == 2 + 2 * 5 + 3  # zero-shot and budget (5 methods) per task, 3 trainings
    stamps = [p.stat().st_mtime_ns for p in done]
    again = bench.run(tmp_path / "out", quick=True, config=cfg, progress=False)
    assert [p.stat().st_mtime_ns for p in done] == stamps
    assert again["tables"] == rec["tables"]


def test_skip_training_and_filter(tmp_path, tiny_checkpoint):
    cfg = _config(tmp_path, tiny_checkpoint, skip_training=True, task_filter=("ffnn",))
    res = bench.evaluate(cfg, tmp_path / "runs")
    assert [r["task"] for r in res.zero_shot] == [TASKS[1].name, "geometric mean"]
    assert res.training == [] and res.curves == []
    with pytest.raises(ConfigError, match="no task matches"):
        bench.bench_tasks(replace(cfg, task_filter=("nothing",)))


def test_the_equal_episodes_fine_tuning_can_be_left_out(tmp_path, tiny_checkpoint, capsys):
    cfg = _config(tmp_path, tiny_checkpoint, finetune_long=False, task_filter=("ffnn",))
    res = bench.evaluate(cfg, tmp_path / "runs")
    assert [r["method"] for r in res.training] == ["zero-shot", "fine-tuned", "scratch"]
    assert bench.long_comparison(res.training) is None
    assert bench.make_config(skip_finetune_long=None).finetune_long is True
    with pytest.raises(ConfigError, match="finetune_long = 'no', expected true or false"):
        bench.GeneralBenchConfig(finetune_long="no")
    with pytest.raises(ConfigError, match="fine-tuning setting 'lrr' is not a Stage II field"):
        bench.GeneralBenchConfig(long_train={"lrr": 0.1})
    assert main(["bench", "sim", "--skip-finetune-long"]) == 2
    assert "--skip-finetune-long is an option of bench general" in capsys.readouterr().err


def test_bad_settings_are_named():
    with pytest.raises(ConfigError, match="group 'papers'"):
        bench.GeneralBenchConfig(groups=("papers",))
    with pytest.raises(ConfigError, match="curve"):
        bench.GeneralBenchConfig(curve=(0, 10))
    with pytest.raises(ConfigError, match="scratch_imitation_episodes 400"):
        bench.GeneralBenchConfig(scratch_episodes=400)
    with pytest.raises(ConfigError, match="--curve '1,x'"):
        bench.parse_budgets("1,x")


def test_finetune_settings_merge_and_bad_ones_are_named(capsys):
    net = {"finetune_method": "network"}
    cfg = bench.make_config(finetune_set={"lr": 0.03, "episodes_per_update": 4}, **net)
    assert cfg.finetune_train == {
        "lr": 0.03,
        "lr_warmup": 3,
        "tempered_loss": True,
        "episodes_per_update": 4,
    }
    stages, _ = bench._training_setup(cfg, TASKS[0], "finetune", 2)
    st = stages[0]
    assert (st.lr, st.episodes_per_update, st.lr_warmup, st.seed) == (0.03, 4, 3, 2)
    assert st.episodes == cfg.finetune_episodes and st.semantics == TASKS[0].semantics
    with pytest.raises(ConfigError, match="'episodes' is set by the bench"):
        bench.make_config(finetune_set={"episodes": 5}, **net)
    with pytest.raises(ConfigError, match="'lrr' is not a Stage II field"):
        bench.GeneralBenchConfig(finetune_train={"lrr": 1e-3})
    with pytest.raises(ConfigError, match="lr"):
        bench.make_config(finetune_set={"lr": -1.0}, **net)
    # the adapter (the default): its own fields; the budget and the proposals are the bench's
    cfg = bench.make_config(finetune_set={"lr": 0.5, "temperature": 3.0}, partitions=2)
    acfg = cfg.adapt_config()
    assert (acfg.lr, acfg.temperature, acfg.proposals.partitions) == (0.5, 3.0, 2)
    assert (acfg.episodes, acfg.proposals.samples) == (cfg.finetune_episodes, cfg.samples)
    assert cfg.finetune_train == bench.GeneralBenchConfig().finetune_train
    with pytest.raises(ConfigError, match="'samples', which the bench sets itself"):
        bench.make_config(finetune_set={"samples": 3})
    with pytest.raises(ConfigError, match="finetune_adapter field 'episodes_per_update'"):
        bench.make_config(finetune_set={"episodes_per_update": 4})
    with pytest.raises(ConfigError, match=r"adapter config: setting lr=-1.0; expected a finite"):
        bench.make_config(finetune_set={"lr": -1.0})
    with pytest.raises(ConfigError, match="finetune_episodes = 10 do not cover"):
        bench.GeneralBenchConfig(finetune_episodes=10)
    with pytest.raises(ConfigError, match="finetune_method = 'eas'"):
        bench.GeneralBenchConfig(finetune_method="eas")
    argv = ["bench", "general", "--finetune-method", "network", "--skip-training"]
    assert main([*argv, "--finetune-set", "seed=3"]) == 2
    assert "'seed' is set by the bench" in capsys.readouterr().err
    assert main(["bench", "general", "--finetune-set", "seed=3", "--skip-training"]) == 2
    assert "finetune_adapter field 'seed'" in capsys.readouterr().err
    assert main(["bench", "sim", "--finetune-set", "lr=0.1"]) == 2
    assert "--finetune-set is an option of bench general" in capsys.readouterr().err


def test_cli_options_belong_to_bench_general(capsys):
    assert main(["bench", "sim", "--budget", "5"]) == 2
    assert "--budget is an option of bench general" in capsys.readouterr().err
    assert main(["bench", "sim", "--skip-clustering"]) == 2
    assert "--skip-clustering is an option of bench general" in capsys.readouterr().err
    with pytest.raises(ConfigError, match="clustering = 'no', expected true or false"):
        bench.GeneralBenchConfig(clustering="no")
    assert bench.make_config(clustering=False).adapt_config().proposals.clustering is False
    with pytest.raises(ConfigError, match="'clustering', which the bench sets itself"):
        bench.make_config(finetune_set={"clustering": False})


def test_cli_runs_bench_general_with_its_options(tmp_path, monkeypatch, tiny_checkpoint, capsys):
    monkeypatch.chdir(tmp_path)  # the run cache is relative to the working folder
    argv = ["bench", "general", "--quick", "--no-progress", "--out", "out"]
    argv += ["--checkpoint", tiny_checkpoint, "--curve", "5,10", "--budget", "10"]
    argv += ["--skip-training", "--task", "ffnn", "--seeds", "1", "--partitions", "0"]
    argv += ["--skip-clustering"]
    assert main(argv) == 0, capsys.readouterr().err
    rec = json.loads((tmp_path / "out" / "general.json").read_text())
    zero = next(v for k, v in rec["tables"].items() if k.startswith("Zero-shot"))
    assert "+ 0 partitions" in next(k for k in rec["tables"] if k.startswith("Zero-shot"))
    assert zero[0]["general"] == zero[0]["policy"] and zero[0]["from_partition"] == 0
    assert zero[0]["from_clustering"] == 0 and " + clustering" not in "".join(rec["tables"])
    assert len(rec["tables"]["Targets"]) == 7  # no rows of the rollouts alone: they are general
    assert rec["summary"]["tasks"] == 1 and rec["summary"]["checkpoint"] == tiny_checkpoint
    curve = json.loads((tmp_path / "out" / "general" / "budget_curve.json").read_text())
    assert curve["budget"] == 10
    assert {c["sim_calls"] for c in curve["curve"]} == {5, 10}
    assert (tmp_path / "runs" / "bench_general_quick").is_dir()


def test_found_leaves_out_the_curriculum_stages_on_fewer_devices():
    # a device curriculum's first stages ran on 4 of the 6 devices: another machine
    from doppler_lab.hardware.cluster import make_cluster

    six = make_cluster("uniform", 6)
    plan = [("imitation", six.first(4)), ("sim", six.first(4)), ("sim", six)]
    rows = [
        [{"imitation/cost_best": 1.0}],
        [{"sim/cost_best": 2.0}, {"sim/cost_best": None}],
        [{"sim/cost_best": 5.0, "sim/cost_min": 4.0}, {"sim/cost_best": 3.0}],
    ]
    assert bench.best_found(plan, rows, 6) == 3.0
    assert bench.best_found(plan, rows, 4) == 1.0
    assert bench.best_found(plan[:1], [[{"imitation/loss": 0.5}]], 4) is None


def test_training_seeds(capsys):
    """Two seeds by default (single runs from scratch vary by up to a third), one when quick,
    any number from ``--train-seeds``."""
    assert bench.make_config().train_seeds == 2
    assert bench.make_config().seeds == 10 and bench.make_config(quick=True).seeds == 1
    assert bench.make_config(quick=True).train_seeds == 1
    assert bench.make_config(quick=True, train_seeds=3).train_seeds == 3
    with pytest.raises(ConfigError, match="train_seeds"):
        bench.GeneralBenchConfig(train_seeds=0)
    assert main(["bench", "sim", "--train-seeds", "2"]) == 2
    assert "--train-seeds is an option of bench general" in capsys.readouterr().err


def test_fine_tuning_has_seeds_of_its_own(tmp_path, tiny_checkpoint, capsys):
    """The short fine-tuning runs ``finetune_seeds`` seeds (cheap; 8 by default), scratch and the
    long fine-tuning ``train_seeds``; the table's seeds column and mean follow."""
    assert bench.make_config().finetune_seeds == 8
    assert bench.make_config(quick=True).finetune_seeds == 1
    cfg = _config(
        tmp_path, tiny_checkpoint, finetune_seeds=3, task_filter=("ffnn",), finetune_long=False
    )
    res = bench.evaluate(cfg, tmp_path / "runs")
    by = {r["method"]: r for r in res.training}
    assert by["fine-tuned"]["seeds"] == 3 and by["scratch"]["seeds"] == 1
    done = sorted((tmp_path / "runs").rglob("result.json"))
    finetune = [p for p in done if "finetune" in str(p)]
    assert len(finetune) == 3
    mean = np.mean([json.loads(p.read_text())["makespan"] for p in finetune])
    assert by["fine-tuned"]["makespan"] == pytest.approx(mean)
    with pytest.raises(ConfigError, match="finetune_seeds = 0, expected an integer >= 1"):
        bench.GeneralBenchConfig(finetune_seeds=0)
    assert main(["bench", "sim", "--finetune-seeds", "2"]) == 2
    assert "--finetune-seeds is an option of bench general" in capsys.readouterr().err
