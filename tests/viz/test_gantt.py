"""Gantt charts and the critical path of a trace."""

from __future__ import annotations

import numpy as np
import pytest

from doppler_lab.house.errors import ConfigError, GraphError
from doppler_lab.io.documents import read_paper_graph
from doppler_lab.ir.graph import DataflowGraph
from doppler_lab.ir.trace import Trace
from doppler_lab.timing.sim import simulate
from doppler_lab.viz import compare_gantt, critical_path, gantt, transfer_lanes

from viz_helpers import blocked_mlp, random_dag, round_robin_wc


@pytest.fixture(scope="module")
def mlp() -> DataflowGraph:
    return blocked_mlp()


@pytest.fixture(scope="module")
def mlp_wc(mlp: DataflowGraph) -> Trace:
    return round_robin_wc(mlp)


@pytest.fixture(scope="module")
def big() -> tuple[DataflowGraph, Trace]:
    g = random_dag(10_000)
    placement = np.random.default_rng(1).integers(0, 4, g.num_nodes)
    return g, simulate(g, "uniform", placement, semantics="paper")


@pytest.fixture(scope="module")
def ffnn(paper_dir) -> DataflowGraph:
    path = paper_dir / "ffnn_192nodes.txt"
    if not path.exists():
        pytest.skip(f"paper graph {path} not found")
    return read_paper_graph(path)


def bars(fig):
    return [t for t in fig.data if t.type == "bar" and t.name != "critical path"]


def lanes_of(fig, axis: str = "yaxis") -> list[str]:
    return list(fig.layout[axis].categoryarray)


def assert_valid_path(trace: Trace, steps, rtol: float = 1e-9) -> None:
    """A chain from time 0 to the makespan, each step ending where the next starts."""
    tol = rtol * trace.makespan
    assert steps, "empty critical path"
    assert abs(steps[-1].end - trace.makespan) <= tol
    assert steps[-1].record == "op"
    assert steps[0].start <= tol
    for a, b in zip(steps, steps[1:]):
        assert abs(a.end - b.start) <= tol, (a, b)
    for s in steps:
        if s.record == "op":
            assert trace.names[s.index] == s.name
            assert (trace.start[s.index], trace.end[s.index]) == (s.start, s.end)
        else:
            assert (trace.transfer_start[s.index], trace.transfer_end[s.index]) == (s.start, s.end)


# -- figure structure -------------------------------------------------------------------------
def test_paper_trace_has_device_and_pair_lanes(ffnn: DataflowGraph) -> None:
    trace = simulate(ffnn, "uniform", np.arange(ffnn.num_nodes) % 4, semantics="paper")
    fig = gantt(trace, ffnn)
    lanes = lanes_of(fig)
    assert lanes[:4] == [f"device {d}" for d in range(4)]
    pairs = {f"link {a}->{b}" for a, b in zip(trace.transfer_src_device, trace.transfer_dst_device)}
    assert set(lanes[4:]) == pairs
    assert fig.layout.xaxis.type == "linear"
    assert fig.layout.barmode == "overlay"
    assert len(fig.data) <= 8  # a few traces, not one per op
    op_bar = next(b for b in bars(fig) if b.name == "compute")
    assert len(op_bar.x) == trace.device[trace.device >= 0].size
    assert all(isinstance(v, float) for v in op_bar.base[:5])  # numeric time, not dates
    names = {row[0] for row in op_bar.customdata}
    assert set(ffnn.names) <= names
    assert "%{customdata[0]}" in op_bar.hovertemplate and "duration" in op_bar.hovertemplate


def test_bars_match_the_trace(mlp: DataflowGraph, mlp_wc: Trace) -> None:
    fig = gantt(mlp_wc, mlp)
    seen = {}
    for b in bars(fig):
        for lane, base, dur, row in zip(b.y, b.base, b.x, b.customdata):
            seen[(row[0], lane)] = (base, base + dur)
    for v in mlp.compute_nodes:
        start, end = seen[(mlp.names[v], f"device {mlp_wc.device[v]}")]
        assert start == pytest.approx(mlp_wc.start[v]) and end == pytest.approx(mlp_wc.end[v])
    assert sum(len(b.x) for b in bars(fig)) == mlp.compute_nodes.size + mlp_wc.num_transfers


def test_link_lanes_name_link_resources(mlp: DataflowGraph, mlp_wc: Trace) -> None:
    fig = gantt(mlp_wc, mlp)
    index, labels = transfer_lanes(mlp_wc)
    assert labels and all(lb.startswith("link pcie") for lb in labels)
    assert lanes_of(fig)[4:] == labels
    transfer_bar = next(b for b in bars(fig) if b.name == "transfer")
    assert set(transfer_bar.y) == set(labels)
    assert {row[0] for row in transfer_bar.customdata} == {
        f"{mlp.names[u]} -> {mlp.names[w]}"
        for u, w in zip(mlp_wc.transfer_src, mlp_wc.transfer_dst)
    }


def test_legend_by_kind_and_other_colourings(mlp: DataflowGraph, mlp_wc: Trace) -> None:
    by_kind = {b.name for b in bars(gantt(mlp_wc, mlp))}
    assert by_kind == {"einsum", "elementwise", "reduce", "transfer"}
    by_device = {b.name for b in bars(gantt(mlp_wc, mlp, color_by="device"))}
    assert by_device == {f"device {d}" for d in range(4)}
    by_node = bars(gantt(mlp_wc, mlp, color_by="node"))
    assert len(by_node) == 2 and by_node[0].marker.colorscale is not None
    with pytest.raises(ConfigError, match="color_by 'colour'"):
        gantt(mlp_wc, mlp, color_by="colour")  # type: ignore[arg-type]


def test_idle_devices_keep_their_lane(mlp: DataflowGraph) -> None:
    trace = simulate(mlp, "p100x4", np.zeros(mlp.num_nodes, dtype=int), semantics="wc")
    fig = gantt(trace, mlp)
    placeholder = next(t for t in fig.data if t.name == "lanes")
    assert list(placeholder.y) == [f"device {d}" for d in range(4)]


def test_without_transfers_or_highlight(mlp: DataflowGraph, mlp_wc: Trace) -> None:
    fig = gantt(mlp_wc, mlp, show_transfers=False, highlight_critical=False)
    assert lanes_of(fig) == [f"device {d}" for d in range(4)]
    assert not any(t.name == "critical path" for t in fig.data)


def test_critical_path_is_highlighted(mlp: DataflowGraph, mlp_wc: Trace) -> None:
    fig = gantt(mlp_wc, mlp)
    steps = critical_path(mlp_wc, mlp)
    outline = next(t for t in fig.data if t.type == "bar" and t.name == "critical path")
    assert list(outline.y) == [s.lane for s in steps]
    assert list(outline.base) == pytest.approx([s.start for s in steps])


def test_many_ops_are_merged_past_max_ops() -> None:
    g = random_dag(1500)
    trace = simulate(g, "uniform", np.arange(g.num_nodes) % 3, semantics="paper")
    fig = gantt(trace, g, max_ops=100)
    op_bars = [b for b in bars(fig) if b.name != "transfer"]
    assert sum(len(b.x) for b in op_bars) <= 100
    busy = {}
    for b in op_bars:
        for lane, dur in zip(b.y, b.x):
            busy[lane] = busy.get(lane, 0.0) + dur
    for d in range(3):  # merged segments still cover every op's time
        assert busy[f"device {d}"] >= trace.busy_time()[d] - 1e-6
    assert any(" ops: " in row[0] for b in op_bars for row in b.customdata)


def test_ten_thousand_ops_use_few_traces(big) -> None:
    g, trace = big
    fig = gantt(trace, g)
    memory = [t for t in fig.data if t.legendgroup == "memory"]
    assert len(memory) == trace.num_devices  # one memory line per device
    assert len(fig.data) - len(memory) <= 10
    assert sum(len(b.x) for b in bars(fig)) == g.compute_nodes.size + trace.num_transfers
    jumps = next(t for t in fig.data if t.name == "critical path jumps")
    assert jumps.visible == "legendonly"  # a long path's connectors are offered, not drawn
    assert list(fig.layout.yaxis.range) == [len(lanes_of(fig)) - 0.5, -0.5]


def test_compare_gantt_shares_the_time_axis(mlp: DataflowGraph) -> None:
    traces = {
        "round robin": simulate(mlp, "p100x4", np.arange(mlp.num_nodes) % 4, semantics="wc"),
        "single": simulate(mlp, "p100x4", np.zeros(mlp.num_nodes, dtype=int), semantics="wc"),
    }
    fig = compare_gantt(traces, mlp, time_unit="s")
    assert fig.layout.xaxis.matches == "x2" or fig.layout.xaxis2.matches == "x"
    titles = [a.text for a in fig.layout.annotations]
    assert titles[0].startswith("round robin: makespan") and titles[1].startswith("single")
    assert lanes_of(fig, "yaxis2") == [f"device {d}" for d in range(4)]
    assert fig.layout.xaxis2.title.text == "time (s)"
    legend = [t.name for t in fig.data if t.showlegend is not False]
    assert len(legend) == len(set(legend))  # each kind listed once
    with pytest.raises(ConfigError, match="at least one trace"):
        compare_gantt({})


def test_time_units_on_axes_titles_and_hovers(mlp: DataflowGraph) -> None:
    """Modelled times read as times everywhere: ticks and hovers in SI units (``50µs``),
    titles in the same unit, never a raw ``6.51993e-05``; compare_gantt picks the unit itself
    (notebook 04 passes none)."""
    import re

    traces = {
        "round robin": simulate(mlp, "p100x4", np.arange(mlp.num_nodes) % 4, semantics="wc"),
        "single": simulate(mlp, "p100x4", np.zeros(mlp.num_nodes, dtype=int), semantics="wc"),
    }
    for fig in (compare_gantt(traces, mlp), gantt(traces["single"], mlp)):
        axis = fig.layout.xaxis2 if "xaxis2" in fig.layout else fig.layout.xaxis
        assert axis.title.text == "time (s)" and axis.ticksuffix == "s"
        assert axis.exponentformat == "SI"
        texts = [a.text for a in fig.layout.annotations] + [fig.layout.title.text]
        for text in texts:
            if text and "makespan" in text:
                assert re.search(r"makespan \d+(\.\d+)? (µs|ms|s)\b", text), text
                assert "e-0" not in text
        hovers = [t.hovertemplate for t in fig.data if t.hovertemplate]
        assert hovers and all(".6g" not in h for h in hovers)
    with pytest.raises(ConfigError, match="no option 'colour_by'"):
        compare_gantt(traces, mlp, colour_by="device")  # type: ignore[call-arg]
    by_device = compare_gantt(traces, mlp, color_by="device", show_transfers=False)
    assert {t.name for t in by_device.data if t.type == "bar"} >= {"device 0", "critical path"}


# -- critical path ----------------------------------------------------------------------------
@pytest.mark.parametrize(
    "cluster,semantics,devices",
    [
        ("uniform", "paper", 4),
        ("p100x4", "wc", 4),
        ("v100x8", "wc", 8),
        ("p100x4", "bsp", 4),
    ],
)
@pytest.mark.parametrize("with_graph", [True, False])
def test_critical_path_is_a_chain(
    cluster: str, semantics: str, devices: int, with_graph: bool
) -> None:
    g = blocked_mlp() if cluster != "uniform" else random_dag(300, seed=3)
    placement = np.random.default_rng(0).integers(0, devices, g.num_nodes)
    trace = simulate(g, cluster, placement, semantics=semantics)
    steps = critical_path(trace, g if with_graph else None)
    assert_valid_path(trace, steps)


def test_critical_path_on_noisy_and_paper_traces(ffnn: DataflowGraph) -> None:
    noisy = simulate(blocked_mlp(), "p100x4", np.arange(68) % 4, semantics="wc", noise=0.3, seed=7)
    assert_valid_path(noisy, critical_path(noisy, blocked_mlp()))
    paper = simulate(ffnn, "uniform", np.arange(ffnn.num_nodes) % 4, semantics="paper")
    steps = critical_path(paper, ffnn)
    assert_valid_path(paper, steps)
    assert any(s.record == "transfer" for s in steps)


def test_critical_path_on_ten_thousand_ops(big) -> None:
    g, trace = big
    assert_valid_path(trace, critical_path(trace, g))


def _trace(names, device, start, end, transfers=()) -> Trace:
    tr = np.array(transfers, dtype=float).reshape(-1, 6)  # src, dst, src_dev, dst_dev, start, end
    return Trace(
        graph_name="hand",
        names=tuple(names),
        kinds=("compute",) * len(names),
        device=np.array(device),
        start=np.array(start, dtype=float),
        end=np.array(end, dtype=float),
        transfer_src=tr[:, 0],
        transfer_dst=tr[:, 1],
        transfer_src_device=tr[:, 2],
        transfer_dst_device=tr[:, 3],
        transfer_start=tr[:, 4],
        transfer_end=tr[:, 5],
        transfer_link=np.full(len(tr), -1),
        num_devices=2,
        semantics="measured",
    )


def _chain_graph() -> DataflowGraph:
    from doppler_lab.ir.graph import GraphBuilder

    b = GraphBuilder("hand")
    a = b.add_node("a", cost=1.0)
    c = b.add_node("c", cost=1.0)
    b.add_node("b", cost=1.0, inputs=[a])
    b.add_node("d", cost=1.0, inputs=[c])
    return b.build()


def test_critical_path_follows_the_device_when_it_was_busy() -> None:
    g = _chain_graph()  # a -> b, c -> d; all on device 0: d waits for the device, not for c
    trace = _trace(g.names, [0, 0, 0, 0], [0, 1, 2, 3], [1, 2, 3, 4])
    steps = critical_path(trace, g)
    assert [s.name for s in steps] == ["a", "c", "b", "d"]


def test_critical_path_crosses_a_transfer() -> None:
    g = _chain_graph()  # a on 0, b on 1 after a transfer of a; c and d run early on device 1
    trace = _trace(g.names, [0, 1, 1, 1], [0, 0, 3, 1], [1, 1, 4, 2], [(0, 2, 0, 1, 1.0, 3.0)])
    steps = critical_path(trace, g)
    assert [(s.record, s.name) for s in steps] == [("op", "a"), ("transfer", "a -> b"), ("op", "b")]
    assert steps[1].lane == "link 0->1"


def test_critical_path_bridges_dispatch_gaps_in_measured_traces() -> None:
    g = _chain_graph()
    trace = _trace(g.names, [0, 1, 0, 1], [0, 0, 1.25, 1.5], [1, 1, 2, 2.5])
    steps = critical_path(trace, g)
    assert [s.name for s in steps] == ["c", "d"]  # d waited 0.5 after c: the gap is kept
    assert steps[0].start == 0 and steps[-1].end == trace.makespan


def test_a_trace_of_another_graph_is_refused(mlp_wc: Trace) -> None:
    with pytest.raises(GraphError, match="68 nodes but graph 'random10'"):
        critical_path(mlp_wc, random_dag(10))
    with pytest.raises(ConfigError, match="max_ops"):
        gantt(mlp_wc, max_ops=0)


def test_memory_panel_under_the_lanes(mlp: DataflowGraph, mlp_wc: Trace) -> None:
    """A simulated trace with sizes gets a memory row on the shared time axis; off on request,
    and by default where the trace has no memory or no graph is given."""
    from dataclasses import replace

    from doppler_lab.timing.sim.footprint import memory_profile

    fig = gantt(mlp_wc, mlp)
    memory = [t for t in fig.data if t.legendgroup == "memory"]
    assert [t.yaxis for t in memory] == ["y2"] * mlp_wc.num_devices
    assert fig.layout.yaxis2.title.text == "GB"
    assert fig.layout.xaxis2.title.text == "time (s)"
    prof = memory_profile(mlp, mlp_wc)
    for d, line in enumerate(memory):
        assert max(line.y) == pytest.approx(prof.levels[d].max() / 1e9)
        assert max(line.y) <= mlp_wc.peak_memory_bytes[d] / 1e9 + 1e-12
        assert line.x[-1] >= mlp_wc.makespan
    plain = gantt(mlp_wc, mlp, show_memory=False)
    assert not any(t.legendgroup == "memory" for t in plain.data)
    assert not any(t.legendgroup == "memory" for t in gantt(mlp_wc).data)
    old = replace(mlp_wc, peak_memory_bytes=None)
    assert not any(t.legendgroup == "memory" for t in gantt(old, mlp).data)
    with pytest.raises(ConfigError, match="show_memory"):
        gantt(old, mlp, show_memory=True)
    both = compare_gantt({"a": mlp_wc, "b": mlp_wc}, mlp, show_memory=True)
    assert sum(t.legendgroup == "memory" for t in both.data) == 2 * mlp_wc.num_devices
    assert fig.layout.xaxis.matches == "x2" or fig.layout.xaxis2.matches == "x"
