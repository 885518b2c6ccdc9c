"""Search distillation (expert iteration, ``train-general --distill``): the labels that replay a
placement reproduce it under teacher forcing, a round is deterministic by seed, and a run
interrupted between two tasks' searches resumes to the checkpoint of an uninterrupted run."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import torch

from doppler_lab.cli import main
from doppler_lab.house.errors import ConfigError, RunError
from doppler_lab.placers import place
from doppler_lab.policies.checkpoint import load_policy
from doppler_lab.policies.pretrained import resolve_checkpoint
from doppler_lab.train import distill as dl
from doppler_lab.train.general_policy import Task, memory_task_cap

#: a tiny pool: two semantics, two device counts, one memory-bound task
TINY = (
    Task("chainmm:matrices=4,blocks=2", "uniform:3", "wc"),
    Task("ffnn:layers=2,blocks=2,batch_blocks=2", "cpu:2", "paper"),
)
TINY_RECIPE = dl.DistillRecipe(
    rounds=1, tasks=2, budget=24, imitation_episodes=8, sim_episodes=16, seed=3
)


@pytest.fixture(scope="module")
def init():
    return resolve_checkpoint("doppler/general-memory")


def _weights(path):
    policy, _ = load_policy(path)
    return {k: v.clone() for k, v in policy.state_dict().items()}


def _same(a, b) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def _memory_task() -> Task:
    g = Task("ffnn:layers=2,blocks=2,batch_blocks=2", "p100x4", "wc")
    graph, cluster = g.build()
    return Task(g.graph, g.cluster, "wc", memory=memory_task_cap(graph, 4, 2.0))


@pytest.mark.parametrize("placer", ["heft", "clustering", "cp"])
def test_replayed_labels_reproduce_the_placement_exactly(init, placer):
    policy, _ = load_policy(init)
    for task in (*TINY, _memory_task()):
        graph, cluster = task.build()
        target = place(placer, graph, cluster, seed=1).device
        episodes, got = dl.replay_labels(policy, graph, cluster, target, task.semantics)
        nodes = graph.compute_nodes
        assert np.array_equal(got.device[nodes], target[nodes]), (placer, task.name)
        # one label per state, the device the episode took there: the teacher's own action
        labels = episodes.plc_teacher[0]
        assert labels.sum(axis=1).tolist() == [1] * len(nodes)
        taken = episodes.devices[0]
        assert np.array_equal(labels.argmax(axis=1), taken)
        assert np.array_equal(taken, target[nodes][episodes.nodes[0]])


def test_labeller_follows_a_renamed_device_group():
    # the teacher put nodes 0 and 2 together on device 1; the episode put node 0 on device 0
    lab = dl.PlacementLabeller(np.array([1, 0, 1, 0]))

    class State:
        device = np.array([0, -1, -1, -1])
        num_devices = 2

    assert lab(State, 2, np.zeros(2), np.random.default_rng(0)).tolist() == [0]
    assert lab(State, 1, np.zeros(2), np.random.default_rng(0)).tolist() == [0]  # no mate yet


def test_one_round_is_deterministic_by_seed(tmp_path, init):
    a = dl.distill(tmp_path / "a", TINY_RECIPE, init, tasks=TINY, progress=False)
    b = dl.distill(tmp_path / "b", TINY_RECIPE, init, tasks=TINY, progress=False)
    assert _same(_weights(a["checkpoint"]), _weights(b["checkpoint"]))
    assert a["rounds"] == b["rounds"]
    assert not _same(_weights(a["checkpoint"]), _weights(init))  # it trained
    rec = a["rounds"][0]
    assert rec["teacher_vs_greedy"] <= 1.0  # the teacher is never worse than the start


def test_resume_after_an_interrupt_between_tasks_matches(tmp_path, init, monkeypatch):
    recipe = replace(TINY_RECIPE, rounds=2)
    whole = dl.distill(tmp_path / "whole", recipe, init, tasks=TINY, progress=False)
    real = dl.search_task

    def stop_at_round_two_task_two(*args):
        if "round-2" in args[-1] and args[-1].endswith("t001.npz"):
            raise RuntimeError("stopped between tasks")
        return real(*args)

    monkeypatch.setattr(dl, "search_task", stop_at_round_two_task_two)
    with pytest.raises(RunError, match="stopped between tasks"):
        dl.distill(tmp_path / "cut", recipe, init, tasks=TINY, progress=False)
    assert (tmp_path / "cut/round-2/search/t000.npz").exists()
    assert not (tmp_path / "cut/round-2/search/t001.npz").exists()
    monkeypatch.setattr(dl, "search_task", real)
    resumed = dl.distill(tmp_path / "cut", recipe, init, tasks=TINY, progress=False)
    assert _same(_weights(whole["checkpoint"]), _weights(resumed["checkpoint"]))
    assert whole["rounds"] == resumed["rounds"]


def test_recipe_and_flag_errors_name_the_value(capsys):
    with pytest.raises(ConfigError, match=r"rounds = 0, expected an integer >= 1"):
        dl.DistillRecipe(rounds=0)
    with pytest.raises(ConfigError, match="imitation or sim episodes"):
        dl.DistillRecipe(imitation_episodes=0, sim_episodes=0)
    for bad in ("0", "two"):
        assert main(["train-general", "--distill", bad]) == 2
        err = capsys.readouterr().err.strip().splitlines()[-1]
        assert "--distill" in err and repr(bad) in err
