"""The training loop shared by Stage I (imitation), Stage II (REINFORCE in the simulator) and
Stage III (REINFORCE on the real system): only the cost function and the loss weights differ.

One update: pick the next graph (round robin), encode it once, roll out K episodes, evaluate
their costs (one batched call), then recompute the log-probabilities of the actions taken with
autograd and step the optimisers (one Adam per policy half). The loss per update::

    pg_coef * mean_k,t[-A_k gamma^(T-1-t) (log pi_sel + log pi_plc)]
    - imitation_coef * mean_k,t[log pi(teacher's choices)]
    - entropy_coef * mean_k,t[H_sel + H_plc]

where pi is the distribution the episodes were sampled from (scores over the sampling
temperature): trained at temperature 1 but sampled hotter, the policy gradient and
self-imitation pull the policy towards its own flatter samples every update.

The advantages, the loss and the optimisers' step live in :mod:`doppler_lab.policies.reinforce`
(shared with the per-instance adapter). ``estimator="ppo"`` replaces the policy-gradient term by
PPO's clipped surrogate on normalised advantages and takes ``ppo_epochs`` steps per update (the
first one above, then one per further pass over the same episodes); ``reinforce`` (the default,
the paper's) is the loss above, one step.

A run directory holds ``config.json`` (the frozen configs), ``metrics.csv``,
``checkpoints/last.pt`` (weights, optimisers, schedules, every RNG state, counters; the one
before it stays as ``checkpoints/last.prev.pt``) and, at the end, ``policy.pt`` and
``summary.json``. Restarting a run in the same directory resumes from the last checkpoint (from
the one before, with a note, when ``last.pt`` cannot be read): the metrics rows after it are
dropped and recomputed, so an interrupted run ends with the same rows and weights as an
uninterrupted one.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

import numpy as np
import torch
from tqdm.auto import tqdm

from ..hardware.cluster import Cluster
from ..house.errors import CheckpointError, ConfigError
from ..house.jsonutil import write_json
from ..house.progress import note
from ..house.validate import one_line
from ..ir.graph import DataflowGraph
from ..ir.placement import Placement
from ..policies.checkpoint import load_policy, make_policy, read_checkpoint, save_checkpoint
from ..policies.context import GraphContext
from ..policies.features import FeatureArgs, hint_name
from ..policies.policy_base import Episodes, PlacementPolicy, Temperature
from ..policies.policy_config import PolicyConfig
from ..policies.reinforce import (
    Baseline,
    Optimisers,
    advantages,
    extra_epochs,
    normalise,
    policy_loss,
    step_logp,
)
from ..policies.rollout import GREEDY, ActionMode, RolloutOptions, run_episodes
from ..policies.tensors import as_tensor, flush_denormal
from ..timing.sim import SEMANTICS, Simulator
from .cost_functions import CostFunction, SimulatorCost, evaluate_costs, make_executor_cost
from .metrics import MetricsLog
from .stage_verdict import VERDICT_PAIRS, greedy_placements, judge_stage, verdict_line
from .train_config import TrainConfig

METRICS: tuple[str, ...] = (
    "cost_mean",
    "cost_min",
    "cost_best",
    "baseline",
    "loss",
    "sel_entropy",
    "plc_entropy",
    "sel_teacher_prob",
    "plc_teacher_prob",
    "grad_norm",
    "grad_norm_sel",
    "grad_norm_plc",
    "lr_sel",
    "lr_plc",
    "epsilon",
    "teacher",
    "greedy_cost",
)

Callback = Callable[["Trainer", dict[str, Any]], None]
#: the resume checkpoint in ``<run>/checkpoints/`` and the one before it (kept: a corrupt
#: ``last.pt`` falls back to it)
LAST_CHECKPOINT = "last.pt"
PREV_CHECKPOINT = "last.prev.pt"


def metric_columns(stage: str) -> list[str]:
    """The CSV header of a stage's metrics."""
    return ["update", "episode", "graph"] + [f"{stage}/{m}" for m in METRICS]


def _lerp(a: float, b: float, f: float) -> float:
    return a + (b - a) * f


def temperature_at(start: float, end: float | None, frac: float) -> float:
    """A sampling temperature ``frac`` of the way through a stage: linear from ``start`` to
    ``end`` (None: constant ``start``)."""
    return start if end is None else _lerp(start, end, frac)


def lr_factor(schedule: str, final: float, update: int, updates: int, warmup: int = 0) -> float:
    """Multiplier of the initial learning rate at ``update`` (0-based) of ``updates``, ramped up
    linearly over the first ``w`` updates (``(update + 1) / (w + 1)``), ``w = warmup`` but at most
    a third of the stage's updates: a short stage still reaches its rate."""
    w = min(warmup, updates // 3)
    ramp = min(1.0, (update + 1) / (w + 1))
    f = update / max(updates - 1, 1)
    if schedule == "linear":
        return ramp * (1.0 - (1.0 - final) * f)
    if schedule == "cosine":
        return ramp * (final + (1.0 - final) * 0.5 * (1.0 + math.cos(math.pi * f)))
    return ramp


#: the old private name of :class:`~doppler_lab.policies.reinforce.Baseline`
_Baseline = Baseline


@dataclass
class TrainResult:
    """What a finished run returns.

    Attributes:
        policy: the trained policy.
        rows: the metrics rows (the whole run, resumed parts included).
        out_dir: the run directory (None for an in-memory run).
        checkpoint: ``policy.pt`` of the run (None in memory).
    """

    policy: PlacementPolicy
    rows: list[dict[str, Any]]
    out_dir: Path | None
    checkpoint: Path | None
    summary: dict[str, Any] = field(default_factory=dict)


def grads_pending(update: int, config: TrainConfig) -> bool:
    """Whether gradients of finished updates wait for the optimiser step after ``update``
    updates (a checkpoint then would lose them: checkpoints fall on step boundaries)."""
    return update % config.graphs_per_step != 0 and update != config.updates


def _run_header(
    config: TrainConfig,
    policy_config: PolicyConfig,
    graphs: Sequence[DataflowGraph],
    clusters: Sequence[Cluster],
    init: str | None,
    semantics: Sequence[str] | None = None,
) -> dict[str, Any]:
    head: dict[str, Any] = {
        "train": config.to_dict(),
        "policy": policy_config.to_dict(),
        "graphs": [g.name for g in graphs],
        "graph_nodes": [g.num_nodes for g in graphs],
        "cluster": clusters[0].name,
        "num_devices": clusters[0].num_devices,
        "init": init,
    }
    if any(c is not clusters[0] for c in clusters):  # a task per graph: its own cluster
        head["cluster"] = [c.name for c in clusters]
        head["num_devices"] = [c.num_devices for c in clusters]
    if semantics is not None:  # a semantics per graph
        head["semantics"] = list(semantics)
    return head


def _clusters_per_graph(
    graphs: Sequence[DataflowGraph],
    cluster: Cluster | Sequence[Cluster],
    semantics: Sequence[str] | None,
    cost_fns: Sequence[CostFunction] | None,
) -> list[Cluster]:
    """One cluster per graph; the per-graph arguments checked against the graphs.

    Raises:
        ConfigError: no graph, a count that does not match the graphs', an unknown semantics.
    """
    if not graphs:
        raise ConfigError("training needs at least one graph")
    if semantics is not None and len(semantics) != len(graphs):
        raise ConfigError(f"{len(semantics)} semantics for {len(graphs)} graphs")
    if cost_fns is not None and len(cost_fns) != len(graphs):
        raise ConfigError(f"{len(cost_fns)} cost functions for {len(graphs)} graphs")
    clusters = [cluster] * len(graphs) if isinstance(cluster, Cluster) else list(cluster)
    if len(clusters) != len(graphs):
        raise ConfigError(f"{len(clusters)} clusters for {len(graphs)} graphs")
    for sem in semantics or ():
        if sem not in SEMANTICS:
            raise ConfigError(f"graph semantics {sem!r}, expected one of {SEMANTICS}")
    return clusters


class Trainer:
    """One training stage over one or more graphs (see the module docstring).

    Args:
        config: the stage's configuration.
        graphs: the training graphs (updates cycle through them).
        cluster: the cluster all graphs run on, or one cluster per graph (of any device
            counts: the DOPPLER networks score each device with shared weights; the policy is
            built for the first one's count).
        policy: a policy config (fresh weights from ``config.seed``) or a policy object.
        out_dir: the run directory (None: in memory, no checkpoints).
        init: a checkpoint to start from (warm start; its policy config is used).
        cost_fns: one cost function per graph (default: the stage's: simulator or executor).
        callbacks: called after every update with ``(trainer, row)``; may raise to stop.
        progress: show a tqdm bar.
        allow_device_change: accept an ``init`` checkpoint trained on another device count.
        anchors: a starting anchor placement (``(N,)`` devices, or None) per graph for the
            ``anchor`` mode, e.g. a search's result: the policy learns to reproduce it and
            explores around it (a better placement found replaces it). Ignored on resume (the
            checkpoint holds the anchors reached).
        semantics: each graph's simulator semantics (default: the stage's ``semantics`` for
            all): the default cost functions judge under it, and a ``task``-timed policy's
            episode state uses its estimate.
        force: start the stage afresh when neither ``checkpoints/last.pt`` nor
            ``checkpoints/last.prev.pt`` can be read (instead of failing).
        verdict_pairs: Stage III (``real``) ends by measuring its final greedy placement
            against its first one in this many interleaved pairs and says whether it is
            better (:mod:`~doppler_lab.train.stage_verdict`; in ``summary["verdict"]``);
            0: not.
        hints: per graph, the heuristic whose devices a policy that reads a hint
            (``doppler12``) sees (True: the clustering's, the default everywhere; ``partition``;
            False or None: no hint; :func:`~doppler_lab.policies.features.hint_name`); a pool
            may hold each task once per hint and once without, so that the policy also places
            well without one.

    The arguments after ``out_dir`` stay flat keywords: they are the options :func:`train`
    and :func:`~doppler_lab.train.pipeline.run_pipeline` pass through by name (``**options``).
    """

    def __init__(
        self,
        config: TrainConfig,
        graphs: Sequence[DataflowGraph],
        cluster: Cluster | Sequence[Cluster],
        policy: PolicyConfig | PlacementPolicy | None = None,
        out_dir: str | Path | None = None,
        init: str | Path | None = None,
        cost_fns: Sequence[CostFunction] | None = None,
        callbacks: Sequence[Callback] = (),
        progress: bool = True,
        allow_device_change: bool = False,
        anchors: Sequence[np.ndarray | None] | None = None,
        semantics: Sequence[str] | None = None,
        force: bool = False,
        verdict_pairs: int = VERDICT_PAIRS,
        hints: Sequence[bool | str | None] | None = None,
    ):
        self.config = config
        self.graphs = list(graphs)
        self.clusters = _clusters_per_graph(self.graphs, cluster, semantics, cost_fns)
        self.cluster = self.clusters[0]
        self.semantics = list(semantics) if semantics is not None else None
        self.out_dir = Path(out_dir) if out_dir is not None else None
        self.callbacks = list(callbacks)
        self.progress = progress
        self.init = str(init) if init is not None else None
        d = self.cluster.num_devices
        found = self._resume_point(d, force) if self.out_dir is not None else None
        self._resume_doc: dict[str, Any] | None = None if found is None else found[1]
        self.policy = (
            found[0] if found is not None else self._start_policy(policy, d, allow_device_change)
        )
        self.header = _run_header(
            config, self.policy.config, self.graphs, self.clusters, self.init, self.semantics
        )
        sems = self.semantics or [config.semantics] * len(self.graphs)
        if hints is not None and len(hints) != len(self.graphs):
            raise ConfigError(f"{len(hints)} hints for {len(self.graphs)} graphs")
        hints = [True] * len(self.graphs) if hints is None else [hint_name(h) for h in hints]
        self.contexts = [
            GraphContext.for_policy(g, c, self.policy.config, sem, h)
            for g, c, sem, h in zip(self.graphs, self.clusters, sems, hints)
        ]
        seeds = np.random.SeedSequence(config.seed).spawn(1 + len(self.graphs))
        self.rng = np.random.default_rng(seeds[0])
        if cost_fns is None:
            cost_fns = [
                self._default_cost(g, c, s, sem)
                for g, c, s, sem in zip(self.graphs, self.clusters, seeds[1:], sems)
            ]
        self.cost_fns = list(cost_fns)
        self.labellers = self._make_labellers(sems)
        self.optim = self._make_optimisers()
        self._fresh_progress(verdict_pairs)
        keep_rows = None
        if self._resume_doc is not None:
            keep_rows = self._restore(self._resume_doc)
        elif anchors is not None:
            self._set_anchors(anchors)
        if self._resume_doc is None and config.stage == "real" and self.verdict_pairs > 0:
            self.start_placements = greedy_placements(self.policy, self.contexts)
        self.columns = metric_columns(config.stage)
        self.log: MetricsLog | None = None
        if self.out_dir is not None:
            self._write_header(found is not None)
            self.log = MetricsLog(self.out_dir / "metrics.csv", self.columns, keep_rows)
        self.rows: list[dict[str, Any]] = list(self.log.rows) if self.log else []

    # -- setup -----------------------------------------------------------------------------
    @property
    def optimizers(self) -> dict[str, torch.optim.Optimizer]:
        """One Adam optimiser per policy half (``sel``, ``plc``)."""
        return self.optim.optimizers

    @property
    def schedulers(self) -> dict[str, Any]:
        """Each optimiser's learning-rate schedule."""
        return self.optim.schedulers

    def _start_policy(
        self,
        policy: PolicyConfig | PlacementPolicy | None,
        num_devices: int,
        allow_device_change: bool,
    ) -> PlacementPolicy:
        """The policy of a fresh run: ``init``'s, the one given, or new weights from the seed."""
        if self.init is not None:
            kinds = [policy.kind] if isinstance(policy, PolicyConfig) else None
            return load_policy(self.init, kinds, num_devices, allow_device_change)[0]
        if isinstance(policy, PlacementPolicy):
            return policy
        pcfg = policy or PolicyConfig()
        return make_policy(pcfg, num_devices, self.config.seed, self.config.semantics)

    def _make_labellers(self, sems: Sequence[str]) -> list[Any]:
        """PLC's imitation labeller per graph (None: the Critical Path rule's labels)."""
        labels = self.config.plc_labels
        if labels == "cp-rollout":
            from ..placers.cp_rollout import RolloutLabeller

            return [
                RolloutLabeller(
                    Simulator(g, c, sem), ctx.teacher.b_level, self.config.label_fraction
                )
                for g, c, sem, ctx in zip(self.graphs, self.clusters, sems, self.contexts)
            ]
        if labels == "cluster":
            from ..placers.clustering import ClusterLabeller

            labellers = []
            for ctx in self.contexts:
                args = FeatureArgs(*ctx.features.extra)  # the layout's clusters, if it reads them
                clusters = (args.cluster_of, args.cluster_ptr, args.members)
                labellers.append(
                    ClusterLabeller(ctx.graph, ctx.cost, clusters if args.cluster_of.size else None)
                )
            return labellers
        if labels == "clustering":
            from ..placers.clustering import PlacementRuleLabeller, clustering_devices

            return [
                PlacementRuleLabeller(clustering_devices(ctx.graph, ctx.cost)[0])
                for ctx in self.contexts
            ]
        if labels == "hint":
            from ..placers.clustering import PlacementRuleLabeller, clustering_devices

            labellers = []
            for ctx in self.contexts:  # the clustering's without a hint, or one for every node
                given = ctx.hinted_devices
                if given is None or not given.size or not bool((given >= 0).all()):
                    given = clustering_devices(ctx.graph, ctx.cost)[0]
                labellers.append(PlacementRuleLabeller(given))
            return labellers
        return [None] * len(self.graphs)

    def _make_optimisers(self) -> Optimisers:
        """One Adam per policy half (SEL at ``lr_sel``), on the stage's schedule."""
        c = self.config
        lrs = {"sel": c.lr_sel or c.lr, "plc": c.lr}
        u = c.steps
        return Optimisers(
            self.policy.param_groups(),
            lrs,
            lambda i: lr_factor(c.lr_schedule, c.lr_final, i, u, c.lr_warmup),
        )

    def _fresh_progress(self, verdict_pairs: int) -> None:
        """The counters, baselines, elites and anchors of a stage at its start."""
        self.update = 0
        self.train_s = 0.0  # wall seconds spent in updates, summed over resumed sessions
        self.baselines = [Baseline() for _ in self.graphs]
        self.best = [math.inf for _ in self.graphs]
        self.elites: list[list[tuple[float, Episodes]]] = [[] for _ in self.graphs]
        self.anchors: list[tuple[float, np.ndarray] | None] = [None for _ in self.graphs]
        self.verdict_pairs = int(verdict_pairs)
        #: Stage III's greedy placements at its start (judged against its end's)
        self.start_placements: list[np.ndarray] | None = None

    def _resume_point(
        self, num_devices: int, force: bool
    ) -> tuple[PlacementPolicy, dict[str, Any]] | None:
        """The policy and checkpoint to resume from: ``last.pt``, else (unreadable) the one
        before it, ``last.prev.pt``, with a note saying so; None for a fresh run."""
        assert self.out_dir is not None
        last, prev = (self.out_dir / "checkpoints" / n for n in (LAST_CHECKPOINT, PREV_CHECKPOINT))
        bad: list[tuple[Path, str]] = []
        for path in (last, prev):
            if not path.exists():
                continue
            try:
                policy, doc = load_policy(path, num_devices=num_devices)
                if doc.get("train") is None:
                    raise CheckpointError(f"checkpoint {str(path)!r} has no training state")
            except CheckpointError as exc:
                bad.append((path, one_line(exc)))
                continue
            if bad:
                note(f"note: {bad[0][0]} cannot be read ({bad[0][1]}); resuming from {path}")
            return policy, doc
        if not bad:
            return None
        if force:
            note(f"note: no checkpoint of {self.out_dir} can be read; starting the stage again")
            return None
        why = "; ".join(f"{p.name}: {m}" for p, m in bad)
        raise CheckpointError(
            f"run folder {str(self.out_dir)!r} cannot resume: no checkpoint reads ({why}); "
            "start the run again with --force (force=True), or start from a checkpoint you "
            "trust with --init FILE"
        )

    def _set_anchors(self, anchors: Sequence[np.ndarray | None]) -> None:
        if len(anchors) != len(self.graphs):
            raise ConfigError(f"{len(anchors)} anchor placements for {len(self.graphs)} graphs")
        for gi, dev in enumerate(anchors):
            if dev is None:
                continue
            p = Placement(np.asarray(dev, dtype=np.int64), None, "anchor").validate(
                self.graphs[gi], self.clusters[gi].num_devices
            )
            cost = float(evaluate_costs(self.cost_fns[gi], [p])[0])
            self.anchors[gi] = (cost, p.device.copy())

    def _default_cost(
        self,
        graph: DataflowGraph,
        cluster: Cluster,
        seed: np.random.SeedSequence,
        semantics: str,
    ) -> CostFunction:
        c = self.config
        if c.stage == "real":
            return make_executor_cost(graph, cluster, c.repeats)
        return SimulatorCost(graph, cluster, semantics, c.noise, seed)

    def _write_header(self, resume: bool) -> None:
        assert self.out_dir is not None
        path = self.out_dir / "config.json"
        if resume and path.exists():
            from ..house.validate import read_json_file

            saved = read_json_file(path)
            if not isinstance(saved, dict):
                raise CheckpointError(f"{path}: expected the run's config object")
            for key, value in self.header.items():
                if key == "init":
                    continue
                now, was = json.loads(json.dumps(value)), saved.get(key)
                if now != was:
                    what = key
                    if isinstance(now, dict) and isinstance(was, dict):
                        diff = sorted(k for k in set(now) | set(was) if now.get(k) != was.get(k))
                        what = f"{key}: " + ", ".join(
                            f"{k} = {was.get(k)!r}, now {now.get(k)!r}" for k in diff
                        )
                    else:
                        what = f"{key} = {was!r}, now {now!r}"
                    raise ConfigError(
                        f"run directory {str(self.out_dir)!r} holds a run with another "
                        f"configuration ({what}); resume it unchanged or use a new --out"
                    )
            return
        write_json(path, self.header)

    def _train_state(self) -> dict[str, Any]:
        return {
            "update": self.update,
            "train_s": self.train_s,
            "rows": len(self.rows),
            "rng": self.rng.bit_generator.state,
            "costs": [c.get_state() if hasattr(c, "get_state") else None for c in self.cost_fns],
            "baselines": [b.to_dict() for b in self.baselines],
            "best": list(self.best),
            "elites": [[(c, e.to_state()) for c, e in el] for el in self.elites],
            "anchors": [None if a is None else (a[0], as_tensor(a[1])) for a in self.anchors],
            **self.optim.state_dict(),  # "optimizers" and "schedulers"
            "header": json.loads(json.dumps(self.header)),
            "start_placements": None
            if self.start_placements is None
            else [as_tensor(p) for p in self.start_placements],
        }

    def _restore(self, doc: dict[str, Any]) -> int:
        state = doc.get("train")
        if state is None:
            raise CheckpointError("the run's last checkpoint has no training state to resume from")
        self.update = int(state["update"])
        self.train_s = float(state.get("train_s", 0.0))  # absent in older checkpoints
        self.rng.bit_generator.state = state["rng"]
        for c, s in zip(self.cost_fns, state["costs"]):
            if s is not None and hasattr(c, "set_state"):
                c.set_state(s)
        self.baselines = [_Baseline(**b) for b in state["baselines"]]
        self.best = [float(b) for b in state["best"]]
        self.anchors = [
            None if a is None else (float(a[0]), a[1].numpy()) for a in state["anchors"]
        ]
        self.elites = [
            [(float(c), Episodes.from_state(e)) for c, e in el] for el in state["elites"]
        ]
        self.optim.load_state_dict(state)
        start = state.get("start_placements")  # absent in older checkpoints
        self.start_placements = None if start is None else [t.numpy() for t in start]
        return int(state["rows"])

    def save(
        self,
        path: str | Path,
        with_train_state: bool = True,
        keep_previous: str | Path | None = None,
    ) -> Path:
        """Write a checkpoint (with the resume state unless ``with_train_state`` is False; the
        old file moves to ``keep_previous`` when given)."""
        meta = {
            "stage": self.config.stage,
            "graphs": self.header["graphs"],
            "cluster": self.header["cluster"],
            "num_devices": self.header["num_devices"],
            "episodes": min(self.update * self.config.episodes_per_update, self.config.episodes),
            "seed": self.config.seed,
            "train_config": self.config.to_dict(),
            "init": self.init,
            "final": self.rows[-1] if self.rows else {},
        }
        return save_checkpoint(
            path,
            self.policy,
            meta,
            self._train_state() if with_train_state else None,
            keep_previous,
        )

    # -- the loop --------------------------------------------------------------------------
    def _modes(self, frac: float) -> tuple[ActionMode, ActionMode, float, float]:
        c = self.config
        eps = _lerp(c.epsilon_start, c.epsilon_end, frac)
        teach = _lerp(c.teacher_start, c.teacher_end, frac)
        greedy = c.explore != "sample"
        perturb = c.explore == "perturb"
        plc_t = temperature_at(c.plc_temperature, c.plc_temperature_end, frac)
        sel_t = temperature_at(c.sel_temperature, c.sel_temperature_end, frac)
        sel = ActionMode(greedy, eps, teach, sel_t, perturb)
        plc = ActionMode(greedy, eps, teach, plc_t, perturb)
        return sel, plc, eps, teach

    def _remember(self, gi: int, costs: np.ndarray, episodes: Episodes) -> None:
        """Keep the best ``sil_size`` distinct episodes of graph ``gi`` (self-imitation)."""
        el = self.elites[gi]
        for k in np.argsort(costs, kind="stable"):
            c = float(costs[k])
            if len(el) >= self.config.sil_size and c >= el[-1][0]:
                break
            if any(np.array_equal(e.devices[0], episodes.devices[k]) for _, e in el):
                continue
            el.append((c, episodes.select(np.array([k]))))
            el.sort(key=lambda x: x[0])
            del el[self.config.sil_size :]

    def _anchor_update(self, gi: int, costs: np.ndarray, episodes: Episodes) -> None:
        """Make the batch's best placement the graph's anchor if it beats the anchor."""
        best = int(np.argmin(costs))
        if self.anchors[gi] is None or costs[best] < self.anchors[gi][0]:  # type: ignore[index]
            self.anchors[gi] = (float(costs[best]), episodes.placements[best].device.copy())

    def _terms_and_backward(
        self,
        gi: int,
        enc: Any,
        episodes: Episodes,
        adv: np.ndarray,
        anchored: bool = False,
        temperature: Temperature = (1.0, 1.0),
        old: list[torch.Tensor] | None = None,
    ) -> tuple[float, dict[str, float]]:
        """Recompute log-probabilities (chunked for memory-heavy policies) and backpropagate.

        ``temperature``: the (SEL, PLC) temperatures the update's episodes were sampled at; the
        policy gradient, self-imitation and entropy terms are those of that distribution.
        ``old``: PPO's record of each chunk's step log-probabilities at sampling time (filled
        by the first pass, read by the next ones: the loss is then the clipped surrogate);
        None: REINFORCE.
        """
        ctx = self.contexts[gi]
        k, t = episodes.num_episodes, episodes.num_steps
        chunk = self.policy.eval_chunk or k
        total = 0.0
        stats: dict[str, float] = {}
        sums: dict[str, float] = {}
        if self.config.sil_coef > 0 and self.elites[gi] and not self.config.anchor:
            best = Episodes.concat([e for _, e in self.elites[gi]])
            terms = self.policy.log_probs(ctx, enc, best, temperature)
            ll = sum(x.sum() for x in (terms.sel_logp, terms.plc_logp) if x is not None)
            sil = -self.config.sil_coef * ll / (best.num_episodes * t)
            sil.backward(retain_graph=True)
            total += float(sil.detach())
        for lo in range(0, k, chunk):
            rows = slice(lo, min(lo + chunk, k))
            part = episodes if chunk >= k else episodes.select(rows)
            terms = self.policy.log_probs(ctx, enc, part, temperature)
            before = None
            if old is not None:  # PPO: the first pass records pi_old, at ratio 1
                if len(old) <= lo // chunk:
                    old.append(step_logp(terms).detach())
                before = old[lo // chunk]
            adv_rows = as_tensor(adv[rows]).float()
            loss = policy_loss(terms, adv_rows, self.config, anchored, before)
            loss = loss / (k * t)
            loss.backward(retain_graph=lo + chunk < k)
            total += float(loss.detach())
            with torch.no_grad():
                for name, x in (
                    ("sel_entropy", terms.sel_entropy),
                    ("plc_entropy", terms.plc_entropy),
                    ("sel_teacher_prob", terms.sel_teacher_ll),
                    ("plc_teacher_prob", terms.plc_teacher_ll),
                ):
                    if x is not None:
                        v = x.exp() if name.endswith("prob") else x
                        sums[name] = sums.get(name, 0.0) + float(v.sum())
        for name, s in sums.items():
            stats[name] = s / (k * t)
        return total, stats

    def _refit_anchor(
        self, gi: int, episodes: Episodes, temperature: Temperature = (1.0, 1.0)
    ) -> None:
        """Extra gradient steps on the anchor's labels at the batch's states."""
        ctx = self.contexts[gi]
        for _ in range(self.config.sil_epochs - 1):
            enc = self.policy.encode(ctx)
            terms = self.policy.log_probs(ctx, enc, episodes, temperature)
            if terms.plc_teacher_ll is None:
                return
            loss = -self.config.sil_coef * terms.plc_teacher_ll.mean()
            loss.backward()
            self._step(schedule=False)

    def _average_grads(self, count: int) -> None:
        """Divide the gradients summed over ``count`` updates by ``count`` (their mean)."""
        self.optim.average(count)

    def _step(self, schedule: bool = True) -> dict[str, float]:
        """One optimiser step each; returns each optimiser's gradient norm before clipping."""
        return self.optim.step(self.config.grad_clip, schedule)

    def _weights_finite(self) -> bool:
        return all(bool(torch.isfinite(p).all()) for p in self.policy.parameters())

    def _diverged(self, update: int, what: str) -> NoReturn:
        """Stop the run: nothing more is saved (the last checkpoint, from a finite policy,
        stays as it was). Names the update and the settings that scale the step."""
        c = self.config
        named = [f"lr={c.lr:g}"] + [
            f"{k}={getattr(c, k):g}"
            for k in ("lr_sel", "pg_coef", "imitation_coef", "entropy_coef", "sil_coef")
            if getattr(c, k) is not None and getattr(c, k) > 1e3
        ]
        raise ConfigError(
            f"training diverged at update {update + 1} of stage {c.stage!r}: {what} (with "
            f"{', '.join(named)}); expected smaller settings; nothing was saved after the last "
            "checkpoint"
        )

    def greedy_cost(self, graph_index: int = 0) -> float:
        """Cost of the current policy's greedy rollout on graph ``graph_index``."""
        ctx = self.contexts[graph_index]
        with torch.no_grad():
            enc = self.policy.encode(ctx)
            ep = run_episodes(self.policy, ctx, enc, 1, self.rng, GREEDY, GREEDY)
        return float(evaluate_costs(self.cost_fns[graph_index], ep.placements)[0])

    def run(self) -> TrainResult:
        """Train to the end of the stage (resuming if the run directory has a checkpoint)."""
        with flush_denormal():
            return self._run()

    def _run(self) -> TrainResult:
        c = self.config
        done = min(self.update * c.episodes_per_update, c.episodes)
        bar = tqdm(
            total=c.episodes,
            initial=done,
            desc=f"{c.stage} {self.policy.kind}",
            unit="ep",
            disable=not self.progress,
            leave=False,
        )
        try:
            while self.update < c.updates:
                t_update = time.perf_counter()
                row, costs, gi = self._one_update()
                self.rows.append(row)
                self.train_s += time.perf_counter() - t_update
                if self.log is not None:
                    self.log.append(row)
                if self.out_dir is not None and (
                    (self.update % c.checkpoint_every == 0 and not grads_pending(self.update, c))
                    or self.update == c.updates
                ):
                    ckpts = self.out_dir / "checkpoints"
                    self.save(ckpts / LAST_CHECKPOINT, keep_previous=ckpts / PREV_CHECKPOINT)
                bar.update(costs.size)
                bar.set_postfix(cost=f"{costs.mean():.4g}", best=f"{self.best[gi]:.4g}")
                for cb in self.callbacks:
                    cb(self, row)
        finally:
            bar.close()
        return self._finish()

    def _one_update(self) -> tuple[dict[str, Any], np.ndarray, int]:
        """Roll out, judge and learn from one batch of episodes on the next graph; returns the
        metrics row, the episodes' costs and the graph's index."""
        c = self.config
        k_max = c.episodes_per_update
        u = self.update
        gi = u % len(self.graphs)
        ctx = self.contexts[gi]
        k = min(k_max, c.episodes - u * k_max)
        sel_mode, plc_mode, eps, teach = self._modes(u * k_max / c.episodes)
        lrs = {f"lr_{n}": lr for n, lr in self.optim.rates().items()}
        anchor = self.anchors[gi] if c.anchor else None
        if anchor is not None:  # PLC follows the anchor, SEL acts greedily
            plc_mode = ActionMode(False, 0.0, 1.0 - eps, plc_mode.temperature)
            sel_mode = GREEDY
        enc = self.policy.encode(ctx)
        options = RolloutOptions(
            record_teacher=c.imitation_coef > 0 or anchor is not None,
            anchor=None if anchor is None else anchor[1],
            plc_labeller=self.labellers[gi],
        )
        episodes = run_episodes(self.policy, ctx, enc, k, self.rng, sel_mode, plc_mode, options)
        costs = evaluate_costs(self.cost_fns[gi], episodes.placements)
        adv, base = advantages(
            costs,
            self.baselines[gi],
            c.baseline,
            c.baseline_decay,
            c.advantage,
            episodes.partial if c.step_baseline else None,
            c.elite_quantile,
        )
        if c.estimator == "ppo":
            adv = normalise(adv)
        if c.sil_coef > 0 and not c.anchor:
            self._remember(gi, costs, episodes)
        temps = (sel_mode.temperature, plc_mode.temperature) if c.tempered_loss else (1.0, 1.0)
        old: list[torch.Tensor] | None = [] if c.estimator == "ppo" else None
        loss, stats = self._terms_and_backward(
            gi, enc, episodes, adv, anchor is not None, temps, old
        )
        if not math.isfinite(loss):
            self._diverged(u, f"the loss is {loss}")
        if c.anchor:
            self._anchor_update(gi, costs, episodes)
        norms: dict[str, float] = {}
        if (u + 1) % c.graphs_per_step == 0 or u + 1 == c.updates:
            self._average_grads(u % c.graphs_per_step + 1)
            norms = self._step()
            self._more_epochs(gi, episodes, adv, temps, old)
            if not self._weights_finite():
                self._diverged(u, "the policy's weights are no longer finite")
        if anchor is not None:
            self._refit_anchor(gi, episodes, temps)
        self.best[gi] = min(self.best[gi], float(costs.min()))
        self.update += 1
        greedy = None
        if c.eval_every and (self.update % c.eval_every == 0 or self.update == c.updates):
            greedy = self.greedy_cost(gi)
        metrics = {
            "cost_mean": float(costs.mean()),
            "cost_min": float(costs.min()),
            "cost_best": self.best[gi],
            "baseline": base,
            "loss": loss,
            # the total and per optimiser: one exploding parameter freezes the rest
            # of its half under the clip; the per-half norm shows which half
            "grad_norm": math.hypot(*norms.values()) if norms else None,
            "grad_norm_sel": norms.get("sel"),
            "grad_norm_plc": norms.get("plc"),
            "epsilon": eps,
            "teacher": teach,
            "greedy_cost": greedy,
            **stats,
            **lrs,
        }
        row = {
            "update": self.update,
            "episode": u * k_max + k,
            "graph": self.graphs[gi].name,
            **{f"{c.stage}/{m}": v for m, v in metrics.items()},
        }
        return row, costs, gi

    def _more_epochs(
        self,
        gi: int,
        episodes: Episodes,
        adv: np.ndarray,
        temperature: Temperature,
        old: list[torch.Tensor] | None,
    ) -> None:
        """PPO's further passes over the update's episodes, a clipped step each (the schedule
        stays: it counts updates); nothing for REINFORCE."""
        u = self.update
        for _ in range(extra_epochs(self.config.estimator, self.config.ppo_epochs)):
            enc = self.policy.encode(self.contexts[gi])
            loss, _ = self._terms_and_backward(gi, enc, episodes, adv, False, temperature, old)
            if not math.isfinite(loss):
                self._diverged(u, f"the loss is {loss}")
            self._step(schedule=False)

    def _finish(self) -> TrainResult:
        ckpt = None
        summary = {
            "stage": self.config.stage,
            "policy": self.policy.kind,
            "graphs": self.header["graphs"],
            "episodes": self.config.episodes,
            "best_cost": dict(zip(self.header["graphs"], self.best)),
            "train_s": self.train_s,
            "final": self.rows[-1] if self.rows else {},
        }
        if self.start_placements is not None and self.verdict_pairs > 0:
            final = greedy_placements(self.policy, self.contexts)
            names = self.header["graphs"]
            rows = judge_stage(
                self.cost_fns, names, self.start_placements, final, self.verdict_pairs
            )
            summary["verdict"] = rows
            for row in rows:
                note(verdict_line(row))
        if self.out_dir is not None:
            ckpt = self.save(self.out_dir / "policy.pt", with_train_state=False)
            summary["checkpoint"] = str(ckpt)
            write_json(self.out_dir / "summary.json", summary, default=str)
        return TrainResult(self.policy, self.rows, self.out_dir, ckpt, summary)


def train(
    config: TrainConfig,
    graphs: Sequence[DataflowGraph],
    cluster: Cluster,
    policy: PolicyConfig | PlacementPolicy | None = None,
    out_dir: str | Path | None = None,
    **options: Any,
) -> TrainResult:
    """Run one training stage (``Trainer(...).run()``; ``options`` are the other
    :class:`Trainer` arguments); resumes if ``out_dir`` has a checkpoint.

    Example:
        >>> from doppler_lab.train import preset, train  # doctest: +SKIP
        >>> result = train(preset("imitation", episodes=64), [graph], cluster)  # doctest: +SKIP
    """
    return Trainer(config, graphs, cluster, policy, out_dir, **options).run()


def is_finished(out_dir: str | Path) -> bool:
    """Whether the run in ``out_dir`` completed (its ``policy.pt`` exists and reads)."""
    path = Path(out_dir) / "policy.pt"
    if not path.exists():
        return False
    try:
        read_checkpoint(path)
    except CheckpointError:
        return False
    return True
