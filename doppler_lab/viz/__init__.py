"""Plotting: Gantt charts of traces, training curves, quality bars, graph pictures, HTML reports.

Everything here returns plotly figures (``plotly.graph_objects.Figure``) and imports neither
ipywidgets nor torch; interactive explorers live in ``viz.widgets``, which imports ipywidgets
lazily (their model, importable without it: ``viz.explorer`` and ``viz.episodes``).
"""

from __future__ import annotations

from ._style import series_color
from .curves import bar_compare, learning_curves, read_metrics, smooth
from .gantt import PathStep, compare_gantt, critical_path, gantt, transfer_lanes
from .graph_plot import layered_layout, plot_graph
from .html import HtmlReport, markdown_to_html, write_gantt_html

__all__ = [
    "HtmlReport",
    "PathStep",
    "bar_compare",
    "compare_gantt",
    "critical_path",
    "gantt",
    "layered_layout",
    "learning_curves",
    "markdown_to_html",
    "plot_graph",
    "read_metrics",
    "series_color",
    "smooth",
    "transfer_lanes",
    "write_gantt_html",
]
