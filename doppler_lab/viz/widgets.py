"""The placement explorer's widgets: controls for a scenario and two placers, the metrics and
Gantt charts of :func:`~doppler_lab.viz.explorer.compare`, and an episode panel stepping through
a placer's decisions (:mod:`doppler_lab.viz.episodes`).

ipywidgets is imported when a widget is built, never at module load. The model's names are
importable from here too (notebooks use ``from doppler_lab.viz.widgets import ...``).

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
from pathlib import Path
from typing import Any

import numpy as np
import plotly.graph_objects as go

from ..hardware.cluster import PRESETS
from ..house.deps import require
from ._style import CRITICAL_COLOR
from .episodes import (
    PLC_VIEWS,
    CriticalPathStepper,
    EpisodeStepper,
    PlcView,
    PolicyStepper,
    StepInfo,
    StepperFactory,
    make_stepper,
    run_episode,
    step_figure,
    step_table,
    steppable_placers,
)
from .explorer import (
    PAPER_PREFIX,
    SCALE_CHOICES,
    SNAPSHOT_CLASS,
    Comparison,
    PlacerChoice,
    Scenario,
    StaticView,
    build_graph,
    checkpoint_choices,
    compare,
    metrics_html,
    placement_metrics,
    snapshot_html,
    status_line,
    time_unit_of,
    workload_choices,
)

__all__ = [
    "PAPER_PREFIX",
    "PLC_VIEWS",
    "SCALE_CHOICES",
    "SNAPSHOT_CLASS",
    "Comparison",
    "CriticalPathStepper",
    "EpisodePanel",
    "EpisodeStepper",
    "ExplorerWidget",
    "WithStaticView",
    "PlacerChoice",
    "PlcView",
    "PolicyStepper",
    "Scenario",
    "StaticView",
    "StepInfo",
    "StepperFactory",
    "build_graph",
    "checkpoint_choices",
    "compare",
    "explorer_view",
    "explorer_widget",
    "make_stepper",
    "placement_metrics",
    "run_episode",
    "snapshot_html",
    "step_figure",
    "step_table",
    "steppable_placers",
    "time_unit_of",
    "workload_choices",
]


# -- widgets ---------------------------------------------------------------------------------------
def _figure_output(out: Any, fig: go.Figure) -> None:
    """Show ``fig`` in an ipywidgets ``Output`` (works with or without a running kernel; JupyterLab
    draws the plotly mimetype)."""
    pio = require("plotly.io", "showing a chart in a widget")

    bundle = pio.renderers["plotly_mimetype"].to_mimebundle(fig.to_dict())
    bundle["text/plain"] = f"<figure: {fig.layout.title.text or 'plotly'}>"
    out.outputs = ({"output_type": "display_data", "data": bundle, "metadata": {}},)


class EpisodePanel:
    """Step through an episode: buttons (reset, step, +10, to the end), a line of text and the
    :func:`step_figure` of the last decision.

    Args:
        stepper: the episode to show (replace it with :meth:`set_stepper`).
    """

    def __init__(self, stepper: EpisodeStepper | None = None):
        w = require("ipywidgets", "the interactive widgets")

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
        self.widget = w.VBox([w.HBox(buttons, layout=wrapping(w)), self.info, self.figure])
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
        w = require("ipywidgets", "the interactive widgets")

        from ..placers import available_placers
        from ..timing.sim import SEMANTICS

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
                placeholder="estimate=additive",
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
        self._episode_message = ""
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
        column = w.Layout(flex="0 0 auto", margin="0 18px 6px 0")
        columns = [
            w.VBox([self.workload, self.scale, self.cluster, self.semantics], layout=column),
            w.VBox([self.noise, self.noise_seeds, self.seed], layout=column),
            *(
                w.VBox([p, ck, op], layout=column)
                for p, ck, op in zip(self.placers, self.checkpoints, self.options)
            ),
        ]
        self.controls = w.HBox(columns, layout=wrapping(w))
        self.widget = w.VBox(
            [
                self.controls,
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
        from ..house.errors import DopplerLabError

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
        self.status.value = html.escape(status_line(cmp))
        self.metrics.value = metrics_html(cmp)
        _figure_output(self.gantt, cmp.figure)
        self._update_episode(cmp)
        return cmp

    def _update_episode(self, cmp: Comparison) -> None:
        stepper, self._episode_message = episode_stepper(cmp, [self.choice(0), self.choice(1)])
        self.episode.set_stepper(stepper, self._episode_message)

    def snapshot(self) -> str:
        """The explorer's current view as static HTML (:func:`snapshot_html`), for pages
        without a widget manager; the status line alone when the controls give an error."""
        if self.comparison is None:
            return f"<p>{self.status.value}</p>"
        stepper = self.episode.stepper
        return snapshot_html(
            self.comparison,
            [self.choice(0), self.choice(1)],
            episode_line(stepper) if stepper is not None else self._episode_message,
        )


def wrapping(w: Any) -> Any:
    """The layout of a row of controls that wraps onto more lines when the page is narrow (the
    explorer's four columns need about 1400 px side by side)."""
    return w.Layout(display="flex", flex_flow="row wrap", align_items="flex-start", width="100%")


def episode_stepper(
    cmp: Comparison, choices: list[PlacerChoice]
) -> tuple[EpisodeStepper | None, str]:
    """The episode the explorer steps: the first of ``choices`` that can be stepped (see
    :func:`steppable_placers`); None and why when neither can."""
    from ..house.errors import DopplerLabError

    names = steppable_placers()
    pick = next((c for c in choices if c.name in names), None)
    if pick is None:
        return None, f"neither placer can be stepped; steppable: {', '.join(names)}"
    try:
        return make_stepper(pick, cmp.graph, cmp.cluster, cmp.scenario.seed), ""
    except DopplerLabError as exc:
        return None, f"cannot step {pick.label}: {exc}"


def episode_line(stepper: EpisodeStepper) -> str:
    """The episode panel in a line, for the static view."""
    return (
        f"Episode panel: {stepper.name}'s {stepper.num_steps} decisions, one step at a time "
        "(its buttons run in JupyterLab; the step figures above show some of them)."
    )


class WithStaticView:
    """A widget that carries a static view of itself: displayed, it gives the widget's view and
    ``html`` (``text/html``) in one output. JupyterLab draws the widget; a page rendered without
    a widget manager (nbconvert without saved widget state,
    :func:`~doppler_lab.lab.reporting.notebook_runs.render_html` always) draws the HTML.

    Attributes:
        widget: the ipywidgets box.
        html: its static view.
    """

    def __init__(self, widget: Any, html: str):
        self.widget = widget
        self.html = html

    def _repr_mimebundle_(self, **kwargs: Any) -> dict[str, Any]:
        bundle = dict(self.widget._repr_mimebundle_(**kwargs) or {})
        bundle["text/html"] = self.html
        return bundle


def explorer_widget(
    scenario: Scenario | None = None,
    first: PlacerChoice | str = "round-robin",
    second: PlacerChoice | str = "cp",
    checkpoints_dir: str | Path | None = None,
) -> Any:
    """The explorer as one ipywidgets box (display it in JupyterLab)."""
    return ExplorerWidget(scenario, first, second, checkpoints_dir).widget


def explorer_view(
    scenario: Scenario,
    first: PlacerChoice | str,
    second: PlacerChoice | str,
    interactive: bool = True,
    comparison: Comparison | None = None,
    checkpoints_dir: str | Path | None = None,
) -> WithStaticView | StaticView:
    """The explorer for a notebook cell, drawn wherever the notebook is read.

    ``interactive`` (JupyterLab): the widgets (:class:`ExplorerWidget`), carrying the static
    view of their first state for exported pages (:class:`WithStaticView`). Headless runs
    (papermill: the tests, ``doppler-lab report``): that static view alone
    (:func:`snapshot_html` of ``comparison``, computed when not given), so that the page shows
    the same controls' values, table and Gantt charts where the widgets would be.
    """
    if interactive:
        ex = ExplorerWidget(scenario, first, second, checkpoints_dir)
        return WithStaticView(ex.widget, ex.snapshot())
    choices = [c if isinstance(c, PlacerChoice) else PlacerChoice(c) for c in (first, second)]
    cmp = comparison if comparison is not None else compare(scenario, *choices)
    stepper, message = episode_stepper(cmp, choices)
    return StaticView(snapshot_html(cmp, choices, episode_line(stepper) if stepper else message))
