"""Learned policies as placers (``doppler``, ``placeto``, ``gdp`` in the placer registry).

The experiment protocol (ARCHITECTURE.md): a learned method's placement is the best of its
greedy rollout and ``samples`` sampled rollouts from the final policy, judged by the simulator
(the same semantics and noise as the table it goes into). ``doppler`` also judges heuristic
proposals with them by default: the ``clustering`` placer's placement (:data:`CLUSTERING_PROPOSAL`;
:mod:`doppler_lab.placers.clustering`) and ``partitions`` METIS min-cut partitions
(:data:`PARTITION_PROPOSALS`; :mod:`doppler_lab.placers.partition`), which win where transfers
dominate; ``clustering=false, partitions=0`` is the policy alone. ``samples=0, partitions=0,
clustering=false`` gives the greedy rollout alone, without any simulator call.

With a ``budget`` (simulator calls) the placer searches instead: the policy's rollouts, then an
iterated local search from the best of them with the rest of the calls
(:mod:`doppler_lab.search.budget`), the budget protocol of the search placers
(``local-search``). ``doppler`` without a checkpoint runs the shipped general policy (:data:`~doppler_lab.policies.pretrained.GENERAL_CHECKPOINT`).
A budget search (and the adapter) also judges the clustering's bounded variants
(:data:`~doppler_lab.placers.clustering.CLUSTER_CAPS`, a call each); the zero-shot protocol
judges the unbounded clustering alone (:mod:`doppler_lab.search.proposals` says why, and
builds, counts and judges every one of these proposal sets).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from ..hardware.cluster import Cluster
from ..house.errors import CheckpointError, ConfigError
from ..house.limits import MAX_BUDGET, MAX_NOISE
from ..house.progress import progress as progress_bar
from ..house.runners import torch_threads
from ..house.settings import check_setting
from ..ir.graph import DataflowGraph
from ..ir.placement import Placement
from ..placers.repair import fit_placement
from ..policies.checkpoint import load_policy
from ..policies.context import GraphContext
from ..policies.policy_base import PlacementPolicy
from ..policies.pretrained import (
    GENERAL_CHECKPOINT,
    GENERAL_MEMORY_CHECKPOINT,
    list_checkpoints,
    resolve_checkpoint,
)
from ..timing.fit import cap_can_bind
from ..timing.sim import SEMANTICS, Simulator
from .adapter import adapt_search
from .budget import SEARCH_STRATEGIES, SearchConfig, SearchOutcome, candidate_source, policy_search
from .proposals import (
    CLUSTERING_PROPOSAL,
    FEWER_DEVICES,
    MEMORY_BASELINES,
    PARTITION_PROPOSALS,
    ProposalSet,
    Verdict,
    check_fewer_devices,
    judge,
)

#: ``search`` values of the learned placers with a budget
PLACER_SEARCHES: tuple[str, ...] = (*SEARCH_STRATEGIES, "adapt")


@dataclass(frozen=True)
class RolloutResult:
    """The protocol's candidates and the winner.

    Attributes:
        placement: the best placement (on ties, the one that cuts the least transfer time,
            then the first: :func:`~doppler_lab.search.proposals.proposal_order`).
        costs: ``(1 + samples + proposals,)`` simulated cost of the greedy rollout, of each
            sample, then of each heuristic proposal (the clusterings, the partitions).
        best_index: index of the winner in ``costs`` (0: the greedy rollout).
        rollouts: how many of ``costs`` are the policy's rollouts (the rest: heuristic
            proposals).
        clustering: how many of the heuristic proposals are clustering placements (they come
            first: the clustering and its bounded variants; then the partitions).
        memories: how many of them, the last ones, are memory baselines' placements.
    """

    placement: Placement
    costs: np.ndarray
    best_index: int
    rollouts: int = -1
    clustering: int = 0
    memories: int = 0

    def __post_init__(self) -> None:
        if self.rollouts < 0:
            object.__setattr__(self, "rollouts", int(len(self.costs)))

    @property
    def verdict(self) -> Verdict:
        """The costs as the judge's :class:`~doppler_lab.search.proposals.Verdict` (the best
        of each kind of proposal)."""
        return Verdict(
            self.costs, self.best_index, self.rollouts, int(self.clustering), self.memories
        )

    @property
    def greedy_cost(self) -> float:
        return float(self.costs[0])

    @property
    def best_cost(self) -> float:
        return float(self.costs[self.best_index])

    @property
    def rollout_cost(self) -> float:
        """The best of the policy's own rollouts."""
        return self.verdict.rollout_cost

    @property
    def partition_cost(self) -> float:
        """The best partition proposal (nan without any)."""
        return self.verdict.partition_cost

    @property
    def memory_cost(self) -> float:
        """The best memory baseline's placement (nan without any)."""
        return self.verdict.memory_cost

    @property
    def clustering_cost(self) -> float:
        """The best clustering proposal's cost (nan without one)."""
        return self.verdict.clustering_cost

    @property
    def source(self) -> str:
        """What the winner is: ``greedy``, ``sample``, ``greedy on K devices`` (a rollout on
        fewer devices), ``clustering`` or ``partition``."""
        return candidate_source(self.best_index, self.rollouts, self.placement)


@dataclass(frozen=True)
class Judging:
    """A judge with duration noise: the candidates' cost is the mean over ``noise_seeds``
    simulations with lognormal sigma ``noise`` under ``semantics``."""

    semantics: str = "paper"
    noise: float = 0.0
    noise_seeds: int = 1


def best_of_rollouts(
    policy: PlacementPolicy,
    graph: DataflowGraph,
    cluster: Cluster,
    samples: int | None = None,
    seed: int | np.random.Generator | None = 0,
    semantics: str | Judging = "paper",
    ctx: GraphContext | None = None,
    proposals: ProposalSet | None = None,
) -> RolloutResult:
    """The greedy rollout and ``samples`` sampled rollouts of ``policy`` (or the proposals of
    ``proposals``); the best by simulated cost (with a noisy :class:`Judging`, the mean over
    its noise draws; :func:`~doppler_lab.search.proposals.judge`).

    Args:
        policy: the policy.
        graph: the graph.
        cluster: the cluster.
        samples: sampled rollouts besides the greedy one (K of the protocol; default 16).
        seed: seed (or generator) of the sampled rollouts and the noise.
        semantics: simulator semantics that judges the candidates, or a :class:`Judging`
            (semantics, duration noise sigma, noise draws per candidate).
        ctx: a prepared :class:`GraphContext` (built if None).
        proposals: the proposals instead of ``samples``: rollouts on fewer devices, the
            clustering, METIS partitions (:class:`~doppler_lab.search.proposals.ProposalSet`,
            e.g. :data:`~doppler_lab.search.proposals.DOPPLER_PROPOSALS`).
    """
    if proposals is None:
        proposals = ProposalSet(16 if samples is None else samples)
    elif samples is not None:
        raise ConfigError(
            f"best_of_rollouts: samples = {samples!r} and a proposal set; expected the samples "
            "in the proposal set"
        )
    how = semantics if isinstance(semantics, Judging) else Judging(semantics)
    semantics, noise, noise_seeds = how.semantics, how.noise, how.noise_seeds
    rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)
    ctx = ctx or GraphContext.for_policy(graph, cluster, policy.config, semantics)
    props = proposals.build(policy, graph, cluster, rng, ctx.cost, ctx, semantics)
    if len(props) == 1:
        return RolloutResult(props.placements[0], np.array([np.nan]), 0)
    # the context's cost model is the simulator's (both CostModel(graph, cluster))
    sim = Simulator(graph, ctx.cluster, semantics, noise, ctx.cost)  # type: ignore[arg-type]
    # (the simulator restores torch's thread count after its parallel kernels itself)
    verdict = judge(
        sim, props, rng=rng if noise > 0 else None, reps=noise_seeds if noise > 0 else 1
    )
    best = verdict.best
    return RolloutResult(props.placements[best], verdict.costs, best, props.rollouts,
                         props.clusterings, props.memories)  # fmt: skip


class _LearnedPlacer:
    """A checkpoint as a placer (see the module docstring). Its attributes stay flat
    :meth:`__init__` keywords: they are the CLI's ``-o key=value`` options.

    Attributes:
        checkpoint: the policy checkpoint (a path, or a shipped checkpoint's name; ``doppler``
            defaults to the general policy).
        samples: sampled rollouts besides the greedy one (default: 16; with a budget, the
            search's own share of it).
        semantics: simulator semantics that judges the rollouts.
        noise: duration noise sigma of the judge (0 with a budget: the search is deterministic).
        allow_device_change: run a Placeto / GDP checkpoint trained on another device count.
        budget: simulator calls of a search with the policy as the proposal (None: the
            protocol's best of the greedy rollout and ``samples`` samples).
        search: the budget search's strategy, one of
            :data:`PLACER_SEARCHES` (the search's strategies, and ``adapt``: the per-instance
            adapter, :func:`~doppler_lab.search.adapter.adapt_search`).
        progress: show a bar over the budget's simulator calls on stderr.
        partitions: METIS min-cut partitions judged with the rollouts, with or without a budget
            (:mod:`doppler_lab.placers.partition`; default :attr:`default_partitions`; 0: the
            policy's rollouts alone).
        fewer_devices: also place greedily on fewer devices, in place of as many samples:
            ``True`` for the first half of the devices and the first 2, a list of device
            counts, or ``False`` (default :attr:`default_fewer_devices`; off with an adapter,
            whose table is for the whole cluster).
        adapter: a per-instance table trained for this graph on this checkpoint
            (``adapter.pt`` of ``doppler-lab adapt``; :func:`~doppler_lab.search.adapter.adapt`):
            the rollouts run with it on PLC's logits. Refused for another graph, device count
            or network, and with ``search="adapt"`` (which trains a table of its own).
        cluster_moves: the budget search's descent (``ils``, ``ils-cp``) also tries moves of
            several ops at once (:class:`~doppler_lab.placers.local_search.ClusterMoves`; default
            true; false: single-node moves alone).
        clustering: judge the ``clustering`` placer's placement
            (:mod:`doppler_lab.placers.clustering`) with the rollouts, with or without a budget
            (default :attr:`default_clustering`; one simulator call).
        temperature: PLC's temperature in the sampled rollouts (default: the checkpoint's
            ``sample_temperature``, else 1; see
            :attr:`~doppler_lab.policies.policy_base.PlacementPolicy.sample_temperature`).
        memory_baselines: judge the memory baselines' placements (m-ETF, m-SCT, ``pipeline``)
            with the rollouts, with or without a budget, where the graph does not fit on one
            device (:func:`~doppler_lab.search.proposals.memory_candidates`; default
            :attr:`default_memory_baselines`; up to 3 simulator calls).
    """

    name: ClassVar[str] = ""
    kinds: ClassVar[tuple[str, ...]] = ()
    default_checkpoint: ClassVar[str | None] = None
    #: the default where a memory cap can bind (when shipped; None: the default everywhere)
    memory_checkpoint: ClassVar[str | None] = None
    #: partition proposals judged with the rollouts unless ``partitions`` says otherwise
    default_partitions: ClassVar[int] = 0
    #: rollouts on fewer devices unless ``fewer_devices`` says otherwise
    default_fewer_devices: ClassVar[bool] = False
    #: the clustering proposal judged with the rollouts unless ``clustering`` says otherwise
    default_clustering: ClassVar[bool] = False
    #: the memory baselines judged with the rollouts unless ``memory_baselines`` says otherwise
    default_memory_baselines: ClassVar[bool] = False

    def __init__(
        self,
        checkpoint: str | Path | None = None,
        samples: int | None = None,
        semantics: str = "paper",
        noise: float = 0.0,
        allow_device_change: bool = False,
        budget: int | None = None,
        search: str = SEARCH_STRATEGIES[0],
        progress: bool = False,
        partitions: int | None = None,
        adapter: str | Path | None = None,
        fewer_devices: bool | list[int] | None = None,
        cluster_moves: bool = True,
        clustering: bool | None = None,
        temperature: float | None = None,
        memory_baselines: bool | None = None,
    ):
        what = f"placer {self.name!r}: option"
        owner = f"placer {self.name!r}"

        def opt(value: Any, kind: str, key: str, **bounds: Any) -> Any:
            return check_setting(value, kind, owner, key, "option", **bounds)

        if temperature is not None:
            temperature = opt(temperature, "float", "temperature", above=0)
        cluster_moves = opt(cluster_moves, "bool", "cluster_moves")
        if clustering is None:
            clustering = self.default_clustering
        clustering = opt(clustering, "bool", "clustering")
        if memory_baselines is None:
            memory_baselines = self.default_memory_baselines
        memory_baselines = opt(memory_baselines, "bool", "memory_baselines")
        if samples is not None:
            samples = opt(samples, "int", "samples", minimum=0, maximum=MAX_BUDGET)
        if partitions is None:
            partitions = self.default_partitions
        partitions = opt(partitions, "int", "partitions", minimum=0, maximum=MAX_BUDGET)
        if fewer_devices is None:
            fewer_devices = self.default_fewer_devices and adapter is None
        elif fewer_devices is not False and adapter is not None:
            raise ConfigError(
                f"{what} fewer_devices = {fewer_devices!r} with an adapter: its table is for "
                "every device of the cluster (expected fewer_devices false or no adapter)"
            )
        check_fewer_devices(fewer_devices, f"placer {self.name!r}")
        if budget is not None:
            budget = opt(budget, "int", "budget", minimum=1, maximum=MAX_BUDGET)
        noise = opt(noise, "float", "noise", minimum=0, maximum=MAX_NOISE)
        allow_device_change = opt(allow_device_change, "bool", "allow_device_change")
        progress = opt(progress, "bool", "progress")
        if semantics not in SEMANTICS:
            raise ConfigError(
                f"placer {self.name!r}: semantics {semantics!r}, expected one of {SEMANTICS}"
            )
        if search not in PLACER_SEARCHES:
            raise ConfigError(f"{what} search = {search!r}, expected one of {PLACER_SEARCHES}")
        if budget is not None and noise > 0:
            raise ConfigError(
                f"{what} noise = {noise!r} with a budget; the budget search judges placements "
                "without noise (expected noise 0)"
            )
        if adapter is not None:
            if not isinstance(adapter, (str, Path)) or not str(adapter):
                raise ConfigError(f"{what} adapter = {adapter!r}, expected a file path")
            if search == "adapt" and budget is not None:
                raise ConfigError(
                    f"{what} adapter with search='adapt': that search trains a table of its own; "
                    f"expected another search ({', '.join(SEARCH_STRATEGIES)}) or no adapter"
                )
        self.adapter = None if adapter is None else Path(adapter)
        self.checkpoint = self._checkpoint(checkpoint)
        self._memory_checkpoint: Path | None = None
        if checkpoint is None and self.memory_checkpoint in list_checkpoints():
            self._memory_checkpoint = resolve_checkpoint(self.memory_checkpoint, self.name)
        self.samples = samples
        self.semantics = semantics
        self.noise = float(noise)
        self.allow_device_change = allow_device_change
        self.budget = budget
        self.search = search
        self.progress = progress
        self.partitions = partitions
        self.fewer_devices = fewer_devices
        self.cluster_moves = cluster_moves
        self.clustering = clustering
        self.temperature = temperature
        self.memory_baselines = memory_baselines
        self._cache: dict[tuple[str, int], PlacementPolicy] = {}

    def _checkpoint(self, checkpoint: str | Path | None) -> Path:
        if checkpoint is not None:
            return resolve_checkpoint(checkpoint, self.name)
        if self.default_checkpoint is None:
            raise ConfigError(
                f"placer {self.name!r} needs a checkpoint (--checkpoint CKPT, or a shipped name: "
                "see doppler_lab.policies.pretrained.list_checkpoints())"
            )
        shipped = list_checkpoints()
        if self.default_checkpoint not in shipped:
            raise CheckpointError(
                f"placer {self.name!r} without a checkpoint runs the general policy "
                f"{self.default_checkpoint!r}, which is not shipped in this install; pass "
                f"--checkpoint CKPT (a file or a shipped name: {', '.join(sorted(shipped))})"
            )
        return resolve_checkpoint(self.default_checkpoint, self.name)

    def checkpoint_for(self, graph: DataflowGraph, cluster: Cluster) -> Path:
        """The checkpoint that places ``graph`` on ``cluster``: the one given, else the
        default, or :attr:`memory_checkpoint` where a memory cap can bind
        (:func:`~doppler_lab.timing.fit.cap_can_bind`)."""
        if self._memory_checkpoint is not None and cap_can_bind(graph, cluster):
            return self._memory_checkpoint
        return self.checkpoint

    def policy(self, num_devices: int, checkpoint: Path | None = None) -> PlacementPolicy:
        path = self.checkpoint if checkpoint is None else checkpoint
        key = (str(path), num_devices)
        if key not in self._cache:
            pol, _ = load_policy(path, self.kinds, num_devices, self.allow_device_change)
            if self.temperature is not None:
                pol.sample_temperature = self.temperature
            self._cache[key] = pol
        return self._cache[key]

    @contextlib.contextmanager
    def _adapted(self, graph: DataflowGraph, cluster: Cluster) -> Iterator[PlacementPolicy]:
        """The policy for ``cluster``, with the ``adapter`` table set while in use."""
        policy = self.policy(cluster.num_devices, self.checkpoint_for(graph, cluster))
        if self.adapter is None:
            yield policy
            return
        from .adapter import load_adapter

        if not hasattr(policy, "set_node_bias"):
            raise ConfigError(
                f"placer {self.name!r}: option adapter needs a DOPPLER policy with a learned PLC"
            )
        load_adapter(self.adapter, policy, graph, cluster.num_devices)
        try:
            yield policy
        finally:
            policy.set_node_bias(None)

    def proposal_set(self) -> ProposalSet:
        """The proposals judged without a budget (the unbounded clustering alone)."""
        return ProposalSet(
            16 if self.samples is None else self.samples,
            self.fewer_devices,
            self.clustering,
            (),
            self.partitions,
            memory_baselines=self.memory_baselines,
        )

    def search_config(self) -> SearchConfig:
        """The budget search's settings (the proposals' with the clustering ladder)."""
        return SearchConfig(
            strategy=self.search,
            samples=self.samples,
            partitions=self.partitions,
            clustering=self.clustering,
            fewer_devices=self.fewer_devices,
            cluster_moves=self.cluster_moves,
            memory_baselines=self.memory_baselines,
        )

    def run(
        self, graph: DataflowGraph, cluster: Cluster, rng: np.random.Generator
    ) -> RolloutResult:
        """The protocol's greedy rollout and ``samples`` samples (without a budget)."""
        with self._adapted(graph, cluster) as policy:
            judging = Judging(self.semantics, self.noise)
            return best_of_rollouts(
                policy, graph, cluster, seed=rng, semantics=judging, proposals=self.proposal_set()
            )

    def run_search(
        self, graph: DataflowGraph, cluster: Cluster, rng: np.random.Generator
    ) -> SearchOutcome:
        """The budget search (requires ``budget``)."""
        if self.budget is None:
            raise ConfigError(f"placer {self.name!r}: run_search needs the option budget")
        bar = progress_bar(
            total=self.budget, desc=f"{self.name} {graph.name}", enabled=self.progress, unit="call"
        )
        try:
            with self._adapted(graph, cluster) as policy:
                task = (policy, graph, cluster, self.budget, rng, self.semantics)
                if self.search == "adapt":
                    return adapt_search(*task, self.search_config(), bar)
                return policy_search(*task, self.search_config(), bar=bar)
        finally:
            bar.close()

    def place(self, graph: DataflowGraph, cluster: Cluster, rng: np.random.Generator) -> Placement:
        """The placement (on one torch thread: an episode's tensors are tiny, and a second
        thread made a zero-shot placement ten times slower on a busy two-core machine; the
        placements are the same)."""
        with torch_threads(1):
            return self._place(graph, cluster, rng)

    def _place(self, graph: DataflowGraph, cluster: Cluster, rng: np.random.Generator) -> Placement:
        meta: dict[str, Any] = {"checkpoint": str(self.checkpoint_for(graph, cluster))}
        if self.adapter is not None:
            meta["adapter"] = str(self.adapter)
        if self.budget is not None:
            out = self.run_search(graph, cluster, rng)
            p = out.placement
            meta.update(
                greedy_cost=out.greedy_cost,
                rollout_cost=out.rollout_cost,
                best_cost=out.cost,
                partition_cost=out.partition_cost,
                clustering_cost=out.clustering_cost,
                memory_cost=out.memory_cost,
                samples=out.rollouts - 1,
                budget=self.budget,
                search=self.search,
                sim_calls=out.calls,
            )
        else:
            samples = 16 if self.samples is None else self.samples
            res = self.run(graph, cluster, rng)
            p = res.placement
            meta.update(
                greedy_cost=res.greedy_cost,
                rollout_cost=res.rollout_cost,
                partition_cost=res.partition_cost,
                clustering_cost=res.clustering_cost,
                memory_cost=res.memory_cost,
                best_cost=res.best_cost,
                source=res.source,
                samples=samples,
                partitions=len(res.costs) - res.rollouts - int(res.clustering) - res.memories,
                clusterings=int(res.clustering),
                memory_baselines=res.memories,
                # each candidate judged once; the greedy rollout alone is not judged
                sim_calls=len(res.costs) if len(res.costs) > 1 else 0,
            )
        out = Placement(p.device, p.priority, self.name, {**p.meta, **meta})
        return fit_placement(graph, cluster, out, self.name)


class DopplerPlacer(_LearnedPlacer):
    """The DOPPLER dual policy (or its SEL-only / PLC-only ablation) from a checkpoint (default:
    the shipped general policy)."""

    name = "doppler"
    kinds = ("dual", "sel-only", "plc-only")
    default_checkpoint = GENERAL_CHECKPOINT
    memory_checkpoint = GENERAL_MEMORY_CHECKPOINT
    default_partitions = PARTITION_PROPOSALS
    default_fewer_devices = FEWER_DEVICES
    default_clustering = CLUSTERING_PROPOSAL
    default_memory_baselines = MEMORY_BASELINES


class PlacetoPlacer(_LearnedPlacer):
    """Our Placeto from a checkpoint."""

    name = "placeto"
    kinds = ("placeto",)


class GdpPlacer(_LearnedPlacer):
    """Our GDP from a checkpoint."""

    name = "gdp"
    kinds = ("gdp",)
