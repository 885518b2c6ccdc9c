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

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

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
    MAX_SAMPLES,
    SAMPLE_SHARE,
    Candidate,
    ProposalSet,
    Winner,
    check_fewer_devices,
    clustering_candidates,
    clustering_count,
    clustering_fits,
    config_from_settings,
    config_settings,
    default_samples,
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


#: what :func:`policy_search` found: the winner (``search from <start>`` where the local moves
#: improved on the best proposal), its cost, the calls spent and every proposal's cost
SearchOutcome = Winner


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
    return Placement(p.device, p.priority, p.placer, p.meta), cost, need


#: a budget search's proposals unless its config says otherwise: greedy + the budget's share of
#: samples (:func:`default_samples`), the clustering ladder's caps ready for when the
#: clustering is asked for
SEARCH_PROPOSALS = ProposalSet(samples=None, cluster_caps=CLUSTER_CAPS)


@dataclass(frozen=True)
class SearchConfig:
    """Settings of a budget search (:func:`policy_search`; the ``adapt`` search,
    :func:`~doppler_lab.search.adapter.adapt_search`, reads its proposals).

    Attributes:
        strategy: one of :data:`SEARCH_STRATEGIES`.
        proposals: the proposals judged before the local moves, starts of the search
            (:class:`~doppler_lab.search.proposals.ProposalSet`; ``samples`` None: the
            budget's share, :func:`default_samples`; cut to the budget by
            :meth:`~doppler_lab.search.proposals.ProposalSet.for_search`).
        cluster_moves: ``ils`` and ``ils-cp`` try
            :class:`~doppler_lab.placers.local_search.ClusterMoves` in their descent (False:
            single-node moves alone).
        batch: proposals simulated per round of local moves.
        temperature: annealing temperature relative to the start's makespan.
        mix: weight of the uniform draw in the guided proposal.
        restarts: starts of the ``restarts`` strategy.
    """

    strategy: str = SEARCH_STRATEGIES[0]
    proposals: ProposalSet = field(default=SEARCH_PROPOSALS)
    cluster_moves: bool = True
    batch: int = 8
    temperature: float = 0.02
    mix: float = UNIFORM_MIX
    restarts: int = RESTARTS

    def __post_init__(self) -> None:
        if not isinstance(self.proposals, ProposalSet):
            raise ConfigError(
                f"search config: proposals = {self.proposals!r}, expected a ProposalSet"
            )

    @classmethod
    def from_dict(cls, settings: Mapping[str, Any], owner: str = "search config") -> SearchConfig:
        """A config from flat settings (its own fields and the proposal set's, as saved by
        :meth:`to_dict`), or with the proposal set's under ``proposals``.

        Raises:
            ConfigError: an unknown setting or a bad value (one line naming it).
        """
        return config_from_settings(cls, settings, owner, SEARCH_PROPOSALS)

    def to_dict(self) -> dict[str, Any]:
        """The settings, flat (the proposal set's beside the search's own)."""
        return config_settings(self)

    def proposal_set(self, budget: int) -> ProposalSet:
        """The proposals a search of ``budget`` calls judges (:meth:`ProposalSet.for_search
        <doppler_lab.search.proposals.ProposalSet.for_search>`)."""
        return self.proposals.for_search(budget)


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
    calls = len(props)
    if strategy == "ils-cp":
        start = _cp_rollout_start(sim, cluster, semantics, budget - calls, bar)
        if start is not None:
            p, cost, need = start
            cand = Candidate(p, "cp-rollout start", "start", p.placer)
            verdict = verdict.with_start(cand, cost, graph, sim.cost)
            calls += need
    costs, order = verdict.costs, verdict.order
    devices = np.stack([c.placement.device for c in verdict.candidates])
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
    start = verdict.candidates[best_i]
    p = start.placement
    placement = Placement(best_dev, p.priority, p.placer, p.meta)
    if best_cost < float(costs[best_i]):
        return verdict.improved(
            placement, best_cost, f"search from {start.label}", start.source, calls
        )
    return verdict.winner(calls, placement)


__all__ = [
    "CLUSTERING_MAX_OPS",
    "CP_ROLLOUT_SHARE",
    "HEURISTIC_SOURCES",
    "MAX_SAMPLES",
    "RESTARTS",
    "SAMPLE_SHARE",
    "SEARCH_STRATEGIES",
    "UNIFORM_MIX",
    "SEARCH_PROPOSALS",
    "SearchConfig",
    "SearchOutcome",
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
