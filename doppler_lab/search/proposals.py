"""The proposals a learned placer judges: which placements, how many simulator calls, who wins.

Every learned placement starts from a set of proposals (:class:`ProposalSet`): the policy's
greedy rollout, ``samples`` sampled rollouts (the last of them greedy rollouts on fewer
devices when ``fewer_devices`` says so), then the heuristic proposals: the ``clustering``
placer's placement and its bounded variants (the clustering ladder, ``cluster_caps``), then
``partitions`` METIS min-cut partitions, then, for a graph that does not fit on one device, the
memory baselines' placements. :meth:`ProposalSet.build` makes them (no simulator
call; the rollouts are the only draws from the generator), :meth:`ProposalSet.most_calls`
counts them, and :func:`judge` simulates each once on one simulator: the lowest makespan wins,
equal makespans go to the proposal that cuts less transfer time, then to the first
(:func:`proposal_order`).

The callers differ only in the set they ask for:

- the protocol (:func:`~doppler_lab.search.learned.best_of_rollouts`): the policy's rollouts
  (``ProposalSet(samples)``), and for the ``doppler`` placer :data:`DOPPLER_PROPOSALS` (the
  unbounded clustering alone: its ladder's mappings take 5-55 ms more on graphs of 150-370
  ops, which the zero-shot target of 100 ms has no room for);
- the budget search (:func:`~doppler_lab.search.budget.policy_search`): the placer's set with
  the ladder of :data:`~doppler_lab.placers.clustering.CLUSTER_CAPS`, fitted to the budget by
  :meth:`ProposalSet.for_search` (the heuristic proposals cut to the calls the rollouts leave);
- the adapter (:func:`~doppler_lab.search.adapter.adapt`): :meth:`AdaptConfig.proposal_set
  <doppler_lab.search.adapter.AdaptConfig.proposal_set>`, and as the ``adapt`` search
  :meth:`ProposalSet.for_adapter` (the ladder and the partitions cut before they are built).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import torch

from ..hardware.cluster import Cluster
from ..house.deps import available, warn_once
from ..house.errors import PlacementError
from ..house.settings import bad_setting
from ..ir.graph import DataflowGraph
from ..ir.placement import Placement
from ..placers.repair import MEMORY_BASELINE_PLACERS
from ..policies.context import GraphContext
from ..policies.policy_base import PlacementPolicy
from ..policies.rollout import greedy_and_samples
from ..policies.tensors import flush_denormal
from ..timing.cost_model import CostModel
from ..timing.fit import capped, fits_one_device
from ..timing.sim import Simulator

#: ``doppler``'s partition proposals by default: four METIS partitions (two seeds each of 3% and
#: 10% imbalance) next to the greedy rollout and 16 samples, 21 simulator calls in all (22 with
#: the clustering; ``doppler-lab bench general`` before the clustering: 0.816 of CP's makespan
#: in geometric mean over the held-out set, against 0.838 for the policy's rollouts alone; the
#: partitions won on the paper graphs and communication-heavy ones, the policy where work must
#: spread step by step)
PARTITION_PROPOSALS = 4
#: ``doppler``'s rollouts on fewer devices by default (``True``: greedy rollouts on the first
#: half of the devices and on 2 replace as many of the 16 samples, so the calls stay 17). The
#: general policy's best of 17 on the validation pool (32 tasks of its training distribution,
#: seeds 0-1): 0.9287 of CP on all devices, 0.9269 with them (one task of 32 worse, by 0.3%);
#: on the held-out set 0.861 -> 0.837, a communication-heavy random DAG going from 0.93 to 0.47
FEWER_DEVICES = True
#: ``doppler`` judges the ``clustering`` placer's placement with its rollouts by default (one
#: simulator call; :mod:`doppler_lab.placers.clustering`): Sarkar's edge-zeroing clustering,
#: the classic heuristic where transfers cost as much as compute or more. On the paper's
#: transformer graphs it is 0.1-6% from YARDSTICK's best known where the policy's rollouts are
#: 28-67% away (the block: 166.9 against 212.7), and it wins some communication-heavy ``wc``
#: tasks; with it the held-out set's geometric mean goes from 0.816 to 0.749 of CP
#: (``doppler-lab bench general``, columns ``clustering`` and ``from_clustering``)
CLUSTERING_PROPOSAL = True

#: the clustering proposal is left out of graphs with more ops than this: its model runs once
#: per edge, each run over the whole graph (0.16 s for 1000 ops on one core, 1.3 s for 3000,
#: 7 s for 6000, where the policy's 17 rollouts take about 0.5 s for 3000); the ``clustering``
#: placer itself places any size
CLUSTERING_MAX_OPS = 2000

#: ``doppler`` judges the memory baselines' placements
#: (:data:`~doppler_lab.placers.repair.MEMORY_BASELINE_PLACERS`: m-ETF, m-SCT, ``pipeline``)
#: where the graph does not fit on one device
#: (:func:`~doppler_lab.timing.fit.fits_one_device`), what a user splitting a model too
#: big for one GPU compares against. Without them the policy's rollouts and the other proposals
#: lost to one of them on 2 of the 4 cases of ``doppler-lab bench memory``
#: (reports/bench/memory.md, notes); other graphs never place them
MEMORY_BASELINES = True

#: the heuristic proposals judged next to the policy's rollouts (:func:`heuristic_candidates`,
#: :func:`memory_candidates`)
HEURISTIC_SOURCES = ("clustering", "partition", *MEMORY_BASELINE_PLACERS)


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


def candidate_source(index: int, rollouts: int, placement: Placement) -> str:
    """What candidate ``index`` of the proposals is (``rollouts`` of them the policy's, the rest
    heuristic proposals): ``greedy``, ``sample``, ``greedy on K devices``
    (:func:`policy_candidates`'s rollouts on fewer devices), ``clustering``, ``partition`` or a
    memory baseline (``etf``, ``m-sct``, ``pipeline``: :func:`memory_candidates`)."""
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
    ``semantics``: the task's, which picks the estimate of a ``task``-timed policy.

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


def memory_candidates(
    graph: DataflowGraph,
    cluster: Cluster,
    seen: Sequence[Placement] = (),
    one_device: bool | None = None,
) -> list[Placement]:
    """The placements of the memory baselines
    (:data:`~doppler_lab.placers.repair.MEMORY_BASELINE_PLACERS`; deterministic, no draw
    from a generator) when ``graph`` does not fit on one device of ``cluster``, else none; a
    baseline that finds nothing that fits is left out, and so is a placement equal to one of
    ``seen`` or to an earlier baseline's (no simulator call). ``one_device``: whether it fits
    on one device, where the caller has it
    (:func:`~doppler_lab.timing.fit.fits_one_device`, up to three simulations; None:
    found here)."""
    from ..placers import get_placer

    if fits_one_device(graph, cluster) if one_device is None else one_device:
        return []
    known = {p.device.tobytes() for p in seen}
    out = []
    for name in MEMORY_BASELINE_PLACERS:
        try:
            p = get_placer(name).place(graph, cluster, np.random.default_rng(0))
        except PlacementError:
            continue
        if p.device.tobytes() not in known:
            known.add(p.device.tobytes())
            out.append(Placement(p.device, p.priority, name, dict(p.meta)))
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


@dataclass(frozen=True)
class Proposals:
    """The placements of a :class:`ProposalSet` on one graph, in judging order.

    Attributes:
        placements: the policy's rollouts (greedy first), then the clusterings, then the
            partitions.
        rollouts: how many of them are the policy's rollouts.
        clusterings: how many of the heuristic proposals are clustering placements.
        memories: how many of them, the last ones, are memory baselines' placements.
    """

    placements: list[Placement]
    rollouts: int
    clusterings: int
    memories: int = 0

    def __len__(self) -> int:
        return len(self.placements)

    @property
    def heuristics(self) -> list[Placement]:
        """The heuristic proposals (clusterings, partitions, then memory baselines)."""
        return self.placements[self.rollouts :]

    def source(self, index: int) -> str:
        """What proposal ``index`` is (:func:`candidate_source`)."""
        return candidate_source(index, self.rollouts, self.placements[index])


@dataclass(frozen=True)
class ProposalSet:
    """Which proposals a learned placement judges (module docstring). The default: the
    policy's own protocol, the greedy rollout and 16 samples (:data:`DOPPLER_PROPOSALS`: the
    ``doppler`` placer's).

    Attributes:
        samples: sampled rollouts besides the greedy one (K of the protocol).
        fewer_devices: greedy rollouts on fewer devices in place of as many of the last
            samples: ``True`` (the first half of the devices and the first 2), ``False``, or
            device counts (:func:`fewer_device_counts`).
        clustering: the ``clustering`` placer's placement (graphs of at most
            :data:`CLUSTERING_MAX_OPS` ops).
        cluster_caps: the work bounds of its bounded variants judged beside it (the ladder;
            each distinct placement once).
        partitions: METIS min-cut partitions (equal ones, and ones equal to a clustering,
            once).
        limit: at most this many heuristic proposals, the first ones (None: all).
        memory_baselines: the memory baselines' placements (:func:`memory_candidates`: only
            where the graph does not fit on one device), after the partitions.
    """

    samples: int = 16
    fewer_devices: bool | tuple[int, ...] = False
    clustering: bool = False
    cluster_caps: tuple[float, ...] = ()
    partitions: int = 0
    limit: int | None = None
    memory_baselines: bool = False

    def __post_init__(self) -> None:
        check_fewer_devices(self.fewer_devices, "proposal set", "setting")
        if isinstance(self.fewer_devices, list):
            object.__setattr__(self, "fewer_devices", tuple(self.fewer_devices))
        if self.fewer_devices is None:
            object.__setattr__(self, "fewer_devices", False)
        object.__setattr__(self, "cluster_caps", tuple(self.cluster_caps))

    def device_counts(self, num_devices: int) -> tuple[int, ...]:
        """The fewer-device counts on a cluster of ``num_devices`` (:func:`fewer_device_counts`)."""
        return fewer_device_counts(num_devices, self.fewer_devices)

    def clusterings(self, graph: DataflowGraph | None = None) -> int:
        """The most clustering proposals (the unbounded one and one per cap; equal ones are
        judged once) on ``graph`` (None: a graph the clustering fits)."""
        if not self.clustering or (graph is not None and not clustering_fits(graph)):
            return 0
        return 1 + len(self.cluster_caps)

    def most_calls(
        self,
        graph: DataflowGraph | None = None,
        cluster: Cluster | None = None,
        one_device: bool | None = None,
    ) -> int:
        """The most simulator calls judging the proposals takes (equal heuristic proposals are
        judged once, so it may take fewer; the memory baselines count unless ``graph`` fits
        on one device of ``cluster``). ``one_device``: whether it does, where the caller has
        it (as :func:`memory_candidates` takes it; None: found here)."""
        heuristics = self.clusterings(graph) + self.partitions
        if self.memory_baselines:
            if one_device is None:
                fits = graph is not None and cluster is not None and fits_one_device(graph, cluster)
            else:
                fits = one_device
            if not fits:
                heuristics += len(MEMORY_BASELINE_PLACERS)
        if self.limit is not None:
            heuristics = min(heuristics, max(0, self.limit))
        return 1 + self.samples + heuristics

    def describe(self, graph: DataflowGraph | None = None) -> str:
        """``1 greedy + S samples + P partitions [+ C clusterings]`` (messages)."""
        k = self.clusterings(graph)
        return (
            f"1 greedy + {self.samples} samples + {self.partitions} partitions"
            + (f" + {k} clusterings" if k else "")
            + (" + the memory baselines" if self.memory_baselines else "")
        )

    def for_search(self, budget: int) -> ProposalSet:
        """The set a budget search of ``budget`` calls judges
        (:func:`~doppler_lab.search.budget.policy_search`): at most ``budget - 1`` samples, and
        the heuristic proposals cut to the calls the rollouts leave (the whole ladder built,
        its first distinct placements kept, then the partitions)."""
        samples = min(self.samples, budget - 1)
        return replace(self, samples=samples, limit=budget - 1 - samples)

    def for_adapter(self, budget: int, graph: DataflowGraph) -> ProposalSet:
        """The set the ``adapt`` search of ``budget`` calls judges
        (:func:`~doppler_lab.search.adapter.adapt_search`): at most ``budget - 1`` samples; then
        the clustering when a call is left, as many caps of its ladder as the calls after it
        leave (cut before the ladder is built), and the partitions in what remains."""
        samples = min(self.samples, budget - 1)
        left = budget - 1 - samples
        clustering = self.clustering and clustering_fits(graph) and left >= 1
        caps = self.cluster_caps[: max(0, left - 1)] if clustering else ()
        room = max(0, min(self.partitions, left - (1 + len(caps) if clustering else 0)))
        return replace(
            self, samples=samples, clustering=clustering, cluster_caps=caps, partitions=room,
            limit=None,
        )  # fmt: skip

    def build(
        self,
        policy: PlacementPolicy,
        graph: DataflowGraph,
        cluster: Cluster,
        rng: np.random.Generator,
        cost: CostModel,
        ctx: GraphContext | None = None,
        semantics: str | None = None,
        one_device: bool | None = None,
    ) -> Proposals:
        """The proposals on ``graph`` (no simulator call): the policy's rollouts (draws from
        ``rng``, :func:`policy_candidates`; ``ctx`` built when None), then the heuristic
        proposals on ``cost``, the judge's cost model (:func:`heuristic_candidates`), then the
        memory baselines' (:func:`memory_candidates`, given ``one_device``)."""
        cands = policy_candidates(
            policy, graph, cluster, self.samples, rng, ctx, semantics,
            fewer_devices=self.device_counts(cluster.num_devices),
        )  # fmt: skip
        rollouts = len(cands)
        extra: list[Placement] = []
        if self.limit is None or self.limit > 0:
            extra = heuristic_candidates(
                graph, cost, cluster.num_devices, self.partitions, self.clustering,
                self.cluster_caps, self.limit,
            )  # fmt: skip
        memory: list[Placement] = []
        if self.memory_baselines and (self.limit is None or self.limit > len(extra)):
            memory = memory_candidates(graph, cluster, extra, one_device)
            memory = memory if self.limit is None else memory[: self.limit - len(extra)]
        return Proposals([*cands, *extra, *memory], rollouts, clustering_count(extra), len(memory))


#: the ``doppler`` placer's zero-shot proposals by default: greedy + 16 samples (two of them
#: greedy rollouts on fewer devices), the clustering and 4 partitions, 22 simulator calls (and
#: the memory baselines, up to 3 more, for a graph that does not fit on one device)
DOPPLER_PROPOSALS = ProposalSet(
    fewer_devices=FEWER_DEVICES,
    clustering=CLUSTERING_PROPOSAL,
    partitions=PARTITION_PROPOSALS,
    memory_baselines=MEMORY_BASELINES,
)


@dataclass(frozen=True)
class Verdict:
    """The judge's costs of some :class:`Proposals` and the winner.

    Attributes:
        costs: the simulated makespan of each proposal (a mean over the noise draws).
        best: the winner's index (:func:`proposal_order`).
        rollouts: how many of the proposals are the policy's rollouts (they come first).
        clusterings: how many clustering proposals follow them (then the partitions).
        memories: how many memory baselines' placements end the proposals.
    """

    costs: np.ndarray
    best: int
    rollouts: int
    clusterings: int
    memories: int = 0

    @property
    def rollout_cost(self) -> float:
        """The best of the policy's rollouts."""
        return float(np.min(self.costs[: self.rollouts]))

    @property
    def heuristic_cost(self) -> float:
        """The best heuristic proposal (nan without any)."""
        rest = self.costs[self.rollouts :]
        return float(np.min(rest)) if rest.size else float("nan")

    @property
    def clustering_cost(self) -> float:
        """The best clustering proposal (nan without any)."""
        k = self.clusterings
        return float(np.min(self.costs[self.rollouts : self.rollouts + k])) if k else float("nan")

    @property
    def partition_cost(self) -> float:
        """The best partition proposal (nan without any)."""
        rest = self.costs[self.rollouts + self.clusterings : len(self.costs) - self.memories]
        return float(np.min(rest)) if rest.size else float("nan")

    @property
    def memory_cost(self) -> float:
        """The best memory baseline's placement (nan without any)."""
        rest = self.costs[len(self.costs) - self.memories :] if self.memories else self.costs[:0]
        return float(np.min(rest)) if rest.size else float("nan")


def judge(
    sim: Simulator,
    proposals: Proposals,
    *,
    devices_only: bool = False,
    in_groups: bool = False,
    rng: np.random.Generator | None = None,
    reps: int = 1,
    bar: Any = None,
) -> Verdict:
    """Simulate each proposal once on ``sim`` (``reps`` times with noise, from ``rng``: the
    mean) and rank them: the lowest makespan wins, equal ones go to the proposal that cuts
    less transfer time, then to the first (:func:`proposal_order` on ``sim``'s cost model).

    ``devices_only``: judge the device vectors alone (FIFO dispatch, as a budget search's moves
    are judged) instead of the placements with their priorities. ``in_groups``: the rollouts
    and the heuristic proposals in two simulator batches (a budget search's, whose ``bar``
    moves after each), else one batch. ``bar``: advanced by the calls. A proposal over a
    device's memory costs ``inf`` (:func:`~doppler_lab.timing.fit.capped`).
    """
    sim = capped(sim)  # a proposal over a device's memory costs inf
    groups = (
        [proposals.placements[: proposals.rollouts], proposals.heuristics]
        if in_groups
        else [proposals.placements]
    )
    parts = []
    for group in groups:
        if not group:
            continue
        batch: Any = np.stack([p.device for p in group]) if devices_only else group
        if reps > 1:
            parts.append(np.mean([sim.makespans(batch, rng=rng) for _ in range(reps)], axis=0))
        else:
            parts.append(np.asarray(sim.makespans(batch, rng=rng), dtype=np.float64))
        if bar is not None:
            bar.update(len(group))
    costs = parts[0] if len(parts) == 1 else np.concatenate(parts)
    devices = np.stack([p.device for p in proposals.placements])
    best = int(proposal_order(costs, devices, sim.graph, sim.cost)[0])
    return Verdict(costs, best, proposals.rollouts, proposals.clusterings, proposals.memories)


__all__ = [
    "CLUSTERING_MAX_OPS",
    "CLUSTERING_PROPOSAL",
    "DOPPLER_PROPOSALS",
    "FEWER_DEVICES",
    "HEURISTIC_SOURCES",
    "MEMORY_BASELINES",
    "PARTITION_PROPOSALS",
    "ProposalSet",
    "Proposals",
    "Verdict",
    "candidate_source",
    "check_fewer_devices",
    "clustering_candidates",
    "clustering_count",
    "clustering_fits",
    "fewer_device_counts",
    "heuristic_candidates",
    "judge",
    "memory_candidates",
    "partition_candidates",
    "policy_candidates",
    "proposal_order",
]
