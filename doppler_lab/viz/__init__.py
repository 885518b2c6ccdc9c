"""Plotting: Gantt charts of traces, training curves, quality bars, graph pictures, HTML reports.

Everything here returns plotly figures (``plotly.graph_objects.Figure``) and imports neither
ipywidgets nor torch; interactive explorers live in ``viz.widgets``, which imports ipywidgets
lazily (their model, importable without it: ``viz.explorer`` and ``viz.episodes``).

Without plotly (``gpu-check`` on a GPU machine without the plot stack) the package still
imports, so :mod:`doppler_lab.viz.html`'s tables work; each plotting name then raises the
one-line message of :func:`doppler_lab.house.deps.require` when used.
"""

from __future__ import annotations

from typing import Any

from ..house.deps import available, require
from .html import HtmlReport, markdown_to_html, write_gantt_html

_PLOTS = {
    "series_color": "_style",
    "bar_compare": "curves",
    "learning_curves": "curves",
    "read_metrics": "curves",
    "smooth": "curves",
    "PathStep": "gantt",
    "compare_gantt": "gantt",
    "critical_path": "gantt",
    "gantt": "gantt",
    "transfer_lanes": "gantt",
    "layered_layout": "graph_plot",
    "plot_graph": "graph_plot",
}

if available("plotly.graph_objects"):
    from ._style import series_color
    from .curves import bar_compare, learning_curves, read_metrics, smooth
    from .gantt import PathStep, compare_gantt, critical_path, gantt, transfer_lanes
    from .graph_plot import layered_layout, plot_graph
else:

    def __getattr__(name: str) -> Any:
        if name in _PLOTS:
            require("plotly.graph_objects", f"doppler_lab.viz.{name}", "plotly")
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


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
