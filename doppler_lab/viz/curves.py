"""Training curves (smoothed, several runs with a spread band) and quality bar charts."""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from ..house.errors import ConfigError, FormatError
from ._style import check_choice, check_columns, series_color, with_alpha

MetricsSource = pd.DataFrame | str | Path
Band = Literal["std", "minmax", "none"]
BANDS: tuple[str, ...] = ("std", "minmax", "none")


def read_metrics(source: MetricsSource) -> pd.DataFrame:
    """A metrics frame from a frame (returned as is), a CSV file or a JSON-lines file.

    Args:
        source: a ``DataFrame``, or a path ending in ``.csv``, ``.jsonl`` or ``.json``.

    Returns:
        One row per logged step, columns such as ``episode`` and ``stage/metric``.
    """
    if isinstance(source, pd.DataFrame):
        return source
    path = Path(source)
    if not path.exists():
        raise FormatError("metrics file does not exist; expected a .csv or .jsonl log", str(path))
    if path.suffix == ".csv":
        return pd.read_csv(path)
    if path.suffix in (".jsonl", ".json"):
        return pd.read_json(path, lines=path.suffix == ".jsonl")
    raise FormatError(
        f"unknown metrics file type {path.suffix!r}; expected .csv, .jsonl or .json", str(path)
    )


def smooth(values: Sequence[float] | np.ndarray, weight: float) -> np.ndarray:
    """Exponential moving average with bias correction (TensorBoard's smoothing).

    Args:
        values: a series in step order; NaNs are skipped (they keep the previous average).
        weight: in ``[0, 1)``; 0 returns the values unchanged, 0.9 smooths strongly.

    Returns:
        The smoothed series, same length.
    """
    if not 0.0 <= weight < 1.0:
        raise ConfigError(f"smoothing weight {weight!r} must lie in [0, 1)")
    x = np.asarray(values, dtype=np.float64)
    if weight == 0.0:
        return x.copy()
    out = np.full(x.shape, np.nan)
    acc, norm = 0.0, 0.0
    for i, v in enumerate(x.tolist()):
        if not np.isnan(v):
            acc = weight * acc + (1.0 - weight) * v
            norm = weight * norm + (1.0 - weight)
        if norm > 0:
            out[i] = acc / norm
    return out


def _combine_runs(
    data: MetricsSource | Mapping[str, MetricsSource] | Sequence[MetricsSource], run: str
) -> pd.DataFrame:
    if isinstance(data, pd.DataFrame | str | Path):
        frame = read_metrics(data).copy()
        if run not in frame.columns:
            frame[run] = "run"
        return frame
    if isinstance(data, Mapping):
        items = list(data.items())
    else:
        items = [
            (Path(d).stem if isinstance(d, str | Path) else str(i), d) for i, d in enumerate(data)
        ]
    if not items:
        raise ConfigError("learning_curves needs at least one metrics frame or file; got none")
    frames = []
    for label, src in items:
        f = read_metrics(src).copy()
        f[run] = str(label)
        frames.append(f)
    return pd.concat(frames, ignore_index=True)


def _run_series(
    frame: pd.DataFrame, x: str, metric: str, weight: float
) -> tuple[np.ndarray, np.ndarray]:
    """x values and smoothed metric of one run (NaN rows dropped, repeated x averaged)."""
    f = frame[[x, metric]].dropna()
    if f.empty:
        return np.zeros(0), np.zeros(0)
    f = f.groupby(x, sort=True)[metric].mean()
    return f.index.to_numpy(dtype=np.float64), smooth(f.to_numpy(dtype=np.float64), weight)


def _aggregate(
    series: list[tuple[np.ndarray, np.ndarray]], band: str
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Mean and band over runs on the union of their x values (each run interpolated inside its
    own range, absent outside it)."""
    grid = np.unique(np.concatenate([xs for xs, _ in series]))
    ys = np.full((len(series), grid.size), np.nan)
    for i, (xs, vs) in enumerate(series):
        inside = (grid >= xs[0]) & (grid <= xs[-1])
        ys[i, inside] = np.interp(grid[inside], xs, vs)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # columns where no run is present
        mean = np.nanmean(ys, axis=0)
        if band == "minmax":
            lo, hi = np.nanmin(ys, axis=0), np.nanmax(ys, axis=0)
        else:
            sd = np.nanstd(ys, axis=0)
            lo, hi = mean - sd, mean + sd
    return grid, mean, lo, hi


def learning_curves(
    data: MetricsSource | Mapping[str, MetricsSource] | Sequence[MetricsSource],
    metrics: Sequence[str] | None = None,
    x: str = "episode",
    run: str = "run",
    group: str | None = None,
    smoothing: float = 0.6,
    band: Band = "std",
    show_runs: bool = True,
    title: str | None = None,
    units: Mapping[str, str | None] | None = None,
) -> go.Figure:
    """Learning curves: one panel per metric, runs of a group averaged with a spread band.

    Its keyword parameters are plot options, flat as a plotting call takes them.

    Args:
        data: one metrics frame or log file, a mapping label -> frame/file, or a sequence of
            them; labels (or file stems) go into the ``run`` column.
        metrics: columns to draw (default: every numeric column but ``x``, ``run``, ``group``).
        x: the step column.
        run: the column naming a run (seed); added when missing.
        group: a column whose values are drawn as separate coloured series (a method, a
            config); ``None`` draws all runs as one series.
        smoothing: exponential-moving-average weight in ``[0, 1)`` applied to each run.
        band: ``std`` (mean +- one standard deviation over runs), ``minmax`` or ``none``.
        show_runs: draw each run as a faint line under the mean when a series has several.
        title: figure title.
        units: metric -> the unit of its values (``s``, ``%``, ``cost units``...), drawn as
            the tables show them (seconds of 0.02 as 20 ms, the unit in the panel's title);
            default: the frame's ``attrs["units"]`` (what made the curves says, e.g. the
            graph's time unit for its costs), else what a metric's name implies. A panel
            whose values span two decades or more has a log axis.

    Returns:
        A figure with one subplot per metric on a shared step axis.
    """
    check_choice(band, BANDS, "band")
    smooth([], smoothing)  # validates the weight
    frame = _combine_runs(data, run)
    check_columns(frame.columns, [x] + ([group] if group else []), "the metrics frame")
    if metrics is None:
        skip = {x, run, group}
        metrics = [
            c for c in frame.columns if c not in skip and pd.api.types.is_numeric_dtype(frame[c])
        ]
        metrics = [c for c in metrics if frame[c].notna().any()]
        if not metrics:
            raise ConfigError(
                f"the metrics frame has no numeric column besides {x!r}; columns: {list(frame.columns)}"
            )
    check_columns(frame.columns, metrics, "the metrics frame")
    frame, panel_titles, axis_types = _scaled_metrics(frame, metrics, units, data)
    groups = list(dict.fromkeys(frame[group].astype(str))) if group else ["all runs"]
    keys = frame[group].astype(str) if group else pd.Series("all runs", index=frame.index)
    cols = 1 if len(metrics) <= 3 else 2
    rows = -(-len(metrics) // cols)
    fig = make_subplots(
        rows=rows,
        cols=cols,
        subplot_titles=panel_titles,
        vertical_spacing=min(0.12, 0.5 / rows),
        horizontal_spacing=0.08,
    )
    for m_i, metric in enumerate(metrics):
        r, c = m_i // cols + 1, m_i % cols + 1
        for g_i, grp in enumerate(groups):
            sub = frame[keys == grp]
            series = [_run_series(f, x, metric, smoothing) for _, f in sub.groupby(run, sort=False)]
            series = [s for s in series if s[0].size]
            if series:
                for t in _series_traces(
                    series, grp, series_color(g_i), band, show_runs, m_i == 0, metric, x
                ):
                    fig.add_trace(t, row=r, col=c)
        fig.update_yaxes(type=axis_types[m_i], row=r, col=c)
    fig.update_xaxes(matches="x", showgrid=True)
    for c in range(1, cols + 1):
        fig.update_xaxes(title=x, row=rows, col=c)
    fig.update_layout(
        title=title,
        template="plotly_white",
        height=max(320, 250 * rows + 80),
        hovermode="x unified" if len(groups) > 1 else "closest",
        legend=dict(title=group or ""),
        margin=dict(l=10, r=10, t=70, b=50),
        showlegend=len(groups) > 1 or group is not None,
    )
    return fig


def _scaled_metrics(
    frame: pd.DataFrame,
    metrics: Sequence[str],
    units: Mapping[str, str | None] | None,
    data: Any,
) -> tuple[pd.DataFrame, list[str], list[str]]:
    """``frame`` with each metric in the unit its axis shows, the panels' titles (with that
    unit) and the axes' types (log where the values span decades)."""
    from .tables import axis_scale, axis_title, axis_type, infer_unit

    if units is None:
        sources = data.values() if isinstance(data, Mapping) else [data]
        units = {}
        for d in sources:
            if isinstance(d, pd.DataFrame):
                units = {**units, **d.attrs.get("units", {})}
    frame = frame.copy()
    titles, types = [], []
    for metric in metrics:
        unit = units[metric] if metric in units else infer_unit(metric)
        values = pd.to_numeric(frame[metric], errors="coerce")
        factor, shown = axis_scale(values.dropna().tolist(), unit)
        if factor != 1.0:
            frame[metric] = values * factor
        titles.append(axis_title(metric, shown))
        types.append(axis_type(pd.to_numeric(frame[metric], errors="coerce").dropna().tolist()))
    return frame, titles, types


def _series_traces(
    series: list[tuple[np.ndarray, np.ndarray]],
    name: str,
    color: str,
    band: str,
    show_runs: bool,
    show_legend: bool,
    metric: str,
    x: str,
) -> list[go.Scatter]:
    out: list[go.Scatter] = []
    if len(series) == 1:
        xs, mean = series[0]
        lo = hi = None
    else:
        xs, mean, lo, hi = _aggregate(series, band)
        if show_runs:
            rx: list[float | None] = []
            ry: list[float | None] = []
            for a, b in series:
                rx += a.tolist() + [None]
                ry += b.tolist() + [None]
            out.append(
                go.Scatter(
                    x=rx,
                    y=ry,
                    mode="lines",
                    line=dict(color=with_alpha(color, 0.3), width=0.8),
                    hoverinfo="skip",
                    showlegend=False,
                    legendgroup=name,
                    name=name,
                )
            )
        if band != "none":
            ok = ~(np.isnan(lo) | np.isnan(hi))
            out.append(
                go.Scatter(
                    x=np.r_[xs[ok], xs[ok][::-1]],
                    y=np.r_[hi[ok], lo[ok][::-1]],
                    fill="toself",
                    fillcolor=with_alpha(color, 0.18),
                    line=dict(width=0),
                    hoverinfo="skip",
                    showlegend=False,
                    legendgroup=name,
                    name=name,
                )
            )
    runs = f" (mean of {len(series)} runs)" if len(series) > 1 else ""
    out.append(
        go.Scatter(
            x=xs,
            y=mean,
            mode="lines",
            line=dict(color=color, width=2),
            name=name,
            legendgroup=name,
            showlegend=show_legend,
            hovertemplate=f"{name}{runs}<br>{x}: %{{x}}<br>{metric}: %{{y:.5g}}<extra></extra>",
        )
    )
    return out


def _as_frame(rows: pd.DataFrame | Sequence[Mapping[str, Any]]) -> pd.DataFrame:
    return rows if isinstance(rows, pd.DataFrame) else pd.DataFrame(list(rows))


def bar_compare(
    frame: pd.DataFrame | Sequence[Mapping[str, Any]],
    value: str = "ratio",
    category: str = "graph",
    series: str = "method",
    error: str | None = None,
    reference: float | None = 1.0,
    reference_label: str = "lower bound",
    title: str | None = None,
    value_title: str | None = None,
    text_format: str = ".3g",
    unit: str | None = None,
) -> go.Figure:
    """Grouped bars of a quality table: ``value`` per ``series`` (method) per ``category`` (graph).

    Its keyword parameters are plot options, flat as a plotting call takes them.

    Several rows for one (category, series) pair (seeds) are averaged and their standard
    deviation drawn as error bars, unless ``error`` names a column holding the spread.

    Args:
        frame: a table (frame or list of dicts), e.g. makespan ratio to the lower bound.
        value: the column drawn.
        category: the column along the axis (graphs).
        series: the column giving one coloured bar per value (methods).
        error: a column with the error-bar half-width, if the table carries one.
        reference: a horizontal reference line (1.0: the lower bound); ``None`` for none.
        reference_label: its label.
        title, value_title: figure title and value-axis title (default: ``value``).
        text_format: d3 format of the value printed on each bar.
        unit: the unit of ``value`` (default: what its name implies, e.g. ``seconds``):
            drawn as the tables show it (seconds of 0.02 as 20 ms), named in the axis title;
            a log axis where the bars span two decades or more.

    Returns:
        A figure with one ``go.Bar`` per series.
    """
    from .tables import axis_scale, axis_title, axis_type, infer_unit

    df = _as_frame(frame)
    check_columns(df.columns, [value, category, series] + ([error] if error else []), "the table")
    cats = list(dict.fromkeys(df[category].astype(str)))
    names = list(dict.fromkeys(df[series].astype(str)))
    key = [df[category].astype(str), df[series].astype(str)]
    agg = df.groupby(key, sort=False)[value].agg(["mean", "std", "count"])
    if error:
        agg["std"] = df.groupby(key, sort=False)[error].mean()
    factor, shown = axis_scale(agg["mean"].dropna().tolist(), unit or infer_unit(value))
    agg[["mean", "std"]] = agg[["mean", "std"]] * factor
    fig = go.Figure()
    for i, name in enumerate(names):
        rows = agg.xs(name, level=1).reindex(cats)
        has_err = bool(rows["std"].notna().any())
        fig.add_trace(
            go.Bar(
                x=cats,
                y=rows["mean"].to_numpy(),
                name=name,
                marker=dict(color=series_color(i)),
                error_y=dict(
                    type="data",
                    array=rows["std"].fillna(0).to_numpy(),
                    visible=has_err,
                    thickness=1.2,
                ),
                text=rows["mean"].to_numpy(),
                texttemplate=f"%{{y:{text_format}}}",
                textposition="inside",
                insidetextanchor="start",
                customdata=rows["count"].fillna(0).to_numpy(),
                hovertemplate=f"{name}<br>{category}: %{{x}}<br>{value}: %{{y:.5g}}<br>rows: %{{customdata}}<extra></extra>",
            )
        )
    if reference is not None:
        fig.add_hline(
            y=reference * factor,
            line=dict(color="#444", dash="dash", width=1),
            annotation_text=reference_label,
            annotation_position="top right",
        )
    fig.update_layout(
        title=title,
        barmode="group",
        template="plotly_white",
        yaxis_title=value_title or axis_title(value, shown),
        yaxis_type=axis_type(agg["mean"].dropna().tolist()),
        xaxis_title=category,
        legend=dict(title=series),
        height=420,
        margin=dict(l=10, r=10, t=60, b=50),
    )
    return fig
