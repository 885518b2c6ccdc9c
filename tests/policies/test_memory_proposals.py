"""The memory baselines (m-ETF, m-SCT, pipeline) as proposals of the learned placer: judged
only where the graph does not fit on one device, never worse than the best of them there, and
counted apart from the partitions."""

from __future__ import annotations

import math

import numpy as np
import pytest

from doppler_lab.hardware.cluster import make_cluster
from doppler_lab.placers import place
from doppler_lab.placers.repair import MEMORY_BASELINE_PLACERS
from doppler_lab.search.proposals import DOPPLER_PROPOSALS, ProposalSet, memory_candidates
from doppler_lab.timing.fit import capped, fits_one_device
from doppler_lab.timing.memory import tensor_bytes
from doppler_lab.timing.sim import SEMANTICS, Simulator

OPTS = dict(samples=2, partitions=1, semantics="wc")


def _split_cluster(graph, share=0.4):
    """p100x4 with a cap no device can hold the graph under (``share`` of every tensor)."""
    return make_cluster("p100x4").with_memory(share * float(tensor_bytes(graph).sum()))


def test_only_a_graph_that_does_not_fit_on_one_device_gets_them(small_graph):
    free = make_cluster("p100x4")
    assert fits_one_device(small_graph, free) and memory_candidates(small_graph, free) == []
    assert DOPPLER_PROPOSALS.most_calls(small_graph, free) == 22
    split = _split_cluster(small_graph)
    one = fits_one_device(small_graph, split)
    assert not one
    cands = memory_candidates(small_graph, split)
    assert 1 <= len(cands) <= len(MEMORY_BASELINE_PLACERS)
    assert {p.placer for p in cands} <= set(MEMORY_BASELINE_PLACERS)
    assert len({p.device.tobytes() for p in cands}) == len(cands)  # equal ones once
    assert DOPPLER_PROPOSALS.most_calls(small_graph, split) == 25
    # found once, handed to both: the same answers
    got = memory_candidates(small_graph, split, one_device=one)
    assert [p.device.tobytes() for p in got] == [p.device.tobytes() for p in cands]
    assert DOPPLER_PROPOSALS.most_calls(small_graph, split, one_device=one) == 25
    assert memory_candidates(small_graph, split, one_device=True) == []
    assert DOPPLER_PROPOSALS.most_calls(small_graph, split, one_device=True) == 22


def test_doppler_is_no_worse_than_the_memory_baselines(small_graph):
    cluster = _split_cluster(small_graph)
    sim = capped(Simulator(small_graph, cluster, "wc"))
    best = min(
        sim.makespan(place(name, small_graph, cluster, seed=0)) for name in MEMORY_BASELINE_PLACERS
    )
    p = place("doppler", small_graph, cluster, seed=0, **OPTS)
    assert sim.makespan(p) <= best * (1 + 1e-12)
    assert p.meta["memory_cost"] == pytest.approx(best)
    assert p.meta["memory_baselines"] >= 1 and p.meta["partitions"] <= 1
    for s in SEMANTICS:
        assert np.all(Simulator(small_graph, cluster, s).run(p).peak_memory_bytes <= sim.caps)
    # the budget search starts from them too
    q = place("doppler", small_graph, cluster, seed=0, budget=40, **OPTS)
    assert sim.makespan(q) <= best * (1 + 1e-12) and q.meta["sim_calls"] <= 40


def test_memory_baselines_false_leaves_them_out(small_graph):
    cluster = _split_cluster(small_graph)
    p = place("doppler", small_graph, cluster, seed=0, memory_baselines=False, **OPTS)
    assert p.meta["memory_baselines"] == 0 and math.isnan(p.meta["memory_cost"])
    assert p.meta["source"] not in MEMORY_BASELINE_PLACERS
    # the same rollouts: the baselines draw nothing from the generator
    q = place("doppler", small_graph, cluster, seed=0, **OPTS)
    assert q.meta["rollout_cost"] == p.meta["rollout_cost"]


def test_a_budget_too_small_for_them_cuts_them_first(small_graph):
    from doppler_lab.policies.checkpoint import make_policy
    from doppler_lab.policies.policy_config import PolicyConfig
    from doppler_lab.timing.cost_model import CostModel

    cluster = _split_cluster(small_graph)
    props = ProposalSet(2, partitions=1, memory_baselines=True).for_search(4)
    assert props.limit == 1
    pol = make_policy(PolicyConfig(hidden=16, head_hidden=24, mp_steps=2, num_bases=4), 4, seed=1)
    cost = CostModel(small_graph, cluster)
    got = props.build(pol, small_graph, cluster, np.random.default_rng(0), cost)
    assert len(got) == 3 + 1 and got.memories == 0  # the partition took the one call left
    wide = ProposalSet(2, partitions=1, memory_baselines=True).for_search(10)
    got = wide.build(pol, small_graph, cluster, np.random.default_rng(0), cost)
    assert got.memories >= 1 and got.placements[-1].placer in MEMORY_BASELINE_PLACERS
