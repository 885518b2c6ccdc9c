"""Search settings said once (a ProposalSet held by each config and by the learned placers) and
the provenance of a learned placement: each candidate's label, the one result type (Winner)
that names the winner and the runner-up, and ``place`` saying what produced its result."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest

from doppler_lab.cli import main
from doppler_lab.hardware.cluster import make_cluster
from doppler_lab.house.errors import ConfigError
from doppler_lab.ir.graph import GraphBuilder
from doppler_lab.ir.placement import Placement
from doppler_lab.placers import get_placer, place
from doppler_lab.placers.clustering import CLUSTER_CAPS
from doppler_lab.policies.checkpoint import make_policy, save_checkpoint
from doppler_lab.policies.policy_config import PolicyConfig
from doppler_lab.search.adapter import ADAPT_PROPOSALS, AdaptConfig
from doppler_lab.search.budget import SEARCH_PROPOSALS, SearchConfig, policy_search
from doppler_lab.search.learned import DopplerPlacer, best_of_rollouts
from doppler_lab.search.proposals import (
    DOPPLER_PROPOSALS,
    NAMED_PROPOSALS,
    POLICY_ALONE_PROPOSALS,
    Proposals,
    ProposalSet,
    heuristic_labels,
    judge,
    rollout_candidates,
)
from doppler_lab.timing.sim import Simulator

SMALL = dict(hidden=16, head_hidden=16, mp_steps=2, num_bases=4)

#: an AdaptConfig as ``to_dict`` saved it before the config held a proposal set (adapter files,
#: run states and summaries written then): flat, without ``memory_baselines`` or ``limit``
OLD_ADAPT_DICT = {
    "episodes": 200, "batch": 16, "lr": 1.0, "anchor_bias": 10.0, "imitation": 4.0,
    "samples": 16, "partitions": 4, "clustering": True, "cluster_caps": list(CLUSTER_CAPS),
    "fewer_devices": True, "temperature": 2.5, "reanchor": True, "settle_steps": 100,
}  # fmt: skip


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    pol = make_policy(PolicyConfig(kind="dual", **SMALL), 4, seed=3)
    return save_checkpoint(tmp_path_factory.mktemp("prov") / "p.pt", pol, {"note": "test"})


# -- one ProposalSet in each config --------------------------------------------------------------


def test_search_config_holds_a_proposal_set_and_round_trips():
    cfg = SearchConfig()
    assert cfg.proposals == SEARCH_PROPOSALS and cfg.proposals.cluster_caps == CLUSTER_CAPS
    cfg = SearchConfig.from_dict({"strategy": "scan", "partitions": 2, "memory_baselines": True})
    assert isinstance(cfg.proposals, ProposalSet)
    assert (cfg.strategy, cfg.proposals.partitions, cfg.proposals.memory_baselines) == (
        "scan", 2, True,
    )  # fmt: skip
    assert SearchConfig.from_dict(json.loads(json.dumps(cfg.to_dict()))) == cfg
    nested = {"strategy": "scan", "proposals": cfg.proposals.to_dict()}
    assert SearchConfig.from_dict(nested) == cfg
    with pytest.raises(ConfigError, match="search config has no setting 'samplez'"):
        SearchConfig.from_dict({"samplez": 3})
    with pytest.raises(ConfigError, match="setting partitions=-1; expected an integer >= 0"):
        SearchConfig.from_dict({"partitions": -1})
    with pytest.raises(ConfigError, match="expected a ProposalSet"):
        SearchConfig(proposals={"samples": 3})  # type: ignore[arg-type]


def test_adapt_config_holds_a_proposal_set_with_the_memory_baselines():
    cfg = AdaptConfig()
    assert cfg.proposals == ADAPT_PROPOSALS and cfg.proposal_set() is cfg.proposals
    # the setting the adapter used to lack, now read like the others
    mem = AdaptConfig.from_dict({"memory_baselines": True, "samples": 4})
    assert mem.proposals.memory_baselines is True and mem.proposals.samples == 4
    assert AdaptConfig.from_dict(json.loads(json.dumps(mem.to_dict()))) == mem
    assert AdaptConfig.from_dict({"proposals": mem.proposals.to_dict()}) == mem
    with pytest.raises(ConfigError, match="adapter config has no setting 'nope'"):
        AdaptConfig.from_dict({"nope": 1})
    with pytest.raises(ConfigError, match="adapter config: setting samples=-1"):
        AdaptConfig.from_dict({"samples": -1})


def test_an_adapt_config_saved_before_the_proposal_set_still_loads():
    old = AdaptConfig.from_dict(OLD_ADAPT_DICT)
    assert old == AdaptConfig()
    assert old.proposals.memory_baselines is False and old.proposals.limit is None
    changed = AdaptConfig.from_dict({**OLD_ADAPT_DICT, "samples": 8, "fewer_devices": [2]})
    assert changed.proposals == replace(ADAPT_PROPOSALS, samples=8, fewer_devices=(2,))


def test_the_learned_placer_builds_its_proposal_set_from_its_options(ckpt):
    default = DopplerPlacer(ckpt)
    # the zero-shot protocol's set is the documented one; the search's adds the ladder
    assert default.proposal_set() == DOPPLER_PROPOSALS
    assert default.search_config().proposals == replace(
        DOPPLER_PROPOSALS, samples=None, cluster_caps=CLUSTER_CAPS
    )
    p = get_placer("doppler", checkpoint=ckpt, samples=4, partitions=1, clustering=False)
    assert (p.proposals.samples, p.proposals.partitions, p.proposals.clustering) == (4, 1, False)
    given = ProposalSet(samples=3, partitions=0)
    assert get_placer("doppler", checkpoint=ckpt, proposals=given).proposals is given
    with pytest.raises(ConfigError, match="option samples = 4 beside proposals"):
        get_placer("doppler", checkpoint=ckpt, proposals=given, samples=4)
    with pytest.raises(ConfigError, match=r"placer 'doppler': option samples=-1; expected an"):
        get_placer("doppler", checkpoint=ckpt, samples=-1)
    with pytest.raises(ConfigError, match="placer 'doppler' has no option 'sample'"):
        get_placer("doppler", checkpoint=ckpt, sample=4)


def test_the_policy_alone_is_one_named_proposal_set(ckpt, small_graph, cluster4):
    """``proposals=none`` (``--placer doppler:proposals=none``) is POLICY_ALONE_PROPOSALS: the
    same placement as the four options that spelled it before; options still change it; an
    unknown name is one line naming the names there are."""
    alone = get_placer("doppler", checkpoint=ckpt, proposals="none")
    assert alone.proposals == POLICY_ALONE_PROPOSALS == NAMED_PROPOSALS["none"]
    assert alone.proposal_set().describe() == "1 greedy + 16 samples + 0 partitions"
    spelled = dict(clustering=False, partitions=0, memory_baselines=False, fewer_devices=False)
    before = place("doppler", small_graph, cluster4, seed=3, checkpoint=ckpt, **spelled)
    after = place("doppler", small_graph, cluster4, seed=3, checkpoint=ckpt, proposals="none")
    assert after.device.tolist() == before.device.tolist()
    assert after.meta.produced_by == before.meta.produced_by
    assert after.meta.produced_by.startswith(("greedy rollout", "sample"))
    fewer = get_placer("doppler", checkpoint=ckpt, proposals="none", samples=0)
    assert fewer.proposals == replace(POLICY_ALONE_PROPOSALS, samples=0)
    with pytest.raises(ConfigError, match="option proposals='all'; expected one of none"):
        get_placer("doppler", checkpoint=ckpt, proposals="all")


def test_place_takes_a_placer_spec_with_options(capsys):
    """``--placer doppler:proposals=none`` is the policy alone, beside ``doppler`` in one table
    (``key=value`` items continue the spec before them)."""
    argv = ["place", "chainmm", "--checkpoint", "chainmm", "--json"]
    assert main([*argv, "--placer", "doppler:proposals=none,samples=3"]) == 0
    one = json.loads(capsys.readouterr().out)
    assert one["placer"] == "doppler:proposals=none,samples=3"
    assert one["options"]["proposals"] == "none" and one["options"]["samples"] == 3
    assert one["produced_by"].startswith(("greedy rollout", "sample"))
    assert main([*argv, "--placer", "cp,doppler:proposals=none,samples=3"]) == 0
    both = json.loads(capsys.readouterr().out)
    assert [r["placer"] for r in both] == ["cp", "doppler:proposals=none,samples=3"]
    assert both[1]["makespan"] == one["makespan"]
    assert main([*argv, "--placer", "doppler:samples=3", "-o", "samples=4"]) == 2
    assert "option 'samples' is given in --placer" in capsys.readouterr().err


# -- each candidate's label and the winner -------------------------------------------------------


@pytest.fixture(scope="module")
def pair():
    """Two ops whose transfer costs ten times their work: together on one device wins."""
    b = GraphBuilder("pair")
    a = b.add_node("a", cost=1.0)
    b.add_node("b", inputs=[a], cost=1.0, edge_costs=[10.0])
    return b.build(), make_cluster("uniform", 2)


def _judged(pair, rollouts, heuristics=()):
    graph, cluster = pair
    props = Proposals((*rollout_candidates(rollouts), *heuristic_labels(list(heuristics))))
    return judge(Simulator(graph, cluster, "paper"), props)


SPLIT, TOGETHER = [0, 1], [1, 1]


def test_the_winner_is_the_greedy_rollout(pair):
    v = _judged(pair, [Placement(TOGETHER), Placement(SPLIT), Placement(SPLIT)])
    won = v.winner(len(v.costs))
    assert (won.label, won.source, won.cost) == ("greedy rollout", "greedy", 2.0)
    assert (won.runner_up, won.runner_up_cost) == ("sample 1", 12.0)
    assert won.provenance() == {
        "produced_by": "greedy rollout", "runner_up": "sample 1", "runner_up_cost": 12.0,
    }  # fmt: skip


def test_the_winner_is_a_sample(pair):
    v = _judged(pair, [Placement(SPLIT), Placement(SPLIT), Placement(TOGETHER)])
    won = v.winner(3)
    assert (won.label, won.source, won.best_index) == ("sample 2", "sample", 2)
    assert won.runner_up == "greedy rollout" and won.rollout_cost == 2.0


def test_the_winner_is_a_proposal(pair):
    rollouts = [Placement(SPLIT), Placement(SPLIT, meta={"devices_used": 1})]
    heuristics = [
        Placement(SPLIT, None, "clustering", {"cap": None}),
        Placement(TOGETHER, None, "clustering", {"cap": 0.5}),
        Placement(SPLIT, None, "partition"),
        Placement([0, 0], None, "m-sct"),
    ]
    v = _judged(pair, rollouts, heuristics)
    assert [c.label for c in v.candidates] == [
        "greedy rollout", "greedy rollout on 1 device", "proposal clustering",
        "proposal clustering(cap=0.5)", "proposal partition 1", "memory baseline m-sct",
    ]  # fmt: skip
    assert [c.kind for c in v.candidates] == [
        "rollout", "rollout", "clustering", "clustering", "partition", "memory",
    ]  # fmt: skip
    won = v.winner(6)
    # a tie at 2.0 (nothing cut either way): the first of them wins
    assert (won.label, won.source, won.cost) == ("proposal clustering(cap=0.5)", "clustering", 2.0)
    # the runner-up places otherwise, at the same cost
    assert (won.runner_up, won.runner_up_cost) == ("memory baseline m-sct", 2.0)
    assert (v.clustering_cost, v.partition_cost, v.memory_cost) == (2.0, 12.0, 2.0)


def test_every_candidate_alike_has_no_runner_up(pair):
    won = _judged(pair, [Placement(TOGETHER), Placement(TOGETHER)]).winner(2)
    assert won.label == "greedy rollout" and won.runner_up is None
    assert np.isnan(won.runner_up_cost) and won.provenance()["runner_up_cost"] is None


def test_a_policy_protocol_labels_its_rollouts(ckpt, small_graph, cluster4):
    pol = DopplerPlacer(ckpt).policy(4)
    alone = best_of_rollouts(pol, small_graph, cluster4, 0, 0)
    assert (alone.label, alone.calls, alone.runner_up) == ("greedy rollout", 0, None)
    props = ProposalSet(samples=4, fewer_devices=(2,))
    res = best_of_rollouts(pol, small_graph, cluster4, seed=0, proposals=props)
    labels = [c.label for c in res.verdict.candidates]
    assert labels == ["greedy rollout", "sample 1", "sample 2", "sample 3",
                      "greedy rollout on 2 devices"]  # fmt: skip
    best = res.verdict.candidates[res.best_index]
    assert res.label == best.label and res.placement is best.placement
    assert res.cost == float(np.min(res.costs))


def test_a_search_names_its_start(ckpt, small_graph, cluster4):
    placer = DopplerPlacer(ckpt)
    cfg = placer.search_config()  # the placer's proposals: the clustering ladder, partitions
    rng = np.random.default_rng(4)
    out = policy_search(placer.policy(4), small_graph, cluster4, 40, rng, "wc", cfg)
    v = out.verdict
    start = v.candidates[v.best]
    if out.cost < float(v.costs[v.best]):
        assert out.label == f"search from {start.label}"
        assert (out.runner_up, out.runner_up_cost) == (start.label, float(v.costs[v.best]))
    else:
        assert out.label == start.label
    p = place("doppler", small_graph, cluster4, seed=4, checkpoint=ckpt, budget=40,
              semantics="wc")  # fmt: skip
    assert p.meta.produced_by == out.label and p.meta["produced_by"] == out.label


# -- place says what produced its result ---------------------------------------------------------


def test_place_names_what_produced_the_result(capsys, tmp_path):
    argv = ["place", "chainmm", "--placer", "doppler", "--checkpoint", "chainmm",
            "-o", "samples=3", "-o", "partitions=1"]  # fmt: skip
    assert main([*argv, "--json", "--out", str(tmp_path / "p.json")]) == 0
    r = json.loads(capsys.readouterr().out)
    labels = ("greedy rollout", "sample", "proposal clustering", "proposal partition")
    assert r["produced_by"].startswith(labels) and r["source"]
    saved = json.loads((tmp_path / "p.json").read_text())["meta"]
    assert saved["produced_by"] == r["produced_by"] and "runner_up" in saved
    assert main(argv) == 0
    assert f"produced by  the {r['produced_by']}" in capsys.readouterr().out
    # a budget search names its start
    assert main([*argv, "--budget", "40", "--json"]) == 0
    r = json.loads(capsys.readouterr().out)
    assert r["produced_by"].startswith(("search from ", *labels))


def test_the_local_search_placer_names_its_start(small_graph, cluster4):
    p = place("local-search", small_graph, cluster4, seed=1, budget=100, start="single",
              method="hill")  # fmt: skip
    assert p.meta["best_makespan"] < p.meta["start_makespan"]
    assert p.meta.produced_by == "search from single"
    # a budget of one call: the start's evaluation alone, nothing moved
    q = place("local-search", small_graph, cluster4, seed=1, budget=1, start="cp", method="ils")
    assert q.meta.produced_by == "start cp"


def test_the_adapter_names_its_winner(ckpt, small_graph, cluster4):
    from doppler_lab.search.adapter import adapt

    policy = DopplerPlacer(ckpt).policy(4)
    cfg = AdaptConfig.from_dict(dict(episodes=40, batch=8, samples=4, partitions=2))
    out = adapt(policy, small_graph, cluster4, "paper", cfg, seed=0)
    first = out.verdict.candidates[out.verdict.best]
    if out.source == "adapter":
        assert out.label == f"adapter table from {first.label}"
    else:
        assert (out.label, out.source) == (first.label, first.source)
