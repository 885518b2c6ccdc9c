"""Per-instance fine-tuning of a DOPPLER policy: a node-by-device bias table on PLC's logits,
trained by policy gradient with the network frozen (efficient active search, Hottung et al.,
ICLR 2022, "EAS-tab").

Fine-tuning the network itself on one graph for a few hundred episodes barely moves it, and
the rates that make it memorise a good placement unsettle everything else it knows (measured:
``bench general``'s notes). The table is the opposite trade: ``n x D`` numbers that only this
graph reads, so a high learning rate is safe and the network's judgement of every state is kept.

:func:`adapt` spends ``episodes`` simulator calls:

1. the proposals of the ``doppler`` placer (greedy + ``samples`` sampled rollouts + the
   ``clustering`` placement and its bounded variants of ``cluster_caps`` + up to ``partitions``
   METIS partitions); the best is the incumbent, and the table starts at ``anchor_bias`` on
   each node's incumbent device (0: at zero);
2. updates of ``batch`` sampled episodes each: the policy gradient of the episodes' costs
   (advantage = the batch mean minus the cost, scaled by the batch's standard deviation) plus
   ``imitation`` times the log-likelihood of the incumbent's own episode (EAS's imitation term:
   the table learns to reproduce the best placement found so far); by default PPO's clipped
   surrogate with ``ppo_epochs`` steps per batch (``estimator="reinforce"``: one plain
   policy-gradient step, as before :data:`ADAPT_ESTIMATOR` was chosen);
3. whatever the budget leaves when a batch would overrun it goes to a last, smaller batch;
4. settling: imitation steps on the best placement, without simulator calls, until the greedy
   rollout reproduces it (at most ``settle_steps``).

The adapted policy is judged as any policy: its greedy rollout and sampled rollouts.
``adapt(state=FILE)`` keeps the run's progress in ``FILE`` after the proposals and after every
update (table, optimiser, incumbent, random state), and a run started again with the same file
resumes exactly where it stopped; ``doppler-lab adapt GRAPH --out DIR`` runs it from the command
line, and the ``doppler`` placer's ``adapter`` option places with a saved table
(:func:`load_adapter`, which refuses a table of another graph, device count or network).

Why these defaults (a sweep of 2026-12-02/03): reports/notes/search_tuning.md.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..hardware.cluster import Cluster
from ..house.errors import ConfigError
from ..house.limits import MAX_BUDGET, MAX_DEVICES, MAX_NODES
from ..house.settings import check_setting
from ..house.userfiles import input_file, torch_file_problem
from ..house.validate import type_name, want_int, want_str
from ..ir.graph import DataflowGraph
from ..ir.placement import Placement
from ..placers.clustering import CLUSTER_CAPS
from ..policies.checkpoint import save_atomic
from ..policies.reinforce import (
    PPO_CLIP,
    PPO_EPOCHS,
    Optimisers,
    batch_mean_advantages,
    check_estimator,
    extra_epochs,
    surrogate,
)
from ..timing.fit import capped
from ..timing.sim import Simulator
from .budget import SearchConfig, SearchOutcome
from .proposals import (
    PROTOCOL_SAMPLES,
    ProposalSet,
    Verdict,
    config_from_settings,
    config_settings,
    judge,
    proposal_setting_names,
)

#: the ``format`` field of a saved table
ADAPTER_FORMAT = "doppler-lab/adapter-1"
#: the ``format`` field of a run's progress file (``adapt(state=...)``)
ADAPT_STATE_FORMAT = "doppler-lab/adapt-state-1"


#: upper bounds of the adapter's settings: the table's logits and the loss stay finite (a bias
#: of 1e308 made every softmax NaN)
ADAPT_MAXIMA: dict[str, float] = {
    "lr": 1e3,
    "anchor_bias": 1e3,
    "imitation": 1e6,
    "temperature": 1e3,
    "episodes": MAX_BUDGET,
    "batch": MAX_BUDGET,
    "settle_steps": MAX_BUDGET,
    "ppo_epochs": 100,
    "ppo_clip": 10,
}

#: the adapter's estimator by default, chosen by ``bench learner`` (reports/bench/learner.md):
#: on the paper's 4-GPU graphs, 200 calls from the general policy, 8 seeds, PPO's best was
#: shorter in 7 of 32 pairs and longer in none: the paired verdict supports PPO, but its mean
#: gain (0.003%) is far below the 0.5% the bench asks of a default whose updates take twice
#: the time (:func:`~doppler_lab.lab.bench.learner.default_estimator`), so REINFORCE stays
ADAPT_ESTIMATOR = "reinforce"

#: the adapter's proposals by default: the ``doppler`` placer's (greedy + 16 samples, two of
#: them greedy rollouts on fewer devices, the clustering and 4 partitions) with the clustering
#: ladder; without the memory baselines unless asked (``memory_baselines=true``)
ADAPT_PROPOSALS = ProposalSet(
    samples=PROTOCOL_SAMPLES,
    fewer_devices=True,
    clustering=True,
    cluster_caps=CLUSTER_CAPS,
    partitions=4,
)


@dataclass(frozen=True)
class AdaptConfig:
    """Settings of :func:`adapt`.

    Attributes:
        episodes: simulator calls in all (the proposals' included).
        batch: sampled episodes per update.
        lr: Adam learning rate of the table.
        anchor_bias: the table's start on each node's incumbent device (0: zeros).
        imitation: weight of the incumbent's log-likelihood in the loss.
        proposals: the proposals judged first, as in the ``doppler`` placer
            (:class:`~doppler_lab.search.proposals.ProposalSet`, default
            :data:`ADAPT_PROPOSALS`; its ``samples`` None: 16).
        temperature: PLC's sampling temperature during the updates (SEL samples at 1); at least
            0.001 (the logits divided by less overflow).
        reanchor: when a sampled placement beats the incumbent, swap each moved node's table
            entries of its old and new device, so the table's preference follows the new
            incumbent with the confidence it had learned.
        settle_steps: at most this many imitation steps on the best placement after the
            budget (no simulator calls), until the greedy rollout reproduces it.
        estimator: how each batch updates the table (:mod:`~doppler_lab.policies.reinforce`):
            ``reinforce`` (one step) or ``ppo`` (``ppo_epochs`` clipped steps, clip range
            ``ppo_clip``).
        ppo_epochs, ppo_clip: PPO's passes over each batch and its clip range.

    :meth:`from_dict` builds one from flat settings (``samples=4``, ``partitions=2``: the
    proposal set's beside the adapter's own), as the command line's ``--set`` and a saved
    :meth:`to_dict` give them.
    """

    episodes: int = 200
    batch: int = 16
    lr: float = 1.0
    anchor_bias: float = 10.0
    imitation: float = 4.0
    proposals: ProposalSet = field(default=ADAPT_PROPOSALS)
    temperature: float = 2.5
    reanchor: bool = True
    settle_steps: int = 100
    estimator: str = ADAPT_ESTIMATOR
    ppo_epochs: int = PPO_EPOCHS
    ppo_clip: float = PPO_CLIP

    def __post_init__(self) -> None:
        owner = "adapter config"
        for name, kind, bounds in (
            ("episodes", "int", {"minimum": 1}),
            ("batch", "int", {"minimum": 1}),
            ("settle_steps", "int", {"minimum": 0}),
            ("reanchor", "bool", {}),
            ("lr", "float", {"above": 0}),
            ("anchor_bias", "float", {"minimum": 0}),
            ("imitation", "float", {"minimum": 0}),
            ("temperature", "float", {"minimum": 1e-3}),  # logits / 1e-300 overflow
            ("estimator", "str", {}),
            ("ppo_epochs", "int", {"minimum": 1}),
            ("ppo_clip", "float", {"above": 0}),
        ):
            top = ADAPT_MAXIMA.get(name)
            value = check_setting(getattr(self, name), kind, owner, name, maximum=top, **bounds)
            object.__setattr__(self, name, value)
        check_estimator(self.estimator, owner)
        if not isinstance(self.proposals, ProposalSet):
            raise ConfigError(
                f"{owner}: setting proposals={self.proposals!r}; expected a proposal set "
                "(or its settings flat: samples, partitions, clustering, ...)"
            )

    @classmethod
    def setting_names(cls) -> tuple[str, ...]:
        """The flat settings :meth:`from_dict` reads: the adapter's own and the proposal
        set's."""
        own = tuple(f.name for f in fields(cls) if f.name != "proposals")
        return own + proposal_setting_names()

    @classmethod
    def from_dict(cls, settings: Mapping[str, Any], owner: str = "adapter config") -> AdaptConfig:
        """A config from flat settings (a saved :meth:`to_dict`, before or after it held a
        proposal set; the command line's ``--set``), or with the proposal set's under
        ``proposals``; a proposal setting not given is :data:`ADAPT_PROPOSALS`'s.

        Raises:
            ConfigError: an unknown setting or a bad value (one line naming it).
        """
        return config_from_settings(cls, settings, owner, ADAPT_PROPOSALS)

    def to_dict(self) -> dict[str, Any]:
        """The settings, flat (the proposal set's beside the adapter's own, as saved before
        the config held a proposal set, with ``limit`` and ``memory_baselines`` added)."""
        return config_settings(self)

    def proposal_set(self) -> ProposalSet:
        """The proposals judged first."""
        return self.proposals

    def proposal_calls(self, graph: DataflowGraph | None = None) -> int:
        """The most simulator calls the proposals take on ``graph`` (equal clusterings are
        judged once, so they may take fewer; None: a graph the clustering fits)."""
        return self.proposals.most_calls(graph)


@dataclass
class AdaptResult:
    """What :func:`adapt` found.

    Attributes:
        bias: ``(n, D)`` the trained table (local node ids; set it with
            :meth:`~doppler_lab.policies.doppler.DualPolicy.set_node_bias`).
        best: the best placement simulated on the way.
        best_cost: its makespan.
        start_cost: the best proposal's makespan.
        calls: simulator calls spent.
        rows: one dict per update (calls so far, batch mean / min, incumbent).
        config: the settings.
        greedy_cost: the greedy rollout's makespan (before the table).
        rollout_cost: the best proposal rollout's makespan.
        rollouts: the proposal rollouts judged (the greedy one included).
        partition_cost: the best heuristic proposal's makespan (clustering or partitions; nan
            without any).
        source: where the best placement came from (``greedy``, ``sample``, ``clustering``,
            ``partition`` or ``adapter``).
        label: what produced it, in words (the winning proposal's label, e.g. ``sample 3``,
            or ``adapter table from <that label>`` once a sampled episode beat the proposals).
        verdict: the proposals' costs and labels (None in a run resumed from its state).
        settle_steps: imitation steps after the budget until the greedy rollout reproduced
            the best placement (-1: it did not within ``settle_steps``).
        policy: :func:`policy_digest` of the network the table was trained on.
    """

    bias: torch.Tensor
    best: Placement
    best_cost: float
    start_cost: float
    calls: int
    rows: list[dict[str, float]]
    config: AdaptConfig
    greedy_cost: float = math.nan
    rollout_cost: float = math.nan
    rollouts: int = 0
    partition_cost: float = math.nan
    source: str = ""
    settle_steps: int = 0
    policy: str = ""
    label: str = ""
    verdict: Verdict | None = None

    def save(self, path: str | Path, graph: DataflowGraph, cluster: Cluster, checkpoint: Any):
        """Write the table with what it belongs to (:func:`load_adapter` reads it back)."""
        path = Path(path)
        if not bool(torch.isfinite(self.bias).all()):
            raise ConfigError(
                f"adapter {path}: the trained table holds non-finite values; expected other "
                f"settings (lr {self.config.lr:g}, anchor_bias {self.config.anchor_bias:g}, "
                f"imitation {self.config.imitation:g}, temperature {self.config.temperature:g}); "
                "nothing was written"
            )
        doc = {
            "format": ADAPTER_FORMAT,
            "bias": self.bias,
            "graph": graph.name,
            "graph_digest": graph.structure_digest,
            "nodes": int(self.bias.shape[0]),
            "devices": int(cluster.num_devices),
            "checkpoint": str(checkpoint),
            "policy": self.policy,
            "best_device": self.best.device.tolist(),
            "best_cost": self.best_cost,
            "start_cost": self.start_cost,
            "calls": self.calls,
            "config": self.config.to_dict(),
        }
        return save_atomic(doc, path)


def load_adapter(
    path: str | Path, policy: Any, graph: DataflowGraph, num_devices: int | None = None
) -> dict[str, Any]:
    """Set the table saved at ``path`` on ``policy`` for ``graph``; returns the saved record.

    Raises:
        ConfigError: no such file, not an adapter file, or saved for another graph, device
            count (``num_devices``, when given) or network (the saved :func:`policy_digest`).
    """
    path = Path(path)
    if not os.path.lexists(path):
        raise ConfigError(f"adapter {path}: no such file (doppler-lab adapt --out DIR writes one)")
    input_file(path, "adapter", limit="MAX_TENSOR_FILE_BYTES")  # a FIFO, a device: refused
    try:
        doc = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001 - a foreign file, named in the message
        raise ConfigError(
            f"adapter {path}: unreadable ({torch_file_problem(path, exc)}); expected an adapter "
            "table (what doppler-lab adapt --out DIR writes)"
        ) from None
    if not isinstance(doc, dict) or doc.get("format") != ADAPTER_FORMAT:
        raise ConfigError(f"adapter {path}: not an adapter table (format {ADAPTER_FORMAT!r})")
    _check_adapter(doc, path)
    n = int(graph.compute_nodes.size)
    if doc["graph"] != graph.name or doc["nodes"] != n:
        raise ConfigError(
            f"adapter {path}: trained on {doc['graph']!r} ({doc['nodes']} compute nodes), "
            f"expected the graph it is used on, {graph.name!r} ({n})"
        )
    saved = doc.get("graph_digest")  # absent in tables saved before it was recorded
    if saved is not None and saved != graph.structure_digest:
        raise ConfigError(
            f"adapter {path}: trained on {doc['graph']!r} (digest {saved}), not on this "
            f"{graph.name!r} (digest {graph.structure_digest}): its node names or edges differ"
        )
    if num_devices is not None and doc["devices"] != num_devices:
        raise ConfigError(
            f"adapter {path}: trained for {doc['devices']} devices, expected the cluster's "
            f"{num_devices}"
        )
    digest = policy_digest(policy)
    if doc.get("policy") and doc["policy"] != digest:
        raise ConfigError(
            f"adapter {path}: trained on top of another network (weights {doc['policy']}, "
            f"from {doc.get('checkpoint')!r}); this policy's are {digest}: expected the "
            "checkpoint it was trained with"
        )
    policy.set_node_bias(doc["bias"])
    return doc


#: fields every adapter file has (``save`` writes more)
ADAPTER_FIELDS = ("format", "bias", "graph", "nodes", "devices")


def _check_adapter(doc: dict[str, Any], path: Path) -> None:
    """The fields :func:`load_adapter` reads, with their types; the table finite."""

    def fail(msg: str) -> ConfigError:
        return ConfigError(f"adapter {path}: {msg}")

    for key in ADAPTER_FIELDS:
        if key not in doc:
            raise fail(f"lacks the field {key!r}; expected {', '.join(ADAPTER_FIELDS)}")
    want_str(doc["graph"], "graph", fail)
    nodes = want_int(doc["nodes"], "nodes", fail, minimum=0, maximum=MAX_NODES)
    devices = want_int(doc["devices"], "devices", fail, minimum=1, maximum=MAX_DEVICES)
    bias = doc["bias"]
    if not isinstance(bias, torch.Tensor) or not bias.is_floating_point():
        raise fail(f"bias is {type_name(bias)}; expected a float tensor")
    if tuple(bias.shape) != (nodes, devices):
        raise fail(f"bias has shape {tuple(bias.shape)}; expected ({nodes}, {devices})")
    if not bool(torch.isfinite(bias).all()):
        raise fail("bias holds non-finite values (nan or inf); expected finite ones")
    if doc.get("policy") is not None:
        want_str(doc["policy"], "policy", fail)


def _reanchor(bias: torch.Tensor, old: np.ndarray, new: np.ndarray) -> None:
    """Swap ``bias[v, old[v]]`` and ``bias[v, new[v]]`` where they differ (in place)."""
    moved = np.nonzero(old != new)[0]
    if moved.size:
        rows = torch.as_tensor(moved)
        a, b = torch.as_tensor(old[moved]), torch.as_tensor(new[moved])
        with torch.no_grad():
            va, vb = bias[rows, a].clone(), bias[rows, b].clone()
            bias[rows, a], bias[rows, b] = vb, va


@dataclass
class _Progress:
    """What an adapter run has reached: its table, its incumbent and its counters (kept in its
    state file after the proposals and after every update)."""

    bias: torch.Tensor
    best: Placement
    best_cost: float
    start_cost: float
    calls: int
    source: str
    label: str
    part_cost: float
    greedy_cost: float
    rollout_cost: float
    rollouts: int
    incumbent: Any  # the incumbent as an episode of the policy (:class:`Episodes`)
    rows: list[dict[str, float]]
    verdict: Verdict | None = None

    def to_state(self, key: dict[str, Any], optim: Optimisers, rng: np.random.Generator):
        """The state file's record (with the optimiser's moments and the random state)."""
        best, opt = self.best, optim.optimizers[_TABLE]
        return {
            "format": ADAPT_STATE_FORMAT, "key": key, "bias": self.bias.detach().clone(),
            "opt": opt.state_dict() if opt.state else None,
            "best_device": torch.from_numpy(np.array(best.device, dtype=np.int64)),
            "best_priority": None if best.priority is None else torch.from_numpy(
                np.array(best.priority, dtype=np.float64)),  # a copy: placements are read-only
            "best_placer": best.placer, "best_cost": self.best_cost,
            "start_cost": self.start_cost, "calls": self.calls, "source": self.source,
            "label": self.label, "partition_cost": self.part_cost,
            "greedy_cost": self.greedy_cost, "rollout_cost": self.rollout_cost,
            "rollouts": self.rollouts, "incumbent": self.incumbent.to_state(), "rows": self.rows,
            "rng": json.dumps(rng.bit_generator.state),
        }  # fmt: skip

    @classmethod
    def from_state(cls, saved: dict[str, Any]) -> _Progress:
        """A run's progress from its state file (its key already checked: the table has the
        run's shape)."""
        from ..policies.policy_base import Episodes

        bias = saved["bias"].detach().to(torch.float32).clone()
        best = Placement(
            saved["best_device"].numpy(),
            None if saved["best_priority"] is None else saved["best_priority"].numpy(),
            saved["best_placer"],
        )
        return cls(
            bias, best, saved["best_cost"], saved["start_cost"], saved["calls"], saved["source"],
            saved.get("label", saved["source"]),  # states saved before the labels: the source
            saved["partition_cost"], saved["greedy_cost"], saved["rollout_cost"],
            saved["rollouts"], Episodes.from_state(saved["incumbent"]), list(saved["rows"]),
        )  # fmt: skip

    def result(self, cfg: AdaptConfig, settled: int, digest: str) -> AdaptResult:
        return AdaptResult(
            self.bias.detach().clone(), self.best, self.best_cost, self.start_cost, self.calls,
            self.rows, cfg, self.greedy_cost, self.rollout_cost, self.rollouts, self.part_cost,
            self.source, settled, digest, self.label, self.verdict,
        )  # fmt: skip


#: the name of the adapter's one parameter group (its table)
_TABLE = "table"


def _check_adaptable(policy: Any, graph: DataflowGraph, cfg: AdaptConfig) -> None:
    """Refuse a policy without a learned PLC and a budget that does not cover the proposals."""
    if getattr(policy, "plc", None) is None or not hasattr(policy, "set_node_bias"):
        raise ConfigError(
            f"adapt: a {getattr(policy, 'kind', type(policy).__name__)} policy has no learned "
            "PLC to bias; expected a DOPPLER dual or plc-only policy"
        )
    wanted = cfg.proposal_set()
    proposals = wanted.most_calls(graph)
    if cfg.episodes < proposals:
        raise ConfigError(
            f"adapt: episodes = {cfg.episodes} do not cover the proposals "
            f"({wanted.describe(graph)}); expected at least {proposals}"
        )


def _from_proposals(
    policy: Any,
    graph: DataflowGraph,
    cluster: Cluster,
    semantics: str,
    ctx: Any,
    enc: Any,
    sim: Any,
    cfg: AdaptConfig,
    rng: np.random.Generator,
) -> _Progress:
    """Judge the proposals; the best is the incumbent, and the table starts on its devices."""
    from ..policies.policy_base import Episodes
    from ..policies.rollout import GREEDY, ActionMode, RolloutOptions, run_episodes

    n, d = ctx.num_nodes, ctx.num_devices
    props = cfg.proposal_set().build(policy, graph, cluster, rng, ctx.cost, ctx, semantics)
    verdict: Verdict = judge(sim, props)
    costs, i = verdict.costs, verdict.best
    best = props.placements[i]
    bias = torch.zeros((n, d), dtype=torch.float32)
    if cfg.anchor_bias:
        bias[torch.arange(n), torch.as_tensor(best.device[ctx.features.nodes])] = float(
            cfg.anchor_bias
        )
    # the incumbent as an episode of the policy (SEL greedy, PLC on its devices): what the
    # imitation term makes likelier
    follow = ActionMode(False, 0.0, 1.0, 1.0)  # PLC takes the anchor's devices
    with torch.no_grad():
        on_best = RolloutOptions(anchor=best.device)
        incumbent: Episodes = run_episodes(policy, ctx, enc, 1, rng, GREEDY, follow, on_best)
    cand = verdict.candidates[i]
    return _Progress(
        bias, best, float(costs[i]), float(costs[i]), len(props), cand.source, cand.label,
        verdict.heuristic_cost, float(costs[0]), verdict.rollout_cost, props.rollouts,
        incumbent, [], verdict,
    )  # fmt: skip


def _table_step(
    policy: Any,
    ctx: Any,
    enc: Any,
    episodes: Any,
    costs: np.ndarray,
    run: _Progress,
    optim: Optimisers,
    cfg: AdaptConfig,
) -> None:
    """One update of the table (:mod:`~doppler_lab.policies.reinforce`): the policy gradient
    of the batch (advantage: the batch mean minus the cost, over the batch's spread) plus
    ``imitation`` times the incumbent's log-likelihood; REINFORCE one step, PPO
    ``ppo_epochs`` clipped steps on the same batch."""
    temps = (1.0, cfg.temperature)
    n = ctx.num_nodes
    a = batch_mean_advantages(costs)
    adv = None if a is None else torch.as_tensor(a, dtype=torch.float32)
    old = None
    for _ in range(1 + extra_epochs(cfg.estimator, cfg.ppo_epochs)):
        optim.zero_grad()
        loss = torch.zeros(())
        if adv is not None:
            terms = policy.log_probs(ctx, enc, episodes, temps)
            if cfg.estimator == "ppo":  # per action, against the sampling-time probabilities
                old = terms.plc_logp.detach() if old is None else old
                gain = surrogate(terms.plc_logp, adv[:, None], old, cfg.ppo_clip).sum(1)
            else:
                gain = surrogate(terms.plc_logp.sum(1), adv)
            loss = loss - gain.mean()
        if cfg.imitation:
            terms = policy.log_probs(ctx, enc, run.incumbent, temps)
            loss = loss - cfg.imitation * terms.plc_logp.sum() / n
        if not loss.requires_grad:
            return
        loss.backward()
        optim.step(schedule=False)


def _take_best(run: _Progress, episodes: Any, costs: np.ndarray, nodes: np.ndarray, cfg) -> int:
    """Make the batch's best placement the incumbent if it beats it (the table's preference
    follows when ``reanchor``); returns its index in the batch."""
    j = int(np.argmin(costs))
    if costs[j] < run.best_cost:
        if cfg.reanchor:
            _reanchor(run.bias, run.best.device[nodes], episodes.placements[j].device[nodes])
        run.best, run.best_cost = episodes.placements[j], float(costs[j])
        run.incumbent = episodes.select([j])
        if run.source != "adapter":
            run.label = f"adapter table from {run.label}"
        run.source = "adapter"
    return j


def adapt(
    policy: Any,
    graph: DataflowGraph,
    cluster: Cluster,
    semantics: str = "paper",
    config: AdaptConfig | None = None,
    *,
    seed: int | np.random.Generator = 0,
    progress: bool = False,
    pbar: Any = None,
    track_greedy: bool = False,
    state: str | Path | None = None,
) -> AdaptResult:
    """Train a per-instance bias table for ``policy`` on ``graph`` (module docstring). The
    policy's network is left as it was, and so is its bias (the result holds the table).

    The settings are ``config``; the keywords after it are the run's own (its seed, how it
    reports, where it keeps its progress), outside :class:`AdaptConfig` so that the key a
    resumable run saves (``config.to_dict()`` and the seed) stays what it was.

    Args:
        policy: a DOPPLER policy (learned PLC).
        graph: the graph.
        cluster: the cluster.
        semantics: simulator semantics of the objective.
        config: the settings (default :class:`AdaptConfig`).
        seed: seed (or generator) of every draw.
        progress: show a bar over the simulator calls.
        pbar: a bar to advance instead (a search's own).
        track_greedy: record the greedy rollout's makespan after each update (``greedy_cost``;
            evaluation calls, not counted in the budget, as training's greedy evaluations).
        state: a file that keeps the run's progress (written after the proposals and after
            every update, atomically). When it exists the run resumes from it, with the same
            draws an uninterrupted run makes, so the result is the same; a finished run only
            settles again.

    Raises:
        ConfigError: the policy has no learned PLC (only DOPPLER's dual and PLC-only do), the
            budget does not cover the proposals, or ``state`` belongs to another run (another
            graph, cluster, semantics, settings, seed or network).
    """
    from ..house.progress import progress as bar
    from ..policies.context import GraphContext
    from ..policies.rollout import GREEDY, SAMPLE, ActionMode, Rollout, run_episodes

    cfg = config or AdaptConfig()
    _check_adaptable(policy, graph, cfg)
    rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)
    ctx = GraphContext.for_policy(graph, cluster, policy.config, semantics)
    # placements over a memory cap simulate as inf
    sim = capped(Simulator(graph, ctx.cluster, semantics, 0.0, ctx.cost))  # type: ignore[arg-type]
    nodes = ctx.features.nodes  # local -> global
    key = _run_key(policy, graph, ctx, semantics, cfg, seed)
    old = policy.node_bias
    policy.set_node_bias(None)
    with torch.no_grad():
        enc = policy.encode(ctx)
    saved = _read_state(state, key) if state is not None else None
    if saved is None:
        run = _from_proposals(policy, graph, cluster, semantics, ctx, enc, sim, cfg, rng)
    else:
        run = _Progress.from_state(saved)
        rng.bit_generator.state = json.loads(saved["rng"])
    run.bias.requires_grad_(True)
    optim = Optimisers({_TABLE: [run.bias]}, {_TABLE: cfg.lr})
    if saved is not None and saved["opt"] is not None:
        optim.optimizers[_TABLE].load_state_dict(saved["opt"])
    if state is not None and saved is None:
        _write_state(state, run.to_state(key, optim, rng))
    own = pbar is None
    if own:
        pbar = bar(total=cfg.episodes, desc="adapt", enabled=progress, unit="ep")
    pbar.update(run.calls)
    plc = ActionMode(True, 0.0, 0.0, cfg.temperature)
    try:
        policy.set_node_bias(run.bias)
        while run.calls < cfg.episodes:
            k = min(cfg.batch, cfg.episodes - run.calls)
            with torch.no_grad():
                eps = run_episodes(policy, ctx, enc, k, rng, SAMPLE, plc)
            c = np.asarray(sim.makespans(eps.placements), dtype=np.float64)
            run.calls += k
            j = _take_best(run, eps, c, nodes, cfg)
            _table_step(policy, ctx, enc, eps, c, run, optim, cfg)
            row = {"calls": run.calls, "cost_mean": float(c.mean()), "cost_min": float(c[j]),
                   "cost_best": run.best_cost}  # fmt: skip
            if track_greedy:
                with torch.no_grad():
                    g = Rollout(policy, ctx, enc, 1, rng, GREEDY, GREEDY).run_placements()[0]
                row["greedy_cost"] = float(sim.makespan(g))
            run.rows.append(row)
            if state is not None:
                _write_state(state, run.to_state(key, optim, rng))
            pbar.update(k)
        settled = _settle(policy, ctx, enc, run.bias, run.best.device, cfg, rng)
    finally:
        if own:
            pbar.close()
        policy.set_node_bias(old)
    return run.result(cfg, settled, key["policy"])


def _run_key(
    policy: Any,
    graph: DataflowGraph,
    ctx: Any,
    semantics: str,
    cfg: AdaptConfig,
    seed: int | np.random.Generator,
) -> dict[str, Any]:
    """What a state file must have been written by to be resumed by this run."""
    return {
        "graph": graph.name,
        "nodes": int(ctx.num_nodes),
        "devices": int(ctx.num_devices),
        "semantics": semantics,
        "config": cfg.to_dict(),
        "policy": policy_digest(policy),
        "seed": None if isinstance(seed, np.random.Generator) else int(seed),
    }


def policy_digest(policy: Any) -> str:
    """A digest of the network's weights (16 hex digits): what a table was trained on top of."""
    h = hashlib.sha256()
    for name, t in sorted(policy.state_dict().items()):
        h.update(name.encode())
        h.update(np.ascontiguousarray(t.detach().cpu().numpy()).tobytes())
    return h.hexdigest()[:16]


def _write_state(path: str | Path, doc: dict[str, Any]) -> None:
    save_atomic(doc, path)


def _read_state(path: str | Path, key: dict[str, Any]) -> dict[str, Any] | None:
    """The saved progress of the run ``key`` at ``path`` (None when there is none yet)."""
    path = Path(path)
    if not os.path.lexists(path):
        return None
    input_file(path, "adapt state", limit="MAX_TENSOR_FILE_BYTES")
    try:
        doc = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001 - a torn or foreign file, named in the message
        raise ConfigError(
            f"adapt state {path}: unreadable ({torch_file_problem(path, exc)}); delete it to "
            "start over"
        ) from None
    if not isinstance(doc, dict) or doc.get("format") != ADAPT_STATE_FORMAT:
        raise ConfigError(
            f"adapt state {path}: not an adapter run's state (format {ADAPT_STATE_FORMAT!r})"
        )
    for name, want in key.items():
        have = doc["key"].get(name)
        if name == "config" and isinstance(have, Mapping):  # as loaded: older saves are flat
            have = {"estimator": "reinforce", **have}  # saved before there was a choice
            try:
                same = AdaptConfig.from_dict(have) == AdaptConfig.from_dict(want)
            except ConfigError:
                same = False
            if same:
                continue
        if have != want:
            raise ConfigError(
                f"adapt state {path}: written by another run ({name} {have!r}, this run "
                f"{want!r}); use another file, or delete it to start over"
            )
    return doc


def _settle(policy, ctx, enc, bias, target, cfg: AdaptConfig, rng) -> int:
    """Imitation steps (no simulator call) until the greedy rollout places every node where
    ``target`` does: the episode that follows ``target``'s devices along greedy SEL is the one
    the greedy rollout takes once every PLC choice agrees. Returns the steps taken (-1: still
    not reproduced after ``cfg.settle_steps``). A fresh optimiser: the policy gradient's
    moment estimates point elsewhere (with them, 100 steps did not settle the paper's full
    transformer layer; fresh, 11 did)."""
    from ..policies.rollout import GREEDY, ActionMode, Rollout, RolloutOptions, run_episodes

    opt = torch.optim.Adam([bias], lr=cfg.lr)
    follow = ActionMode(False, 0.0, 1.0, 1.0)
    nodes, temps = ctx.features.nodes, (1.0, cfg.temperature)  # as :func:`adapt` has them
    want = target[nodes]
    for step in range(cfg.settle_steps + 1):
        with torch.no_grad():
            got = Rollout(policy, ctx, enc, 1, rng, GREEDY, GREEDY).run_placements()[0]
        if np.array_equal(got.device[nodes], want):
            return step
        if step == cfg.settle_steps:
            break
        with torch.no_grad():
            on_target = RolloutOptions(anchor=target)
            path = run_episodes(policy, ctx, enc, 1, rng, GREEDY, follow, on_target)
        opt.zero_grad()
        loss = -policy.log_probs(ctx, enc, path, temps).plc_logp.sum() / len(nodes)
        loss.backward()
        opt.step()
    return -1


def adapt_search(
    policy: Any,
    graph: DataflowGraph,
    cluster: Cluster,
    budget: int,
    rng: np.random.Generator,
    semantics: str,
    config: SearchConfig | None = None,
    bar: Any = None,
) -> SearchOutcome:
    """The ``doppler`` placer's ``search="adapt"``: the budget spent training a per-instance
    table on PLC's logits (:func:`adapt`, its proposals first, from ``config``'s proposal
    fields: ``samples``, default :class:`AdaptConfig`'s, with ``fewer_devices``, then the
    ``clustering`` placement, its bounded variants and ``partitions`` as the budget leaves room:
    :meth:`~doppler_lab.search.proposals.ProposalSet.for_adapter`); the best placement it
    simulated."""
    scfg = config or SearchConfig()
    fit = scfg.proposals.for_adapter(budget, graph)
    # no settling: a search returns the best placement simulated, not the policy
    cfg = AdaptConfig(episodes=budget, proposals=fit, settle_steps=0)
    out = adapt(policy, graph, cluster, semantics, cfg, seed=rng, pbar=bar)
    best = out.best
    placement = Placement(
        best.device, best.priority, best.placer, {**best.meta, "source": out.source}
    )
    verdict = out.verdict
    assert verdict is not None  # a fresh run (no state) keeps its verdict
    if out.source == "adapter":
        return verdict.improved(placement, out.best_cost, out.label, out.source, out.calls)
    return verdict.winner(out.calls, placement)
