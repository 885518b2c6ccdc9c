"""Episodes decision by decision, for the explorer: what SEL and PLC saw and chose at each step.

An *episode stepper* (:class:`EpisodeStepper`) replays the SEL/PLC decisions of one episode:
``reset()``, then ``step() -> StepInfo`` until ``done``. Steppers are views, not episodes of
their own: :class:`CriticalPathStepper` takes each decision with
:meth:`doppler_lab.placers.CriticalPathTeacher.decide` on a :class:`~doppler_lab.timing.episode.Episode`
(the decisions of ``place("cp", ...)``), and :class:`PolicyStepper` steps a one-episode greedy
:class:`~doppler_lab.policies.rollout.Rollout` (the decisions of the policy's greedy rollout)
and reads its scores. :func:`make_stepper` picks one for a placer name; :func:`step_figure`
draws one step and :func:`step_table` lists them. No ipywidgets here (see
:mod:`doppler_lab.viz.widgets`).

Any other policy plugs into the episode panel by implementing :class:`EpisodeStepper`: per step
it exposes the candidate set, a SEL score and probability per candidate, the chosen node, a PLC
score and probability per device, the chosen device and the partial placement (:class:`StepInfo`);
a learned placer's module may provide ``make_stepper(choice, graph, cluster, seed)`` to be used
instead of :class:`PolicyStepper`.

Example:
    >>> from doppler_lab.hardware import make_cluster
    >>> from doppler_lab.placers import place
    >>> from doppler_lab.workloads import build
    >>> g, c = build("chainmm", scale="tiny"), make_cluster("p100x4")
    >>> stepper = CriticalPathStepper(g, c, seed=0)
    >>> steps = run_episode(stepper)
    >>> bool((stepper.placement().device == place("cp", g, c, seed=0).device).all())
    True
"""

from __future__ import annotations

import html
from collections.abc import Callable, Sequence
from typing import Any, Literal, NamedTuple, Protocol, runtime_checkable

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from ..hardware.cluster import Cluster
from ..house.errors import ConfigError, PlacementError
from ..ir.graph import DataflowGraph
from ..ir.placement import Placement
from ..timing.cost_model import CostModel
from ..timing.episode import Episode
from ._style import CRITICAL_COLOR, series_color
from .explorer import PlacerChoice

PlcView = Literal["softmax", "ties"]
PLC_VIEWS: tuple[str, ...] = ("softmax", "ties")


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


def _cp_sel_view(teacher: Any, cand: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """SEL by the CP rule as shown: the candidates' b-levels, uniform over the max ties."""
    ties = teacher.node_choices(cand)
    return teacher.b_level[cand], _uniform_on(cand.size, np.searchsorted(cand, ties))


def _cp_plc_view(teacher: Any, est: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """PLC by the CP rule as shown: ``-EST``, uniform over the min ties."""
    return -est, _uniform_on(est.size, teacher.device_choices(est))


def _check_not_done(stepper: EpisodeStepper) -> None:
    if stepper.done:
        raise PlacementError(f"episode of {stepper.name!r} is done ({stepper.num_steps} steps)")


class CriticalPathStepper:
    """The Critical Path teacher as an :class:`EpisodeStepper` (makes the same decisions as
    ``place("cp", graph, cluster, seed=seed, estimate=estimate)``: both take them with
    :meth:`~doppler_lab.placers.CriticalPathTeacher.decide`).

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
        estimate: the episode's estimate, ``est`` or ``additive``.
        plc_view: ``softmax`` or ``ties``.
    """

    sel_label = "b-level"
    plc_label = "-earliest start"

    def __init__(
        self,
        graph: DataflowGraph,
        cluster: Cluster,
        seed: int = 0,
        estimate: str = "est",
        plc_view: PlcView = "softmax",
    ):
        from ..placers import CriticalPathTeacher

        if plc_view not in PLC_VIEWS:
            raise ConfigError(f"plc_view {plc_view!r}; expected one of {PLC_VIEWS}")
        self.name = "cp" if estimate == "est" else f"cp [estimate={estimate}]"
        self.graph = graph
        self.num_devices = cluster.num_devices
        self.seed = seed
        self.plc_view = plc_view
        cost = CostModel(graph, cluster)
        self._mean_compute = cost.mean_compute
        self._teacher = CriticalPathTeacher(graph, cost)
        self.episode = Episode(graph, cost, estimate)  # type: ignore[arg-type]
        self.reset()

    @property
    def num_steps(self) -> int:
        return self.episode.num_steps

    @property
    def done(self) -> bool:
        return self.episode.done

    def reset(self) -> None:
        self.episode.reset()
        self._rng = np.random.default_rng(self.seed)

    def step(self) -> StepInfo:
        _check_not_done(self)
        ep = self.episode
        dec = self._teacher.decide(ep, self._rng)
        sel_scores, sel_probs = _cp_sel_view(self._teacher, dec.candidates)
        plc_scores, plc_probs = _cp_plc_view(self._teacher, dec.est)
        c = float(self._mean_compute[dec.node])
        if self.plc_view == "softmax" and c > 0:
            plc_probs = _softmax(-(dec.est - dec.est.min()) / c)
        ep.assign(dec.node, dec.device, dec.est)
        return StepInfo(
            dec.step,
            dec.candidates,
            sel_scores,
            sel_probs,
            dec.node,
            plc_scores,
            plc_probs,
            dec.device,
            ep.device.copy(),
        )

    def placement(self) -> Placement:
        return self.episode.placement(self.name).validate(self.graph, self.num_devices)


class PolicyStepper:
    """A learned policy's greedy episode as an :class:`EpisodeStepper`: a one-episode greedy
    :class:`~doppler_lab.policies.rollout.Rollout` stepped one decision at a time (the same
    decisions as the policy's greedy rollout), with the scores it decided on.

    SEL: learned scores (the policy's static per-node scores, softmax over the candidates), the
    Critical Path rule (``plc-only`` ablation: b-levels, uniform over ties), or the topological
    order (Placeto, GDP: one-hot). PLC: the policy's logits over the devices and their softmax,
    or the Critical Path rule (``sel-only`` ablation: ``-EST``, uniform over ties). A learned
    placer's placement is the best of this greedy episode and K sampled ones, so it can differ.

    Args:
        policy: a :class:`~doppler_lab.policies.policy_base.PlacementPolicy`.
        graph: the graph.
        cluster: the cluster (its device count must be the policy's).
        seed: seeds the Critical Path rule's ties (ablations).
        name: label (default: the policy's kind).
        semantics: the task's simulator semantics (picks a ``task``-timed policy's estimate).
    """

    def __init__(
        self,
        policy: Any,
        graph: DataflowGraph,
        cluster: Cluster,
        seed: int = 0,
        name: str | None = None,
        semantics: str | None = None,
    ):
        from ..policies.context import GraphContext

        self.policy = policy
        self.graph = graph
        self.num_devices = cluster.num_devices
        self.seed = seed
        self.name = name or policy.kind
        cfg = policy.config
        self.ctx = GraphContext.for_policy(graph, cluster, cfg, semantics)
        self.sel_label = {"learned": "SEL score", "topo": "-topological position"}.get(
            policy.sel_mode, "b-level (CP rule)"
        )
        self.plc_label = (
            "PLC logit" if policy.plc_mode == "learned" else "-earliest start (CP rule)"
        )
        with self._no_grad():
            self._enc = policy.encode(self.ctx)
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

    @property
    def num_steps(self) -> int:
        return self.ctx.num_nodes

    @property
    def done(self) -> bool:
        return self.rollout.done

    @property
    def episode(self) -> Episode:
        """The episode being stepped."""
        return self.rollout.episodes[0]

    def reset(self) -> None:
        from ..policies.rollout import GREEDY, Rollout

        rng = np.random.default_rng(self.seed)
        with self._no_grad():
            self.rollout = Rollout(self.policy, self.ctx, self._enc, 1, rng, GREEDY, GREEDY)

    def step(self) -> StepInfo:
        _check_not_done(self)
        ep, r = self.episode, self.rollout
        t, cand = r.t, ep.candidates()
        with self._no_grad():  # the PLC state must not record autograd history
            r.step()
        v, d, est = int(r.selected[0]), int(r.devices[0, t]), r.ests[0]
        if self.policy.sel_mode == "topo":
            sel_scores, sel_probs = -self._topo_pos[cand], (cand == v).astype(float)
        elif r.sel_scores is not None:
            sel_scores = np.asarray(r.sel_scores[self.ctx.features.local[cand]], np.float64)
            sel_probs = _softmax(sel_scores)
        else:
            sel_scores, sel_probs = _cp_sel_view(self.ctx.teacher, cand)
        if r.logits is None:
            plc_scores, plc_probs = _cp_plc_view(self.ctx.teacher, est)
        else:
            plc_scores = np.asarray(r.logits, dtype=np.float64)[0]
            plc_probs = _softmax(plc_scores)
        return StepInfo(
            t, cand, sel_scores, sel_probs, v, plc_scores, plc_probs, d, ep.device.copy()
        )

    def placement(self) -> Placement:
        return self.episode.placement(self.policy.kind).validate(self.graph, self.num_devices)


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
    """An episode stepper for a placer: ``cp`` (:class:`CriticalPathStepper`, its ``estimate``
    option honoured), or a learned placer (its module's ``make_stepper(choice, graph, cluster,
    seed)`` when it has one, else a :class:`PolicyStepper` over the policy the placer loads from
    its checkpoint).

    Raises:
        ConfigError: the placer cannot be stepped (it is not a SEL + PLC episode), or a learned
            placer has no checkpoint.
    """
    choice = choice if isinstance(choice, PlacerChoice) else PlacerChoice(choice)
    if choice.name == "cp":
        extra = sorted(set(choice.options) - {"estimate"})
        if extra:
            raise ConfigError(f"cp stepper has no option {extra[0]!r}; it takes estimate")
        return CriticalPathStepper(graph, cluster, seed, choice.options.get("estimate", "est"))
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
    semantics = getattr(placer, "semantics", None)
    return PolicyStepper(policy, graph, cluster, seed, name=choice.label, semantics=semantics)


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
