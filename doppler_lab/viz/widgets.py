"""The placement explorer: two placers side by side, and an episode stepped decision by decision.

Two layers. The pure layer builds figures and tables and never imports ipywidgets, so notebooks
run it headless under papermill and tests call it directly:

- :func:`compare` places one scenario (workload, cluster, semantics, noise) with two placers and
  returns a :class:`Comparison` (metrics table, stacked Gantt charts, traces);
- an *episode stepper* (:class:`EpisodeStepper`) replays the SEL/PLC decisions of one episode:
  ``reset()``, then ``step() -> StepInfo`` until ``done``; :class:`CriticalPathStepper` is the
  Critical Path teacher (SEL scores = b-levels, PLC = earliest start times),
  :class:`PolicyStepper` a learned policy's greedy episode (its SEL scores and PLC logits, through
  the :class:`~doppler_lab.policies.base.PlacementPolicy` methods), and :func:`make_stepper`
  picks one for a placer name; :func:`step_figure` draws one step.

The widget layer (:class:`ExplorerWidget`, :class:`EpisodePanel`) imports ipywidgets when it is
built and only wires controls to those functions.

Any other policy plugs into the episode panel by implementing :class:`EpisodeStepper`: per step
it exposes the candidate set, a SEL score and probability per candidate, the chosen node, a PLC
score and probability per device, the chosen device and the partial placement (:class:`StepInfo`);
a learned placer's module may provide ``make_stepper(choice, graph, cluster, seed)`` to be used
instead of :class:`PolicyStepper`.

Example:
    >>> ex = compare(Scenario("chainmm", scale="tiny"), PlacerChoice("round-robin"), PlacerChoice("cp"))
    >>> list(ex.metrics.index)
    ['round-robin', 'cp']
    >>> stepper = CriticalPathStepper(ex.graph, ex.cluster, seed=0)
    >>> steps = run_episode(stepper)
    >>> bool((stepper.placement().device == ex.placements["cp"].device).all())
    True
"""

from __future__ import annotations

import html
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, NamedTuple, Protocol, runtime_checkable

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from ..errors import ConfigError, PlacementError
from ..graph import DataflowGraph
from ..hardware import PRESETS, Cluster, CostModel, make_cluster
from ..placement import Placement
from ..trace import Trace
from ._style import CRITICAL_COLOR, series_color

PlcView = Literal["softmax", "ties"]
PLC_VIEWS: tuple[str, ...] = ("softmax", "ties")
PAPER_PREFIX = "paper:"
SCALE_CHOICES: tuple[float | str, ...] = ("tiny", 0.05, 0.1, 0.25, 0.5, 1.0)


# -- scenario and placers ------------------------------------------------------------------------
@dataclass(frozen=True)
class Scenario:
    """What to place and how to run it.

    Attributes:
        workload: a generated workload spec (``llama_block`` or ``llama_block:heads=8``) or a
            paper graph as ``paper:<name>`` (e.g. ``paper:ffnn_192nodes``).
        scale: tensor-size scale of a generated workload (a number or ``"tiny"``).
        cluster: hardware preset (``p100x4``, ``v100x8``, ``h100x8``, ``cpu``, ``uniform``).
        semantics: simulator semantics, ``paper``, ``wc`` or ``bsp``.
        noise: lognormal sigma of the durations (0: deterministic).
        noise_seeds: noise draws per placement for the mean makespan (same seeds for both).
        seed: seeds the placers' ties and the first noise draw.
        paper_graphs: folder of the paper's graphs (default: see
            :func:`~doppler_lab.paths.paper_graphs_dir`).
    """

    workload: str = "llama_block"
    scale: float | str = 1.0
    cluster: str = "p100x4"
    semantics: str = "wc"
    noise: float = 0.0
    noise_seeds: int = 1
    seed: int = 0
    paper_graphs: str | None = None

    def __post_init__(self) -> None:
        from ..sim import SEMANTICS

        if self.semantics not in SEMANTICS:
            raise ConfigError(f"scenario semantics {self.semantics!r}; expected one of {SEMANTICS}")
        if not (math.isfinite(self.noise) and self.noise >= 0):
            raise ConfigError(f"scenario noise {self.noise!r}; expected a finite sigma >= 0")
        if self.noise_seeds < 1:
            raise ConfigError(f"scenario noise_seeds {self.noise_seeds!r}; expected >= 1")

    def build(self) -> tuple[DataflowGraph, Cluster]:
        """The graph and the cluster of this scenario."""
        graph = build_graph(self.workload, self.scale, self.paper_graphs)
        return graph, make_cluster(self.cluster)


def build_graph(
    workload: str, scale: float | str = 1.0, paper_graphs: str | None = None
) -> DataflowGraph:
    """A generated workload (spec plus ``scale``) or a paper graph (``paper:<name>``)."""
    if workload.startswith(PAPER_PREFIX):
        from ..io import read_paper_graph
        from ..paths import paper_graph_path

        return read_paper_graph(paper_graph_path(workload[len(PAPER_PREFIX) :], paper_graphs))
    from ..workloads import build, parse_spec

    name, params = parse_spec(workload)
    if scale != 1.0:
        params.setdefault("scale", scale)
    return build(name, **params)


def workload_choices(paper_graphs: str | None = None) -> list[str]:
    """Generated workloads, then the paper's graphs found on disk (as ``paper:<name>``)."""
    from ..analysis import GENERATED_WORKLOADS, PAPER_GRAPH_NAMES
    from ..paths import paper_graphs_dir

    out = list(GENERATED_WORKLOADS)
    folder = paper_graphs_dir(paper_graphs)
    if folder is not None:
        out += [PAPER_PREFIX + n for n in PAPER_GRAPH_NAMES if (folder / f"{n}.txt").exists()]
    return out


def checkpoint_choices(placer: str, root: str | Path | None = None) -> list[str]:
    """Checkpoints offered for a learned ``placer``.

    With ``root``: the ``.pt`` files (and checkpoint folders) in ``root/<placer>/`` and the
    ``.pt`` files in ``root``, as paths. Without: the shipped checkpoints (``data/checkpoints``,
    see :func:`doppler_lab.policies.pretrained.list_checkpoints`), by name, whose recorded policy
    kind suits the placer; empty when there are none or the policies are not installed.
    """
    if root is not None:
        base = Path(root)
        own = base / placer
        found = (
            [p for p in own.iterdir() if p.suffix == ".pt" or p.is_dir()] if own.is_dir() else []
        )
        found += base.glob("*.pt") if base.is_dir() else []
        return sorted(str(p) for p in found)
    try:
        from ..policies.pretrained import list_checkpoints
    except ImportError:
        return []
    kinds = _placer_kinds(placer)
    return sorted(
        name
        for name, record in list_checkpoints().items()
        if not kinds or record.get("kind") in (None, *kinds)
    )


def _placer_kinds(placer: str) -> tuple[str, ...]:
    """The policy kinds a learned placer loads (its class's ``kinds``; empty when unknown)."""
    import importlib

    from ..placers import placer_specs

    spec = placer_specs().get(placer)
    if spec is None:
        return ()
    module, _, attr = spec.target.partition(":")
    try:
        return tuple(getattr(getattr(importlib.import_module(module), attr), "kinds", ()))
    except (ImportError, AttributeError):
        return ()


@dataclass(frozen=True)
class PlacerChoice:
    """A placer from the registry with its options (a policy variant is a learned placer with a
    checkpoint, or a placer with different options).

    Attributes:
        name: registry name (see :func:`~doppler_lab.placers.available_placers`).
        checkpoint: checkpoint path, for learned placers.
        options: further placer options (``{"timing": "paper"}``).
    """

    name: str
    checkpoint: str | None = None
    options: Mapping[str, Any] = field(default_factory=dict)

    @property
    def label(self) -> str:
        """A short label: the name, with the checkpoint's stem and the options."""
        extra = [Path(self.checkpoint).stem] if self.checkpoint else []
        extra += [f"{k}={v}" for k, v in self.options.items()]
        return f"{self.name} [{', '.join(extra)}]" if extra else self.name

    def placer_options(self) -> dict[str, Any]:
        """The options for :func:`~doppler_lab.placers.place` (checkpoint included)."""
        from ..placers import placer_spec

        spec = placer_spec(self.name)
        opts = dict(self.options)
        if self.checkpoint:
            opts["checkpoint"] = self.checkpoint
        if spec.needs_checkpoint and not opts.get("checkpoint"):
            shipped = checkpoint_choices(self.name)
            hint = (
                f"shipped: {', '.join(shipped)}" if shipped else "none shipped in data/checkpoints"
            )
            raise ConfigError(f"placer {self.name!r} needs a checkpoint ({hint})")
        return opts

    def place(self, graph: DataflowGraph, cluster: Cluster, seed: int) -> Placement:
        """Place ``graph`` on ``cluster``."""
        from ..placers import place

        return place(self.name, graph, cluster, seed=seed, **self.placer_options())


# -- comparison ----------------------------------------------------------------------------------
@dataclass(frozen=True, eq=False)
class Comparison:
    """Two placements of one scenario, simulated with the same settings and noise seeds.

    Attributes:
        scenario: the scenario.
        graph, cluster: what was placed where.
        placements, traces: by label (the first placer first); traces use the scenario's seed.
        metrics: one row per label: ``makespan`` (mean over the noise seeds), ``makespan_std``,
            ``ratio_lb``, ``transfers``, ``utilisation`` (mean busy fraction of the devices),
            ``devices_used``.
        lower_bound: the makespan lower bound.
        figure: stacked Gantt charts on one time axis.
    """

    scenario: Scenario
    graph: DataflowGraph
    cluster: Cluster
    placements: dict[str, Placement]
    traces: dict[str, Trace]
    metrics: pd.DataFrame
    lower_bound: float
    figure: go.Figure

    @property
    def improvement(self) -> float:
        """(first - second) / first of the mean makespans: > 0 when the second is faster."""
        m = self.metrics["makespan"].to_numpy()
        return float((m[0] - m[1]) / m[0]) if m[0] > 0 else 0.0


def _labels(choices: Sequence[PlacerChoice]) -> list[str]:
    labels = [c.label for c in choices]
    if len(set(labels)) < len(labels):
        labels = [f"{chr(65 + i)}: {lab}" for i, lab in enumerate(labels)]
    return labels


def placement_metrics(
    trace: Trace, makespans: np.ndarray, lower_bound: float, graph: DataflowGraph
) -> dict[str, float]:
    """One row of :attr:`Comparison.metrics` from a trace and the makespans over noise seeds."""
    used = np.unique(trace.device[graph.compute_nodes]).size
    return {
        "makespan": float(np.mean(makespans)),
        "makespan_std": float(np.std(makespans)),
        "ratio_lb": float(np.mean(makespans) / lower_bound) if lower_bound > 0 else math.nan,
        "transfers": trace.num_transfers,
        "utilisation": float(trace.utilisation().mean()),
        "devices_used": int(used),
    }


def time_unit_of(graph: DataflowGraph) -> str | None:
    """``"s"`` for graphs costed by the cost model, None for explicit (paper) units."""
    return None if graph.compute_cost is not None else "s"


def compare(
    scenario: Scenario,
    first: PlacerChoice | str,
    second: PlacerChoice | str,
    graph: DataflowGraph | None = None,
    cluster: Cluster | None = None,
) -> Comparison:
    """Place ``scenario`` with two placers and simulate both on the same noise seeds.

    Args:
        scenario: the workload, cluster, semantics and noise.
        first, second: the placers (a name or a :class:`PlacerChoice`).
        graph, cluster: prebuilt graph and cluster (default: built from the scenario).

    Returns:
        The :class:`Comparison`; ``figure`` holds the two Gantt charts.
    """
    from ..sim import Simulator
    from .gantt import compare_gantt

    choices = [c if isinstance(c, PlacerChoice) else PlacerChoice(c) for c in (first, second)]
    if graph is None or cluster is None:
        graph, cluster = scenario.build()
    sim = Simulator(graph, cluster, scenario.semantics, scenario.noise)  # type: ignore[arg-type]
    lb = sim.lower_bound()
    seeds = range(scenario.seed, scenario.seed + scenario.noise_seeds)
    placements, traces, rows = {}, {}, {}
    for label, choice in zip(_labels(choices), choices):
        pl = choice.place(graph, cluster, scenario.seed)
        tr = sim.run(pl, seed=scenario.seed)
        makespans = np.array([sim.makespan(pl, seed=s) for s in seeds])
        placements[label], traces[label] = pl, tr
        rows[label] = placement_metrics(tr, makespans, lb, graph)
    metrics = pd.DataFrame.from_dict(rows, orient="index")
    metrics.index.name = "placer"
    noise = f", noise {scenario.noise:g}" if scenario.noise else ""
    title = f"{graph.name} on {cluster.name} ({scenario.semantics}{noise})"
    fig = compare_gantt(traces, graph, title=title, time_unit=time_unit_of(graph))
    return Comparison(scenario, graph, cluster, placements, traces, metrics, lb, fig)


# -- episode stepping ----------------------------------------------------------------------------
class StepInfo(NamedTuple):
    """One decision of an episode (what the episode panel shows).

    Attributes:
        step: 0-based step index.
        candidates: ``(K,)`` candidate node ids (unassigned nodes whose predecessors are placed).
        sel_scores: ``(K,)`` SEL's score of each candidate (higher = preferred).
        sel_probs: ``(K,)`` SEL's probability of each candidate (sums to 1).
        chosen_node: the node SEL picked (one of ``candidates``).
        plc_scores: ``(D,)`` PLC's score of each device for the chosen node.
        plc_probs: ``(D,)`` PLC's probability of each device (sums to 1).
        chosen_device: the device PLC picked.
        device: ``(N,)`` the partial placement after this step (-1: not placed yet; inputs -1).
    """

    step: int
    candidates: np.ndarray
    sel_scores: np.ndarray
    sel_probs: np.ndarray
    chosen_node: int
    plc_scores: np.ndarray
    plc_probs: np.ndarray
    chosen_device: int
    device: np.ndarray


@runtime_checkable
class EpisodeStepper(Protocol):
    """An episode of a placement policy, one SEL + PLC decision per :meth:`step`.

    Attributes:
        name: label of the policy.
        graph: the graph being placed.
        num_devices: devices of the cluster.
        sel_label, plc_label: what the scores mean (axis titles).
    """

    name: str
    graph: DataflowGraph
    num_devices: int
    sel_label: str
    plc_label: str

    @property
    def num_steps(self) -> int:
        """Decisions in a full episode (the compute nodes)."""
        ...

    @property
    def done(self) -> bool:
        """Every compute node is placed."""
        ...

    def reset(self) -> None:
        """Start the episode again (same seed: same decisions)."""
        ...

    def step(self) -> StepInfo:
        """Take the next decision (:class:`PlacementError` when done)."""
        ...

    def placement(self) -> Placement:
        """The finished episode's placement."""
        ...


def _softmax(x: np.ndarray) -> np.ndarray:
    z = np.exp(x - x.max())
    return z / z.sum()


def _uniform_on(n: int, idx: np.ndarray) -> np.ndarray:
    p = np.zeros(n)
    p[idx] = 1.0 / idx.size
    return p


class _ScheduleStepper:
    """What the steppers share: an episode over a
    :class:`~doppler_lab.schedule.ListScheduleState` and the Critical Path rule's decisions
    (ties drawn from the episode's generator in the teacher's order: node, then device)."""

    name: str
    graph: DataflowGraph
    num_devices: int
    _state: Any
    _teacher: Any
    _rng: np.random.Generator

    @property
    def num_steps(self) -> int:
        return int(self.graph.compute_nodes.size)

    @property
    def done(self) -> bool:
        return self._state.done

    def _candidates(self) -> np.ndarray:
        if self._state.done:
            raise PlacementError(f"episode of {self.name!r} is done ({self.num_steps} steps)")
        return self._state.candidates()

    def _cp_node(self, cand: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
        """SEL by the CP rule: (b-levels, uniform over the max ties, the node drawn)."""
        ties = self._teacher.node_choices(cand)
        probs = _uniform_on(cand.size, np.searchsorted(cand, ties))
        return self._teacher.b_level[cand], probs, int(self._rng.choice(ties))

    def _cp_device(self, est: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
        """PLC by the CP rule: (-EST, uniform over the min ties, the device drawn)."""
        ties = self._teacher.device_choices(est)
        return -est, _uniform_on(self.num_devices, ties), int(self._rng.choice(ties))

    def _placement(self, placer: str) -> Placement:
        return self._state.placement(placer).validate(self.graph, self.num_devices)


class CriticalPathStepper(_ScheduleStepper):
    """The Critical Path teacher as an :class:`EpisodeStepper` (makes the same decisions as
    ``place("cp", graph, cluster, seed=seed, timing=timing)``).

    SEL scores are the candidates' b-levels; SEL's probabilities are the teacher's own policy,
    uniform over the max-b-level ties. PLC scores are ``-EST`` (earliest start of the node on
    each device, raw units); PLC's probabilities are ``softmax(-(EST - min EST) / c)`` with ``c``
    the node's mean compute time (``plc_view="softmax"``: a device that can start one op later
    gets e^-1 of the weight), or the teacher's own policy, uniform over the min-EST ties
    (``plc_view="ties"``). Either way the chosen device has the largest probability.

    Args:
        graph: the graph.
        cluster: the cluster.
        seed: seeds the random tie-breaking (as in :func:`~doppler_lab.placers.place`).
        timing: the schedule state's timing model, ``est`` or ``paper``.
        plc_view: ``softmax`` or ``ties``.
    """

    sel_label = "b-level"
    plc_label = "-earliest start"

    def __init__(
        self,
        graph: DataflowGraph,
        cluster: Cluster,
        seed: int = 0,
        timing: str = "est",
        plc_view: PlcView = "softmax",
    ):
        from ..placers import CriticalPathTeacher
        from ..schedule import ListScheduleState

        if plc_view not in PLC_VIEWS:
            raise ConfigError(f"plc_view {plc_view!r}; expected one of {PLC_VIEWS}")
        self.name = "cp" if timing == "est" else f"cp [timing={timing}]"
        self.graph = graph
        self.num_devices = cluster.num_devices
        self.seed = seed
        self.plc_view = plc_view
        cost = CostModel(graph, cluster)
        self._mean_compute = cost.mean_compute
        self._teacher = CriticalPathTeacher(graph, cost)
        self._state = ListScheduleState(graph, cost, timing)  # type: ignore[arg-type]
        self.reset()

    def reset(self) -> None:
        self._state.reset()
        self._rng = np.random.default_rng(self.seed)

    def step(self) -> StepInfo:
        cand = self._candidates()
        sel_scores, sel_probs, v = self._cp_node(cand)
        est = self._state.est(v)
        plc_scores, plc_probs, d = self._cp_device(est)
        c = float(self._mean_compute[v])
        if self.plc_view == "softmax" and c > 0:
            plc_probs = _softmax(-(est - est.min()) / c)
        t = self._state.num_assigned
        self._state.assign(v, d, est)
        device = self._state.device.copy()
        return StepInfo(t, cand, sel_scores, sel_probs, v, plc_scores, plc_probs, d, device)

    def placement(self) -> Placement:
        return self._placement(self.name)


class PolicyStepper(_ScheduleStepper):
    """A learned policy's greedy episode as an :class:`EpisodeStepper`: the same decisions as
    its greedy rollout (:func:`doppler_lab.policies.rollout.run_episodes` with ``GREEDY``).

    SEL: learned scores (the policy's static per-node scores, softmax over the candidates), the
    Critical Path rule (``plc-only`` ablation: b-levels, uniform over ties), or the topological
    order (Placeto, GDP: one-hot). PLC: the policy's logits over the devices and their softmax,
    or the Critical Path rule (``sel-only`` ablation: ``-EST``, uniform over ties). A learned
    placer's placement is the best of this greedy episode and K sampled ones, so it can differ.

    Args:
        policy: a :class:`~doppler_lab.policies.base.PlacementPolicy`.
        graph: the graph.
        cluster: the cluster (its device count must be the policy's).
        seed: seeds the Critical Path rule's ties (ablations).
        name: label (default: the policy's kind).
    """

    def __init__(
        self,
        policy: Any,
        graph: DataflowGraph,
        cluster: Cluster,
        seed: int = 0,
        name: str | None = None,
    ):
        from ..policies.context import GraphContext

        self.policy = policy
        self.graph = graph
        self.num_devices = cluster.num_devices
        self.seed = seed
        self.name = name or policy.kind
        cfg = policy.config
        self.ctx = GraphContext(graph, cluster, cfg.layout, cfg.timing)
        self._teacher = self.ctx.teacher
        self.sel_label = {"learned": "SEL score", "topo": "-topological position"}.get(
            policy.sel_mode, "b-level (CP rule)"
        )
        self.plc_label = (
            "PLC logit" if policy.plc_mode == "learned" else "-earliest start (CP rule)"
        )
        with self._no_grad():
            self._enc = policy.encode(self.ctx)
            self._sel = policy.sel_scores(self._enc) if policy.sel_mode == "learned" else None
        topo = np.asarray(self.ctx.topo_global)
        self._topo_pos = np.empty(graph.num_nodes)
        self._topo_pos[topo] = np.arange(topo.size)
        self.reset()

    def _no_grad(self) -> Any:
        """``torch.no_grad`` with denormals flushed, as in the policy's own rollouts."""
        import contextlib

        import torch

        stack = contextlib.ExitStack()
        stack.enter_context(torch.no_grad())
        try:
            from ..policies.tensors import flush_denormal
        except ImportError:
            return stack
        stack.enter_context(flush_denormal())
        return stack

    def reset(self) -> None:
        self._state = self.ctx.new_state()
        self._rng = np.random.default_rng(self.seed)
        learned_plc = self.policy.plc_mode == "learned"
        with self._no_grad():
            self._pstate = self.policy.plc_begin(self.ctx, self._enc, 1) if learned_plc else None

    def step(self) -> StepInfo:
        with self._no_grad():  # the PLC state must not record autograd history
            return self._step()

    def _step(self) -> StepInfo:
        state, local = self._state, self.ctx.features.local
        cand = self._candidates()
        t = state.num_assigned
        if self.policy.sel_mode == "topo":
            v = int(self.ctx.topo_global[t])
            sel_scores, sel_probs = -self._topo_pos[cand], (cand == v).astype(float)
        elif self._sel is not None:
            sel_scores = np.asarray(self._sel[local[cand]], dtype=np.float64)
            sel_probs = _softmax(sel_scores)
            v = int(cand[int(np.argmax(sel_scores))])
        else:
            sel_scores, sel_probs, v = self._cp_node(cand)
        est = state.est(v)
        if self._pstate is None:
            plc_scores, plc_probs, d = self._cp_device(est)
        else:
            feats = self.ctx.normalize(self.ctx.raw_device_features(state, v, est)[None])
            logits = self.policy.plc_logits(self.ctx, self._enc, self._pstate, local[[v]], feats)
            plc_scores = np.asarray(logits, dtype=np.float64)[0]
            plc_probs = _softmax(plc_scores)
            d = int(np.argmax(plc_scores))
        state.assign(v, d, est)
        if self._pstate is not None:
            self.policy.plc_observe(self._pstate, local[[v]], np.array([d]))
        device = state.device.copy()
        return StepInfo(t, cand, sel_scores, sel_probs, v, plc_scores, plc_probs, d, device)

    def placement(self) -> Placement:
        return self._placement(self.policy.kind)


def run_episode(stepper: EpisodeStepper, max_steps: int | None = None) -> list[StepInfo]:
    """Reset ``stepper`` and step it to the end (or ``max_steps`` decisions)."""
    stepper.reset()
    steps: list[StepInfo] = []
    while not stepper.done and (max_steps is None or len(steps) < max_steps):
        steps.append(stepper.step())
    return steps


StepperFactory = Callable[[DataflowGraph, Cluster, int], EpisodeStepper]


def make_stepper(
    choice: PlacerChoice | str, graph: DataflowGraph, cluster: Cluster, seed: int = 0
) -> EpisodeStepper:
    """An episode stepper for a placer: ``cp`` (:class:`CriticalPathStepper`, its ``timing``
    option honoured), or a learned placer (its module's ``make_stepper(choice, graph, cluster,
    seed)`` when it has one, else a :class:`PolicyStepper` over the policy the placer loads from
    its checkpoint).

    Raises:
        ConfigError: the placer cannot be stepped (it is not a SEL + PLC episode), or a learned
            placer has no checkpoint.
    """
    choice = choice if isinstance(choice, PlacerChoice) else PlacerChoice(choice)
    if choice.name == "cp":
        extra = sorted(set(choice.options) - {"timing"})
        if extra:
            raise ConfigError(f"cp stepper has no option {extra[0]!r}; it takes timing")
        return CriticalPathStepper(graph, cluster, seed, choice.options.get("timing", "est"))
    if not _is_learned(choice.name):
        raise ConfigError(
            f"placer {choice.name!r} cannot be stepped; steppable: {', '.join(steppable_placers())}"
        )
    import importlib

    from ..placers import get_placer, placer_spec

    module = importlib.import_module(placer_spec(choice.name).target.partition(":")[0])
    factory = getattr(module, "make_stepper", None)
    if factory is not None:
        return factory(choice, graph, cluster, seed)
    placer = get_placer(choice.name, **choice.placer_options())
    policy = placer.policy(cluster.num_devices)  # type: ignore[attr-defined]
    return PolicyStepper(policy, graph, cluster, seed, name=choice.label)


def _is_learned(name: str) -> bool:
    from ..placers import placer_specs

    spec = placer_specs().get(name)
    return spec is not None and spec.kind == "learned"


def steppable_placers() -> list[str]:
    """Placers whose episodes the explorer can step through: ``cp`` and the learned placers."""
    from ..placers import placer_specs

    return ["cp"] + [n for n, s in placer_specs().items() if s.kind == "learned"]


def step_table(steps: Sequence[StepInfo], graph: DataflowGraph) -> pd.DataFrame:
    """One row per decision: the chosen node, its score rank, the device and its probability."""
    rows = []
    for s in steps:
        k = int(np.flatnonzero(s.candidates == s.chosen_node)[0])
        rows.append(
            {
                "step": s.step,
                "candidates": int(s.candidates.size),
                "node": s.chosen_node,
                "name": graph.names[s.chosen_node],
                "sel_score": float(s.sel_scores[k]),
                "sel_prob": float(s.sel_probs[k]),
                "device": s.chosen_device,
                "plc_prob": float(s.plc_probs[s.chosen_device]),
            }
        )
    return pd.DataFrame(rows).set_index("step") if rows else pd.DataFrame()


def step_figure(
    info: StepInfo,
    graph: DataflowGraph,
    sel_label: str = "SEL score",
    plc_label: str = "PLC score",
    num_steps: int | None = None,
    max_candidates: int = 24,
) -> go.Figure:
    """One decision: SEL's scores over the candidates and PLC's probabilities over the devices
    (the chosen node and device in red), and the nodes placed so far per device.

    Args:
        info: the step.
        graph: the graph (node names).
        sel_label, plc_label: what the scores mean.
        num_steps: steps of the episode (for the title).
        max_candidates: most candidates drawn (the best-scored ones, the chosen one always).
    """
    order = np.argsort(-info.sel_scores, kind="stable")[:max_candidates]
    k = int(np.flatnonzero(info.candidates == info.chosen_node)[0])
    if k not in order:
        order = np.append(order[:-1], k)
    names = [graph.names[int(v)] for v in info.candidates[order]]
    sel_colors = [CRITICAL_COLOR if i == k else series_color(0) for i in order]
    devs = [f"device {d}" for d in range(info.plc_probs.size)]
    plc_colors = [
        CRITICAL_COLOR if d == info.chosen_device else series_color(0)
        for d in range(info.plc_probs.size)
    ]
    placed = np.bincount(info.device[info.device >= 0], minlength=info.plc_probs.size)
    fig = make_subplots(
        rows=1,
        cols=3,
        column_widths=[0.5, 0.25, 0.25],
        horizontal_spacing=0.08,
        subplot_titles=(
            f"SEL: {sel_label} of {info.candidates.size} candidates",
            "PLC: probability per device",
            "placed so far",
        ),
    )
    fig.add_trace(
        go.Bar(
            y=names,
            x=info.sel_scores[order],
            orientation="h",
            marker_color=sel_colors,
            customdata=np.stack([info.sel_probs[order], info.candidates[order]], axis=1),
            hovertemplate="%{y} (node %{customdata[1]})<br>score %{x:.4g}"
            "<br>p %{customdata[0]:.3f}<extra></extra>",
            name="SEL",
        ),
        row=1,
        col=1,
    )
    fig.add_trace(
        go.Bar(
            x=devs,
            y=info.plc_probs,
            marker_color=plc_colors,
            customdata=info.plc_scores,
            hovertemplate=f"%{{x}}<br>p %{{y:.3f}}<br>{html.escape(plc_label)} %{{customdata:.4g}}"
            "<extra></extra>",
            name="PLC",
        ),
        row=1,
        col=2,
    )
    fig.add_trace(
        go.Bar(x=devs, y=placed, marker_color=[series_color(d) for d in range(placed.size)]),
        row=1,
        col=3,
    )
    total = f"/{num_steps}" if num_steps else ""
    fig.update_layout(
        title=f"step {info.step + 1}{total}: SEL picks {graph.names[info.chosen_node]!r}, "
        f"PLC puts it on device {info.chosen_device}",
        template="plotly_white",
        showlegend=False,
        height=max(320, 22 * len(order) + 140),
        margin=dict(l=10, r=10, t=70, b=40),
    )
    fig.update_yaxes(autorange="reversed", row=1, col=1)
    fig.update_yaxes(range=[0, 1], row=1, col=2)
    return fig


# -- widgets ---------------------------------------------------------------------------------------
def _figure_output(out: Any, fig: go.Figure) -> None:
    """Show ``fig`` in an ipywidgets ``Output`` (works with or without a running kernel; JupyterLab
    draws the plotly mimetype)."""
    import plotly.io as pio

    bundle = pio.renderers["plotly_mimetype"].to_mimebundle(fig.to_dict())
    bundle["text/plain"] = f"<figure: {fig.layout.title.text or 'plotly'}>"
    out.outputs = ({"output_type": "display_data", "data": bundle, "metadata": {}},)


def _metrics_html(metrics: pd.DataFrame, improvement: float | None = None) -> str:
    """The metrics table as HTML, with the second placer's improvement under it."""
    body = metrics.to_html(float_format=lambda x: f"{x:.4g}", border=0)
    if improvement is not None:
        body += f"<p>second vs first: {improvement:+.1%} (positive: the second is faster)</p>"
    return body


class EpisodePanel:
    """Step through an episode: buttons (reset, step, +10, to the end), a line of text and the
    :func:`step_figure` of the last decision.

    Args:
        stepper: the episode to show (replace it with :meth:`set_stepper`).
    """

    def __init__(self, stepper: EpisodeStepper | None = None):
        import ipywidgets as w

        self.reset_button = w.Button(description="reset", icon="undo")
        self.step_button = w.Button(description="step", icon="step-forward")
        self.step10_button = w.Button(description="+10 steps", icon="forward")
        self.end_button = w.Button(description="to the end", icon="fast-forward")
        self.info = w.HTML()
        self.figure = w.Output()
        self.reset_button.on_click(lambda _: self.reset())
        self.step_button.on_click(lambda _: self.advance(1))
        self.step10_button.on_click(lambda _: self.advance(10))
        self.end_button.on_click(lambda _: self.advance(None))
        buttons = [self.reset_button, self.step_button, self.step10_button, self.end_button]
        self.widget = w.VBox([w.HBox(buttons), self.info, self.figure])
        self.stepper: EpisodeStepper | None = None
        self.last: StepInfo | None = None
        if stepper is not None:
            self.set_stepper(stepper)

    def set_stepper(self, stepper: EpisodeStepper | None, message: str = "") -> None:
        """Show ``stepper`` from its first step (None: a message instead)."""
        self.stepper = stepper
        if stepper is None:
            self.last = None
            self.figure.outputs = ()
            self.info.value = html.escape(message)
            return
        self.reset()

    def reset(self) -> None:
        """Back to step 0."""
        if self.stepper is None:
            return
        self.stepper.reset()
        self.last = None
        self.figure.outputs = ()
        self.info.value = (
            f"<b>{html.escape(self.stepper.name)}</b>: 0/{self.stepper.num_steps} steps; "
            "press <i>step</i>"
        )

    def advance(self, steps: int | None = 1) -> StepInfo | None:
        """Take ``steps`` decisions (None: to the end) and show the last one."""
        s = self.stepper
        if s is None:
            return None
        taken = 0
        while not s.done and (steps is None or taken < steps):
            self.last = s.step()
            taken += 1
        if self.last is not None:
            k = int(np.flatnonzero(self.last.candidates == self.last.chosen_node)[0])
            node = self.graph_name(self.last.chosen_node)
            self.info.value = (
                f"<b>{html.escape(s.name)}</b>: step {self.last.step + 1}/{s.num_steps}; "
                f"SEL picked <code>{html.escape(node)}</code> ({s.sel_label} "
                f"{self.last.sel_scores[k]:.4g}, p={self.last.sel_probs[k]:.2f}) among "
                f"{self.last.candidates.size}; PLC chose device {self.last.chosen_device} "
                f"(p={self.last.plc_probs[self.last.chosen_device]:.2f})"
                + ("; episode done" if s.done else "")
            )
            fig = step_figure(self.last, s.graph, s.sel_label, s.plc_label, s.num_steps)
            _figure_output(self.figure, fig)
        return self.last

    def graph_name(self, v: int) -> str:
        return self.stepper.graph.names[v] if self.stepper is not None else str(v)


class ExplorerWidget:
    """Controls for a scenario and two placers, the metrics table, the Gantt charts, and an
    :class:`EpisodePanel` stepping through the first placer's episode (or the second's when only
    it can be stepped). Every change of a control recomputes :func:`compare`.

    Args:
        scenario: the initial scenario.
        first, second: the initial placers.
        checkpoints_dir: where shipped checkpoints are looked up (default ``data/checkpoints``).
        auto_update: recompute when a control changes (else call :meth:`update`).
    """

    def __init__(
        self,
        scenario: Scenario | None = None,
        first: PlacerChoice | str = "round-robin",
        second: PlacerChoice | str = "cp",
        checkpoints_dir: str | Path | None = None,
        auto_update: bool = True,
    ):
        import ipywidgets as w

        from ..placers import available_placers
        from ..sim import SEMANTICS

        sc = scenario or Scenario()
        self.checkpoints_dir = checkpoints_dir
        choices = [c if isinstance(c, PlacerChoice) else PlacerChoice(c) for c in (first, second)]
        workloads = workload_choices(sc.paper_graphs)
        if sc.workload not in workloads:
            workloads.append(sc.workload)
        scales = list(SCALE_CHOICES) + ([sc.scale] if sc.scale not in SCALE_CHOICES else [])
        placers = available_placers()
        self.workload = w.Dropdown(options=workloads, value=sc.workload, description="workload")
        self.scale = w.Dropdown(
            options=[(str(s), s) for s in scales], value=sc.scale, description="scale"
        )
        self.cluster = w.Dropdown(
            options=sorted({*PRESETS, sc.cluster}), value=sc.cluster, description="cluster"
        )
        self.semantics = w.Dropdown(options=SEMANTICS, value=sc.semantics, description="semantics")
        self.noise = w.FloatSlider(
            value=sc.noise,
            min=0.0,
            max=0.5,
            step=0.05,
            description="noise",
            continuous_update=False,
        )
        self.noise_seeds = w.IntSlider(
            value=sc.noise_seeds, min=1, max=20, description="noise seeds", continuous_update=False
        )
        self.seed = w.IntText(value=sc.seed, description="seed")
        self.placers = [
            w.Dropdown(options=placers, value=c.name, description=f"placer {i + 1}")
            for i, c in enumerate(choices)
        ]
        self.checkpoints = [w.Dropdown(description="checkpoint") for _ in choices]
        self.options = [
            w.Text(
                value=",".join(f"{k}={v}" for k, v in c.options.items()),
                description="options",
                placeholder="timing=paper",
            )
            for c in choices
        ]
        for i, c in enumerate(choices):
            self._refresh_checkpoints(i, c.checkpoint)
        self.status = w.HTML()
        self.metrics = w.HTML()
        self.gantt = w.Output()
        self.episode = EpisodePanel()
        self.comparison: Comparison | None = None
        self._updating = False
        for i, dd in enumerate(self.placers):
            dd.observe(lambda change, i=i: self._on_placer(i), names="value")
        controls = [
            self.workload,
            self.scale,
            self.cluster,
            self.semantics,
            self.noise,
            self.noise_seeds,
            self.seed,
            *self.checkpoints,
            *self.options,
        ]
        if auto_update:
            for c in controls:
                c.observe(lambda change: self.update(), names="value")
        columns = [
            w.VBox([self.workload, self.scale, self.cluster, self.semantics]),
            w.VBox([self.noise, self.noise_seeds, self.seed]),
            *(
                w.VBox([p, ck, op])
                for p, ck, op in zip(self.placers, self.checkpoints, self.options)
            ),
        ]
        self.widget = w.VBox(
            [
                w.HBox(columns),
                self.status,
                self.metrics,
                self.gantt,
                w.HTML("<h3>Episode, decision by decision</h3>"),
                self.episode.widget,
            ]
        )
        self._auto = auto_update
        self.update()

    def _refresh_checkpoints(self, i: int, value: str | None = None) -> None:
        from ..placers import placer_specs

        spec = placer_specs().get(self.placers[i].value)
        dd = self.checkpoints[i]
        if spec is not None and spec.needs_checkpoint:
            shipped = checkpoint_choices(spec.name, self.checkpoints_dir)
            opts = shipped + ([value] if value and value not in shipped else [])
            dd.options = opts
            dd.value = value if value else (opts[0] if opts else None)
            dd.layout.display = None
        else:
            dd.options = []
            dd.layout.display = "none"

    def _on_placer(self, i: int) -> None:
        self._updating = True
        try:
            self._refresh_checkpoints(i)
        finally:
            self._updating = False
        if self._auto:
            self.update()

    def scenario(self) -> Scenario:
        """The scenario the controls describe."""
        return Scenario(
            workload=self.workload.value,
            scale=self.scale.value,
            cluster=self.cluster.value,
            semantics=self.semantics.value,
            noise=float(self.noise.value),
            noise_seeds=int(self.noise_seeds.value),
            seed=int(self.seed.value),
        )

    def choice(self, i: int) -> PlacerChoice:
        """The ``i``-th placer the controls describe."""
        from ..workloads import parse_param

        text = self.options[i].value.strip()
        opts = dict(
            parse_param(s.strip(), "placer options: ") for s in text.split(",") if s.strip()
        )
        return PlacerChoice(self.placers[i].value, self.checkpoints[i].value or None, opts)

    def update(self) -> Comparison | None:
        """Recompute the comparison and the episode from the controls; errors go to the status
        line (and leave the previous charts)."""
        from ..errors import DopplerLabError

        if self._updating:
            return self.comparison
        try:
            cmp = compare(self.scenario(), self.choice(0), self.choice(1))
        except DopplerLabError as exc:
            self.status.value = (
                f'<span style="color:{CRITICAL_COLOR}">{html.escape(str(exc))}</span>'
            )
            return None
        self.comparison = cmp
        self.status.value = (
            f"{html.escape(cmp.graph.name)}: {cmp.graph.compute_nodes.size} ops on "
            f"{cmp.cluster.num_devices} devices; lower bound {cmp.lower_bound:.4g}"
        )
        self.metrics.value = _metrics_html(cmp.metrics, cmp.improvement)
        _figure_output(self.gantt, cmp.figure)
        self._update_episode(cmp)
        return cmp

    def _update_episode(self, cmp: Comparison) -> None:
        from ..errors import DopplerLabError

        choices = [self.choice(0), self.choice(1)]
        names = steppable_placers()
        pick = next((c for c in choices if c.name in names), None)
        if pick is None:
            self.episode.set_stepper(
                None,
                f"neither placer can be stepped; steppable: {', '.join(names)}",
            )
            return
        try:
            stepper = make_stepper(pick, cmp.graph, cmp.cluster, cmp.scenario.seed)
        except DopplerLabError as exc:
            self.episode.set_stepper(None, f"cannot step {pick.label}: {exc}")
            return
        self.episode.set_stepper(stepper)


def explorer_widget(
    scenario: Scenario | None = None,
    first: PlacerChoice | str = "round-robin",
    second: PlacerChoice | str = "cp",
    checkpoints_dir: str | Path | None = None,
) -> Any:
    """The explorer as one ipywidgets box (display it in JupyterLab)."""
    return ExplorerWidget(scenario, first, second, checkpoints_dir).widget
