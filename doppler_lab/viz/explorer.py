"""The placement explorer's model: a scenario placed by two placers side by side.

:func:`compare` places one :class:`Scenario` (workload, cluster, semantics, noise) with two
placers (:class:`PlacerChoice`) and returns a :class:`Comparison` (metrics table, stacked Gantt
charts, traces), and :func:`snapshot_html` draws a comparison as the explorer shows it, for
pages without widgets. Episodes stepped decision by decision live in
:mod:`doppler_lab.viz.episodes`; the widgets that wire controls to both in
:mod:`doppler_lab.viz.widgets`. Nothing here imports ipywidgets, so notebooks run it headless
under papermill and tests call it directly.

Example:
    >>> ex = compare(Scenario("chainmm", scale="tiny"), PlacerChoice("round-robin"), PlacerChoice("cp"))
    >>> list(ex.metrics.index)
    ['round-robin', 'cp']
"""

from __future__ import annotations

import html
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from ..hardware.cluster import Cluster
from ..house.errors import ConfigError
from ..ir.graph import DataflowGraph
from ..ir.placement import Placement
from ..ir.trace import Trace

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
            :func:`~doppler_lab.house.paths.paper_graphs_dir`).
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
        from ..timing.sim import SEMANTICS

        if self.semantics not in SEMANTICS:
            raise ConfigError(f"scenario semantics {self.semantics!r}; expected one of {SEMANTICS}")
        if not (math.isfinite(self.noise) and self.noise >= 0):
            raise ConfigError(f"scenario noise {self.noise!r}; expected a finite sigma >= 0")
        if self.noise_seeds < 1:
            raise ConfigError(f"scenario noise_seeds {self.noise_seeds!r}; expected >= 1")

    def build(self) -> tuple[DataflowGraph, Cluster]:
        """The graph and the cluster of this scenario."""
        graph = build_graph(self.workload, self.scale, self.paper_graphs)
        from ..workloads.specs import cluster_from_spec

        return graph, cluster_from_spec(self.cluster)


def build_graph(
    workload: str, scale: float | str = 1.0, paper_graphs: str | None = None
) -> DataflowGraph:
    """The graph of a graph spec (:mod:`doppler_lab.workloads.specs`; the explorer offers
    workloads and ``paper:<name>``), a workload given ``scale`` unless its spec sets one;
    ``paper_graphs``: the folder of the paper's graphs."""
    from ..workloads.specs import graph_from_spec, parse_graph_spec

    spec = parse_graph_spec(workload)
    if spec.kind == "workload" and scale != 1.0 and "scale" not in spec.params:
        spec = spec.with_params(scale=scale)
    return graph_from_spec(spec, paper_dir=paper_graphs)


def workload_choices(paper_graphs: str | None = None) -> list[str]:
    """Generated workloads, then the paper's graphs found on disk (as ``paper:<name>``)."""
    from ..house.paths import paper_graphs_dir
    from ..workloads.catalog import GENERATED_WORKLOADS, PAPER_GRAPH_NAMES

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
        options: further placer options (``{"estimate": "additive"}``).
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

    def policy_alone(self) -> PlacerChoice | None:
        """For a ``doppler`` choice with its proposals: the same placer with the policy
        alone (``proposals=none``: its rollouts, no heuristic proposal), the row shown beside
        every ``doppler`` row; None for any other choice."""
        if self.name != "doppler" or "proposals" in self.options:
            return None
        return PlacerChoice(self.name, self.checkpoint, {**self.options, "proposals": "none"})


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
            ``devices_used``, ``produced_by`` (a learned placer's winning candidate, else
            empty); after the two placers, ``<label> (policy alone)`` for a ``doppler`` one
            (:meth:`PlacerChoice.policy_alone`).
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
    from ..timing.sim import Simulator
    from .gantt import compare_gantt

    choices = [c if isinstance(c, PlacerChoice) else PlacerChoice(c) for c in (first, second)]
    if graph is None or cluster is None:
        graph, cluster = scenario.build()
    sim = Simulator(graph, cluster, scenario.semantics, scenario.noise)  # type: ignore[arg-type]
    lb = sim.lower_bound()
    seeds = range(scenario.seed, scenario.seed + scenario.noise_seeds)
    labels = _labels(choices)
    # a doppler row has its policy alone beside it (after the two, which the charts show)
    runs = list(zip(labels, choices))
    runs += [
        (f"{label} (policy alone)", alone)
        for label, c in zip(labels, choices)
        if (alone := c.policy_alone()) is not None
    ]
    placements, traces, rows = {}, {}, {}
    for label, choice in runs:
        if label in rows:  # the same choice twice
            continue
        pl = choice.place(graph, cluster, scenario.seed)
        tr = sim.run(pl, seed=scenario.seed)
        makespans = np.array([sim.makespan(pl, seed=s) for s in seeds])
        placements[label], traces[label] = pl, tr
        rows[label] = placement_metrics(tr, makespans, lb, graph)
        rows[label]["produced_by"] = pl.meta.produced_by or ""  # a learned placer's winner
    metrics = pd.DataFrame.from_dict(rows, orient="index")
    metrics.index.name = "placer"
    noise = f", noise {scenario.noise:g}" if scenario.noise else ""
    title = f"{graph.name} on {cluster.name} ({scenario.semantics}{noise})"
    shown = {label: traces[label] for label in labels}
    fig = compare_gantt(shown, graph, title=title, time_unit=time_unit_of(graph))
    return Comparison(scenario, graph, cluster, placements, traces, metrics, lb, fig)


# -- the explorer's view without widgets ---------------------------------------------------------
#: the units of the metrics table (notebook 11 and the explorer's widgets show it so)
METRIC_UNITS: dict[str, str | None] = {
    "makespan": "s",
    "makespan_std": "s",
    "ratio_lb": "x",
    "utilisation": "%",
}


def metrics_html(cmp: Comparison) -> str:
    """The metrics table (:func:`~doppler_lab.viz.tables.tidy`) and the second placer's
    improvement under it, in a box that scrolls sideways rather than overflow."""
    from .tables import tidy

    seconds = time_unit_of(cmp.graph) == "s"
    units = {k: v if seconds or v != "s" else None for k, v in METRIC_UNITS.items()}
    body = tidy(cmp.metrics, units=units).to_html()
    body += f"<p>second vs first: {cmp.improvement:+.1%} (positive: the second is faster)</p>"
    made = provenance_line(cmp)
    if made:
        body += f"<p>{html.escape(made)}</p>"
    return f'<div style="overflow-x:auto;max-width:100%">{body}</div>'


def provenance_line(cmp: Comparison) -> str:
    """What produced each placement that says so (a learned placer's winning candidate, a
    search's start: :attr:`~doppler_lab.ir.placement.PlacementMeta.produced_by`), e.g.
    ``produced by: doppler: the proposal clustering``; empty when none says."""
    made = [
        f"{label}: the {p.meta.produced_by}"
        for label, p in cmp.placements.items()
        if p.meta.produced_by
    ]
    return f"produced by: {'; '.join(made)}" if made else ""


def status_line(cmp: Comparison) -> str:
    """The explorer's line over the table: graph, devices, lower bound (with its unit)."""
    from ..house.progress import format_time

    lb = format_time(cmp.lower_bound, in_seconds=time_unit_of(cmp.graph) == "s")
    return (
        f"{cmp.graph.name}: {cmp.graph.compute_nodes.size} ops on "
        f"{cmp.cluster.num_devices} devices; lower bound {lb}"
    )


#: the class of the explorer's static view (a test looks for it in rendered pages)
SNAPSHOT_CLASS = "doppler-explorer-static"
#: the box that holds a row of controls and wraps them on narrow screens
WRAP_STYLE = "display:flex;flex-wrap:wrap;gap:4px 18px;align-items:flex-start"


def snapshot_html(
    cmp: Comparison, choices: Sequence[PlacerChoice], episode: str | None = None
) -> str:
    """The explorer's view of ``cmp`` as static HTML: the controls' values (wrapping on narrow
    screens), the status line, the metrics table and the Gantt charts (plotly, drawn by the
    page's plotly.js), and a line on the episode panel. Exported pages show it where the
    widgets would be (see :func:`doppler_lab.viz.widgets.explorer_view`)."""
    import html as _html

    sc = cmp.scenario
    controls = [
        ("workload", sc.workload),
        ("scale", sc.scale),
        ("cluster", sc.cluster),
        ("semantics", sc.semantics),
        ("noise", f"{sc.noise:g}"),
        ("noise seeds", sc.noise_seeds),
        ("seed", sc.seed),
        *((f"placer {i + 1}", c.label) for i, c in enumerate(choices)),
    ]
    chips = "".join(
        f"<span><span style='color:#6a737d'>{_html.escape(k)}</span> "
        f"<code>{_html.escape(str(v))}</code></span>"
        for k, v in controls
    )
    figure = cmp.figure.to_html(
        full_html=False,
        include_plotlyjs=False,
        include_mathjax=False,
        default_width="100%",
        config={"displaylogo": False, "responsive": True},
    )
    parts = [
        f'<div class="{SNAPSHOT_CLASS}">',
        "<p><b>Explorer</b>: its first view, drawn without widgets (open the notebook in "
        "JupyterLab to change the controls and step through the episode).</p>",
        f'<div style="{WRAP_STYLE}">{chips}</div>',
        f"<p>{_html.escape(status_line(cmp))}</p>",
        metrics_html(cmp),
        figure,
    ]
    if episode:
        parts.append(f"<p>{_html.escape(episode)}</p>")
    parts.append("</div>")
    return "".join(parts)


class StaticView:
    """HTML shown as a notebook cell's output (``_repr_html_``)."""

    def __init__(self, html: str):
        self.html = html

    def _repr_html_(self) -> str:
        return self.html

    def __repr__(self) -> str:
        return "<the placement explorer's static view>"
