"""Measuring devices with the executor itself: dispatch gaps, links, op times; calibration.

Every number comes from executor traces, so it includes what the executor really costs (the
dispatch path, the copy lanes, the wake-ups, the other devices running at the same time).

- :func:`dispatch_gaps`: a chain of tiny ops on one device; the median gap between two ops.
- :func:`link_samples`: chains that alternate between two devices on tensors of several sizes;
  each crossing gives the copy's duration and the delay a consumer saw.
- :func:`host_probe`: chains of tiny ops alone and on every device at once, with and without a
  copy before each op: how the one host thread serialises launches and copy issues.
- :func:`op_samples`: graphs (a synthetic sweep of op kinds and shapes, plus any workloads) run
  under random placements; every op's measured duration.
- :func:`calibrate`: all three, fitted into a :class:`~doppler_lab.timing.calibration.Profile`
  (:func:`measure_calibration`: the same measurements, kept raw for a later fit).
"""

from __future__ import annotations

import os
import platform
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np
import torch
from tqdm.auto import tqdm

from ..ir.graph import DataflowGraph, GraphBuilder
from ..ir.placement import Placement, random_placement
from ..ir.trace import Trace
from ..timing.calibration import LinkSample, OpSample, Profile
from ..timing.raw_data import CalibrationRaw
from .backend import Backend
from .runner import Executor


# -- graphs for measuring ---------------------------------------------------------------------
def tiny_chain_graph(
    num_ops: int, chains: int = 1, numel: int = 1, op: str = "add_scalar"
) -> DataflowGraph:
    """``chains`` independent chains of ``num_ops // chains`` tiny elementwise ops each.

    Chain ``c``'s ops are named ``c{c}_{i}``; all read one shared input of ``numel`` elements.
    """
    b = GraphBuilder(f"tiny-chains-{num_ops}x{chains}")
    x = b.add_input("x", (numel,))
    params = {"value": 1.0} if op == "add_scalar" else None
    for c in range(chains):
        prev = x
        for i in range(max(1, num_ops // chains)):
            prev = b.add_elementwise(f"c{c}_{i}", op, [prev], params=params)
    return b.build()


def chain_placement(graph: DataflowGraph, devices: Sequence[int]) -> Placement:
    """Chain ``c`` of a :func:`tiny_chain_graph` on ``devices[c % len(devices)]``."""
    dev = np.zeros(graph.num_nodes, dtype=np.int64)
    for v in graph.compute_nodes:
        c = int(graph.names[v][1:].split("_")[0])
        dev[v] = devices[c % len(devices)]
    return Placement(dev, placer="chains").with_inputs_filled(graph)


def alternating_placement(graph: DataflowGraph, devices: Sequence[int]) -> Placement:
    """The k-th op of a single chain on ``devices[k % len(devices)]`` (a transfer per op)."""
    dev = np.zeros(graph.num_nodes, dtype=np.int64)
    for k, v in enumerate(graph.compute_nodes):
        dev[v] = devices[k % len(devices)]
    return Placement(dev, placer="alternating").with_inputs_filled(graph)


def sweep_graph(quick: bool = False, dtype: str = "float32") -> DataflowGraph:
    """Independent ops over the kinds the workloads use, at several sizes (for the roofline)."""
    b = GraphBuilder("calibration-sweep")
    mm = (32, 96, 192) if quick else (32, 64, 128, 192, 256, 384)
    ew = (1 << 10, 1 << 14, 1 << 17) if quick else (1 << 10, 1 << 13, 1 << 16, 1 << 18, 1 << 20)
    for n in mm:
        a = b.add_input(f"A{n}", (n, n), dtype)
        w = b.add_input(f"B{n}", (n, n), dtype)
        b.add_einsum(f"mm{n}", "ij,jk->ik", [a, w])
        b.add_einsum(f"mmT{n}", "ij,kj->ik", [a, w])
        q = b.add_input(f"Q{n}", (4, n, n // 4), dtype)
        k = b.add_input(f"K{n}", (4, n, n // 4), dtype)
        b.add_einsum(f"bmm{n}", "hij,hkj->hik", [q, k])
    for m in ew:
        x = b.add_input(f"x{m}", (m // 256 or 1, 256) if m >= 256 else (m,), dtype)
        y = b.add_input(f"y{m}", (m // 256 or 1, 256) if m >= 256 else (m,), dtype)
        for op in ("add", "mul") if quick else ("add", "mul", "maximum"):
            b.add_elementwise(f"{op}{m}", op, [x, y])
        for op in ("tanh", "silu") if quick else ("exp", "tanh", "silu", "gelu", "relu", "rsqrt"):
            b.add_elementwise(f"{op}{m}", op, [x])
        b.add_elementwise(f"scale{m}", "scale", [x], params={"factor": 0.5})
        if m >= 256:
            b.add_reduce(f"sum{m}", "sum", x, dims=[-1])
            b.add_reduce(f"max{m}", "max", x, dims=[-1], keepdim=True)
    return b.build()


# -- measurements ----------------------------------------------------------------------------
#: parallel-capacity probes a calibration takes (their median is the profile's ``cores``)
CAPACITY_PROBES = 3


def parallel_capacity(threads: int = 2, seconds: float = 0.3) -> float:
    """How many of ``threads`` busy threads really run at once (1.0 .. ``threads``): the same
    matmul loop timed on one thread and on ``threads`` threads at once. Below ``threads`` means
    other processes take cores, and real multi-device runs cannot match the simulator."""
    a = torch.randn(192, 192)

    def loop(out: list[float], n: int) -> None:
        torch.set_num_threads(1)
        t = time.perf_counter()
        for _ in range(n):
            a @ a
        out.append(time.perf_counter() - t)

    import threading

    probe: list[float] = []
    loop(probe, 10)
    n = max(10, int(seconds / 2 / max(probe[0] / 10, 1e-6)))
    one: list[float] = []
    loop(one, n)
    many: list[float] = []
    workers = [threading.Thread(target=loop, args=(many, n)) for _ in range(threads)]
    t0 = time.perf_counter()
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    wall = time.perf_counter() - t0
    return float(min(threads, threads * one[0] / wall))


def device_gaps(trace: Trace, graph: DataflowGraph) -> list[np.ndarray]:
    """Per device, the idle gaps between consecutive ops (seconds)."""
    comp = graph.compute_nodes
    out = []
    for d in range(trace.num_devices):
        on = comp[trace.device[comp] == d]
        order = on[np.argsort(trace.start[on], kind="stable")]
        out.append(trace.start[order[1:]] - trace.end[order[:-1]])
    return out


def dispatch_gaps(backend: Backend, num_ops: int = 400, repeats: int = 5) -> tuple[float, ...]:
    """Per device, the median gap between two ops of a tiny chain run on that device alone."""
    g = tiny_chain_graph(num_ops)
    gaps = []
    with Executor(g, backend) as ex:
        for d in range(backend.num_devices):
            r = ex.run(chain_placement(g, [d]), repeats=repeats, warmup=1)
            gaps.append(float(np.median(device_gaps(r.trace, g)[d])))
    return tuple(gaps)


def _period(trace: Trace, ops: np.ndarray) -> float:
    """The median time from one op's start to the next's along ``ops`` (a chain, in order)."""
    return float(np.median(np.diff(trace.start[ops])))


def _chains(graph: DataflowGraph) -> list[np.ndarray]:
    """The ops of each chain of a :func:`tiny_chain_graph`, in chain order."""
    by: dict[int, list[int]] = {}
    for v in graph.compute_nodes:
        by.setdefault(int(graph.names[v][1:].split("_")[0]), []).append(int(v))
    return [np.array(by[c]) for c in sorted(by)]


def _shifted_placement(graph: DataflowGraph, d: int) -> Placement:
    """Op ``i`` of chain ``c`` on device ``(c + i) % d``: every op waits for a copy, and every
    device runs one chain's op at any time."""
    dev = np.zeros(graph.num_nodes, dtype=np.int64)
    for c, ops in enumerate(_chains(graph)):
        dev[ops] = (c + np.arange(ops.size)) % d
    return Placement(dev, placer="shifted").with_inputs_filled(graph)


def host_probe(backend: Backend, num_ops: int = 200, repeats: int = 3) -> dict[str, float]:
    """How the host thread serialises launches and copy issues: chains of tiny ops, one chain
    alone and one chain per device at once, each op on one device (launches only) or on the
    next device (a copy before each op). A host that serves one launch at a time makes the
    period with every device busy grow to ``devices x`` its time per launch.

    Returns the per-op periods (median start-to-start, seconds): ``launch_alone_s``,
    ``launch_busy_s``, ``copy_alone_s``, ``copy_busy_s``, and ``devices``.
    """
    d = backend.num_devices
    out: dict[str, float] = {"devices": int(d)}  # an int in the raw file too
    g1 = tiny_chain_graph(num_ops)
    gd = tiny_chain_graph(num_ops * d, chains=d)
    runs = (
        ("launch_alone_s", g1, chain_placement(g1, [0])),
        ("launch_busy_s", gd, chain_placement(gd, list(range(d)))),
        ("copy_alone_s", g1, _shifted_placement(g1, d)),
        ("copy_busy_s", gd, _shifted_placement(gd, d)),
    )
    for key, g, pl in runs:
        if d < 2 and key.startswith("copy"):
            continue
        with Executor(g, backend) as ex:
            t = ex.run(pl, repeats=repeats, warmup=1).trace
        out[key] = float(np.median([_period(t, ops) for ops in _chains(g)]))
    return out


def link_samples(
    backend: Backend,
    sizes: Sequence[int] = (1, 1 << 12, 1 << 16, 1 << 19),
    hops: int = 16,
    repeats: int = 3,
    pairs: Iterable[tuple[int, int]] | None = None,
) -> list[LinkSample]:
    """Transfers between device pairs: a chain alternating between ``a`` and ``b`` per size."""
    d = backend.num_devices
    pairs = (
        list(pairs) if pairs is not None else [(a, b) for a in range(d) for b in range(a + 1, d)]
    )
    out: list[LinkSample] = []
    for numel in sizes:
        g = tiny_chain_graph(hops + 1, numel=numel)
        nbytes = float(g.out_bytes[g.compute_nodes[0]])
        with Executor(g, backend) as ex:
            for a, b in pairs:
                r = ex.run(alternating_placement(g, [a, b]), repeats=repeats, warmup=1)
                t = r.trace
                for k in range(t.num_transfers):
                    u, w = int(t.transfer_src[k]), int(t.transfer_dst[k])
                    out.append(
                        LinkSample(
                            int(t.transfer_src_device[k]),
                            int(t.transfer_dst_device[k]),
                            nbytes,
                            float(t.transfer_end[k] - t.transfer_start[k]),
                            float(t.start[w] - t.end[u]),
                        )
                    )
    return out


def op_samples(
    backend: Backend,
    graphs: Sequence[DataflowGraph],
    placements: int = 4,
    repeats: int = 3,
    seed: int = 0,
    progress: bool = False,
) -> list[OpSample]:
    """Every op's duration in ``repeats`` runs of each of ``placements`` placements per graph.

    The first ``D`` placements are round-robin shifted by one device each, so every op runs on
    every device at least once; the others are random. Where devices share a GPU
    (``cuda-shared``), every placement puts the whole graph on one device (each in turn): an
    op's time alone, which :mod:`doppler_lab.timing.contention` then stretches by what runs beside it
    (measured under round-robin, the times would already hold the contention of that one
    placement)."""
    rng = np.random.default_rng(seed)
    d = backend.num_devices
    shared = bool(getattr(getattr(backend, "api", None), "shared", False))
    out: list[OpSample] = []
    placements = max(placements, d)
    total = len(graphs) * placements
    with tqdm(total=total, desc="profile ops", disable=not progress, leave=False) as bar:
        for g in graphs:
            with Executor(g, backend, seed=seed) as ex:
                for k in range(placements):
                    if shared:
                        pl = Placement(np.full(g.num_nodes, k % d)).with_inputs_filled(g)
                    elif k < d:
                        pl = Placement((np.arange(g.num_nodes) + k) % d).with_inputs_filled(g)
                    else:
                        pl = random_placement(g, d, rng)
                    ex.run(pl, warmup=1)
                    for _ in range(repeats):
                        t = ex.run(pl).trace
                        for v in g.compute_nodes:
                            out.append(
                                OpSample.of(
                                    g.specs[v], int(t.device[v]), float(t.end[v] - t.start[v])
                                )
                            )  # type: ignore[index, arg-type]
                    bar.update()
    return out


def calibrate(backend: Backend, graphs: Sequence[DataflowGraph] = (), **options: Any) -> Profile:
    """Measure ``backend`` (dispatch, links, op times over a sweep and ``graphs``) and fit a
    :class:`Profile`: :func:`measure_calibration` (its keywords: ``name``, ``quick``,
    ``seed``, ``progress``), then its fit."""
    return measure_calibration(backend, graphs, **options).fit()


def measure_calibration(
    backend: Backend,
    graphs: Sequence[DataflowGraph] = (),
    name: str = "",
    quick: bool = False,
    seed: int = 0,
    progress: bool = False,
) -> CalibrationRaw:
    """Measure ``backend`` (dispatch, links, op times over a sweep and ``graphs``), before
    fitting: keep the result (:func:`~doppler_lab.timing.raw_data.write_raw`) and any later
    fit can be made offline; :func:`calibrate` fits it at once.

    Args:
        backend: the devices.
        graphs: workloads whose ops should be measured exactly (their signatures).
        name: the profile's label (default: the backend's cluster name).
        quick: fewer sizes and repeats (a smoke run).
        seed: placements and inputs.
        progress: show progress bars.
    """
    steps: list[tuple[str, Callable[[], Any]]] = []
    results: dict[str, Any] = {}
    rep = 2 if quick else 3
    steps.append(("dispatch", lambda: dispatch_gaps(backend, 100 if quick else 400, rep)))
    steps.append(("host", lambda: host_probe(backend, 100 if quick else 200, rep)))
    if backend.num_devices > 1:
        sizes = (1, 1 << 14) if quick else (1, 1 << 12, 1 << 16, 1 << 19)
        steps.append(("links", lambda: link_samples(backend, sizes, 6 if quick else 16, rep)))
    all_graphs = [sweep_graph(quick), *graphs]
    steps.append(
        ("ops", lambda: op_samples(backend, all_graphs, 2 if quick else 4, rep, seed, progress))
    )
    t0 = time.perf_counter()
    for key, fn in tqdm(steps, desc="calibrate", disable=not progress):
        results[key] = fn()
    meta = {
        **backend.describe(),
        "graphs": [g.name for g in graphs],
        "torch": torch.__version__,
        "python": platform.python_version(),
        "machine": platform.machine(),
        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
        "seconds": time.perf_counter() - t0,
        "quick": quick,
        "load_average_1min": os.getloadavg()[0] if hasattr(os, "getloadavg") else None,
    }
    if backend.name in ("cpu", "dist"):  # the median of a few probes: one can catch a busy moment
        probes = [parallel_capacity(backend.num_devices) for _ in range(CAPACITY_PROBES)]
        meta["parallel_capacity"] = float(np.median(probes))
        meta["parallel_capacity_measured"] = probes
    return CalibrationRaw(
        name or backend.cluster.name,
        backend.name,
        backend.cluster,
        results["ops"],
        results.get("links", []),
        tuple(results["dispatch"]),
        meta,
        results["host"],
    )


# -- shared GPUs -------------------------------------------------------------------------------
def matmul_chains_graph(n: int, length: int, chains: int) -> DataflowGraph:
    """``chains`` independent chains of ``length`` ``(n, n)`` matmuls (chain ``c``'s ops are
    named ``c{c}_{i}``, as :func:`chain_placement` expects)."""
    b = GraphBuilder(f"matmul-chains-{n}x{length}x{chains}")
    w = b.add_input("w", (n, n), init="uniform")  # values grow; only the timing matters
    for c in range(chains):
        prev = b.add_input(f"x{c}", (n, n), init="uniform")
        for i in range(length):
            prev = b.add_einsum(f"c{c}_{i}", "ij,jk->ik", [prev, w])
    return b.build()


def interference_probe(
    backend: Backend,
    sizes: Sequence[int] = (64, 256, 1024, 2048, 4096),
    length: int = 40,
    repeats: int = 3,
) -> list[dict[str, float]]:
    """Matmul chains of each size alone on device 0 and on every device at once (no
    transfers): how much kernels slow each other where devices share a GPU.

    Returns one row per size: ``n``, ``kernel_s`` (median op time alone), ``period_alone_s``
    and ``period_all_s`` (makespan per op of a chain alone and with every device running one),
    ``devices``.
    """
    d = backend.num_devices
    rows = []
    for n in sizes:
        g1 = matmul_chains_graph(n, length, 1)
        gk = matmul_chains_graph(n, length, d)
        with Executor(g1, backend) as ex:
            t1 = ex.run(chain_placement(g1, [0]), repeats=repeats, warmup=1).trace
        with Executor(gk, backend) as ex:
            tk = ex.run(chain_placement(gk, list(range(d))), repeats=repeats, warmup=1).trace
        comp = g1.compute_nodes
        rows.append(
            {
                "n": int(n),
                "devices": d,
                "kernel_s": float(np.median(t1.end[comp] - t1.start[comp])),
                "period_alone_s": float(t1.makespan / length),
                "period_all_s": float(tk.makespan / length),
            }
        )
    return rows


def fit_fill_s(rows: Sequence[dict[str, float]], host_s: float, gpus: int = 1) -> float:
    """The ``fill_s`` of :class:`~doppler_lab.timing.contention.Sharing` that best predicts the probe's
    periods with every device busy (least squares on log periods over a grid)."""
    from ..timing.contention import DEFAULT_FILL_S, op_time

    if not rows:
        return DEFAULT_FILL_S
    kernel = np.array([r["kernel_s"] for r in rows])
    devices = np.array([r["devices"] for r in rows], dtype=np.float64)
    measured = np.maximum([r["period_all_s"] for r in rows], 1e-12)
    m_gpu = np.maximum(devices / max(gpus, 1) - 1, 0)  # other devices on this GPU, all busy
    grid = np.geomspace(1e-6, 1e-1, 161)
    errs = [
        float((np.log(op_time(kernel, fill, m_gpu, host_s, devices - 1) / measured) ** 2).sum())
        for fill in grid
    ]
    return float(grid[int(np.argmin(errs))])
