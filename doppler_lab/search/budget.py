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

Why ``ils`` (reports/bench/doppler_search_probe.md): the policy's best rollout sits in a deep
optimum for single-node moves. Under ``paper`` semantics a quarter or more of its N(D-1) moves
leave the makespan unchanged (off the critical path) and only a few improve it, sometimes one
alone by much (paper full_transformer_layer: 205.5 to 150.1 by one move). ``anneal`` can miss
such a move for the whole budget; ``scan`` tries each within N(D-1) calls, but it takes the
first no-worse move of a batch, drifts over the plateau and may pass the big one by; the
descent tries the few moves that can shorten the path first (a few dozen ops, not N) and takes
the best of each batch, and the kicks leave an optimum that the scan cannot improve. The moves
of several ops at once came after that probe (its ``ils`` rows are single-node moves alone,
``cluster_moves=False`` here); :class:`~doppler_lab.placers.local_search.ClusterMoves` says why
and what they changed.

The simulator is deterministic (noise 0) under ``semantics``; the result is never worse than the
best rollout, and ``calls <= budget`` always.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from tqdm.auto import tqdm

from ..hardware.cluster import Cluster
from ..house.deps import available, warn_once
from ..house.errors import ConfigError
from ..house.settings import bad_setting
from ..ir.graph import DataflowGraph
from ..ir.placement import Placement
from ..placers.clustering import CLUSTER_CAPS
from ..placers.local_search import MoveScan, iterated_search, neighbours, search_devices
from ..policies.context import GraphContext
from ..policies.policy_base import PlacementPolicy
from ..policies.rollout import greedy_and_samples
from ..policies.tensors import flush_denormal
from ..timing.cost_model import CostModel
from ..timing.sim import Simulator

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


def check_fewer_devices(
    spec: object, owner: str = "placer 'doppler'", noun: str = "option"
) -> None:
    """Raise :class:`ConfigError` unless ``spec`` is a ``fewer_devices`` value: ``True``,
    ``False``, ``None`` or a list of device counts >= 1 (the settings parser's message form)."""
    if spec is None or isinstance(spec, bool):
        return
    if isinstance(spec, (list, tuple)) and all(
        isinstance(k, (int, np.integer)) and not isinstance(k, bool) and k >= 1 for k in spec
    ):
        return
    raise bad_setting(
        owner,
        "fewer_devices",
        spec,
        "true (half the devices and 2), false, or a list of device counts >= 1",
        noun,
    )


def fewer_device_counts(num_devices: int, spec: object) -> tuple[int, ...]:
    """The device counts below ``num_devices`` that the policy also places on (greedily, on the
    first devices of the cluster): ``spec`` ``True`` for half the devices and 2, ``False`` /
    ``None`` for none, or a list of counts (each ``1 <= k < num_devices``; larger ones are left
    out, so one list serves clusters of any size; :func:`check_fewer_devices`)."""
    check_fewer_devices(spec)
    if spec is None or spec is False:
        return ()
    if spec is True:
        return tuple(k for k in sorted({num_devices // 2, 2}, reverse=True) if 2 <= k < num_devices)
    return tuple(int(k) for k in dict.fromkeys(spec) if k < num_devices)  # type: ignore[union-attr]


#: the heuristic proposals judged next to the policy's rollouts (:func:`heuristic_candidates`)
HEURISTIC_SOURCES = ("clustering", "partition")


def candidate_source(index: int, rollouts: int, placement: Placement) -> str:
    """What candidate ``index`` of the proposals is (``rollouts`` of them the policy's, the rest
    heuristic proposals): ``greedy``, ``sample``, ``greedy on K devices``
    (:func:`policy_candidates`'s rollouts on fewer devices), ``clustering`` or ``partition``."""
    if index >= rollouts:
        return placement.placer if placement.placer in HEURISTIC_SOURCES else "partition"
    used = placement.meta.get("devices_used")
    if used is not None:
        return f"greedy on {used} device{'s' if used != 1 else ''}"
    return "greedy" if index == 0 else "sample"


def policy_candidates(
    policy: PlacementPolicy,
    graph: DataflowGraph,
    cluster: Cluster,
    samples: int,
    rng: np.random.Generator,
    ctx: GraphContext | None = None,
    semantics: str | None = None,
    fewer_devices: Sequence[int] = (),
) -> list[Placement]:
    """The policy's greedy rollout, then ``samples`` sampled rollouts (no simulator call);
    ``semantics``: the task's, which picks the timing model of a ``task``-timed policy.

    ``fewer_devices`` (device counts below the cluster's; :func:`fewer_device_counts`): the
    last of the samples give way to greedy rollouts on the first k devices of the cluster,
    one per count (as many as there are samples), their placements marked
    ``meta["devices_used"] = k``. Where transfers dominate, fewer devices win (a random DAG
    with 5x transfers on ``p100x4``: 0.47 of CP on 2 devices, 0.93 on 4), and a DOPPLER policy,
    whose weights score each device alike, places on any count.
    """
    ctx = ctx or GraphContext.for_policy(graph, cluster, policy.config, semantics)
    counts = [k for k in fewer_devices if k < cluster.num_devices][:samples]
    with flush_denormal(), torch.no_grad():
        cands = greedy_and_samples(policy, ctx, policy.encode(ctx), samples - len(counts), rng)
        for k in counts:
            small = GraphContext.for_policy(graph, cluster.first(k), policy.config, semantics)
            p = greedy_and_samples(policy, small, policy.encode(small), 0, rng)[0]
            cands.append(Placement(p.device, p.priority, p.placer, {**p.meta, "devices_used": k}))
    return cands


def partition_candidates(
    graph: DataflowGraph, cost: CostModel, num_devices: int, count: int
) -> list[Placement]:
    """``count`` partition proposals of ``graph`` on ``num_devices`` devices as placements
    (equal ones once; :func:`~doppler_lab.placers.partition.partition_proposals`); none when
    ``pymetis`` is not installed, said once per process on stderr (the other proposals are
    judged without them)."""
    from ..placers.partition import partition_proposals

    if count > 0 and num_devices > 1 and not available("pymetis"):
        warn_once(
            "the METIS partition proposals need the package 'pymetis' (pip install pymetis), "
            "which is not installed: placing without them"
        )
        return []
    props = partition_proposals(graph, cost, num_devices, count)
    return [Placement(dev, None, "partition").with_inputs_filled(graph) for dev in props]


def clustering_candidates(
    graph: DataflowGraph, cost: CostModel, caps: Sequence[float] = ()
) -> list[Placement]:
    """The ``clustering`` placer's placement and its bounded variants (``caps``; each distinct
    placement once: :func:`~doppler_lab.placers.clustering.clustering_variants`) as proposals
    (no simulator call)."""
    from ..placers.clustering import clustering_variants

    return [
        Placement(dev, None, "clustering", meta)
        for dev, meta in clustering_variants(graph, cost, tuple(caps))
    ]


#: the clustering proposal is left out of graphs with more ops than this: its model runs once
#: per edge, each run over the whole graph (0.16 s for 1000 ops on one core, 1.3 s for 3000,
#: 7 s for 6000, where the policy's 17 rollouts take about 0.5 s for 3000); the ``clustering``
#: placer itself places any size
CLUSTERING_MAX_OPS = 2000


def clustering_fits(graph: DataflowGraph) -> bool:
    """Whether the clustering proposal is judged on ``graph`` (:data:`CLUSTERING_MAX_OPS`)."""
    return int(graph.compute_nodes.size) <= CLUSTERING_MAX_OPS


def heuristic_candidates(
    graph: DataflowGraph,
    cost: CostModel,
    num_devices: int,
    partitions: int,
    clustering: bool,
    cluster_caps: Sequence[float] = (),
    limit: int | None = None,
) -> list[Placement]:
    """The heuristic proposals judged next to the policy's rollouts: the clustering placement
    and its bounded variants of ``cluster_caps`` (when ``clustering`` and the graph has at most
    :data:`CLUSTERING_MAX_OPS` ops: :func:`clustering_candidates`), then ``partitions`` METIS
    partitions (:func:`partition_candidates`); a partition equal to a clustering placement is
    left out. ``limit``: at most this many in all (the first ones)."""
    out = (
        clustering_candidates(graph, cost, cluster_caps)
        if clustering and clustering_fits(graph)
        else []
    )
    if limit is not None:
        out = out[: max(0, limit)]
    count = partitions if limit is None else min(partitions, limit - len(out))
    if count > 0:
        seen = {p.device.tobytes() for p in out}
        out += [
            p
            for p in partition_candidates(graph, cost, num_devices, count)
            if p.device.tobytes() not in seen
        ]
    return out


def clustering_count(cands: Sequence[Placement]) -> int:
    """How many of the heuristic proposals ``cands`` (:func:`heuristic_candidates`) are
    clustering placements (they come first)."""
    return sum(p.placer == "clustering" for p in cands)


def proposal_order(
    costs: np.ndarray, devices: np.ndarray, graph: DataflowGraph, cost: CostModel
) -> np.ndarray:
    """Indices of the proposals (``devices``: ``(K, N)``) by makespan; equal makespans by the
    transfer time they cut (the mean over device pairs of each edge between ops on two
    devices; less first: the same makespan with fewer bytes on the links), then in order.
    (The paper's chain_mm: the clustering and four partitions all make 1300.11; the partitions
    cut less, and the budget search from the first of them reaches the optimum more often.)"""
    devices = np.asarray(devices).reshape(len(costs), -1)
    between = ~graph.is_input[graph.edge_src] & ~graph.is_input[graph.edge_dst]
    src, dst = graph.edge_src[between], graph.edge_dst[between]
    w = np.asarray(cost.mean_edge_cost, dtype=np.float64)[between]
    cut = ((devices[:, src] != devices[:, dst]) * w).sum(axis=1)
    return np.lexsort((np.arange(len(costs)), cut, np.asarray(costs, dtype=np.float64)))


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
    """

    placement: Placement
    cost: float
    calls: int
    greedy_cost: float
    rollout_cost: float
    rollouts: int
    partition_cost: float = float("nan")
    clustering_cost: float = float("nan")


def cp_rollout_calls(graph: DataflowGraph, num_devices: int) -> int:
    """Simulator calls of the ``cp-rollout`` start of ``ils-cp``: N x D completions, the
    placer's check of its final placement and the search's judgement of it."""
    return int(graph.compute_nodes.size) * num_devices + 2


def _with_cp_rollout(sim, graph, cluster, semantics, budget, cands, devices, costs, calls, bar):
    """The candidates with the ``cp-rollout`` placement added when its calls fit in
    :data:`CP_ROLLOUT_SHARE` of the budget left (unchanged otherwise)."""
    from ..placers.cp_rollout import CPRolloutPlacer

    need = cp_rollout_calls(graph, cluster.num_devices)
    if need > CP_ROLLOUT_SHARE * (budget - calls):
        return cands, devices, costs, calls
    p = CPRolloutPlacer(semantics=semantics).place(graph, cluster, np.random.default_rng(0))
    cost = sim.makespan(p)
    if bar is not None:
        bar.update(need)
    start = Placement(p.device, p.priority, p.placer, dict(p.meta))
    return (
        [*cands, start],
        np.concatenate([devices, p.device[None, :]]),
        np.append(costs, cost),
        calls + need,
    )


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
    partitions: int = 0,
    fewer_devices: Sequence[int] = (),
    cluster_moves: bool = True,
    clustering: bool = False,
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
        partitions: METIS partitions judged after the rollouts (as many as the budget leaves
            room for; equal ones once), starts of the search like them.
        clustering: judge the ``clustering`` placement and its bounded variants
            (:data:`~doppler_lab.placers.clustering.CLUSTER_CAPS`) after the rollouts, before
            the partitions (:func:`heuristic_candidates`), as far as the budget leaves room.
        fewer_devices: device counts whose greedy rollouts replace the last samples
            (:func:`policy_candidates`).
        cluster_moves: ``ils`` and ``ils-cp`` try
            :class:`~doppler_lab.placers.local_search.ClusterMoves` in their descent (False:
            single-node moves alone).
    """
    if strategy not in SEARCH_STRATEGIES:
        raise ConfigError(f"search strategy {strategy!r}, expected one of {SEARCH_STRATEGIES}")
    if budget < 1:
        raise ConfigError(f"search budget {budget!r}, expected an integer >= 1")
    samples = default_samples(budget) if samples is None else min(samples, budget - 1)
    clustering = clustering and clustering_fits(graph)
    cands = policy_candidates(
        policy, graph, cluster, samples, rng, ctx, semantics, fewer_devices=fewer_devices
    )
    sim = Simulator(graph, cluster, semantics)  # type: ignore[arg-type]
    devices = np.stack([p.device for p in cands])
    costs = sim.makespans(devices)
    calls = len(cands)
    if bar is not None:
        bar.update(calls)
    rollout_cost, rollouts = float(costs.min()), len(cands)
    partition_cost = clustering_cost = float("nan")
    room = budget - calls
    if room > 0 and (partitions > 0 or clustering):
        extra = heuristic_candidates(
            graph, sim.cost, cluster.num_devices, partitions, clustering, CLUSTER_CAPS, room
        )
    else:
        extra = []
    if extra:
        rows = np.stack([p.device for p in extra])
        more = sim.makespans(rows)
        first = clustering_count(extra)  # the clusterings come first
        if first:
            clustering_cost = float(more[:first].min())
        if more.size > first:
            partition_cost = float(more[first:].min())
        cands = [*cands, *extra]
        devices = np.concatenate([devices, rows])
        costs = np.concatenate([costs, more])
        calls += len(extra)
        if bar is not None:
            bar.update(len(extra))
    if strategy == "ils-cp":
        cands, devices, costs, calls = _with_cp_rollout(
            sim, graph, cluster, semantics, budget, cands, devices, costs, calls, bar
        )
    order = proposal_order(costs, devices, graph, sim.cost)
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
        stop = calls + (budget - calls) // (len(starts) - n)
        if strategy in ("ils", "ils-cp"):
            found = iterated_search(
                sim, devices[i], float(costs[i]), stop, rng, calls, batch, bar=bar,
                cluster_moves=cluster_moves,
            )  # fmt: skip
        else:
            found = search_devices(
                sim,
                devices[i],
                stop,
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
        placement, best_cost, calls, float(costs[0]), rollout_cost, rollouts, partition_cost,
        clustering_cost,
    )  # fmt: skip
