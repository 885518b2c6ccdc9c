"""A picture of a dataflow graph: layered by depth, coloured by kind or device, sized by work."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

import numpy as np
import plotly.graph_objects as go

from ..house.errors import PlacementError
from ..ir.graph import DataflowGraph
from ..ir.placement import Placement
from ._style import check_choice, kind_color, series_color

GraphColorBy = Literal["kind", "device"]
SizeBy = Literal["auto", "flops", "cost", "none"]
SIZE_BY: tuple[str, ...] = ("auto", "flops", "cost", "none")
_GL_NODES = 1500  # beyond this many nodes, WebGL traces keep panning smooth
_LABEL_NODES = 40  # up to this many ops, their names are printed next to them
_LABEL_PX = 6.0  # the width of a label's character at its font size (9 px)


def short_label(name: str, width: int) -> str:
    """A node's name as a label of at most ``width`` characters: an imported op's last scope
    and op (``lm.model.layers.0.self_attn.q_proj/linear`` -> ``q_proj/linear``), cut with an
    ellipsis when still too long.

    Example:
        >>> short_label("lm.model.layers.0.self_attn.q_proj/linear", 14)
        'q_proj/linear'
        >>> short_label("lm.model.layers.0.post_attention_layernorm/rsqrt_1", 12)
        'post_attent…'
        >>> short_label("lm.model.layers.1/add_8", 20)
        'layers.1/add_8'
    """
    scope, _, op = name.rpartition("/")
    parts = scope.split(".")
    tail = ".".join(parts[-2:]) if parts[-1].isdigit() else parts[-1]
    label = f"{tail}/{op}" if scope else name
    return label if len(label) <= width else label[: max(width - 1, 1)] + "…"


def layered_layout(graph: DataflowGraph, sweeps: int = 3) -> tuple[np.ndarray, np.ndarray]:
    """Coordinates of a layered drawing: x is the node's depth, y its rank within the layer.

    Input nodes sit half a layer left of their first consumer. Within a layer, nodes are ordered
    by the mean position of their neighbours (barycentre heuristic), alternating forward sweeps
    over predecessors and backward sweeps over successors, to cut edge crossings.

    Args:
        graph: the graph.
        sweeps: barycentre sweeps (0 keeps node-id order).

    Returns:
        ``(x, y)`` arrays of shape ``(N,)``; each layer is centred on ``y = 0``.
    """
    n = graph.num_nodes
    col = graph.depth.astype(np.float64)
    if graph.is_input.any():
        first_use = np.full(n, np.inf)
        np.minimum.at(first_use, graph.edge_src, col[graph.edge_dst])
        first_use[np.isinf(first_use)] = 0.0
        col = np.where(graph.is_input, first_use - 0.5, col)
    layers, layer_of = np.unique(col, return_inverse=True)
    members = [np.flatnonzero(layer_of == i) for i in range(layers.size)]
    y = np.zeros(n)
    for m in members:
        y[m] = np.arange(m.size) - (m.size - 1) / 2.0
    src, dst = graph.edge_src, graph.edge_dst
    for s in range(sweeps):
        forward = s % 2 == 0
        near, far = (dst, src) if forward else (src, dst)
        count = np.bincount(near, minlength=n)
        for m in members if forward else members[::-1]:
            bary = np.bincount(near, weights=y[far], minlength=n)[m]
            has = count[m] > 0
            key = np.where(has, bary / np.maximum(count[m], 1), y[m])
            order = m[np.lexsort((y[m], key))]
            y[order] = np.arange(m.size) - (m.size - 1) / 2.0
    return col, y


def _node_sizes(graph: DataflowGraph, size_by: str, largest: float) -> np.ndarray:
    """Marker diameters up to ``largest`` pixels; marker area grows with the node's work."""
    if size_by == "auto":
        size_by = "flops" if graph.flops[graph.compute_nodes].max(initial=0.0) > 0 else "cost"
    w = {"flops": graph.flops, "cost": graph.node_cost(), "none": np.zeros(graph.num_nodes)}[
        size_by
    ]
    w = np.where(graph.is_input, 0.0, w)
    top = w.max(initial=0.0)
    if top <= 0:
        return np.full(graph.num_nodes, 0.6 * largest)
    return largest * (0.3 + 0.7 * np.sqrt(w / top))


def _devices(graph: DataflowGraph, placement: Placement | np.ndarray | Sequence[int]) -> np.ndarray:
    dev = placement.device if isinstance(placement, Placement) else np.asarray(placement)
    if dev.shape != (graph.num_nodes,):
        raise PlacementError(
            f"placement has shape {dev.shape}; graph {graph.name!r} needs one device per node ({graph.num_nodes},)"
        )
    return dev.astype(np.int64)


def plot_graph(
    graph: DataflowGraph,
    placement: Placement | np.ndarray | Sequence[int] | None = None,
    color_by: GraphColorBy | None = None,
    size_by: SizeBy = "auto",
    show_inputs: bool = True,
    title: str | None = None,
) -> go.Figure:
    """Draw a dataflow graph left to right by depth.

    Args:
        graph: the graph.
        placement: device per node; needed for ``color_by="device"``.
        color_by: ``kind`` or ``device`` (default: ``device`` when a placement is given).
        size_by: ``flops``, ``cost`` (the graph's explicit or default node cost), ``none``, or
            ``auto`` (flops when the graph has them, else cost); marker area grows with it.
        show_inputs: draw input nodes (small grey diamonds) and their edges.
        title: figure title (default: the graph's name and sizes).

    Returns:
        A figure with one line trace for all edges and one marker trace per colour group.
    """
    color_by = color_by or ("device" if placement is not None else "kind")
    check_choice(color_by, ("kind", "device"), "color_by")
    check_choice(size_by, SIZE_BY, "size_by")
    if color_by == "device" and placement is None:
        raise PlacementError("color_by='device' needs a placement (a device per node)")
    dev = _devices(graph, placement) if placement is not None else None
    x, y = layered_layout(graph)
    columns, per_column = np.unique(x, return_counts=True)
    widest = int(per_column.max())
    height = int(min(1400, max(380, 16 * widest + 140)))
    # markers no wider than the spacing of layers and rows in a typical 1000-px-wide plot
    spacing = min(1000.0 / columns.size, (height - 140) / widest)
    size = _node_sizes(graph, size_by, float(np.clip(0.9 * spacing, 4.0, 22.0)))
    keep = np.ones(graph.num_nodes, dtype=bool) if show_inputs else ~graph.is_input
    gl = int(keep.sum()) > _GL_NODES
    scatter = go.Scattergl if gl else go.Scatter

    traces: list[go.BaseTraceType] = [_edge_trace(graph, x, y, keep, scatter)]

    kinds = np.array([graph.kind_name(v) for v in range(graph.num_nodes)], dtype=object)
    if color_by == "kind":
        group = kinds
    else:
        assert dev is not None
        group = np.where(
            graph.is_input, "input (resident)", np.char.add("device ", dev.astype(str))
        ).astype(object)
    cost = graph.node_cost()
    names, position = _node_labels(graph, x, y, spacing)
    for grp in sorted(set(group[keep].tolist()), key=_group_order):
        sel = np.flatnonzero(keep & (group == grp))
        traces.append(
            _group_trace(graph, grp, sel, x, y, size, kinds, cost, dev, names, position, scatter)
        )
    fig = go.Figure(data=traces)
    fig.update_layout(
        title=title
        if title is not None
        else f"{graph.name}: {graph.compute_nodes.size} ops, {int(graph.is_input.sum())} inputs, {graph.num_edges} edges",
        template="plotly_white",
        height=height,
        legend=dict(title=color_by, itemsizing="constant"),
        hovermode="closest",
        margin=dict(l=10, r=10, t=60, b=40),
    )
    fig.update_xaxes(title="depth (layer)", showgrid=False, zeroline=False)
    fig.update_yaxes(visible=False, showgrid=False, zeroline=False)
    return fig


def _edge_trace(
    graph: DataflowGraph, x: np.ndarray, y: np.ndarray, keep: np.ndarray, scatter: Any
) -> go.BaseTraceType:
    """One line trace for every edge between kept nodes (``None`` breaks the line)."""
    e = np.flatnonzero(keep[graph.edge_src] & keep[graph.edge_dst])
    ex = np.full(3 * e.size, None, dtype=object)
    ey = np.full(3 * e.size, None, dtype=object)
    ex[0::3], ex[1::3] = x[graph.edge_src[e]], x[graph.edge_dst[e]]
    ey[0::3], ey[1::3] = y[graph.edge_src[e]], y[graph.edge_dst[e]]
    return scatter(
        x=ex,
        y=ey,
        mode="lines",
        line=dict(color="rgba(120,120,120,0.35)", width=0.8),
        hoverinfo="skip",
        name="edges",
        showlegend=False,
    )


def _node_labels(
    graph: DataflowGraph, x: np.ndarray, y: np.ndarray, spacing: float
) -> tuple[np.ndarray, np.ndarray]:
    """Each node's short name (inputs: none) and where it goes (above or below its marker)."""
    # ops are named when there are few: short names, about as wide as two layers' spacing,
    # above and below their markers by turns (along a layer and across layers), so that
    # neighbours' labels do not overlap
    width = int(max(6, 1.8 * spacing / _LABEL_PX))
    names = np.array(
        ["" if graph.is_input[v] else short_label(graph.names[v], width) for v in range(x.size)],
        dtype=object,
    )
    layer = np.unique(x, return_inverse=True)[1]
    rank = np.floor(y + 0.25).astype(np.int64)  # consecutive within a layer (y steps by 1)
    position = np.where((rank + layer) % 2 == 0, "top center", "bottom center")
    return names, position


def _group_trace(
    graph: DataflowGraph,
    grp: str,
    sel: np.ndarray,
    x: np.ndarray,
    y: np.ndarray,
    size: np.ndarray,
    kinds: np.ndarray,
    cost: np.ndarray,
    dev: np.ndarray | None,
    names: np.ndarray,
    position: np.ndarray,
    scatter: Any,
) -> go.BaseTraceType:
    """The marker trace of one colour group (a kind or a device), hover data per node."""
    labels = graph.compute_nodes.size <= _LABEL_NODES
    custom = np.empty((sel.size, 6), dtype=object)
    custom[:, 0] = np.array(graph.names, dtype=object)[sel]
    custom[:, 1] = kinds[sel]
    custom[:, 2] = graph.flops[sel]
    custom[:, 3] = graph.out_bytes[sel]
    custom[:, 4] = cost[sel]
    custom[:, 5] = dev[sel] if dev is not None else ""
    if grp.startswith("device "):
        color = series_color(int(grp.split()[1]))
    else:
        color = kind_color("input" if grp.startswith("input") else grp)
    return scatter(
        x=x[sel],
        y=y[sel],
        mode="markers+text" if labels else "markers",
        text=names[sel] if labels else None,
        textposition=position[sel] if labels else None,
        textfont=dict(size=9, color="#57606a"),
        marker=dict(
            size=np.where(graph.is_input[sel], np.minimum(size[sel], 7.0), size[sel]),
            color=color,
            symbol=np.where(graph.is_input[sel], "diamond", "circle"),
            line=dict(width=0.5, color="white"),
        ),
        customdata=custom,
        hovertemplate=(
            "<b>%{customdata[0]}</b><br>kind: %{customdata[1]}<br>flops: %{customdata[2]:.4g}"
            "<br>out bytes: %{customdata[3]:.4g}<br>cost: %{customdata[4]:.4g}"
            + ("<br>device: %{customdata[5]}" if dev is not None else "")
            + "<extra></extra>"
        ),
        name=grp,
    )


def _group_order(group: str) -> tuple[int, int, str]:
    if group.startswith("device "):
        return (0, int(group.split()[1]), group)
    return (1 if group.startswith("input") else 0, 0, group)
