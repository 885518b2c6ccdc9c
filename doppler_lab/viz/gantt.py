"""Gantt charts of traces: a lane per device and per transfer lane, the critical path marked.

A chart uses a handful of plotly traces whatever the size of the execution: one horizontal
``go.Bar`` (with ``base=`` starts) per colour group, one for the critical path's outlines and one
line for its jumps across lanes (listed in the legend but not drawn when the path is long). Past
``max_ops`` bars, back-to-back records of one lane and colour are merged into segments so that
100k-op traces stay responsive.

Under the lanes, a memory panel (when the trace records ``peak_memory_bytes`` and the graph is
given): bytes resident on each device over time, a step line per device, from the memory model
of :mod:`doppler_lab.timing.sim.footprint` applied to the trace's times (for a measured trace
its legend also gives the executor's measured peak).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal, NamedTuple, TypedDict, Unpack

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from ..house.errors import ConfigError
from ..ir.graph import DataflowGraph
from ..ir.trace import Trace
from ..ir.trace_path import (
    PathStep,
    check_trace_graph,
    critical_path,
    device_lane,
    transfer_lanes,
    transfer_name,
)
from ._style import (
    CRITICAL_COLOR,
    NODE_COLORSCALE,
    check_choice,
    kind_color,
    series_color,
    with_alpha,
)

ColorBy = Literal["kind", "device", "node"]
COLOR_BY: tuple[str, ...] = ("kind", "device", "node")
DEFAULT_MAX_OPS = 20_000


class GanttOptions(TypedDict, total=False):
    """Keyword options of :func:`compare_gantt`, as in :func:`gantt` (``show_memory`` defaults
    to False there)."""

    show_transfers: bool
    highlight_critical: bool
    color_by: ColorBy
    max_ops: int
    time_unit: str | None
    show_memory: bool | str


_OP_HOVER = (
    "<b>%{customdata[0]}</b><br>kind: %{customdata[1]}<br>%{customdata[2]}"
    "<br>start: %{customdata[3]:.6g}<br>end: %{customdata[4]:.6g}"
    "<br>duration: %{customdata[5]:.6g}<extra></extra>"
)
_TRANSFER_HOVER = (
    "<b>%{customdata[0]}</b><br>transfer device %{customdata[6]} on %{customdata[2]}"
    "<br>start: %{customdata[3]:.6g}<br>end: %{customdata[4]:.6g}"
    "<br>duration: %{customdata[5]:.6g}<extra></extra>"
)


# -- bars -------------------------------------------------------------------------------------
class _Bars(NamedTuple):
    """Bars of one record type: lane label, colour group, times, hover fields."""

    lane: np.ndarray
    group: np.ndarray
    start: np.ndarray
    end: np.ndarray
    name: np.ndarray
    kind: np.ndarray
    color_value: np.ndarray
    extra: np.ndarray


def _op_bars(trace: Trace, color_by: str) -> _Bars:
    ran = np.flatnonzero((trace.device >= 0) & np.isfinite(trace.start))
    dev = trace.device[ran]
    kinds = np.array(trace.kinds, dtype=object)[ran] if ran.size else np.zeros(0, dtype=object)
    lanes = np.array([device_lane(d) for d in range(trace.num_devices)], dtype=object)
    group = {"kind": kinds, "device": lanes[dev], "node": np.full(ran.size, "ops", dtype=object)}[
        color_by
    ]
    return _Bars(
        lane=lanes[dev],
        group=group,
        start=trace.start[ran],
        end=trace.end[ran],
        name=np.array(trace.names, dtype=object)[ran] if ran.size else np.zeros(0, dtype=object),
        kind=kinds,
        color_value=ran.astype(np.float64),
        extra=np.full(ran.size, "", dtype=object),
    )


def _transfer_bars(trace: Trace, color_by: str) -> _Bars:
    t = trace.num_transfers
    lane_index, labels = transfer_lanes(trace)
    src_dev, dst_dev = trace.transfer_src_device, trace.transfer_dst_device
    if color_by == "device":
        group = np.array([device_lane(d) for d in src_dev.tolist()], dtype=object)
    else:
        group = np.full(t, "transfer", dtype=object)
    return _Bars(
        lane=np.array(labels, dtype=object)[lane_index] if t else np.zeros(0, dtype=object),
        group=group,
        start=trace.transfer_start,
        end=trace.transfer_end,
        name=np.array([transfer_name(trace, k) for k in range(t)], dtype=object),
        kind=np.full(t, "transfer", dtype=object),
        color_value=trace.transfer_src.astype(np.float64),
        extra=np.array(
            [f"{a}->{b}" for a, b in zip(src_dev.tolist(), dst_dev.tolist())], dtype=object
        ),
    )


def _merge_runs(key: np.ndarray, start: np.ndarray, end: np.ndarray, gap: float) -> np.ndarray:
    """Segment id of each bar (in the order given) after merging bars of one key that overlap or
    lie within ``gap`` of each other."""
    order = np.lexsort((start, key))
    seg = np.empty(key.size, dtype=np.int64)
    current, reach, last_key = -1, -np.inf, None
    for i in order.tolist():
        if key[i] != last_key or start[i] > reach + gap:
            current += 1
            last_key, reach = key[i], end[i]
        else:
            reach = max(reach, end[i])
        seg[i] = current
    return seg


def _coalesce(bars: _Bars, max_bars: int, span: float, what: str) -> _Bars:
    """Merge back-to-back bars of one lane and group until at most ``max_bars`` remain."""
    if bars.start.size <= max_bars:
        return bars
    _, key = np.unique(
        np.char.add(bars.lane.astype(str), "\x00" + bars.group.astype(str)), return_inverse=True
    )
    gap = span / 2000.0
    while True:
        seg = _merge_runs(key, bars.start, bars.end, gap)
        if seg.max() + 1 <= max_bars or gap > span:
            break
        gap *= 2.0
    m = int(seg.max()) + 1
    first = np.full(m, -1, dtype=np.int64)
    order = np.lexsort((bars.start, seg))
    is_first = np.r_[True, seg[order][1:] != seg[order][:-1]]
    first[seg[order][is_first]] = order[is_first]
    last = np.empty(m, dtype=np.int64)
    is_last = np.r_[seg[order][1:] != seg[order][:-1], True]
    last[seg[order][is_last]] = order[is_last]
    count = np.bincount(seg, minlength=m)
    start = np.full(m, np.inf)
    np.minimum.at(start, seg, bars.start)
    end = np.full(m, -np.inf)
    np.maximum.at(end, seg, bars.end)
    names = np.array(
        [
            bars.name[f] if c == 1 else f"{c} {what}: {bars.name[f]} … {bars.name[la]}"
            for f, la, c in zip(first.tolist(), last.tolist(), count.tolist())
        ],
        dtype=object,
    )
    return _Bars(
        lane=bars.lane[first],
        group=bars.group[first],
        start=start,
        end=end,
        name=names,
        kind=bars.kind[first],
        color_value=bars.color_value[first],
        extra=bars.extra[first],
    )


def _group_color(group: str, color_by: str) -> str:
    if color_by == "device" and group.startswith("device "):
        return series_color(int(group.split()[1]))
    return kind_color(group)


def _bar_traces(
    bars: _Bars, color_by: str, transfers: bool, node_range: tuple[float, float], legend: set[str]
) -> list[go.Bar]:
    out: list[go.Bar] = []
    hover = _TRANSFER_HOVER if transfers else _OP_HOVER
    groups = sorted(set(bars.group.tolist()))
    # a hairline between back-to-back bars while they are wide enough to show it
    edge = dict(width=0.6, color="white") if bars.start.size <= 3000 else dict(width=0)
    for grp in groups:
        sel = np.flatnonzero(bars.group == grp)
        custom = np.empty((sel.size, 7), dtype=object)
        custom[:, 0] = bars.name[sel]
        custom[:, 1] = bars.kind[sel]
        custom[:, 2] = bars.lane[sel]
        custom[:, 3] = bars.start[sel]
        custom[:, 4] = bars.end[sel]
        custom[:, 5] = bars.end[sel] - bars.start[sel]
        custom[:, 6] = bars.extra[sel]
        if color_by == "node":
            marker = dict(
                color=bars.color_value[sel],
                colorscale=NODE_COLORSCALE,
                cmin=node_range[0],
                cmax=node_range[1],
                line=edge,
            )
            name = "transfers (colour: producer id)" if transfers else "ops (colour: node id)"
        else:
            base = _group_color(grp, color_by)
            marker = dict(color=with_alpha(base, 0.75) if transfers else base, line=edge)
            name = grp
        out.append(
            go.Bar(
                orientation="h",
                y=bars.lane[sel],
                x=bars.end[sel] - bars.start[sel],
                base=bars.start[sel],
                customdata=custom,
                hovertemplate=hover,
                marker=marker,
                width=0.55 if transfers else 0.8,
                name=name,
                legendgroup=name,
                showlegend=name not in legend,
            )
        )
        legend.add(name)
    return out


def _merge_steps(steps: list[PathStep], tol: float) -> list[PathStep]:
    """Contiguous steps on one lane as one step (for outlining very long paths)."""
    out = [steps[0]]
    for s in steps[1:]:
        last = out[-1]
        if s.lane == last.lane and abs(s.start - last.end) <= tol:
            out[-1] = last._replace(end=s.end)
        else:
            out.append(s)
    return out


def _critical_traces(
    steps: list[PathStep], legend: set[str], max_bars: int
) -> list[go.BaseTraceType]:
    if not steps:
        return []
    tol = 1e-9 * max(abs(steps[-1].end), 1e-300)
    if len(steps) > min(max_bars, 2000):
        steps = _merge_steps(steps, tol)
    lanes = [s.lane for s in steps]
    starts = np.array([s.start for s in steps])
    ends = np.array([s.end for s in steps])
    widths = [0.55 if s.record == "transfer" else 0.8 for s in steps]
    dense = len(steps) > 200  # thinner strokes so that a long path does not hide the lanes
    name = "critical path"
    outline = go.Bar(
        orientation="h",
        y=lanes,
        x=ends - starts,
        base=starts,
        width=widths,
        marker=dict(
            color="rgba(0,0,0,0)", line=dict(color=CRITICAL_COLOR, width=1 if dense else 2)
        ),
        name=name,
        legendgroup=name,
        showlegend=name not in legend,
        hoverinfo="skip",
    )
    # connectors from each step's end to the next step's start (the jumps across lanes); none
    # across a gap, which is a hidden transfer or dispatch overhead
    xs: list[float | None] = []
    ys: list[str | None] = []
    for a, b in zip(steps, steps[1:]):
        if a.lane != b.lane and abs(a.end - b.start) <= tol:
            xs += [a.end, b.start, None]
            ys += [a.lane, b.lane, None]
    # a long path jumps so often that its connectors would hide the chart: listed, not drawn
    jumps = f"{name} jumps"
    walk = go.Scatter(
        x=xs,
        y=ys,
        mode="lines",
        line=dict(color=CRITICAL_COLOR, width=1 if dense else 1.5),
        name=jumps if dense else name,
        legendgroup=jumps if dense else name,
        showlegend=dense and jumps not in legend,
        visible="legendonly" if dense else True,
        hoverinfo="skip",
    )
    legend.update((name, jumps) if dense else (name,))
    return [outline, walk]


class _Panel(NamedTuple):
    traces: list[go.BaseTraceType]
    lanes: list[str]
    makespan: float
    memory: list[go.BaseTraceType] | None = None  # the memory panel's lines, when shown


def _has_memory(trace: Trace, graph: DataflowGraph | None) -> bool:
    peak = trace.peak_memory_bytes
    return graph is not None and peak is not None and bool((peak > 0).any())


def _memory_traces(trace: Trace, graph: DataflowGraph) -> list[go.BaseTraceType]:
    """A step line per device: bytes resident over time (GB)."""
    from ..timing.sim.footprint import memory_profile

    prof = memory_profile(graph, trace)
    measured = trace.semantics == "measured"
    out: list[go.BaseTraceType] = []
    for d in range(trace.num_devices):
        t = np.append(prof.times[d], max(trace.makespan, float(prof.times[d][-1])))
        level = np.append(prof.levels[d], prof.levels[d][-1]) / 1e9
        peak = trace.peak_memory_bytes[d] / 1e9  # type: ignore[index]
        label = f"{device_lane(d)} memory (peak {peak:.3g} GB{' measured' if measured else ''})"
        out.append(
            go.Scatter(
                x=t,
                y=level,
                mode="lines",
                line=dict(shape="hv", width=1.5, color=series_color(d)),
                name=label,
                legendgroup="memory",
                hovertemplate=f"{device_lane(d)}<br>%{{x:.6g}}: %{{y:.4g}} GB<extra></extra>",
            )
        )
    return out


def _panel(
    trace: Trace,
    graph: DataflowGraph | None,
    legend: set[str],
    show_transfers: bool = True,
    highlight_critical: bool = True,
    color_by: str = "kind",
    max_ops: int = DEFAULT_MAX_OPS,
    show_memory: bool | str = False,
) -> _Panel:
    check_choice(color_by, COLOR_BY, "color_by")
    if show_memory not in (True, False, "auto"):
        raise ConfigError(f"show_memory must be True, False or 'auto', got {show_memory!r}")
    if max_ops < 1:
        raise ConfigError(f"max_ops must be >= 1, got {max_ops}")
    check_trace_graph(trace, graph)
    span = trace.makespan
    node_range = (0.0, float(max(len(trace.names) - 1, 1)))
    lanes = [device_lane(d) for d in range(trace.num_devices)]
    ops = _coalesce(_op_bars(trace, color_by), max_ops, span, "ops")
    traces: list[go.BaseTraceType] = list(_bar_traces(ops, color_by, False, node_range, legend))
    if show_transfers and trace.num_transfers:
        tr = _coalesce(_transfer_bars(trace, color_by), max_ops, span, "transfers")
        traces += _bar_traces(tr, color_by, True, node_range, legend)
        lanes += transfer_lanes(trace)[1]
    # plotly drops categories without data: an invisible point per lane keeps idle lanes shown
    traces.append(
        go.Scatter(
            x=np.zeros(len(lanes)),
            y=lanes,
            mode="markers",
            marker=dict(opacity=0),
            hoverinfo="skip",
            showlegend=False,
            name="lanes",
        )
    )
    if highlight_critical:
        steps = critical_path(trace, graph)
        if not show_transfers:
            steps = [s for s in steps if s.record == "op"]
        traces += _critical_traces(steps, legend, max_ops)
    memory = None
    if show_memory and _has_memory(trace, graph):
        memory = _memory_traces(trace, graph)  # type: ignore[arg-type]
    elif show_memory is True:
        raise ConfigError(
            "show_memory needs the graph and a trace with peak_memory_bytes (a simulated trace, "
            "or a measured one from an executor that records memory) and tensor sizes"
        )
    return _Panel(traces, lanes, span, memory)


def format_span(value: float, time_unit: str | None) -> str:
    """A time on a chart, in the unit its axis shows: seconds as ``227.9 µs`` / ``1.234 ms``
    (the axis ticks read ``50µs``), cost units as ``1234 cost units``, no unit as a number."""
    from ..house.progress import format_time

    if time_unit == "s":
        return format_time(value).replace(" us", " µs")
    if time_unit is None:
        return f"{value:.4g}"
    return f"{value:.4g} {time_unit}"


def _title(trace: Trace, time_unit: str | None = None) -> str:
    return (
        f"{trace.graph_name} ({trace.semantics}): makespan {format_span(trace.makespan, time_unit)}"
    )


def resolve_time_unit(
    trace: Trace, graph: DataflowGraph | None, time_unit: str | None
) -> str | None:
    """``"auto"``: seconds for measured traces and graphs costed by the cost model, ``cost
    units`` for graphs with explicit costs (the paper's files); else ``time_unit`` as given."""
    if time_unit != "auto":
        return time_unit
    if trace.semantics == "measured" or (graph is not None and graph.compute_cost is None):
        return "s"
    return "cost units" if graph is not None else None


def _time_axis(time_unit: str | None) -> dict[str, object]:
    """The time axis: seconds as SI ticks with their unit (``0``, ``50µs``, ``100µs``; plotly
    picks the prefix), other units in the title."""
    if time_unit == "s":
        return {"title": "time (s)", "exponentformat": "SI", "ticksuffix": "s"}
    return {"title": f"time ({time_unit})" if time_unit else "time"}


def gantt(
    trace: Trace,
    graph: DataflowGraph | None = None,
    title: str | None = None,
    show_transfers: bool = True,
    highlight_critical: bool = True,
    color_by: ColorBy = "kind",
    max_ops: int = DEFAULT_MAX_OPS,
    time_unit: str | None = "auto",
    show_memory: bool | str = "auto",
) -> go.Figure:
    """A Gantt chart of one execution.

    Its keyword parameters are plot options, flat as a plotting call takes them.

    Args:
        trace: the execution (simulated or measured).
        graph: the graph it ran (lets the critical path follow local producers).
        title: figure title (default: graph, semantics and makespan).
        show_transfers: add a lane per link resource (or per directed device pair).
        highlight_critical: outline the critical path and draw its walk across lanes.
        color_by: ``kind`` (legend by node kind), ``device``, or ``node`` (a colour scale over
            node ids; a transfer takes its producer's colour).
        max_ops: most bars per record type; beyond it, back-to-back bars of one lane and colour
            are merged (their hover names the first and last op).
        time_unit: unit shown on the time axis (``s``, ``paper units``); ``"auto"`` (default):
            :func:`resolve_time_unit`; None: no unit.
        show_memory: a memory panel under the lanes (bytes resident per device over time);
            ``"auto"`` (default): when the graph is given and the trace has a non-zero
            ``peak_memory_bytes``.

    Returns:
        A figure with a numeric time axis and one lane per device, then the transfer lanes
        (and the memory panel below, on the same time axis).
    """
    legend: set[str] = set()
    time_unit = resolve_time_unit(trace, graph, time_unit)
    panel = _panel(
        trace, graph, legend, show_transfers, highlight_critical, color_by, max_ops, show_memory
    )
    title = title if title is not None else _title(trace, time_unit)
    return _assemble([panel], None, title, color_by, time_unit, len(legend))


def compare_gantt(
    traces: Mapping[str, Trace],
    graph: DataflowGraph | Mapping[str, DataflowGraph] | None = None,
    title: str | None = None,
    **options: Unpack[GanttOptions],
) -> go.Figure:
    """Stacked Gantt charts of several executions on one shared time axis.

    Args:
        traces: label -> trace (for instance one per placer), drawn top to bottom.
        graph: the graph they ran, or one per label (labels without one get none).
        title: figure title.
        **options: ``show_transfers``, ``highlight_critical``, ``color_by``, ``max_ops``,
            ``time_unit``, as in :func:`gantt` (``time_unit`` from the first trace and graph).

    Returns:
        A figure with one subplot per trace, titled with its label and makespan.
    """
    if not traces:
        raise ConfigError("compare_gantt needs at least one trace; got an empty mapping")
    known = GanttOptions.__annotations__
    for key in options:
        if key not in known:
            raise ConfigError(
                f"compare_gantt has no option {key!r}; expected one of {tuple(known)}"
            )
    panel_options = {k: v for k, v in options.items() if k != "time_unit"}
    legend: set[str] = set()
    panels = []
    graphs = []
    for label, tr in traces.items():
        g = graph.get(label) if isinstance(graph, Mapping) else graph
        graphs.append(g)
        panels.append(_panel(tr, g, legend, **panel_options))  # type: ignore[arg-type]
    first = next(iter(traces.values()))
    unit = resolve_time_unit(first, graphs[0], options.get("time_unit", "auto"))
    subtitles = [
        f"{label}: makespan {format_span(p.makespan, unit)}" for label, p in zip(traces, panels)
    ]
    color_by = options.get("color_by", "kind")
    return _assemble(panels, subtitles, title, color_by, unit, len(legend))


def _assemble(
    panels: list[_Panel],
    subtitles: list[str] | None,
    title: str | None,
    color_by: str,
    time_unit: str | None,
    legend_entries: int,
) -> go.Figure:
    """Panels stacked on one shared time axis (a plain figure for one panel); a panel's memory
    lines get a row of their own under it."""
    heights: list[float] = []
    titles: list[str] = []
    for i, p in enumerate(panels):
        heights.append(len(p.lanes) + 1.5)
        titles.append(subtitles[i] if subtitles else "")
        if p.memory is not None:
            heights.append(4.0)
            titles.append("resident memory per device (GB)")
    rows = len(heights)
    legend_entries += sum(len(p.memory) for p in panels if p.memory is not None)
    fig = make_subplots(
        rows=rows,
        cols=1,
        shared_xaxes=True,
        vertical_spacing=min(0.08, 0.3 / rows),
        row_heights=[h / sum(heights) for h in heights],
        subplot_titles=titles if (subtitles or rows > len(panels)) else None,
    )
    row = 0
    for p in panels:
        row += 1
        for t in p.traces:
            fig.add_trace(t, row=row, col=1)
        fig.update_yaxes(
            type="category",
            categoryorder="array",
            categoryarray=p.lanes,
            range=[len(p.lanes) - 0.5, -0.5],  # lane 0 on top, no padding
            showgrid=False,
            row=row,
            col=1,
        )
        fig.add_vline(x=p.makespan, line=dict(color="#444", width=1, dash="dot"), row=row, col=1)
        if p.memory is not None:
            row += 1
            for t in p.memory:
                fig.add_trace(t, row=row, col=1)
            fig.update_yaxes(title="GB", rangemode="tozero", row=row, col=1)
    fig.update_xaxes(type="linear", rangemode="tozero", showgrid=True)
    fig.update_xaxes(row=rows, col=1, **_time_axis(time_unit))
    if time_unit == "s":  # every panel's ticks and every hover carry the unit (65.2µs)
        fig.update_xaxes(exponentformat="SI", ticksuffix="s")
        for t in fig.data:
            if t.hovertemplate:
                t.hovertemplate = t.hovertemplate.replace(":.6g}", ":.4~s}s")
    fig.update_layout(
        title=title,
        barmode="overlay",
        bargap=0.0,
        template="plotly_white",
        height=max(280, 160 + 27 * legend_entries, 90 + 50 * rows + int(26 * sum(heights))),
        hoverlabel=dict(namelength=-1),
        legend=dict(title="colour" if color_by == "node" else color_by),
        margin=dict(l=10, r=10, t=70, b=50),
    )
    return fig
