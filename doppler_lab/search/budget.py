"""Inference-time search with a policy as the proposal: a budget of simulator calls.

:func:`policy_search` spends ``budget`` simulator calls (one call = one simulated placement,
a trace included) on one graph: it judges the policy's greedy rollout and ``samples`` sampled
rollouts, then searches device vectors from the best of them with the rest of the budget. The
strategies (:data:`SEARCH_STRATEGIES`):

- ``ils`` (default): iterated local search (``iterated_search`` of
  :mod:`doppler_lab.placers.local_search`, also the ``local-search`` placer's ``method=ils``).
  A descent by the moves of the ops on the critical path of the current placement's trace
  (first the moves of several ops at once around them, :class:`~doppler_lab.placers.local_search.ClusterMoves`: a fan-in
  gathered on one device, a chain moved whole; then each (op, new device) move once,
  :class:`~doppler_lab.placers.local_search.MoveScan`; the path taken again after every
  improvement), then a scan of every single-node move that also accepts moves that leave the
  makespan unchanged (back to the descent on an improvement), and when N(D-1)/2 calls have made
  no progress (no makespan 0.1 % below the one at the last progress), a kick: 4 random
  single-node moves from the best such end so far, and again;
- ``scan``: the anneal of ``anneal``, but the single-node moves are drawn without replacement
  (:class:`~doppler_lab.placers.local_search.MoveScan`: a shuffled list of every (node, new
  device) move, walked in order and reshuffled when used up), so that no move is left untried
  for long;
- ``anneal``: the loop of the ``local-search`` placer
  (:func:`~doppler_lab.placers.local_search.search_devices`: uniform moves, Metropolis rule);
- ``guided``: the moved node's new device drawn from the policy's preferences, the device
  frequencies of each node over the sampled rollouts mixed with a uniform draw;
- ``restarts``: ``guided`` from each of the best few distinct rollouts, the rest of the
  budget split evenly between them;
- ``ils-cp``: ``ils`` from the best of the rollouts and the ``cp-rollout`` placement (the rollout
  over deterministic CP, :mod:`doppler_lab.placers.cp_rollout`), which joins them when its
  N x D (+ 2) calls fit in :data:`CP_ROLLOUT_SHARE` of what the rollouts left of the budget.

The ``doppler`` placer also takes ``search="adapt"``: no local moves, the calls train a
per-instance table on PLC's logits with the network frozen, from the best proposal
(:func:`doppler_lab.search.adapter.adapt_search`; DOPPLER policies only, a learned PLC).

Why ``ils`` is the default (the probe's measurements): reports/notes/search_tuning.md.

The simulator is deterministic (noise 0) under ``semantics``; the result is never worse than the
best rollout, and ``calls <= budget`` always.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from tqdm.auto import tqdm

from ..hardware.cluster import Cluster
from ..house.errors import ConfigError
from ..ir.graph import DataflowGraph
from ..ir.placement import Placement
from ..placers.clustering import CLUSTER_CAPS
from ..placers.local_search import (
    DescentOptions,
    IlsOptions,
    MoveScan,
    iterated_search,
    neighbours,
    search_devices,
)
from ..policies.context import GraphContext
from ..policies.policy_base import PlacementPolicy
from ..timing.fit import capped
from ..timing.sim import Simulator
from .proposals import (  # the proposals' own names, here since the search came first
    CLUSTERING_MAX_OPS,
    HEURISTIC_SOURCES,
    ProposalSet,
    candidate_source,
    check_fewer_devices,
    clustering_candidates,
    clustering_count,
    clustering_fits,
    fewer_device_counts,
    heuristic_candidates,
    judge,
    partition_candidates,
    policy_candidates,
    proposal_order,
)

SEARCH_STRATEGIES = ("ils", "scan", "anneal", "guided", "restarts", "ils-cp")
#: ``ils-cp``: the largest share of the budget left after the rollouts that ``cp-rollout`` may take
CP_ROLLOUT_SHARE = 0.5
#: rollouts judged before the local moves: this share of the budget, at most ``MAX_SAMPLES``
SAMPLE_SHARE = 0.25
MAX_SAMPLES = 64
#: weight of the uniform draw in the guided proposal's device preferences
UNIFORM_MIX = 0.5
#: starts of the ``restarts`` strategy
RESTARTS = 4


def device_preferences(devices: np.ndarray, num_devices: int, mix: float) -> np.ndarray:
    """``(N, D)`` each node's device frequencies over the rows of ``devices`` (``(K, N)``),
    mixed with the uniform distribution (weight ``mix``)."""
    k, n = devices.shape
    freq = np.zeros((n, num_devices))
    np.add.at(freq, (np.tile(np.arange(n), k), devices.reshape(-1)), 1.0)
    return (1.0 - mix) * freq / max(k, 1) + mix / num_devices


def default_samples(budget: int) -> int:
    """Sampled rollouts of a budget search: :data:`SAMPLE_SHARE` of it, at most
    :data:`MAX_SAMPLES`, leaving the greedy rollout one call."""
    return max(0, min(int(budget * SAMPLE_SHARE), MAX_SAMPLES, budget - 1))


@dataclass(frozen=True)
class SearchOutcome:
    """What :func:`policy_search` found.

    Attributes:
        placement: the best placement (the priority of the rollout it started from).
        cost: its simulated makespan.
        calls: simulator calls spent (``<= budget``).
        greedy_cost: the greedy rollout's makespan.
        rollout_cost: the best rollout's makespan (before the local moves; the policy's
            rollouts only, without ``ils-cp``'s ``cp-rollout`` start).
        rollouts: the policy's rollouts judged (the greedy one included).
        partition_cost: the best partition proposal's makespan (nan without any).
        clustering_cost: the clustering proposal's makespan (nan without it).
        memory_cost: the best memory baseline's makespan (nan without any).
    """

    placement: Placement
    cost: float
    calls: int
    greedy_cost: float
    rollout_cost: float
    rollouts: int
    partition_cost: float = float("nan")
    clustering_cost: float = float("nan")
    memory_cost: float = float("nan")


def cp_rollout_calls(graph: DataflowGraph, num_devices: int) -> int:
    """Simulator calls of the ``cp-rollout`` start of ``ils-cp``: N x D completions, the
    placer's check of its final placement and the search's judgement of it."""
    return int(graph.compute_nodes.size) * num_devices + 2


def _cp_rollout_start(
    sim: Simulator, cluster: Cluster, semantics: str, left: int, bar: tqdm | None
) -> tuple[Placement, float, int] | None:
    """The ``cp-rollout`` placement, its makespan and its calls when they fit in
    :data:`CP_ROLLOUT_SHARE` of the ``left`` calls of the budget (None otherwise)."""
    from ..placers.registry import get_placer

    need = cp_rollout_calls(sim.graph, cluster.num_devices)
    if need > CP_ROLLOUT_SHARE * left:
        return None
    p = get_placer("cp-rollout", semantics=semantics).place(
        sim.graph, cluster, np.random.default_rng(0)
    )
    cost = sim.makespan(p)
    if bar is not None:
        bar.update(need)
    return Placement(p.device, p.priority, p.placer, dict(p.meta)), cost, need


@dataclass(frozen=True)
class SearchConfig:
    """Settings of a budget search (:func:`policy_search`; the ``adapt`` search,
    :func:`~doppler_lab.search.adapter.adapt_search`, reads the proposals' fields).

    Attributes:
        strategy: one of :data:`SEARCH_STRATEGIES`.
        samples: sampled rollouts (default :func:`default_samples`; at most ``budget - 1``).
        partitions: METIS partitions judged after the rollouts (as many as the budget leaves
            room for; equal ones once), starts of the search like them.
        clustering: judge the ``clustering`` placement and its bounded variants
            (``cluster_caps``) after the rollouts, before the partitions
            (:func:`~doppler_lab.search.proposals.heuristic_candidates`), as far as the budget
            leaves room.
        cluster_caps: the clustering ladder's work bounds
            (:data:`~doppler_lab.placers.clustering.CLUSTER_CAPS`).
        fewer_devices: greedy rollouts on fewer devices replace the last samples: ``True``,
            ``False`` or device counts (:func:`~doppler_lab.search.proposals.fewer_device_counts`).
        cluster_moves: ``ils`` and ``ils-cp`` try
            :class:`~doppler_lab.placers.local_search.ClusterMoves` in their descent (False:
            single-node moves alone).
        batch: proposals simulated per round of local moves.
        temperature: annealing temperature relative to the start's makespan.
        mix: weight of the uniform draw in the guided proposal.
        restarts: starts of the ``restarts`` strategy.
        memory_baselines: judge the memory baselines' placements after the other proposals
            where the graph does not fit on one device
            (:func:`~doppler_lab.search.proposals.memory_candidates`), starts of the search like
            them.
    """

    strategy: str = SEARCH_STRATEGIES[0]
    samples: int | None = None
    partitions: int = 0
    clustering: bool = False
    cluster_caps: tuple[float, ...] = CLUSTER_CAPS
    fewer_devices: bool | tuple[int, ...] = False
    cluster_moves: bool = True
    batch: int = 8
    temperature: float = 0.02
    mix: float = UNIFORM_MIX
    restarts: int = RESTARTS
    memory_baselines: bool = False

    def proposal_set(self, budget: int) -> ProposalSet:
        """The proposals a search of ``budget`` calls judges (:meth:`ProposalSet.for_search
        <doppler_lab.search.proposals.ProposalSet.for_search>`)."""
        samples = default_samples(budget) if self.samples is None else self.samples
        whole = ProposalSet(
            samples, self.fewer_devices, self.clustering, self.cluster_caps, self.partitions,
            memory_baselines=self.memory_baselines,
        )  # fmt: skip
        return whole.for_search(budget)


def policy_search(
    policy: PlacementPolicy,
    graph: DataflowGraph,
    cluster: Cluster,
    budget: int,
    rng: np.random.Generator,
    semantics: str = "paper",
    config: SearchConfig | None = None,
    ctx: GraphContext | None = None,
    bar: tqdm | None = None,
) -> SearchOutcome:
    """Search placements of ``graph`` with ``policy`` as the proposal (module docstring).

    Its settings are a :class:`SearchConfig`; the rest are the problem, the budget, the randomness
    and two run objects (``ctx``, ``bar``).

    Args:
        policy: the policy.
        graph: the graph.
        cluster: the cluster.
        budget: simulator calls in all (>= 1).
        rng: the only source of randomness.
        semantics: simulator semantics of the objective.
        config: the settings (default :class:`SearchConfig`: ``ils`` from the policy's
            rollouts alone).
        ctx: a prepared :class:`GraphContext` (built if None).
        bar: a progress bar advanced by every simulator call.
    """
    cfg = config or SearchConfig()
    strategy = cfg.strategy
    if strategy not in SEARCH_STRATEGIES:
        raise ConfigError(f"search strategy {strategy!r}, expected one of {SEARCH_STRATEGIES}")
    if budget < 1:
        raise ConfigError(f"search budget {budget!r}, expected an integer >= 1")
    # placements over a memory cap simulate as inf: the search never moves to one
    sim = capped(Simulator(graph, cluster, semantics))  # type: ignore[arg-type]
    props = cfg.proposal_set(budget).build(policy, graph, cluster, rng, sim.cost, ctx, semantics)
    # the device vectors, as the local moves are judged; the rollouts, then the heuristics
    verdict = judge(sim, props, devices_only=True, in_groups=True, bar=bar)
    cands, costs, calls = list(props.placements), verdict.costs, len(props)
    devices = np.stack([p.device for p in cands])
    rollout_cost, rollouts = verdict.rollout_cost, props.rollouts
    clustering_cost, partition_cost = verdict.clustering_cost, verdict.partition_cost
    memory_cost = verdict.memory_cost
    if strategy == "ils-cp":
        start = _cp_rollout_start(sim, cluster, semantics, budget - calls, bar)
        if start is not None:
            p, cost, need = start
            cands.append(p)
            devices = np.concatenate([devices, p.device[None, :]])
            costs = np.append(costs, cost)
            calls += need
    order = proposal_order(costs, devices, graph, sim.cost)
    ndev = cluster.num_devices
    propose = None
    if strategy == "scan":
        propose = MoveScan(graph.compute_nodes, ndev)
    elif strategy != "anneal":
        prefs = device_preferences(devices, ndev, cfg.mix)
        movable = graph.compute_nodes

        def propose(dev: np.ndarray, k: int, r: np.random.Generator) -> np.ndarray:
            return neighbours(dev, movable, ndev, k, r, prefs=prefs)

    ils = IlsOptions(batch=cfg.batch, cluster_moves=cfg.cluster_moves)
    moves = DescentOptions("anneal", cfg.batch, cfg.temperature, propose=propose)
    # restarts: the best few distinct rollouts, the rest of the budget split evenly between them
    _, first = np.unique(devices[order], axis=0, return_index=True)
    starts = [int(order[i]) for i in sorted(first)[: cfg.restarts if strategy == "restarts" else 1]]
    best_i, best_dev, best_cost = starts[0], devices[starts[0]], float(costs[starts[0]])
    for n, i in enumerate(starts):
        stop = calls + (budget - calls) // (len(starts) - n)
        if strategy in ("ils", "ils-cp"):
            found = iterated_search(
                sim, devices[i], float(costs[i]), stop, rng, ils, calls_used=calls, bar=bar
            )
        else:
            found = search_devices(
                sim,
                devices[i],
                stop,
                rng,
                moves,
                start_cost=float(costs[i]),
                calls_used=calls,
                bar=bar,
            )
        calls = found.calls
        if found.cost < best_cost:
            best_i, best_dev, best_cost = i, found.device, found.cost
    start = cands[best_i]
    placement = Placement(best_dev, start.priority, start.placer, dict(start.meta))
    return SearchOutcome(
        placement, best_cost, calls, float(costs[0]), rollout_cost, rollouts, partition_cost,
        clustering_cost, memory_cost,
    )  # fmt: skip


__all__ = [
    "CLUSTERING_MAX_OPS",
    "CP_ROLLOUT_SHARE",
    "HEURISTIC_SOURCES",
    "MAX_SAMPLES",
    "RESTARTS",
    "SAMPLE_SHARE",
    "SEARCH_STRATEGIES",
    "UNIFORM_MIX",
    "SearchConfig",
    "SearchOutcome",
    "candidate_source",
    "check_fewer_devices",
    "clustering_candidates",
    "clustering_count",
    "clustering_fits",
    "cp_rollout_calls",
    "default_samples",
    "device_preferences",
    "fewer_device_counts",
    "heuristic_candidates",
    "partition_candidates",
    "policy_candidates",
    "policy_search",
    "proposal_order",
]
