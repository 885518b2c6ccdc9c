"""Hints from more than one heuristic (``train-general --hints clustering,partition``): a
``doppler12`` context can carry the partition placer's devices in its hint column, Stage I's
``hint`` teacher labels each context with its own hint's devices, the ``doppler`` placer draws a
group of rollouts per hint and one without, each named, and the hints a policy places with
travel in its checkpoint."""

from __future__ import annotations

import numpy as np
import pytest
from rollout_helpers import run_rollout

from doppler_lab.hardware.cluster import make_cluster
from doppler_lab.house.errors import CheckpointError, ConfigError
from doppler_lab.placers.clustering import clustering_devices
from doppler_lab.placers.partition import PartitionPlacer
from doppler_lab.policies.checkpoint import (
    load_policy,
    make_policy,
    save_checkpoint,
    set_hints,
)
from doppler_lab.policies.context import GraphContext
from doppler_lab.policies.features import hint_devices, hint_name
from doppler_lab.policies.policy_config import PolicyConfig
from doppler_lab.policies.rollout import SAMPLE
from doppler_lab.search.proposals import policy_candidates, rollout_candidates
from doppler_lab.timing.cost_model import CostModel
from doppler_lab.train.loop import Trainer
from doppler_lab.train.train_config import preset

pytest.importorskip("pymetis")

SMALL = dict(hidden=16, head_hidden=24, mp_steps=2, num_bases=4)
COLUMN = 11


def _policy(seed: int = 1):
    return make_policy(PolicyConfig(layout="doppler12", estimate="est", **SMALL), 4, seed=seed)


@pytest.mark.parametrize(
    "given, want",
    [(True, "clustering"), (1, "clustering"), (np.bool_(True), "clustering"), (False, None),
     (0, None), (None, None), ("none", None), ("clustering", "clustering"),
     ("partition", "partition")],
)  # fmt: skip
def test_hint_names(given, want):
    assert hint_name(given) == want


@pytest.mark.parametrize("bad", ["heft", 2, "Partition", ""])
def test_an_unknown_hint_is_named(bad):
    with pytest.raises(ConfigError, match=f"hint {bad!r}: expected one of clustering, partition"):
        hint_name(bad)


def test_the_partition_hint_marks_the_partition_placers_devices(small_graph):
    cluster = make_cluster("p100x4")
    want = PartitionPlacer().place(small_graph, cluster, np.random.default_rng(5)).device
    cost = CostModel(small_graph, cluster)
    np.testing.assert_array_equal(hint_devices(small_graph, cost, "partition"), want)
    clus = clustering_devices(small_graph, cost)[0]
    comp = ~small_graph.is_input
    assert not np.array_equal(want[comp], clus[comp])  # a hint of its own on this graph
    ctx = GraphContext(small_graph, cluster, "doppler12", "est", hint="partition")
    assert ctx.hint == "partition"
    r = run_rollout(_policy(), ctx, 2, SAMPLE)
    nodes = ctx.features.nodes
    for t in range(r.num_steps):
        v = int(nodes[r.nodes[0, t]])
        np.testing.assert_array_equal(
            r.feats[0, t, :, COLUMN], np.eye(4, dtype=np.float32)[want[v]]
        )


def test_the_placer_draws_a_group_per_hint_and_one_without(small_graph):
    pol = _policy()
    pol.hints = ("clustering", "partition")
    cands = policy_candidates(
        pol, small_graph, make_cluster("p100x4"), 16, np.random.default_rng(0)
    )
    assert len(cands) == 17  # 6 with the clustering's hint, 6 with the partition's, 5 without
    hints = [p.meta.get("hint") for p in cands]
    assert hints == [None] * 6 + ["partition"] * 6 + [None] * 5
    assert [p.meta.get("clustering_hint") is False for p in cands] == [False] * 12 + [True] * 5
    labels = [c.label for c in rollout_candidates(cands)]
    assert labels[0] == "greedy rollout" and labels[5] == "sample 5"
    assert labels[6] == "greedy rollout with the partition hint"
    assert labels[11] == "sample 5 with the partition hint"
    assert labels[12] == "greedy rollout without a hint" and labels[16] == "sample 4 without a hint"
    sources = {c.source for c in rollout_candidates(cands)}
    assert "greedy with the partition hint" in sources and "sample without a hint" in sources


def test_the_samples_are_numbered_within_their_group_beside_fewer_devices(small_graph):
    """Rollouts on fewer devices come last; the groups before them keep their own numbers (they
    were counted into the hinted group before)."""
    cands = policy_candidates(
        _policy(),
        small_graph,
        make_cluster("p100x4"),
        8,
        np.random.default_rng(0),
        fewer_devices=(2,),
    )
    labels = [c.label for c in rollout_candidates(cands)]
    assert labels == [
        "greedy rollout", "sample 1", "sample 2", "sample 3",
        "greedy rollout without the clustering hint", "sample 1 without the clustering hint",
        "sample 2 without the clustering hint", "sample 3 without the clustering hint",
        "greedy rollout on 2 devices",
    ]  # fmt: skip


def test_hints_travel_in_the_checkpoint(tmp_path):
    path = tmp_path / "p.pt"
    save_checkpoint(path, _policy())
    assert load_policy(path)[0].hints == ("clustering",)  # the default
    set_hints(path, ["partition", "clustering"])
    assert load_policy(path)[0].hints == ("partition", "clustering")
    set_hints(path, None)
    assert load_policy(path)[0].hints == ("clustering",)
    set_hints(path, [])  # every rollout without a hint
    assert load_policy(path)[0].hints == ()
    for bad in (["heft"], ["partition", "partition"], "clustering+heft"):
        with pytest.raises(CheckpointError, match="expected distinct names among clustering"):
            set_hints(path, bad)


def test_the_hint_teacher_labels_each_context_with_its_own_hint(small_graph):
    cluster = make_cluster("p100x4")
    cfg = preset("imitation", episodes=4, episodes_per_update=4, semantics="wc", plc_labels="hint")
    pcfg = PolicyConfig(layout="doppler12", estimate="est", **SMALL)
    tr = Trainer(
        cfg,
        [small_graph] * 3,
        cluster,
        pcfg,
        progress=False,
        hints=["clustering", "partition", None],
    )
    assert [c.hint for c in tr.contexts] == ["clustering", "partition", None]
    labellers = tr._make_labellers(["wc"] * 3)
    cost = CostModel(small_graph, cluster)
    clus = clustering_devices(small_graph, cost)[0]
    part = PartitionPlacer().place(small_graph, cluster, np.random.default_rng(0)).device
    np.testing.assert_array_equal(labellers[0].device, clus)
    np.testing.assert_array_equal(labellers[1].device, part)
    np.testing.assert_array_equal(labellers[2].device, clus)  # no hint: the clustering's


def test_a_recipe_with_hints_is_checked_before_training(tmp_path):
    from doppler_lab.train.general_policy import GeneralRecipe, train_general

    assert GeneralRecipe(hint_free=True).hint_groups() == ("clustering",)
    assert GeneralRecipe(hints=("clustering", "partition")).hint_groups() == (
        "clustering",
        "partition",
    )
    assert GeneralRecipe().hint_groups() == ()
    with pytest.raises(ConfigError, match="hints clustering,partition: layout 'doppler10'"):
        train_general(
            tmp_path, GeneralRecipe(tasks=2, layout="doppler10", hints=("clustering", "partition"))
        )
    with pytest.raises(ConfigError, match="expected distinct names among clustering, partition"):
        train_general(tmp_path, GeneralRecipe(tasks=2, layout="doppler12", hints=("heft",)))


def test_a_run_without_episodes_ships_its_init_with_the_hints(tmp_path):
    """``train-general --init CKPT --imitation-episodes 0 --sim-episodes 0 --hints ...``: the
    init's weights, unchanged, with the hints in its meta (how ``doppler/general-hints`` is
    made); without an init there is nothing to ship."""
    import torch

    from doppler_lab.train.general_policy import GeneralRecipe, train_general

    init = tmp_path / "init.pt"
    save_checkpoint(init, _policy(4))
    recipe = GeneralRecipe(
        tasks=2, imitation_episodes=0, sim_episodes=0, anchor_episodes=0, layout="doppler12",
        hints=("clustering", "partition"),
    )  # fmt: skip
    assert recipe.stages() == []
    (res,) = train_general(tmp_path / "run", recipe, init, progress=False)
    got, before = load_policy(res.checkpoint)[0], load_policy(init)[0]
    assert got.hints == ("clustering", "partition") and before.hints == ("clustering",)
    a, b = got.state_dict(), before.state_dict()
    assert all(torch.equal(a[k], b[k]) for k in b)
    with pytest.raises(ConfigError, match="no stage to run"):
        train_general(tmp_path / "run2", recipe)


def test_where_a_memory_cap_can_bind_the_partition_hint_is_left_out(small_graph):
    from doppler_lab.timing.memory import tensor_bytes

    pol = _policy()
    pol.hints = ("clustering", "partition")
    cluster = make_cluster("p100x4").with_memory(0.5 * float(tensor_bytes(small_graph).sum()))
    cands = policy_candidates(pol, small_graph, cluster, 16, np.random.default_rng(0))
    assert len(cands) == 17 and not any(p.meta.get("hint") for p in cands)
    assert [p.meta.get("clustering_hint") is False for p in cands] == [False] * 9 + [True] * 8


def test_a_policy_without_hints_places_every_rollout_without_one(small_graph):
    pol = _policy()
    pol.hints = ()
    cands = policy_candidates(pol, small_graph, make_cluster("p100x4"), 4, np.random.default_rng(0))
    labels = [c.label for c in rollout_candidates(cands)]
    assert labels == ["greedy rollout without a hint"] + [
        f"sample {j} without a hint" for j in (1, 2, 3, 4)
    ]


@pytest.mark.parametrize(
    ("value", "want"),
    [
        ("clustering+partition", ("clustering", "partition")),
        ("none", ()),
        ("partition", ("partition",)),
    ],
)
def test_the_placer_option_sets_the_hints(value, want):
    from doppler_lab.placers import get_placer

    placer = get_placer("doppler", checkpoint="doppler/general-hint", hints=value, samples=2)
    assert placer.policy(4).hints == want
    with pytest.raises(ConfigError, match="option hints = 'heft': expected distinct names"):
        get_placer("doppler", checkpoint="doppler/general-hint", hints="heft")


def test_with_only_the_partition_hint_the_bare_group_says_without_a_hint(small_graph):
    pol = _policy()
    pol.hints = ("partition",)
    cands = policy_candidates(pol, small_graph, make_cluster("p100x4"), 4, np.random.default_rng(0))
    labels = [c.label.split(" (")[0] for c in rollout_candidates(cands)]
    assert labels == [
        "greedy rollout with the partition hint", "sample 1 with the partition hint",
        "sample 2 with the partition hint", "greedy rollout without a hint",
        "sample 1 without a hint",
    ]  # fmt: skip


@pytest.mark.parametrize("hint", ["partition", None, "clustering"])
def test_a_context_with_another_hint_is_the_one_built_with_it(small_graph, hint):
    """``GraphContext.with_hint`` shares what does not depend on the hint and swaps the hint's
    devices: the rollouts it gives are those of a context built with that hint."""
    cluster = make_cluster("p100x4")
    base = GraphContext(small_graph, cluster, "doppler12", "est", hint="clustering")
    made = GraphContext(small_graph, cluster, "doppler12", "est", hint=hint)
    swapped = base.with_hint(hint)
    assert (swapped is base) == (hint == "clustering") and swapped.hint == made.hint
    for a, b in zip(swapped.features.extra, made.features.extra):
        np.testing.assert_array_equal(a, b)
    assert base.features.extra[5].tolist() == hint_devices(small_graph, base.cost, True).tolist()
    assert base.hinted_devices.tolist() == base.features.extra[5].tolist()
    if hint is None:
        assert swapped.hinted_devices is None and made.hinted_devices is None
    else:
        np.testing.assert_array_equal(swapped.hinted_devices, made.features.extra[5])
        np.testing.assert_array_equal(
            swapped.hinted_devices, hint_devices(small_graph, made.cost, hint)
        )
    pol = _policy()
    r1 = run_rollout(pol, swapped, 3, SAMPLE)
    r2 = run_rollout(pol, made, 3, SAMPLE)
    np.testing.assert_array_equal(r1.devices, r2.devices)


def test_a_rollout_that_is_its_hints_placement_says_so():
    """The shipped ``doppler/general-hint`` copies the clustering's placement on graphs it
    never saw: each rollout is marked ``copies_hint`` exactly when its compute nodes sit where
    its hint puts them, and its label says whose placement it is."""
    from doppler_lab.policies.pretrained import resolve_checkpoint
    from doppler_lab.workloads.specs import graph_from_spec

    graph, cluster = graph_from_spec("llama_block:scale=0.1"), make_cluster("p100x4")
    pol = load_policy(resolve_checkpoint("doppler/general-hint"))[0]
    pol.hints = ("clustering", "partition")
    cands = policy_candidates(pol, graph, cluster, 16, np.random.default_rng(0))
    cost, nodes = CostModel(graph, cluster), graph.compute_nodes
    given = {h: hint_devices(graph, cost, h)[nodes] for h in ("clustering", "partition")}
    marked = 0
    for p, c in zip(cands, rollout_candidates(cands)):
        hint = None if p.meta.get("clustering_hint") is False else p.meta.get("hint", "clustering")
        copies = hint is not None and np.array_equal(p.device[nodes], given[hint])
        assert p.meta.get("copies_hint") == (hint if copies else None)
        assert c.label.endswith(f"(the {hint}'s placement node for node)") == copies
        marked += copies
    assert marked >= 1  # its greedy rollouts copy their hints here
