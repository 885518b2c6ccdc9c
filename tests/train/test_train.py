"""Training: determinism by seed, resume after a real interruption, schedules, improvement."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from doppler_lab.hardware.cluster import make_cluster
from doppler_lab.house.errors import CheckpointError, ConfigError
from doppler_lab.policies.checkpoint import make_policy
from doppler_lab.policies.policy_config import PolicyConfig
from doppler_lab.search.learned import best_of_rollouts
from doppler_lab.train import TrainConfig, Trainer, preset, read_rows, train
from doppler_lab.train.loop import _Baseline, advantages, lr_factor
from doppler_lab.train.metrics import MetricsLog
from doppler_lab.workloads import build_from_spec

SMALL = PolicyConfig(hidden=16, head_hidden=16, mp_steps=2, num_bases=4)


@pytest.fixture(scope="module")
def graph():
    return build_from_spec("chainmm:matrices=3,scale=0.001")


@pytest.fixture(scope="module")
def cluster():
    return make_cluster("p100x4")


def _weights(policy):
    return {k: v.detach().clone() for k, v in policy.state_dict().items()}


def _same_weights(a, b):
    assert a.keys() == b.keys()
    for k in a:
        torch.testing.assert_close(a[k], b[k], rtol=0, atol=0, msg=k)


def _sim(**kw):
    return preset("sim", **{"episodes": 24, "episodes_per_update": 4, "semantics": "wc", **kw})


def test_same_seed_same_run(graph, cluster):
    cfg = _sim(sil_coef=0.5, noise=0.1)
    a = train(cfg, [graph], cluster, SMALL, progress=False)
    b = train(cfg, [graph], cluster, SMALL, progress=False)
    assert a.rows == b.rows
    _same_weights(_weights(a.policy), _weights(b.policy))
    c = train(cfg.replace(seed=1), [graph], cluster, SMALL, progress=False)
    assert c.rows != a.rows


class _Stop(Exception):
    pass


@pytest.mark.parametrize("stage", ["imitation", "sim", "anchor", "ppo"])
def test_resume_after_interruption(tmp_path, graph, cluster, stage):
    cfg = {
        "imitation": preset("imitation", episodes=24, episodes_per_update=4),
        "sim": _sim(sil_coef=0.5, noise=0.1),
        "ppo": _sim(sil_coef=0.5, noise=0.1, estimator="ppo", ppo_epochs=3),
        "anchor": _sim(
            anchor=True, sil_coef=1.0, sil_epochs=2, epsilon_start=0.1, explore="perturb"
        ),
    }[stage].replace(checkpoint_every=2)
    full = train(cfg, [graph], cluster, SMALL, out_dir=tmp_path / "full", progress=False)

    def stop_after_5(trainer, row):
        if row["update"] == 5:
            raise _Stop

    with pytest.raises(_Stop):
        train(
            cfg, [graph], cluster, SMALL, tmp_path / "cut", callbacks=[stop_after_5], progress=False
        )
    # killed after update 5: the last checkpoint holds 4 updates, the log 5 rows
    assert len(read_rows(tmp_path / "cut" / "metrics.csv")) == 5
    trainer = Trainer(cfg, [graph], cluster, SMALL, tmp_path / "cut", progress=False)
    before = trainer.train_s  # the first session's training time, from the checkpoint
    assert trainer.update == 4 and before > 0
    resumed = trainer.run()
    assert resumed.summary["train_s"] > before  # both sessions count
    assert read_rows(tmp_path / "cut" / "metrics.csv") == read_rows(
        tmp_path / "full" / "metrics.csv"
    )
    _same_weights(_weights(resumed.policy), _weights(full.policy))
    assert (tmp_path / "cut" / "policy.pt").exists()
    saved = json.loads((tmp_path / "cut" / "config.json").read_text())
    assert saved["train"]["stage"] == cfg.stage and saved["policy"]["hidden"] == 16


def test_resume_refuses_another_config(tmp_path, graph, cluster):
    cfg = _sim()
    train(cfg.replace(episodes=8), [graph], cluster, SMALL, tmp_path, progress=False)
    with pytest.raises(ConfigError, match="lr = 0.03, now 0.5"):
        Trainer(cfg.replace(episodes=8, lr=0.5), [graph], cluster, SMALL, tmp_path, progress=False)


def test_learning_rate_really_changes(graph, cluster):
    cfg = _sim(lr_schedule="linear", lr_final=0.1, lr_warmup=0)
    r = train(cfg, [graph], cluster, SMALL, progress=False)
    lrs = [row["sim/lr_plc"] for row in r.rows]
    assert lrs[0] == pytest.approx(3e-2) and lrs[-1] == pytest.approx(3e-3)
    assert all(a > b for a, b in zip(lrs, lrs[1:]))
    sel = [row["sim/lr_sel"] for row in r.rows]
    assert sel == lrs
    assert lr_factor("cosine", 0.0, 0, 10) == 1 and lr_factor(
        "cosine", 0.0, 9, 10
    ) == pytest.approx(0)
    assert lr_factor("constant", 0.0, 5, 10) == 1
    # warm-up: the first updates ramp up to the schedule
    ramp = [lr_factor("constant", 0.0, i, 10, warmup=3) for i in range(5)]
    assert ramp == pytest.approx([0.25, 0.5, 0.75, 1.0, 1.0])
    # ... over at most a third of the stage: 6 updates with a warm-up of 10 reach the rate
    short = [lr_factor("constant", 0.0, i, 6, warmup=10) for i in range(4)]
    assert short == pytest.approx([1 / 3, 2 / 3, 1.0, 1.0])


def test_separate_optimisers(graph, cluster):
    t = Trainer(_sim(lr_sel=5e-4, lr_warmup=0), [graph], cluster, SMALL, progress=False)
    assert set(t.optimizers) == {"sel", "plc"}
    assert t.optimizers["sel"].param_groups[0]["lr"] == 5e-4
    sel_params = {id(p) for p in t.policy.sel.parameters()}
    assert not sel_params & {id(p) for g in t.optimizers["plc"].param_groups for p in g["params"]}


def test_gradient_norm_per_optimiser(graph, cluster):
    r = train(_sim(episodes=8), [graph], cluster, SMALL, progress=False)
    for row in r.rows:
        sel, plc = row["sim/grad_norm_sel"], row["sim/grad_norm_plc"]
        assert sel > 0 and plc > 0
        assert row["sim/grad_norm"] == pytest.approx(np.hypot(sel, plc))
    one = train(_sim(episodes=4), [graph], cluster, SMALL.replace(kind="sel-only"), progress=False)
    assert one.rows[0]["sim/grad_norm_plc"] is None
    assert one.rows[0]["sim/grad_norm"] == pytest.approx(one.rows[0]["sim/grad_norm_sel"])


def test_metrics_file_with_fewer_columns_resumes(tmp_path):
    old = MetricsLog(tmp_path / "m.csv", ["update", "episode", "graph", "sim/loss"])
    old.append({"update": 1, "episode": 4, "graph": "g", "sim/loss": 0.5})
    old.append({"update": 2, "episode": 8, "graph": "g", "sim/loss": 0.4})
    cols = ["update", "episode", "graph", "sim/loss", "sim/grad_norm_sel"]
    new = MetricsLog(tmp_path / "m.csv", cols, keep_rows=1)
    new.append({"update": 2, "episode": 8, "graph": "g", "sim/loss": 0.3, "sim/grad_norm_sel": 1.0})
    rows = read_rows(tmp_path / "m.csv")
    assert [r["sim/loss"] for r in rows] == [0.5, 0.3]
    assert rows[0]["sim/grad_norm_sel"] is None and rows[1]["sim/grad_norm_sel"] == 1.0
    with pytest.raises(CheckpointError, match="has columns"):
        MetricsLog(tmp_path / "m.csv", ["update", "episode", "other"], keep_rows=1)


def test_advantages():
    costs = np.array([1.0, 2.0, 3.0])
    adv, base = advantages(costs, _Baseline(), "batch", 0.9, "raw")
    np.testing.assert_allclose(adv, [1.5, 0.0, -1.5])
    st = _Baseline()
    adv, base = advantages(costs, st, "mean", 0.9, "raw")
    np.testing.assert_allclose(adv, [1.0, 0.0, -1.0])
    adv2, base2 = advantages(np.array([4.0]), st, "mean", 0.9, "raw")
    assert base2 == pytest.approx(2.5) and adv2[0] == pytest.approx(-1.5)
    partial = np.array([[0.0, 1.0], [0.0, 0.5], [0.0, 0.0]])
    adv, _ = advantages(costs, _Baseline(), "batch", 0.9, "raw", partial)
    assert adv.shape == (3, 2)
    np.testing.assert_allclose(adv[:, 0], [1.5, 0.0, -1.5])


def test_elite_advantages_reward_only_the_best_quantile():
    costs = np.array([5.0, 1.0, 4.0, 2.0, 3.0, 6.0, 7.0, 8.0])
    partial = np.zeros((8, 3))  # ignored: whole episodes only
    adv, q = advantages(costs, _Baseline(), "batch", 0.9, "elite", partial, 0.25)
    assert adv.shape == (8,)
    assert q == pytest.approx(np.quantile(costs, 0.25))
    assert (adv[costs >= q] == 0).all() and (adv[costs < q] > 0).all()
    np.testing.assert_allclose(adv, np.maximum(q - costs, 0) / costs.std())
    # the whole batch at one cost: nothing to learn
    same, _ = advantages(np.full(4, 2.0), _Baseline(), "batch", 0.9, "elite")
    assert (same == 0).all()
    with pytest.raises(ConfigError, match="elite_quantile"):
        preset("sim", advantage="elite", elite_quantile=0.0)


@pytest.fixture(scope="module")
def paper_chain():
    from doppler_lab.io.documents import read_paper_graph

    from paper_graphs import paper_graph_path

    return read_paper_graph(paper_graph_path("chain_mm_112nodes")), make_cluster("uniform", 4)


def _greedy_makespan(policy, g, cl) -> float:
    from doppler_lab.timing.sim import Simulator

    return Simulator(g, cl).makespan(best_of_rollouts(policy, g, cl, 0).placement)


def test_imitation_improves_on_the_starting_policy(paper_chain):
    g, cl = paper_chain
    start = make_policy(SMALL, 4, 0)
    # 24 updates, the first 8 warming up
    cfg = preset("imitation", episodes=192, episodes_per_update=8, lr=1e-2)
    r = train(cfg, [g], cl, SMALL, progress=False)
    first, last = r.rows[0], r.rows[-1]
    assert last["imitation/sel_teacher_prob"] > first["imitation/sel_teacher_prob"] + 0.1
    assert last["imitation/plc_teacher_prob"] > first["imitation/plc_teacher_prob"] + 0.05
    assert _greedy_makespan(r.policy, g, cl) < _greedy_makespan(start, g, cl)


@pytest.mark.parametrize("seed", [0, 1])
def test_reinforce_improves_on_the_starting_policy(paper_chain, seed):
    g, cl = paper_chain
    cfg = preset("sim", episodes=256, episodes_per_update=16, lr=1e-2, sil_coef=1.0, seed=seed)
    start = make_policy(SMALL, 4, seed)  # the weights the run starts from
    r = train(cfg, [g], cl, SMALL, progress=False)
    means = [row["sim/cost_mean"] for row in r.rows]
    assert np.mean(means[-3:]) < np.mean(means[:3])
    assert _greedy_makespan(r.policy, g, cl) < _greedy_makespan(start, g, cl)


def test_warm_start_and_kind_check(tmp_path, graph, cluster):
    r = train(_sim(episodes=4), [graph], cluster, SMALL, tmp_path / "a", progress=False)
    w = train(_sim(episodes=4), [graph], cluster, SMALL, init=r.checkpoint, progress=False)
    assert w.policy.config == r.policy.config
    with pytest.raises(CheckpointError, match="holds a 'dual' policy"):
        Trainer(
            _sim(), [graph], cluster, PolicyConfig(kind="gdp"), init=r.checkpoint, progress=False
        )


def test_config_validation():
    with pytest.raises(ConfigError, match="stage"):
        TrainConfig(stage="nope")
    with pytest.raises(ConfigError, match="episodes"):
        TrainConfig(episodes=0)
    with pytest.raises(ConfigError, match="imitation_coef"):
        TrainConfig(stage="imitation", imitation_coef=0.0, pg_coef=0.0)
    assert preset("released-sim").episodes_per_update == 1


def test_several_graphs_in_one_run(graph, cluster):
    other = build_from_spec("ffnn:scale=0.001")
    r = train(_sim(episodes=16), [graph, other], cluster, SMALL, progress=False)
    assert [row["graph"] for row in r.rows] == [graph.name, other.name] * 2
    assert set(r.summary["best_cost"]) == {graph.name, other.name}
