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

Each proposal is a :class:`Candidate` that carries its label as data (``greedy rollout``,
``sample 3``, ``greedy rollout on 2 devices``, ``proposal clustering``, ``proposal
clustering(cap=0.5)``, ``proposal partition 2``, ``memory baseline m-sct``); the judge's
:class:`Verdict` holds their costs, and a :class:`Winner` says which one won, at what cost, and
which placed second (a search's winner is ``search from <its start>``).

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

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields, replace
from types import MappingProxyType
from typing import Any

import numpy as np
import torch

from ..hardware.cluster import Cluster
from ..house.deps import available, warn_once
from ..house.errors import PlacementError
from ..house.limits import MAX_BUDGET
from ..house.settings import bad_setting, check_setting, unknown_setting
from ..ir.graph import DataflowGraph
from ..ir.placement import Placement
from ..placers.repair import MEMORY_BASELINE_PLACERS
from ..policies.context import GraphContext
from ..policies.features import uses_clustering_device
from ..policies.policy_base import PlacementPolicy
from ..policies.rollout import greedy_and_samples
from ..policies.tensors import flush_denormal
from ..timing.cost_model import CostModel
from ..timing.fit import cap_can_bind, capped, fits_one_device
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

#: a budget search's rollouts judged before the local moves: this share of the budget, at most
#: ``MAX_SAMPLES`` (:func:`default_samples`)
SAMPLE_SHARE = 0.25
MAX_SAMPLES = 64

#: sampled rollouts of the protocol where a proposal set leaves them to the caller (K)
PROTOCOL_SAMPLES = 16

#: what a :class:`Candidate` is: the policy's rollout, a heuristic proposal (clustering,
#: partition), a memory baseline's placement, or a search's extra start (``ils-cp``'s
#: ``cp-rollout`` placement)
CANDIDATE_KINDS = ("rollout", "clustering", "partition", "memory", "start")
#: the kinds of the heuristic proposals
HEURISTIC_KINDS = ("clustering", "partition", "memory")


@dataclass(frozen=True)
class Candidate:
    """One placement a learned placer judges, with where it came from.

    Attributes:
        placement: the placement.
        label: what it is, in words: ``greedy rollout``, ``sample K``, ``greedy rollout on K
            devices``, ``proposal clustering`` (``proposal clustering(cap=C)`` for a bounded
            one), ``proposal partition K``, ``memory baseline NAME``, ``cp-rollout start``.
        kind: one of :data:`CANDIDATE_KINDS`.
        source: the short name of its kind that placements have said since before the labels
            (``greedy``, ``sample``, ``greedy on K devices``, ``clustering``, ``partition``, a
            memory baseline's name: the ``source`` meta field).
    """

    placement: Placement
    label: str
    kind: str
    source: str

    def __post_init__(self) -> None:
        if self.kind not in CANDIDATE_KINDS:
            raise PlacementError(
                f"candidate {self.label!r}: kind {self.kind!r}, expected one of {CANDIDATE_KINDS}"
            )


def rollout_candidates(placements: Sequence[Placement]) -> list[Candidate]:
    """The policy's rollouts (:func:`policy_candidates`: the greedy one first, then the samples,
    each group of a hinted policy in turn, then the greedy rollouts on fewer devices, marked
    ``meta["devices_used"]``) as candidates. A group is named by its hint
    (``meta["hint"]``): the first (the clustering's, or none) plainly, ``with the partition
    hint``, or ``without the clustering hint`` / ``without a hint`` (``meta["clustering_hint"]``
    False); its samples are numbered from 1 within it. A rollout that is its hint's placement
    node for node (``meta["copies_hint"]``) says so: ``greedy rollout (the clustering's
    placement node for node)``."""
    out = []
    group, first = None, 0  # the current group's suffix and its first index
    for i, p in enumerate(placements):
        used = p.meta.get("devices_used")
        if used is not None:
            on = f" on {used} device{'s' if used != 1 else ''}"
            out.append(Candidate(p, f"greedy rollout{on}", "rollout", f"greedy{on}"))
            continue
        suffix = _hint_suffix(p.meta)
        if i == 0 or suffix != group:
            group, first = suffix, i
        j = i - first
        copied = p.meta.get("copies_hint")
        same = f" (the {copied}'s placement node for node)" if copied else ""
        if j == 0:
            out.append(Candidate(p, f"greedy rollout{suffix}{same}", "rollout", f"greedy{suffix}"))
        else:
            out.append(Candidate(p, f"sample {j}{suffix}{same}", "rollout", f"sample{suffix}"))
    return out


def _hint_suffix(meta: dict) -> str:
    """How a rollout's label names its hint group (:func:`rollout_candidates`)."""
    hint = meta.get("hint")
    if meta.get("clustering_hint") is False:
        return " without a hint" if "hints" in meta else " without the clustering hint"
    if hint is not None and hint != "clustering":
        return f" with the {hint} hint"
    return ""


def heuristic_labels(placements: Sequence[Placement]) -> list[Candidate]:
    """The heuristic proposals (:func:`heuristic_candidates`: clusterings, then partitions) and
    the memory baselines' placements (:func:`memory_candidates`) as candidates."""
    out = []
    parts = 0
    for p in placements:
        if p.placer == "clustering":
            cap = p.meta.get("cap")
            label = "proposal clustering" + ("" if cap is None else f"(cap={cap:g})")
            out.append(Candidate(p, label, "clustering", "clustering"))
        elif p.placer in MEMORY_BASELINE_PLACERS:
            out.append(Candidate(p, f"memory baseline {p.placer}", "memory", p.placer))
        else:
            parts += 1
            out.append(Candidate(p, f"proposal partition {parts}", "partition", "partition"))
    return out


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

    A policy that reads a hint (``doppler12``) places in groups, one per heuristic of its
    :attr:`~doppler_lab.policies.policy_base.PlacementPolicy.hints` (the clustering's alone by
    default) and one without a hint, each a greedy rollout and samples: the ``n + 1`` rollouts
    (``n`` the samples left beside the fewer-devices rollouts) split as evenly as they go, the
    first groups taking one more. The groups after the first are marked ``meta["hint"]`` (the
    heuristic's name) or ``meta["clustering_hint"] = False`` (none; with other hints than the
    clustering's alone also ``meta["hints"]``); a hinted rollout that puts every compute node
    where its hint does is marked ``meta["copies_hint"]`` (the heuristic's name): its label
    says it is that heuristic's placement. A policy whose hints are none places every
    rollout without one. Where a memory cap can bind
    (:func:`~doppler_lab.timing.fit.cap_can_bind`) the partition's hint is left out: its
    placement balances compute, not memory. With the clustering alone (``doppler/general-hint``): the hinted greedy
    rollout and ``n // 2`` samples, then the greedy rollout and ``n - n // 2 - 1`` samples
    without a hint.
    """
    ctx = ctx or GraphContext.for_policy(graph, cluster, policy.config, semantics)
    counts = [k for k in fewer_devices if k < cluster.num_devices][:samples]
    n = samples - len(counts)
    hinted = uses_clustering_device(ctx.layout) and ctx.hint is not None
    hints = list(policy.hints) if hinted else [ctx.hint]
    if hinted and "partition" in hints and cap_can_bind(graph, cluster):
        hints.remove("partition")  # METIS balances compute, not memory: the others take its share
    groups = [*hints, None] if hinted else hints  # unhinted: one group, the context's own
    sizes = [(n + 1) // len(groups) + (i < (n + 1) % len(groups)) for i in range(len(groups))]
    cands: list[Placement] = []
    with flush_denormal(), torch.no_grad():
        for hint, size in zip(groups, sizes):
            if size == 0:
                continue
            c = ctx.with_hint(hint)  # ctx itself for its own hint
            given = c.hinted_devices  # None without a hint
            for p in greedy_and_samples(policy, c, policy.encode(c), size - 1, rng):
                if hinted:  # each group but the clustering's is named; copies of the hint too
                    if hint is None:
                        extra = {"hints": list(hints)} if hints != ["clustering"] else {}
                        p = replace(p, meta={**p.meta, "clustering_hint": False, **extra})
                    elif hint != "clustering":
                        p = replace(p, meta={**p.meta, "hint": hint})
                    if given is not None and _copies(p, given, graph):
                        p = replace(p, meta={**p.meta, "copies_hint": hint})
                cands.append(p)
        for k in counts:
            small = GraphContext.for_policy(graph, cluster.first(k), policy.config, semantics)
            p = greedy_and_samples(policy, small, policy.encode(small), 0, rng)[0]
            cands.append(Placement(p.device, p.priority, p.placer, {**p.meta, "devices_used": k}))
    return cands


def _copies(p: Placement, hint_devices: np.ndarray, graph: DataflowGraph) -> bool:
    """Whether ``p`` puts every compute node where the hint does (node for node)."""
    nodes = graph.compute_nodes
    return bool(np.array_equal(p.device[nodes], hint_devices[nodes]))


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
    """The candidates of a :class:`ProposalSet` on one graph, in judging order.

    Attributes:
        candidates: the policy's rollouts (greedy first), then the clusterings, then the
            partitions, then the memory baselines' placements, each with its label.
    """

    candidates: tuple[Candidate, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "candidates", tuple(self.candidates))

    def __len__(self) -> int:
        return len(self.candidates)

    @property
    def placements(self) -> list[Placement]:
        return [c.placement for c in self.candidates]

    def count(self, *kinds: str) -> int:
        """How many candidates are of ``kinds``."""
        return sum(c.kind in kinds for c in self.candidates)

    @property
    def rollouts(self) -> int:
        """How many are the policy's rollouts."""
        return self.count("rollout")

    @property
    def clusterings(self) -> int:
        """How many are clustering proposals."""
        return self.count("clustering")

    @property
    def memories(self) -> int:
        """How many are memory baselines' placements."""
        return self.count("memory")

    @property
    def heuristics(self) -> list[Placement]:
        """The heuristic proposals (clusterings, partitions, then memory baselines)."""
        return [c.placement for c in self.candidates if c.kind in HEURISTIC_KINDS]

    def source(self, index: int) -> str:
        """What proposal ``index`` is (:attr:`Candidate.source`)."""
        return self.candidates[index].source


@dataclass(frozen=True)
class ProposalSet:
    """Which proposals a learned placement judges (module docstring). The default: the
    policy's own protocol, the greedy rollout and 16 samples (:data:`DOPPLER_PROPOSALS`: the
    ``doppler`` placer's).

    Every setting of a proposal set is said here once: the ``doppler`` placer's options, the
    budget search's :class:`~doppler_lab.search.budget.SearchConfig` and the adapter's
    :class:`~doppler_lab.search.adapter.AdaptConfig` hold one (:meth:`from_settings` builds one
    from flat settings, naming a bad or unknown one).

    Attributes:
        samples: sampled rollouts besides the greedy one (K of the protocol; None: the
            caller's default, :data:`PROTOCOL_SAMPLES` or a budget search's share).
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

    samples: int | None = PROTOCOL_SAMPLES
    fewer_devices: bool | tuple[int, ...] = False
    clustering: bool = False
    cluster_caps: tuple[float, ...] = ()
    partitions: int = 0
    limit: int | None = None
    memory_baselines: bool = False

    def __post_init__(self) -> None:
        for key, value in checked_proposal_settings(vars(self), "proposal set").items():
            object.__setattr__(self, key, value)

    @classmethod
    def from_settings(
        cls,
        settings: Mapping[str, Any],
        owner: str = "proposal set",
        noun: str = "setting",
        base: ProposalSet | None = None,
    ) -> ProposalSet:
        """``base`` (default: the default set) with ``settings`` (flat, by field name: a saved
        config's, or a placer's options), each checked with ``owner``'s name in the message.

        Raises:
            ConfigError: an unknown setting, or a bad value (one line naming it).
        """
        names = proposal_setting_names()
        for key in settings:
            if key not in names:
                raise unknown_setting(owner, str(key), names, noun)
        given = {**vars(base or cls()), **settings}
        return cls(**checked_proposal_settings(given, owner, noun))

    def to_dict(self) -> dict[str, Any]:
        """The settings as plain values (lists for tuples); :meth:`from_settings` reads them."""
        fewer = self.fewer_devices
        return {
            **vars(self),
            "fewer_devices": fewer if isinstance(fewer, bool) else list(fewer),
            "cluster_caps": list(self.cluster_caps),
        }

    def sample_count(self, default: int = PROTOCOL_SAMPLES) -> int:
        """The sampled rollouts (``default`` where :attr:`samples` leaves it to the caller)."""
        return default if self.samples is None else self.samples

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
        return 1 + self.sample_count() + heuristics

    def describe(self, graph: DataflowGraph | None = None) -> str:
        """``1 greedy + S samples + P partitions [+ C clusterings]`` (messages)."""
        k = self.clusterings(graph)
        return (
            f"1 greedy + {self.sample_count()} samples + {self.partitions} partitions"
            + (f" + {k} clusterings" if k else "")
            + (" + the memory baselines" if self.memory_baselines else "")
        )

    def for_search(self, budget: int) -> ProposalSet:
        """The set a budget search of ``budget`` calls judges
        (:func:`~doppler_lab.search.budget.policy_search`): at most ``budget - 1`` samples, and
        the heuristic proposals cut to the calls the rollouts leave (the whole ladder built,
        its first distinct placements kept, then the partitions, then the memory baselines).
        :attr:`samples` None: :func:`default_samples` of the budget."""
        want = default_samples(budget) if self.samples is None else self.samples
        samples = min(want, budget - 1)
        return replace(self, samples=samples, limit=budget - 1 - samples)

    def for_adapter(self, budget: int, graph: DataflowGraph) -> ProposalSet:
        """The set the ``adapt`` search of ``budget`` calls judges
        (:func:`~doppler_lab.search.adapter.adapt_search`): at most ``budget - 1`` samples; then
        the clustering when a call is left, as many caps of its ladder as the calls after it
        leave (cut before the ladder is built), the partitions in what remains, and the memory
        baselines in what is left after them (:attr:`limit`)."""
        samples = min(self.sample_count(), budget - 1)
        left = budget - 1 - samples
        clustering = self.clustering and clustering_fits(graph) and left >= 1
        caps = self.cluster_caps[: max(0, left - 1)] if clustering else ()
        room = max(0, min(self.partitions, left - (1 + len(caps) if clustering else 0)))
        return replace(
            self, samples=samples, clustering=clustering, cluster_caps=caps, partitions=room,
            limit=left if self.memory_baselines else None,
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
            policy, graph, cluster, self.sample_count(), rng, ctx, semantics,
            fewer_devices=self.device_counts(cluster.num_devices),
        )  # fmt: skip
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
        return Proposals((*rollout_candidates(cands), *heuristic_labels([*extra, *memory])))


def config_from_settings(
    cls: Any, settings: Mapping[str, Any], owner: str, base: ProposalSet
) -> Any:
    """A config dataclass ``cls`` that holds a ``proposals`` field, from flat ``settings``
    (its own fields and the proposal set's side by side, as :func:`config_settings` saves
    them) or with the proposal set's under ``proposals``; those not given are ``base``'s.

    Raises:
        ConfigError: an unknown setting or a bad value (one line naming it and ``owner``).
    """
    own = [f.name for f in fields(cls) if f.name != "proposals"]
    names = proposal_setting_names()
    flat = dict(settings)
    nested = flat.pop("proposals", None) or {}
    if isinstance(nested, ProposalSet):
        nested = nested.to_dict()
    if not isinstance(nested, Mapping):
        raise bad_setting(owner, "proposals", nested, "a mapping of proposal settings")
    for key in flat:
        if key not in own and key not in names:
            raise unknown_setting(owner, str(key), [*own, *names])
    mine = {k: v for k, v in flat.items() if k in own}
    rest = {k: v for k, v in flat.items() if k not in own}
    return cls(**mine, proposals=ProposalSet.from_settings({**nested, **rest}, owner, base=base))


def config_settings(config: Any) -> dict[str, Any]:
    """The settings of a config that holds a ``proposals`` field, flat: its own, then the
    proposal set's (:func:`config_from_settings` reads them back)."""
    own = {f.name: getattr(config, f.name) for f in fields(config) if f.name != "proposals"}
    return {**own, **config.proposals.to_dict()}


def proposal_setting_names() -> tuple[str, ...]:
    """The settings of a :class:`ProposalSet`, by name."""
    return tuple(f.name for f in fields(ProposalSet))


def checked_proposal_settings(
    values: Mapping[str, Any], owner: str, noun: str = "setting"
) -> dict[str, Any]:
    """The settings of a :class:`ProposalSet` in ``values`` checked (and normalised: lists to
    tuples, ``fewer_devices`` None to False), the messages naming ``owner``.

    Raises:
        ConfigError: a bad value (one line naming the setting and what was expected).
    """
    from ..placers.clustering import cap_ok

    def opt(key: str, kind: str, **bounds: Any) -> Any:
        return check_setting(values[key], kind, owner, key, noun, **bounds)

    out = dict(values)
    out["samples"] = opt("samples", "int | None", minimum=0, maximum=MAX_BUDGET)
    out["partitions"] = opt("partitions", "int", minimum=0, maximum=MAX_BUDGET)
    out["limit"] = opt("limit", "int | None", minimum=0, maximum=MAX_BUDGET)
    out["clustering"] = opt("clustering", "bool")
    out["memory_baselines"] = opt("memory_baselines", "bool")
    fewer = values["fewer_devices"]
    check_fewer_devices(fewer, owner, noun)
    out["fewer_devices"] = (
        False
        if fewer is None
        else fewer
        if isinstance(fewer, bool)
        else tuple(int(k) for k in fewer)  # type: ignore[union-attr]
    )
    caps = values["cluster_caps"]
    if isinstance(caps, str) or not hasattr(caps, "__iter__") or not all(cap_ok(c) for c in caps):
        raise bad_setting(
            owner,
            "cluster_caps",
            caps,
            "a list of finite numbers > 0 (shares of a device's part of the work)",
            noun,
        )
    out["cluster_caps"] = tuple(caps)
    return out


def default_samples(budget: int) -> int:
    """Sampled rollouts of a budget search: :data:`SAMPLE_SHARE` of it, at most
    :data:`MAX_SAMPLES`, leaving the greedy rollout one call."""
    return max(0, min(int(budget * SAMPLE_SHARE), MAX_SAMPLES, budget - 1))


#: the ``doppler`` placer's zero-shot proposals by default: greedy + 16 samples (two of them
#: greedy rollouts on fewer devices), the clustering and 4 partitions, 22 simulator calls (and
#: the memory baselines, up to 3 more, for a graph that does not fit on one device)
DOPPLER_PROPOSALS = ProposalSet(
    fewer_devices=FEWER_DEVICES,
    clustering=CLUSTERING_PROPOSAL,
    partitions=PARTITION_PROPOSALS,
    memory_baselines=MEMORY_BASELINES,
)

#: the policy alone: its greedy rollout and its samples (16, or a budget search's share), no
#: rollout on fewer devices and no heuristic proposal (no clustering, partition or memory
#: baseline); the "policy alone" row beside every ``doppler`` row
#: (``--placer doppler:proposals=none``)
POLICY_ALONE_PROPOSALS = ProposalSet(samples=None)

#: the proposal sets a learned placer's option ``proposals`` names (``-o proposals=none``,
#: ``--placer doppler:proposals=none``): ``none``, the policy alone
NAMED_PROPOSALS: Mapping[str, ProposalSet] = MappingProxyType({"none": POLICY_ALONE_PROPOSALS})


def named_proposals(name: object, owner: str = "proposal set") -> ProposalSet:
    """The proposal set called ``name`` (:data:`NAMED_PROPOSALS`).

    Raises:
        ConfigError: an unknown name (one line naming it and the names there are).
    """
    if isinstance(name, str) and name in NAMED_PROPOSALS:
        return NAMED_PROPOSALS[name]
    raise bad_setting(owner, "proposals", name, f"one of {', '.join(NAMED_PROPOSALS)}", "option")


@dataclass(frozen=True)
class Verdict:
    """The judge's costs of some candidates, each with its label, and their ranking.

    Attributes:
        candidates: the candidates judged (:attr:`Proposals.candidates`; a search may add a
            start of its own).
        costs: the simulated makespan of each (a mean over the noise draws).
        order: the indices, best first (:func:`proposal_order`).
    """

    candidates: tuple[Candidate, ...]
    costs: np.ndarray
    order: np.ndarray

    @property
    def best(self) -> int:
        """The winner's index."""
        return int(self.order[0])

    def count(self, *kinds: str) -> int:
        """How many candidates are of ``kinds``."""
        return sum(c.kind in kinds for c in self.candidates)

    @property
    def rollouts(self) -> int:
        """How many of the candidates are the policy's rollouts."""
        return self.count("rollout")

    def best_cost_of(self, *kinds: str) -> float:
        """The best cost of the candidates of ``kinds`` (nan without any)."""
        mask = np.array([c.kind in kinds for c in self.candidates], dtype=bool)
        return float(np.min(self.costs[mask])) if mask.any() else float("nan")

    @property
    def greedy_cost(self) -> float:
        """The policy's greedy rollout (the first candidate)."""
        return float(self.costs[0])

    @property
    def rollout_cost(self) -> float:
        """The best of the policy's rollouts."""
        return self.best_cost_of("rollout")

    @property
    def heuristic_cost(self) -> float:
        """The best heuristic proposal or memory baseline (nan without any)."""
        return self.best_cost_of(*HEURISTIC_KINDS)

    @property
    def clustering_cost(self) -> float:
        """The best clustering proposal (nan without any)."""
        return self.best_cost_of("clustering")

    @property
    def partition_cost(self) -> float:
        """The best partition proposal (nan without any)."""
        return self.best_cost_of("partition")

    @property
    def memory_cost(self) -> float:
        """The best memory baseline's placement (nan without any)."""
        return self.best_cost_of("memory")

    def runner_up(self, than: int | None = None) -> int | None:
        """The best candidate that places otherwise than candidate ``than`` (default: the
        winner); None when every one places alike."""
        than = self.best if than is None else than
        dev = self.candidates[than].placement.device
        for i in self.order:
            if not np.array_equal(self.candidates[int(i)].placement.device, dev):
                return int(i)
        return None

    def with_start(
        self, start: Candidate, cost: float, graph: DataflowGraph, model: CostModel
    ) -> Verdict:
        """This verdict with one more candidate judged at ``cost`` (a search's own start),
        ranked again."""
        cands = (*self.candidates, start)
        costs = np.append(self.costs, cost)
        devices = np.stack([c.placement.device for c in cands])
        return Verdict(cands, costs, proposal_order(costs, devices, graph, model))

    def winner(self, calls: int, placement: Placement | None = None) -> Winner:
        """The judge's winner as a :class:`Winner` (``calls``: the simulator calls spent;
        ``placement``: the winner's placement as the caller returns it)."""
        b, up = self.best, self.runner_up()
        cand = self.candidates[b]
        return Winner(
            cand.placement if placement is None else placement, float(self.costs[b]),
            cand.label, cand.source, self, calls,
            None if up is None else self.candidates[up].label,
            float("nan") if up is None else float(self.costs[up]),
        )  # fmt: skip

    def improved(
        self, placement: Placement, cost: float, label: str, source: str, calls: int
    ) -> Winner:
        """A placement found after judging (by a search from the candidates) that beat them:
        the judge's winner is the runner-up."""
        b = self.best
        return Winner(
            placement, float(cost), label, source, self, calls, self.candidates[b].label,
            float(self.costs[b]),
        )  # fmt: skip


@dataclass(frozen=True)
class Winner:
    """Which candidate won and why: what a learned placer's protocol, budget search or
    adapter found (:class:`~doppler_lab.search.learned.RolloutResult` and
    :class:`~doppler_lab.search.budget.SearchOutcome` are this type).

    Attributes:
        placement: the winning placement.
        cost: its simulated makespan (nan: the greedy rollout alone, not judged).
        label: what produced it (:attr:`Candidate.label`; ``search from <start>`` where a
            search improved on its start, ``adapter table from <start>`` where the adapter
            did).
        source: the short name of the winner's kind (:attr:`Candidate.source`; a search's,
            its start's; ``adapter``).
        verdict: every candidate judged, with its cost and label.
        calls: simulator calls spent.
        runner_up: the label of the best other placement (None: every candidate placed
            alike).
        runner_up_cost: its makespan (nan without one).
    """

    placement: Placement
    cost: float
    label: str
    source: str
    verdict: Verdict
    calls: int
    runner_up: str | None = None
    runner_up_cost: float = float("nan")

    @property
    def best_cost(self) -> float:
        return self.cost

    @property
    def best_index(self) -> int:
        """The judge's winner's index among the candidates."""
        return self.verdict.best

    @property
    def costs(self) -> np.ndarray:
        return self.verdict.costs

    @property
    def rollouts(self) -> int:
        return self.verdict.rollouts

    @property
    def greedy_cost(self) -> float:
        return self.verdict.greedy_cost

    @property
    def rollout_cost(self) -> float:
        return self.verdict.rollout_cost

    @property
    def clustering_cost(self) -> float:
        return self.verdict.clustering_cost

    @property
    def partition_cost(self) -> float:
        return self.verdict.partition_cost

    @property
    def memory_cost(self) -> float:
        return self.verdict.memory_cost

    def provenance(self) -> dict[str, Any]:
        """The placement meta fields that say what produced it (``produced_by``,
        ``runner_up``, ``runner_up_cost``)."""
        cost = self.runner_up_cost
        return {
            "produced_by": self.label,
            "runner_up": self.runner_up,
            "runner_up_cost": None if math.isnan(cost) else cost,
        }


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
    order = proposal_order(costs, devices, sim.graph, sim.cost)
    return Verdict(proposals.candidates, costs, order)


__all__ = [
    "CANDIDATE_KINDS",
    "CLUSTERING_MAX_OPS",
    "CLUSTERING_PROPOSAL",
    "DOPPLER_PROPOSALS",
    "FEWER_DEVICES",
    "HEURISTIC_KINDS",
    "HEURISTIC_SOURCES",
    "MAX_SAMPLES",
    "MEMORY_BASELINES",
    "PARTITION_PROPOSALS",
    "PROTOCOL_SAMPLES",
    "SAMPLE_SHARE",
    "Candidate",
    "ProposalSet",
    "Proposals",
    "Verdict",
    "Winner",
    "check_fewer_devices",
    "checked_proposal_settings",
    "config_from_settings",
    "config_settings",
    "clustering_candidates",
    "clustering_count",
    "clustering_fits",
    "default_samples",
    "fewer_device_counts",
    "heuristic_candidates",
    "judge",
    "memory_candidates",
    "partition_candidates",
    "policy_candidates",
    "heuristic_labels",
    "proposal_order",
    "proposal_setting_names",
    "rollout_candidates",
]
