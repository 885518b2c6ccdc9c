"""Learned policies as placers (``doppler``, ``placeto``, ``gdp`` in the placer registry).

The experiment protocol (ARCHITECTURE.md): a learned method's placement is the best of its
greedy rollout and ``samples`` sampled rollouts from the final policy, judged by the simulator
(the same semantics and noise as the table it goes into). ``doppler`` also judges heuristic
proposals with them by default: the ``clustering`` placer's placement (:data:`CLUSTERING_PROPOSAL`;
:mod:`doppler_lab.placers.clustering`) and ``partitions`` METIS min-cut partitions
(:data:`PARTITION_PROPOSALS`; :mod:`doppler_lab.placers.partition`), which win where transfers
dominate; ``proposals=none`` is the policy alone
(:data:`~doppler_lab.search.proposals.POLICY_ALONE_PROPOSALS`: no heuristic proposal, no
rollout on fewer devices), and ``proposals=none,samples=0`` its greedy rollout alone, without
any simulator call.

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
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from ..hardware.cluster import Cluster
from ..house.errors import CheckpointError, ConfigError
from ..house.limits import MAX_BUDGET, MAX_NOISE
from ..house.progress import progress as progress_bar
from ..house.progress import timer
from ..house.runners import torch_threads
from ..house.settings import check_setting
from ..ir.graph import DataflowGraph
from ..ir.placement import Placement
from ..placers.clustering import CLUSTER_CAPS
from ..policies.checkpoint import load_policy
from ..policies.context import GraphContext
from ..policies.features import hint_names
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
from .budget import SEARCH_STRATEGIES, SearchConfig, SearchOutcome, policy_search
from .proposals import (
    CLUSTERING_PROPOSAL,
    FEWER_DEVICES,
    MEMORY_BASELINES,
    PARTITION_PROPOSALS,
    PROTOCOL_SAMPLES,
    ProposalSet,
    Verdict,
    Winner,
    judge,
    named_proposals,
)

#: ``search`` values of the learned placers with a budget
PLACER_SEARCHES: tuple[str, ...] = (*SEARCH_STRATEGIES, "adapt")


#: the protocol's candidates and the winner (:func:`best_of_rollouts`): the one result type of
#: the proposals, :class:`~doppler_lab.search.proposals.Winner` (``best_index``, ``costs``,
#: ``greedy_cost``, ``rollout_cost``, ``best_cost``, ``source``, ``label``, ``runner_up``)
RolloutResult = Winner


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
        proposals = ProposalSet(PROTOCOL_SAMPLES if samples is None else samples)
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
    if len(props) == 1:  # the greedy rollout alone: not judged
        return Verdict(props.candidates, np.array([np.nan]), np.array([0])).winner(0)
    # the context's cost model is the simulator's (both CostModel(graph, cluster))
    sim = Simulator(graph, ctx.cluster, semantics, noise, ctx.cost)  # type: ignore[arg-type]
    # (the simulator restores torch's thread count after its parallel kernels itself)
    verdict = judge(
        sim, props, rng=rng if noise > 0 else None, reps=noise_seeds if noise > 0 else 1
    )
    return verdict.winner(len(props))


class _LearnedPlacer:
    """A checkpoint as a placer (see the module docstring). Its settings are flat
    :meth:`__init__` keywords, the CLI's ``-o key=value`` options; those of its proposals
    (``samples``, ``partitions``, ``fewer_devices``, ``clustering``, ``memory_baselines``)
    build :attr:`proposals`, or a :class:`~doppler_lab.search.proposals.ProposalSet` is given
    whole as ``proposals`` (then none of them).

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
        hints: the heuristics whose devices a policy that reads a hint (``doppler12``) is
            given, a group of rollouts each and one without (default: the checkpoint's
            ``hints``, else the clustering's; ``clustering+partition``, a list, or ``none``: every
            rollout without a hint; see
            :attr:`~doppler_lab.policies.policy_base.PlacementPolicy.hints`).
        memory_baselines: judge the memory baselines' placements (m-ETF, m-SCT, ``pipeline``)
            with the rollouts, with or without a budget, where the graph does not fit on one
            device (:func:`~doppler_lab.search.proposals.memory_candidates`; default
            :attr:`default_memory_baselines`; up to 3 simulator calls).
        proposals: the proposal set itself, in place of the options above (its
            ``cluster_caps``: the ladder a budget search judges; the zero-shot protocol
            judges the unbounded clustering alone), or the name of one
            (:data:`~doppler_lab.search.proposals.NAMED_PROPOSALS`: ``none``, the policy
            alone, :data:`~doppler_lab.search.proposals.POLICY_ALONE_PROPOSALS`) that the
            options above then change.

    The placer keeps the proposals as :attr:`proposals` (samples None: 16 without a budget,
    the budget's share with one; the clustering ladder of
    :data:`~doppler_lab.placers.clustering.CLUSTER_CAPS`).
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
        proposals: ProposalSet | str | None = None,
        hints: str | Sequence[str] | None = None,
    ):
        what = f"placer {self.name!r}: option"
        owner = f"placer {self.name!r}"

        def opt(value: Any, kind: str, key: str, **bounds: Any) -> Any:
            return check_setting(value, kind, owner, key, "option", **bounds)

        if temperature is not None:
            temperature = opt(temperature, "float", "temperature", above=0)
        if hints is not None:
            hints = hint_names(hints, f"{what} hints")
        cluster_moves = opt(cluster_moves, "bool", "cluster_moves")
        given = {
            k: v
            for k, v in (
                ("samples", samples), ("partitions", partitions), ("fewer_devices", fewer_devices),
                ("clustering", clustering), ("memory_baselines", memory_baselines),
            )
            if v is not None
        }  # fmt: skip
        if isinstance(proposals, str):  # a named set (``none``: the policy alone) as the base
            base = named_proposals(proposals, owner)
            proposals = ProposalSet.from_settings(given, owner, "option", base)
            given = {}
        if proposals is not None:
            if not isinstance(proposals, ProposalSet):
                raise ConfigError(f"{what} proposals = {proposals!r}, expected a ProposalSet")
            if given:
                key = next(iter(given))
                raise ConfigError(
                    f"{what} {key} = {given[key]!r} beside proposals; expected it in the "
                    "proposal set (or the options without proposals)"
                )
        else:
            base = self.default_proposals()
            if adapter is not None:  # the table is for the whole cluster: no fewer devices
                base = replace(base, fewer_devices=False)
            proposals = ProposalSet.from_settings(given, owner, "option", base)
        fewer = proposals.fewer_devices
        if adapter is not None and fewer is not False:
            raise ConfigError(
                f"{what} fewer_devices = {fewer!r} with an adapter: its table is for "
                "every device of the cluster (expected fewer_devices false or no adapter)"
            )
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
        self.proposals = proposals
        self.semantics = semantics
        self.noise = float(noise)
        self.allow_device_change = allow_device_change
        self.budget = budget
        self.search = search
        self.progress = progress
        self.cluster_moves = cluster_moves
        self.temperature = temperature
        self.hints = hints
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
            if self.hints is not None:
                pol.hints = self.hints
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

    @classmethod
    def default_proposals(cls) -> ProposalSet:
        """The placer's proposals where its options leave them (the class defaults)."""
        return ProposalSet(
            samples=None,
            fewer_devices=cls.default_fewer_devices,
            clustering=cls.default_clustering,
            cluster_caps=CLUSTER_CAPS,
            partitions=cls.default_partitions,
            memory_baselines=cls.default_memory_baselines,
        )

    def proposal_set(self) -> ProposalSet:
        """The proposals judged without a budget (the unbounded clustering alone)."""
        return replace(
            self.proposals, samples=self.proposals.sample_count(), cluster_caps=(), limit=None
        )

    def search_config(self) -> SearchConfig:
        """The budget search's settings (the proposals with the clustering ladder)."""
        return SearchConfig(
            strategy=self.search, proposals=self.proposals, cluster_moves=self.cluster_moves
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
            won = self.run_search(graph, cluster, rng)
            meta.update(
                greedy_cost=won.greedy_cost,
                rollout_cost=won.rollout_cost,
                best_cost=won.cost,
                partition_cost=won.partition_cost,
                clustering_cost=won.clustering_cost,
                memory_cost=won.memory_cost,
                samples=won.rollouts - 1,
                budget=self.budget,
                search=self.search,
                sim_calls=won.calls,
            )
        else:
            # the protocol's rollouts have no bar of their own: a line counting the seconds
            # once they pass 2 s (a large graph or cluster takes minutes)
            what = f"{self.name}: rollouts on {graph.compute_nodes.size:,} ops x {cluster.num_devices} devices"
            with timer(what, enabled=self.progress, delay_s=2.0):
                won = self.run(graph, cluster, rng)
            verdict = won.verdict
            meta.update(
                greedy_cost=won.greedy_cost,
                rollout_cost=won.rollout_cost,
                partition_cost=won.partition_cost,
                clustering_cost=won.clustering_cost,
                memory_cost=won.memory_cost,
                best_cost=won.best_cost,
                source=won.source,
                samples=self.proposals.sample_count(),
                partitions=verdict.count("partition"),
                clusterings=verdict.count("clustering"),
                memory_baselines=verdict.count("memory"),
                # each candidate judged once; the greedy rollout alone is not judged
                sim_calls=won.calls if won.calls > 1 else 0,
            )
        meta.update(won.provenance())  # what produced it: the winner's label, the runner-up
        p = won.placement
        # fitted to the memory caps once, by the registry (FittedPlacer), as every placer's
        return Placement(p.device, p.priority, self.name, {**p.meta, **meta})


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
