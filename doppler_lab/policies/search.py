"""Inference-time search with a policy as the proposal: a budget of simulator calls.

:func:`policy_search` spends ``budget`` simulator calls (one call = one simulated placement)
on one graph: it judges the policy's greedy rollout and ``samples`` sampled rollouts, then
anneals over device vectors from the best of them with the rest of the budget
(:func:`~doppler_lab.placers.local_search.search_devices`, the loop of the ``local-search``
placer). The strategies (:data:`SEARCH_STRATEGIES`):

- ``scan`` (default): the anneal of ``anneal``, but the single-node moves are drawn without
  replacement (:class:`MoveScan`: a shuffled list of every (node, new device) move, walked in
  order and reshuffled when used up), so that no move is left untried for long;
- ``anneal``: moves as in ``local-search`` (the moved node's new device uniform);
- ``guided``: the moved node's new device drawn from the policy's preferences, the device
  frequencies of each node over the sampled rollouts mixed with a uniform draw;
- ``restarts``: ``guided`` from each of the best few distinct rollouts, the rest of the
  budget split evenly between them.

``scan`` is the default because the policy's best rollout is a deep optimum for single-node
moves: under ``paper`` semantics a quarter or more of its N(D-1) moves leave the makespan
unchanged (off the critical path; the walk accepts them and drifts) and only a few improve it,
sometimes one alone by much; the uniform draw of ``anneal`` can miss such a move for the whole
budget, the scan tries each within about N(D-1) calls (reports/bench/doppler_search_probe.md).

The simulator is deterministic (noise 0) under ``semantics``; the result is never worse than the
best rollout, and ``calls <= budget`` always.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from tqdm.auto import tqdm

from ..errors import ConfigError
from ..graph import DataflowGraph
from ..hardware import Cluster
from ..placement import Placement
from ..placers.local_search import neighbours, search_devices
from ..sim import Simulator
from .base import PlacementPolicy
from .context import GraphContext
from .rollout import greedy_and_samples
from .tensors import flush_denormal

SEARCH_STRATEGIES = ("scan", "anneal", "guided", "restarts")
#: rollouts judged before the local moves: this share of the budget, at most ``MAX_SAMPLES``
SAMPLE_SHARE = 0.25
MAX_SAMPLES = 64
#: weight of the uniform draw in the guided proposal's device preferences
UNIFORM_MIX = 0.5
#: starts of the ``restarts`` strategy
RESTARTS = 4


def policy_candidates(
    policy: PlacementPolicy,
    graph: DataflowGraph,
    cluster: Cluster,
    samples: int,
    rng: np.random.Generator,
    ctx: GraphContext | None = None,
    semantics: str | None = None,
) -> list[Placement]:
    """The policy's greedy rollout, then ``samples`` sampled rollouts (no simulator call);
    ``semantics``: the task's, which picks the timing model of a ``task``-timed policy."""
    ctx = ctx or GraphContext.for_policy(graph, cluster, policy.config, semantics)
    with flush_denormal(), torch.no_grad():
        return greedy_and_samples(policy, ctx, policy.encode(ctx), samples, rng)


def device_preferences(devices: np.ndarray, num_devices: int, mix: float) -> np.ndarray:
    """``(N, D)`` each node's device frequencies over the rows of ``devices`` (``(K, N)``),
    mixed with the uniform distribution (weight ``mix``)."""
    k, n = devices.shape
    freq = np.zeros((n, num_devices))
    np.add.at(freq, (np.tile(np.arange(n), k), devices.reshape(-1)), 1.0)
    return (1.0 - mix) * freq / max(k, 1) + mix / num_devices


class MoveScan:
    """A proposal of :func:`~doppler_lab.placers.local_search.search_devices` that walks every
    single-node move without replacement.

    The moves are the (node, device shift) pairs of the ``movable`` nodes: shuffled, taken in
    order ``count`` at a time and reshuffled when used up; a move applies to the current device
    vector, so the walk goes on as the search moves. With probability ``swap_prob`` a row swaps
    instead: its scanned node trades devices with a random movable node on another device.
    """

    def __init__(self, movable: np.ndarray, num_devices: int, swap_prob: float = 0.2) -> None:
        shift = np.arange(1, num_devices)
        self.moves = np.stack(
            [np.repeat(movable, shift.size), np.tile(shift, movable.size)], axis=1
        )
        self.movable = movable
        self.num_devices = num_devices
        self.swap_prob = swap_prob
        self.order = self.moves
        self.pos = len(self.moves)

    def __call__(self, device: np.ndarray, count: int, rng: np.random.Generator) -> np.ndarray:
        """``(count, N)`` placements, each one move away from ``device``."""
        out = np.repeat(device[None, :], count, axis=0)
        if not len(self.moves):
            return out
        picks, need = [], count
        while need:
            if self.pos == len(self.moves):
                self.order, self.pos = self.moves[rng.permutation(len(self.moves))], 0
            take = self.order[self.pos : self.pos + need]
            self.pos += len(take)
            need -= len(take)
            picks.append(take)
        v, shift = np.concatenate(picks).T
        out[np.arange(count), v] = (device[v] + shift) % self.num_devices
        # swaps: the scanned node trades devices with a random movable node on another device
        rows = np.flatnonzero(rng.random(count) < self.swap_prob)
        w = self.movable[rng.integers(0, self.movable.size, rows.size)]
        a = v[rows]
        keep = device[w] != device[a]
        rows, a, w = rows[keep], a[keep], w[keep]
        out[rows, a] = device[w]
        out[rows, w] = device[a]
        return out


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
        rollout_cost: the best rollout's makespan (before the local moves).
        rollouts: rollouts judged (the greedy one included).
    """

    placement: Placement
    cost: float
    calls: int
    greedy_cost: float
    rollout_cost: float
    rollouts: int


def policy_search(
    policy: PlacementPolicy,
    graph: DataflowGraph,
    cluster: Cluster,
    budget: int,
    rng: np.random.Generator,
    semantics: str = "paper",
    strategy: str = SEARCH_STRATEGIES[0],
    samples: int | None = None,
    ctx: GraphContext | None = None,
    bar: tqdm | None = None,
    batch: int = 8,
    temperature: float = 0.02,
    mix: float = UNIFORM_MIX,
    restarts: int = RESTARTS,
) -> SearchOutcome:
    """Search placements of ``graph`` with ``policy`` as the proposal (module docstring).

    Args:
        policy: the policy.
        graph: the graph.
        cluster: the cluster.
        budget: simulator calls in all (>= 1).
        rng: the only source of randomness.
        semantics: simulator semantics of the objective.
        strategy: one of :data:`SEARCH_STRATEGIES`.
        samples: sampled rollouts (default :func:`default_samples`; at most ``budget - 1``).
        ctx: a prepared :class:`GraphContext` (built if None).
        bar: a progress bar advanced by every simulator call.
        batch: proposals simulated per round of local moves.
        temperature: annealing temperature relative to the start's makespan.
        mix: weight of the uniform draw in the guided proposal.
        restarts: starts of the ``restarts`` strategy.
    """
    if strategy not in SEARCH_STRATEGIES:
        raise ConfigError(f"search strategy {strategy!r}, expected one of {SEARCH_STRATEGIES}")
    if budget < 1:
        raise ConfigError(f"search budget {budget!r}, expected an integer >= 1")
    samples = default_samples(budget) if samples is None else min(samples, budget - 1)
    cands = policy_candidates(policy, graph, cluster, samples, rng, ctx, semantics)
    sim = Simulator(graph, cluster, semantics)  # type: ignore[arg-type]
    devices = np.stack([p.device for p in cands])
    costs = sim.makespans(devices)
    calls = len(cands)
    if bar is not None:
        bar.update(calls)
    order = np.argsort(costs, kind="stable")
    ndev = cluster.num_devices
    propose = None
    if strategy == "scan":
        propose = MoveScan(graph.compute_nodes, ndev)
    elif strategy != "anneal":
        prefs = device_preferences(devices, ndev, mix)
        movable = graph.compute_nodes

        def propose(dev: np.ndarray, k: int, r: np.random.Generator) -> np.ndarray:
            return neighbours(dev, movable, ndev, k, r, prefs=prefs)

    # restarts: the best few distinct rollouts, the rest of the budget split evenly between them
    _, first = np.unique(devices[order], axis=0, return_index=True)
    starts = [int(order[i]) for i in sorted(first)[: restarts if strategy == "restarts" else 1]]
    best_i, best_dev, best_cost = starts[0], devices[starts[0]], float(costs[starts[0]])
    for n, i in enumerate(starts):
        found = search_devices(
            sim,
            devices[i],
            calls + (budget - calls) // (len(starts) - n),
            rng,
            "anneal",
            batch,
            temperature,
            start_cost=float(costs[i]),
            calls_used=calls,
            propose=propose,
            bar=bar,
        )
        calls = found.calls
        if found.cost < best_cost:
            best_i, best_dev, best_cost = i, found.device, found.cost
    start = cands[best_i]
    placement = Placement(best_dev, start.priority, start.placer, dict(start.meta))
    return SearchOutcome(
        placement, best_cost, calls, float(costs[0]), float(costs[order[0]]), len(cands)
    )
