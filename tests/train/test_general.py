"""The general policy: its task distribution, a held-out set training never draws, training
over graphs on clusters of different device counts (resumable), the train-general command."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from doppler_lab.cli import main
from doppler_lab.hardware.cluster import make_cluster
from doppler_lab.house.errors import ClusterError, ConfigError, PlacementError
from doppler_lab.ir.placement import Placement
from doppler_lab.policies.checkpoint import load_policy
from doppler_lab.policies.policy_config import PolicyConfig
from doppler_lab.train import Trainer, preset, read_rows, train
from doppler_lab.train.general_policy import (
    Task,
    held_out_tasks,
    in_training_distribution,
    sample_tasks,
    settle_anchor,
)
from doppler_lab.workloads import build_from_spec
from doppler_lab.workloads.specs import cluster_from_spec, graph_from_spec

SMALL = PolicyConfig(hidden=16, head_hidden=16, mp_steps=2, num_bases=4, estimate="wc")


def test_task_pool_is_seeded_distinct_and_in_distribution():
    a = sample_tasks(24, seed=3)
    assert a == sample_tasks(24, seed=3) and a != sample_tasks(24, seed=4)
    assert len(set(a)) == 24
    assert all(in_training_distribution(t) for t in a)
    devices = {cluster_from_spec(t.cluster).num_devices for t in sample_tasks(60, seed=0)}
    assert {2, 3, 4, 8} <= devices
    assert {t.semantics for t in a} == {"paper", "wc"}


def test_held_out_tasks_are_never_drawn_in_training():
    held = held_out_tasks(("generator", "cluster"))
    assert {t.group for t in held} == {"generator", "cluster"}
    assert not [t.name for t in held if in_training_distribution(t)]
    # each way out of the distribution is seen as such
    assert not in_training_distribution(Task("chainmm:matrices=7", "p100x4", "wc"))
    assert not in_training_distribution(Task("ffnn:scale=3", "p100x4", "wc"))
    assert not in_training_distribution(
        Task("ffnn:layers=2,blocks=2,batch_blocks=2", "h100x8", "wc")
    )
    assert in_training_distribution(Task("ffnn:layers=2,blocks=2,batch_blocks=2", "v100x8", "wc"))
    assert not in_training_distribution(Task("paper:ffnn_192nodes", "uniform:4", "paper"))


def test_task_clusters_are_checked():
    assert cluster_from_spec("uniform:6").num_devices == 6
    for bad in ("uniform:x", "uniform:0", "p100x4:2"):
        with pytest.raises(ClusterError, match=rf"cluster '{bad}': .*; expected "):
            cluster_from_spec(bad)


class _Stop(Exception):
    pass


def test_one_run_over_clusters_of_different_device_counts_resumes_exactly(tmp_path):
    g = build_from_spec("chainmm:matrices=3,scale=0.001")
    clusters = [make_cluster("uniform", 2), make_cluster("p100x4"), make_cluster("uniform", 8)]
    cfg = preset("sim", episodes=24, episodes_per_update=4, semantics="wc", checkpoint_every=2)
    full = train(cfg, [g, g, g], clusters, SMALL, tmp_path / "full", progress=False)
    header = json.loads((tmp_path / "full" / "config.json").read_text())
    assert header["num_devices"] == [2, 4, 8]
    # every update placed its graph on its own cluster's devices
    assert [r["graph"] for r in full.rows][:3] == [g.name] * 3

    def stop(trainer, row):
        if row["update"] == 5:
            raise _Stop

    with pytest.raises(_Stop):
        train(cfg, [g, g, g], clusters, SMALL, tmp_path / "cut", callbacks=[stop], progress=False)
    resumed = Trainer(cfg, [g, g, g], clusters, SMALL, tmp_path / "cut", progress=False).run()
    assert read_rows(tmp_path / "cut" / "metrics.csv") == read_rows(
        tmp_path / "full" / "metrics.csv"
    )
    for k, v in full.policy.state_dict().items():
        torch.testing.assert_close(resumed.policy.state_dict()[k], v, rtol=0, atol=0)
    # the policy saved from a mixed run places on any of the counts
    for d in (2, 6):
        pol, _ = load_policy(tmp_path / "full" / "policy.pt", num_devices=d)
        assert pol.num_devices == d
    with pytest.raises(ConfigError, match="2 clusters for 3 graphs"):
        Trainer(cfg, [g, g, g], clusters[:2], SMALL, progress=False)


def test_train_general_command_trains_resumes_and_ships(tmp_path, capsys):
    out, dest = tmp_path / "run", tmp_path / "ckpts"
    args = [
        "train-general",
        "--out",
        str(out),
        "--tasks",
        "2",
        "--imitation-episodes",
        "8",
        "--anchor-episodes",
        "16",
        "--sim-episodes",
        "16",
        "--no-progress",
    ]
    assert main([*args, "--ship", str(dest)]) == 0
    rows = read_rows(out / "3_sim" / "metrics.csv")
    # the anchor stage started from each task's search with the Stage I policy
    with np.load(out / "anchors-policy-2000.npz") as z:
        assert len(z.files) == 2
    assert len(read_rows(out / "2_sim" / "metrics.csv")) == 1
    tasks = json.loads((out / "tasks.json").read_text())
    assert len(tasks) == 2 and len(rows) == 1
    index = json.loads((dest / "index.json").read_text())["checkpoints"]["doppler/general"]
    assert index["command"] == (
        "doppler-lab train-general --tasks 2 --imitation-episodes 8 --anchor-episodes 16 "
        "--sim-episodes 16"
    )
    assert index["episodes"] == {"imitation": 8, "anchor": 16, "sim": 16}
    assert index["size_bytes"] > 0
    assert (
        "## doppler/general: one policy for any graph and cluster"
        in (dest / "README.md").read_text()
    )
    pol, doc = load_policy(dest / "doppler" / "general.pt", ["dual"], num_devices=5)
    assert pol.config.estimate == "wc"
    # a second call finds both stages finished: same weights, no new rows
    assert main(args) == 0
    assert read_rows(out / "3_sim" / "metrics.csv") == rows
    again, _ = load_policy(out / "3_sim" / "policy.pt")
    for k, v in pol.state_dict().items():
        torch.testing.assert_close(again.state_dict()[k], v, rtol=0, atol=0)
    capsys.readouterr()
    assert main([*args[:-1], "--tasks", "0"]) == 2
    assert "--tasks" in capsys.readouterr().err


def test_a_run_without_episodes_claims_no_tasks(tmp_path, capsys):
    """``train-general --init CKPT`` with 0 episodes ships its init as it is: it trains on no
    task, so it writes no ``tasks.json`` and its index record says 0 tasks and no pool
    shares (a record once said 96 tasks for such a run)."""
    from types import SimpleNamespace

    from doppler_lab.policies.checkpoint import make_policy, save_checkpoint
    from doppler_lab.train.general_policy import run_record

    init = tmp_path / "init.pt"
    save_checkpoint(init, make_policy(SMALL.replace(layout="doppler9"), 4, seed=0))
    out, dest = tmp_path / "run", tmp_path / "ckpts"
    args = [
        "train-general", "--out", str(out), "--tasks", "2", "--imitation-episodes", "0",
        "--anchor-episodes", "0", "--sim-episodes", "0", "--memory-share", "0.25",
        "--paper-cost-share", "0.5", "--init", str(init), "--no-progress", "--json",
        "--ship", str(dest),
    ]  # fmt: skip
    assert main(args) == 0
    summary = json.loads(capsys.readouterr().out)
    assert not (out / "tasks.json").exists()
    assert (out / "policy.pt").exists()
    record = json.loads((dest / "index.json").read_text())["checkpoints"]["doppler/general"]
    for got in (record, summary):
        assert got["tasks"] == 0 and got["episodes"] == {} and got["train_s"] == 0.0
        assert "memory_share" not in got and "paper_cost_share" not in got
    # a run that trains records its pool: the tasks and their shares
    trained = run_record(
        [SimpleNamespace(policy=load_policy(init)[0], summary={})],
        [SimpleNamespace(episodes=8, anchor=False, stage="sim", to_dict=dict)],
        2, 0, None, 0.5, 0.25,
    )  # fmt: skip
    assert trained["tasks"] == 2 and trained["episodes"] == {"sim": 8}
    assert (trained["paper_cost_share"], trained["memory_share"]) == (0.5, 0.25)


def test_general_pool_graphs_are_built_with_their_parameters():
    t = Task("llama_block:blocks=2,batch_blocks=1,kv_heads=8,scale=0.5", "cpu:3", "paper")
    g, c = t.build()
    assert c.num_devices == 3 and g.num_nodes == build_from_spec(t.graph).num_nodes


def test_anchor_stage_starts_from_the_given_placements():
    g = build_from_spec("chainmm:matrices=3,scale=0.001")
    clusters = [make_cluster("uniform", 2), make_cluster("p100x4")]
    cfg = preset(
        "sim", episodes=8, episodes_per_update=4, semantics="wc", anchor=True, sil_coef=1.0
    )
    start = [np.zeros(g.num_nodes, dtype=np.int64), np.arange(g.num_nodes) % 4]
    t = Trainer(cfg, [g, g], clusters, SMALL, progress=False, anchors=[start[0], None])
    assert t.anchors[1] is None
    cost, dev = t.anchors[0]
    np.testing.assert_array_equal(dev, start[0])
    assert cost == pytest.approx(t.cost_fns[0](Placement(start[0])))
    t = Trainer(cfg, [g, g], clusters, SMALL, progress=False, anchors=start)
    np.testing.assert_array_equal(t.anchors[1][1], start[1])
    t.run()  # a better placement found on the way may replace an anchor, never a worse one
    assert t.anchors[1][0] <= t.cost_fns[1](Placement(start[1])) + 1e-12
    with pytest.raises(ConfigError, match="1 anchor placements for 2 graphs"):
        Trainer(cfg, [g, g], clusters, SMALL, progress=False, anchors=start[:1])
    bad = np.full(g.num_nodes, 2)
    with pytest.raises(PlacementError, match="device"):
        Trainer(cfg, [g, g], clusters, SMALL, progress=False, anchors=[bad, None])


def test_general_stages_leave_out_empty_ones():
    from doppler_lab.train.general_policy import general_stages

    only_sim = general_stages(imitation_episodes=0, sim_episodes=32, anchor_episodes=0)
    assert [(s.stage, s.episodes, s.anchor) for s in only_sim] == [("sim", 32, False)]
    three = general_stages(8, 16, 0, anchor_episodes=24)
    assert [(s.stage, s.episodes, s.anchor) for s in three] == [
        ("imitation", 8, False),
        ("sim", 24, True),
        ("sim", 16, False),
    ]
    with pytest.raises(ConfigError, match="at least one stage"):
        general_stages(0, 0, anchor_episodes=0)


def test_task_timed_policy_reads_each_task_under_its_semantics_timing():
    g = build_from_spec("chainmm:matrices=3,scale=0.001")
    clusters = [make_cluster("uniform", 2), make_cluster("p100x4")]
    pcfg = SMALL.replace(estimate="task")
    cfg = preset("sim", episodes=8, episodes_per_update=4, semantics="wc")
    trainer = Trainer(cfg, [g, g], clusters, pcfg, progress=False, semantics=["paper", "wc"])
    # paper's model is est; the costs judge each graph under its own semantics
    assert [c.estimate for c in trainer.contexts] == ["est", "wc"]
    assert [c.sim.semantics for c in trainer.cost_fns] == ["paper", "wc"]
    assert trainer.header["semantics"] == ["paper", "wc"]
    assert trainer.policy.config.estimate == "task"  # kept, not resolved at creation
    # a fixed model ignores the semantics
    fixed = Trainer(cfg, [g, g], clusters, SMALL, progress=False, semantics=["paper", "wc"])
    assert [c.estimate for c in fixed.contexts] == ["wc", "wc"]
    with pytest.raises(ConfigError, match="1 semantics for 2 graphs"):
        Trainer(cfg, [g, g], clusters, pcfg, progress=False, semantics=["wc"])
    with pytest.raises(ConfigError, match="graph semantics 'real'"):
        Trainer(cfg, [g, g], clusters, pcfg, progress=False, semantics=["wc", "real"])
    assert pcfg.context_estimate("paper") == "est" and pcfg.context_estimate("wc") == "wc"
    assert pcfg.context_estimate(None) == "est" and SMALL.context_estimate("paper") == "wc"


def test_graphs_per_step_averages_updates_into_one_step_and_resumes_exactly(tmp_path):
    g = build_from_spec("chainmm:matrices=3,scale=0.001")
    clusters = [make_cluster("uniform", 2), make_cluster("p100x4"), make_cluster("uniform", 3)]
    cfg = preset(
        "sim", episodes=28, episodes_per_update=4, semantics="wc", checkpoint_every=1,
        graphs_per_step=3,
    )  # fmt: skip
    assert cfg.updates == 7 and cfg.steps == 3
    seen = []

    def watch(trainer, row):
        seen.append({k: v.clone() for k, v in trainer.policy.state_dict().items()})

    full = train(
        cfg, [g] * 3, clusters, SMALL, tmp_path / "full", callbacks=[watch], progress=False
    )
    # the weights move only at the step after every third update, and after the last
    moved = [any(not torch.equal(a[k], b[k]) for k in a) for a, b in zip(seen, seen[1:])]
    assert moved == [False, True, False, False, True, True]
    stepped = [r["sim/grad_norm"] is not None for r in full.rows]
    assert stepped == [False, False, True, False, False, True, True]

    def stop(trainer, row):
        if row["update"] == 5:  # mid-step: the last checkpoint is the step after update 3
            raise _Stop

    with pytest.raises(_Stop):
        train(cfg, [g] * 3, clusters, SMALL, tmp_path / "cut", callbacks=[stop], progress=False)
    resumed = Trainer(cfg, [g] * 3, clusters, SMALL, tmp_path / "cut", progress=False).run()
    assert read_rows(tmp_path / "cut" / "metrics.csv") == read_rows(
        tmp_path / "full" / "metrics.csv"
    )
    for k, v in full.policy.state_dict().items():
        torch.testing.assert_close(resumed.policy.state_dict()[k], v, rtol=0, atol=0)
    with pytest.raises(ConfigError, match="graphs_per_step 1, got 2"):
        preset("sim", anchor=True, graphs_per_step=2)


def test_validation_pool_is_fixed_and_disjoint_from_the_held_out_set():
    from doppler_lab.train.general_policy import validation_score, validation_tasks

    tasks = validation_tasks()
    assert tasks == validation_tasks() and len(tasks) == 32
    assert all(in_training_distribution(t) for t in tasks)
    held = {t.name for t in held_out_tasks(("generator", "cluster", "paper"))}
    assert not held & {t.name for t in tasks}
    small = [Task("chainmm:matrices=3,blocks=2,scale=0.5", "uniform:3", "paper", "generator")]
    score = validation_score("doppler/general", small, seeds=1, samples=2, progress=False)
    (row,) = score["rows"]
    assert row["ratio_cp"] == pytest.approx(row["policy"] / row["cp"])
    assert score["ratio_cp"] == pytest.approx(row["ratio_cp"])


def _settle_case():
    from doppler_lab.timing.sim import Simulator
    from doppler_lab.workloads import random_dag

    g = random_dag(num_nodes=40, width=6, seed=3)
    c = make_cluster("uniform", 4)
    return g, Simulator(g, c, "wc"), g.compute_nodes


def test_settle_anchor_keeps_only_the_changes_that_pay():
    g, sim, movable = _settle_case()
    rng = np.random.default_rng(0)
    reference = np.zeros(g.num_nodes, dtype=np.int64)  # all on one device
    ref_cost = sim.makespan(reference)
    # the best of some random placements as the "search result"
    cands = [rng.integers(0, 4, g.num_nodes) for _ in range(64)]
    anchor = min(cands, key=sim.makespan)
    a_cost = sim.makespan(anchor)
    assert a_cost < ref_cost * 0.99
    out = settle_anchor(sim, anchor, reference, movable, rtol=2e-3)
    assert sim.makespan(out) <= a_cost * (1 + 2e-3)
    # every node left off the reference pays: moving it back alone costs more than rtol
    for v in movable[out[movable] != reference[movable]]:
        back = out.copy()
        back[v] = reference[v]
        assert sim.makespan(back) > a_cost * (1 + 2e-3) - 1e-12
    # the anchor's device names are matched to the reference's first
    perm = np.array([2, 3, 0, 1])
    renamed = settle_anchor(sim, perm[out], out, movable)
    np.testing.assert_array_equal(renamed[movable], out[movable])


def test_settle_anchor_returns_the_reference_when_the_search_found_nothing_more():
    g, sim, movable = _settle_case()
    reference = np.random.default_rng(1).integers(0, 4, g.num_nodes)
    worse = reference.copy()
    worse[movable] = 0
    assert sim.makespan(worse) >= sim.makespan(reference)
    np.testing.assert_array_equal(settle_anchor(sim, worse, reference, movable), reference)


def test_cp_rollout_anchors_are_the_placers_and_cached(tmp_path):
    from doppler_lab.placers import place
    from doppler_lab.train.general_policy import general_stages, search_anchors

    pool = [
        Task("chainmm:matrices=3,scale=0.001", "uniform:3", "paper"),
        Task("ffnn:layers=2,blocks=2", "p100x4", "wc"),
    ]
    built = [t.build() for t in pool]
    cache = tmp_path / "anchors.npz"
    got = search_anchors(pool, built, cache=cache, progress=False, source="cp-rollout")
    for t, (g, c), dev in zip(pool, built, got):
        want = place("cp-rollout", g, c, semantics=t.semantics).device
        np.testing.assert_array_equal(dev, want)
    again = search_anchors(pool, built, cache=cache, progress=False, source="cp-rollout")
    for a, b in zip(got, again):
        np.testing.assert_array_equal(a, b)
    # Stage I's PLC labels follow the teacher setting
    first = general_stages(64, 0, teacher="cp-rollout", label_fraction=0.5)[0]
    assert (first.plc_labels, first.label_fraction) == ("cp-rollout", 0.5)
    assert general_stages(64, 0, teacher="cp")[0].plc_labels == "cp"


def test_proposal_anchors_are_the_doppler_placers_zero_shot_pick(tmp_path):
    from doppler_lab.house.errors import ConfigError
    from doppler_lab.placers import place
    from doppler_lab.policies.pretrained import resolve_checkpoint
    from doppler_lab.train.general_policy import search_anchors

    pool = [
        Task("chainmm:matrices=3,scale=0.001", "uniform:3", "paper"),
        Task("ffnn:layers=2,blocks=2", "p100x4", "wc"),
    ]
    built = [t.build() for t in pool]
    policy = resolve_checkpoint("doppler/general")
    got = search_anchors(
        pool, built, seed=5, cache=tmp_path / "a.npz", progress=False, policy=policy,
        source="proposals",
    )  # fmt: skip
    for i, (t, (g, c), dev) in enumerate(zip(pool, built, got)):
        want = place("doppler", g, c, seed=5 + i, semantics=t.semantics, checkpoint=str(policy))
        np.testing.assert_array_equal(dev, want.device)
    with pytest.raises(ConfigError, match="proposals"):
        search_anchors(pool, built, progress=False, source="proposals")


def test_the_recorded_commands_train_the_shipped_general_policies_again():
    """The commands data/checkpoints records must build the stages the general policies were
    trained with, whatever the presets became since. ``doppler/general-v1`` (``doppler-lab
    train-general --seed 1 --name doppler/general-v1``; the default until the cluster share):
    its Stage II config is in the checkpoint, and its Stage I ran before the imitation preset
    warmed its rate up. ``doppler/general`` starts from it (``--init doppler/general-v1``),
    widened to ``doppler10``, and samples PLC at temperature 2."""
    import shlex

    from doppler_lab.cli import build_parser
    from doppler_lab.policies.pretrained import list_checkpoints, resolve_checkpoint
    from doppler_lab.train.general_policy import (
        GENERAL_IMITATION_EPISODES,
        GENERAL_LABEL_FRACTION,
        GENERAL_TEACHER,
        general_stages,
    )

    shipped = list_checkpoints()
    parse = build_parser().parse_args
    v1_command = shipped["doppler/general-v1"]["command"]
    assert v1_command == "doppler-lab train-general --seed 1 --name doppler/general-v1"
    assert parse(shlex.split(v1_command)[1:]).name == "doppler/general-v1"
    imitation, sim = general_stages(seed=1)
    assert imitation.stage == "imitation" and imitation.lr_warmup == 0
    assert imitation.episodes == GENERAL_IMITATION_EPISODES
    assert (imitation.plc_labels, imitation.label_fraction) == (
        GENERAL_TEACHER,
        GENERAL_LABEL_FRACTION,
    )
    assert imitation.replace(lr_warmup=10, plc_labels="cp", label_fraction=1.0) == preset(
        "imitation",
        episodes=GENERAL_IMITATION_EPISODES,
        semantics="wc",
        seed=1,
        checkpoint_every=20,
    )
    v1 = torch.load(
        resolve_checkpoint("doppler/general-v1"), map_location="cpu", weights_only=False
    )
    assert sim.to_dict() == v1["meta"]["train_config"]
    assert v1["policy"]["config"]["layout"] == "doppler9"
    assert "sample_temperature" not in v1["meta"]

    command = shipped["doppler/general"]["command"]
    assert command.startswith("doppler-lab train-general ")
    args = parse(shlex.split(command)[1:])
    assert args.init == "doppler/general-v1" and args.name == "doppler/general"
    lr = {"lr": args.lr} if args.lr is not None else {}
    stages = general_stages(
        args.imitation_episodes,
        args.sim_episodes,
        args.seed,
        args.anchor_episodes,
        args.teacher,
        args.label_fraction,
        **lr,
    )
    doc = torch.load(resolve_checkpoint("doppler/general"), map_location="cpu", weights_only=False)
    assert stages[-1].to_dict() == doc["meta"]["train_config"]
    assert doc["policy"]["config"]["layout"] == args.layout == "doppler10"
    record = shipped["doppler/general"]
    assert record.get("paper_cost_share", 0.0) == args.paper_cost_share
    assert record["train_config"]["imitation"]["plc_labels"] == args.teacher == "cluster"
    # its samples' PLC temperature, recorded in the command, the index and the checkpoint
    assert args.sample_temperature == record["sample_temperature"] == 2.0
    assert doc["meta"]["sample_temperature"] == 2.0

    # doppler/general-memory: Stage II alone from doppler/general widened to doppler11
    command = shipped["doppler/general-memory"]["command"]
    args = parse(shlex.split(command)[1:])
    assert args.init == "doppler/general" and args.name == "doppler/general-memory"
    assert args.imitation_episodes == 0 and args.memory_share == 0.25
    lr = {"lr": args.lr} if args.lr is not None else {}
    stages = general_stages(args.imitation_episodes, args.sim_episodes, args.seed, **lr)
    assert [cfg.stage for cfg in stages] == ["sim"]
    path = resolve_checkpoint("doppler/general-memory")
    doc = torch.load(path, map_location="cpu", weights_only=False)
    assert stages[-1].to_dict() == doc["meta"]["train_config"]
    assert doc["policy"]["config"]["layout"] == args.layout == "doppler11"
    record = shipped["doppler/general-memory"]
    assert record["memory_share"] == args.memory_share
    assert args.sample_temperature == record["sample_temperature"] == 2.0
    assert doc["meta"]["sample_temperature"] == 2.0


def test_a_shipped_general_policy_of_no_episode_claims_no_tasks():
    """A general record whose run trained no episode (``doppler/general-hints``: its init's
    weights, placing with other hints) says 0 tasks and no pool shares, as
    :func:`~doppler_lab.train.general_policy.run_record` writes it; the others their pool."""
    from doppler_lab.policies.pretrained import list_checkpoints

    general = {n: r for n, r in list_checkpoints().items() if r.get("graph") == "general"}
    untrained = [n for n, r in general.items() if not any(r["episodes"].values())]
    assert "doppler/general-hints" in untrained
    for name, r in general.items():
        if name in untrained:
            assert r["tasks"] == 0 and r["train_config"] == {} and r["train_s"] == 0.0, name
            assert "memory_share" not in r and "paper_cost_share" not in r, name
        else:
            assert r["tasks"] > 0, name


def test_paper_cost_tasks_have_the_papers_cost_convention():
    """``--paper-cost-share``: generator draws become ``paper_costs:`` tasks on uniform devices
    under paper semantics, with transfers four times the producer's compute; a share of 0 draws
    nothing more (the pools of before)."""
    from doppler_lab.train.general_policy import PAPER_COST_CLUSTERS

    plain = sample_tasks(40, seed=5)
    assert not [t for t in plain if t.graph.startswith("paper_costs")]
    assert sample_tasks(40, seed=5, paper_cost_share=0.0) == plain
    mixed = sample_tasks(40, seed=5, paper_cost_share=1.0)
    pc = [t for t in mixed if t.graph.startswith("paper_costs:")]
    assert len(pc) >= 10 and all(in_training_distribution(t) for t in mixed)
    assert {t.semantics for t in pc} == {"paper"} and {t.cluster for t in pc} <= set(
        PAPER_COST_CLUSTERS
    )
    g = graph_from_spec(pc[0].graph)
    inner = graph_from_spec(pc[0].graph.partition(":")[2])
    assert g.num_nodes == inner.num_nodes and g.compute_cost is not None
    comp = ~g.is_input[g.edge_src]
    np.testing.assert_allclose(g.edge_cost[comp], 4.0 * g.compute_cost[g.edge_src[comp]])
    assert (g.compute_cost[g.is_input] == 0).all() and g.compute_cost[~g.is_input].max() > 0
    # held out stays held out: uniform:6, wc semantics, or an out-of-grid graph
    spec = pc[0].graph
    assert not in_training_distribution(Task(spec, "uniform:6", "paper"))
    assert not in_training_distribution(Task(spec, pc[0].cluster, "wc"))
    assert not in_training_distribution(
        Task("paper_costs:chainmm:matrices=7", "uniform:4", "paper")
    )
    with pytest.raises(ConfigError, match="paper_cost_share"):
        sample_tasks(4, seed=0, paper_cost_share=1.5)


def test_train_general_widens_a_narrower_init_to_the_cluster_share_layout(tmp_path):
    """``--init`` of a doppler9 policy with ``--layout doppler10``: the widened start keeps the
    saved weights, its new column starts as a copy of pred_share's, it trains, and the widening
    is recorded."""
    from doppler_lab.policies.checkpoint import make_policy, save_checkpoint

    small9 = tmp_path / "small9.pt"
    save_checkpoint(small9, make_policy(SMALL, 4, seed=1))
    out = tmp_path / "run"
    args = ["train-general", "--out", str(out), "--tasks", "2", "--imitation-episodes", "0"]
    args += ["--sim-episodes", "16", "--init", str(small9), "--layout", "doppler10"]
    args += ["--paper-cost-share", "1", "--sample-temperature", "2", "--no-progress"]
    dest = tmp_path / "ckpts"
    assert main([*args, "--name", "doppler/general-wide", "--ship", str(dest)]) == 0
    index = json.loads((dest / "index.json").read_text())["checkpoints"]
    assert list(index) == ["doppler/general-wide"] and (dest / "doppler/general-wide.pt").exists()
    assert "--name doppler/general-wide" in index["doppler/general-wide"]["command"]
    assert "--sample-temperature 2.0" in index["doppler/general-wide"]["command"]
    assert index["doppler/general-wide"]["paper_cost_share"] == 1.0
    assert index["doppler/general-wide"]["sample_temperature"] == 2.0
    assert load_policy(dest / "doppler/general-wide.pt")[0].sample_temperature == 2.0
    assert main([*args, "--name", "general", "--ship", str(dest)]) == 2
    wide, doc = load_policy(out / "init-doppler10.pt")
    narrow, _ = load_policy(small9)
    assert wide.config.layout == "doppler10"
    assert doc["meta"]["widened_from"]["like"] == {"cluster_share": "pred_share"}
    w, w0 = wide.state_dict()["plc.dev_lin.weight"], narrow.state_dict()["plc.dev_lin.weight"]
    torch.testing.assert_close(w[:, :9], w0, rtol=0, atol=0)
    torch.testing.assert_close(w[:, 9], w0[:, 6], rtol=0, atol=0)
    trained, _ = load_policy(out / "1_sim" / "policy.pt")
    assert trained.config.layout == "doppler10"
    assert not torch.equal(trained.state_dict()["plc.dev_lin.weight"], w)


def test_memory_bound_tasks():
    """``--memory-share``: some tasks get a cap that binds (the graph does not fit on one device)
    and that a placement meets; share 0 draws the pools of before; the ``memory`` held-out
    tasks are outside the distribution; Stage II's cost makes an over-cap placement dearer
    than any that fits; a task without a cap is unconstrained on any machine."""
    from doppler_lab.placers import place
    from doppler_lab.timing.memory import tensor_bytes
    from doppler_lab.timing.sim import Simulator
    from doppler_lab.train.cost_functions import OVER_CAP_PENALTY, SimulatorCost
    from doppler_lab.train.general_policy import MEMORY_FACTORS, memory_task_cap

    plain = sample_tasks(12, seed=5)
    assert plain == sample_tasks(12, seed=5, memory_share=0.0)
    assert all(t.memory == 0 and "memory" not in t.to_dict() for t in plain)
    g, c = Task("ffnn", "cpu:5", "wc").build()
    assert all(d.memory_bytes == float("inf") for d in c.devices)  # not this machine's memory

    pool = sample_tasks(12, seed=5, memory_share=0.5)
    capped = [t for t in pool if t.memory]
    assert 2 <= len(capped) < 12
    for t in capped:
        assert in_training_distribution(t)
        assert Task(**t.to_dict()) == t
        g, c = t.build()
        assert all(d.memory_bytes == t.memory for d in c.devices)
        assert float(tensor_bytes(g).sum()) > t.memory  # one device cannot hold it
        factors = [memory_task_cap(g, c.num_devices, f) for f in MEMORY_FACTORS]
        assert t.memory in factors
        assert not in_training_distribution(Task(t.graph, t.cluster, t.semantics, memory=1e3))

    held = held_out_tasks(("memory",))
    assert len(held) == 6 and {t.group for t in held} == {"memory"}
    assert not [t.name for t in held if in_training_distribution(t)]

    t = capped[0]
    g, c = t.build()
    cost = SimulatorCost(g, c, t.semantics)
    assert cost.caps is not None
    fit = place("cp", g, c, seed=0, semantics=t.semantics)
    one = Placement(np.zeros(g.num_nodes, dtype=np.int64))
    sim = Simulator(g, c, t.semantics)
    assert cost(fit) == pytest.approx(sim.makespan(fit))
    assert cost(one) > OVER_CAP_PENALTY * sim.makespan(one)
    assert SimulatorCost(g, c.with_memory(None), t.semantics)(one) == sim.makespan(one)
