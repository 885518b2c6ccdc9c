"""Logical devices that share hardware: several on one GPU (``cuda-shared``), all of them behind
one host dispatcher (the stream executor's single host thread).

The ``wc`` simulator treats devices as independent. On a real GPU shared by ``k`` logical
devices, kernels from their streams run concurrently on one set of SMs: small kernels overlap
almost for free, kernels that fill the GPU take turns. And one host thread launches every op of
every device, so launches never overlap. :func:`contended_makespan` corrects the simulator for
both, by a fixed point over its timeline:

1. simulate the placement with each op's time alone on its device;
2. for each op, read off the timeline how many other devices were busy while it ran: ``m_gpu``
   on its own GPU, ``m_host`` on the whole host;
3. the op's time becomes ``max(kernel * (1 + alpha * m_gpu) + host, host * (1 + m_host))``: its kernel
   slowed by the SMs it shares (``alpha = min(1, kernel / fill_s)``: a kernel as long as
   ``fill_s`` fills the GPU; a shorter one leaves room) plus its launch, or the host's launches
   of every busy device, whichever is the bottleneck (the dispatcher pipelines launches with
   kernels);
4. copies wait for the host's polls and share the GPU: the links' latency grows with the mean
   number of other busy devices on the host, their bandwidth shrinks with the mean load of the
   busiest GPU;
5. simulate again with those times; repeat (damped) a few passes;
6. the result is at least the busiest shared GPU's serial time (:func:`serial_bound`): its
   kernels (times ``alpha``), launches and copies one after another.

``kernel`` is an op's device time alone (the calibrated op time less the dispatch gap) and
``host`` the host's time per launch (the calibrated dispatch gap) times the op's launches (the
steps of an imported program op, each an aten call). ``fill_s`` is measured by
:func:`doppler_lab.executor.profiling.interference_probe` (matmul chains alone and on every
logical device at once), or a nominal default.

This module imports no torch.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..hardware.cluster import Cluster
from ..house.errors import ConfigError
from ..ir.graph import DataflowGraph
from .cost_model import CostModel

#: a kernel this long (seconds) fills a data-centre GPU when no probe has measured it
DEFAULT_FILL_S = 50e-6


@dataclass(frozen=True)
class Sharing:
    """Which logical devices share a GPU, and the host's time per launch.

    Attributes:
        gpu_of: the physical GPU of each logical device.
        host_s: the host dispatcher's time per op launch, seconds (one thread for all devices).
        fill_s: the kernel time at which a kernel occupies the whole GPU, seconds.
        passes: fixed-point passes (each one simulation; 8 settle the GPU figures of the last
            gpu-check where 3 did not: README, GPU section).
    """

    gpu_of: tuple[int, ...]
    host_s: float
    fill_s: float = DEFAULT_FILL_S
    passes: int = 8

    def __post_init__(self) -> None:
        object.__setattr__(self, "gpu_of", tuple(int(g) for g in self.gpu_of))
        for name in ("host_s", "fill_s"):
            v = getattr(self, name)
            if not (np.isfinite(v) and v >= 0):
                raise ConfigError(f"sharing {name} = {v}, expected a finite value >= 0")
        if self.fill_s <= 0:
            raise ConfigError(f"sharing fill_s = {self.fill_s}, expected > 0")
        if self.passes < 1:
            raise ConfigError(f"sharing passes = {self.passes}, expected >= 1")

    @property
    def shared(self) -> bool:
        """Whether any GPU holds more than one logical device."""
        return len(set(self.gpu_of)) < len(self.gpu_of)

    def to_dict(self) -> dict[str, Any]:
        return {
            "gpu_of": list(self.gpu_of),
            "host_s": self.host_s,
            "fill_s": self.fill_s,
            "passes": self.passes,
        }


def _busy_within(trace_start: np.ndarray, trace_end: np.ndarray) -> Any:
    """``busy(a, b)``: the device's busy time inside each interval ``[a, b]`` (its ops are
    serial: their intervals do not overlap)."""
    order = np.argsort(trace_start)
    s, e = trace_start[order], trace_end[order]
    cum = np.concatenate(([0.0], np.cumsum(e - s)))

    def upto(t: np.ndarray) -> np.ndarray:
        # busy time before t: the ops before the last one started by t, and its part before t
        k = np.searchsorted(s, t, side="right")
        i = np.maximum(k - 1, 0)
        running = np.clip(t - s[i], 0.0, e[i] - s[i])
        return np.where(k > 0, cum[i] + running, 0.0)

    return lambda a, b: upto(b) - upto(a)


def _overlaps(
    start: np.ndarray, end: np.ndarray, dev: np.ndarray, ops: np.ndarray, num_devices: int
) -> np.ndarray:
    """``(len(ops), D)``: the share of each op's interval during which each device was busy."""
    out = np.zeros((ops.size, num_devices))
    dur = np.maximum(end[ops] - start[ops], 1e-30)
    for e in range(num_devices):
        mine = ops[dev[ops] == e]
        if mine.size == 0:
            continue
        busy = _busy_within(start[mine], end[mine])
        out[:, e] = np.clip(busy(start[ops], end[ops]) / dur, 0.0, 1.0)
    return out


def _copy_load(
    trace: Any, ops: np.ndarray, gpu_of: np.ndarray, dev: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Per op, the copies running during it: on its own GPU (as a share of its interval) and
    on the whole host. Copies between logical devices of one GPU run on its SMs; every copy
    costs the host a launch and two polls."""
    s, e = trace.start[ops], trace.end[ops]
    dur = np.maximum(e - s, 1e-30)
    on_gpu = np.zeros(ops.size)
    on_host = np.zeros(ops.size)
    ts, te = trace.transfer_start, trace.transfer_end
    if ts.size == 0:
        return on_gpu, on_host
    src_gpu = gpu_of[trace.transfer_src_device]
    dst_gpu = gpu_of[trace.transfer_dst_device]
    op_gpu = gpu_of[dev[ops]]
    for g in np.unique(op_gpu):
        mine = op_gpu == g
        sel = (src_gpu == g) | (dst_gpu == g)
        if sel.any():
            busy = _busy_union(ts[sel], te[sel])
            on_gpu[mine] = np.clip(busy(s[mine], e[mine]) / dur[mine], 0.0, 1.0)
    busy = _busy_union(ts, te)
    on_host = np.clip(busy(s, e) / dur, 0.0, 1.0)
    return on_gpu, on_host


def _busy_union(starts: np.ndarray, ends: np.ndarray) -> Any:
    """``busy(a, b)`` for intervals that may overlap: the time inside ``[a, b]`` covered by at
    least one of them."""
    order = np.argsort(starts)
    merged: list[list[float]] = []
    for a, b in zip(starts[order], ends[order]):
        if merged and a <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], b)
        else:
            merged.append([float(a), float(b)])
    arr = np.array(merged, dtype=np.float64).reshape(-1, 2)
    return _busy_within(arr[:, 0], arr[:, 1])


def contended_times(
    kernel: np.ndarray,
    host: float,
    dev: np.ndarray,
    trace: Any,
    ops: np.ndarray,
    sharing: Sharing,
    launches: np.ndarray | None = None,
) -> np.ndarray:
    """Each op's time under contention (seconds), from a timeline (see the module notes)."""
    d = len(sharing.gpu_of)
    share = _overlaps(trace.start, trace.end, dev, ops, d)
    gpu_of = np.asarray(sharing.gpu_of)
    mine = dev[ops]
    same_gpu = gpu_of[None, :] == gpu_of[mine][:, None]
    other = np.ones_like(share, dtype=bool)
    other[np.arange(ops.size), mine] = False
    m_gpu = (share * (same_gpu & other)).sum(axis=1)
    m_host = (share * other).sum(axis=1)
    if sharing.shared:
        copy_gpu, copy_host = _copy_load(trace, ops, gpu_of, dev)
        m_gpu = m_gpu + copy_gpu
        m_host = m_host + copy_host
    h = host * (launches[ops] if launches is not None else 1.0)
    return op_time(kernel[ops], sharing.fill_s, m_gpu, h, m_host)


def op_time(
    kernel: np.ndarray | float,
    fill_s: float,
    m_gpu: np.ndarray | float,
    host: np.ndarray | float,
    m_host: np.ndarray | float,
) -> np.ndarray:
    """The rule of the module notes, step 3: an op's time with ``m_gpu`` other devices busy on
    its GPU and ``m_host`` on its host (the probe's fit, :func:`~doppler_lab.executor.profiling.
    fit_fill_s`, predicts with it too)."""
    k = np.asarray(kernel, dtype=np.float64)
    return np.maximum(k * (1.0 + fill_share(k, fill_s) * m_gpu) + host, host * (1.0 + m_host))


def fill_share(kernel: np.ndarray | float, fill_s: float) -> np.ndarray:
    """``alpha``: the share of its GPU a kernel of this length fills (1 from ``fill_s`` on)."""
    return np.minimum(1.0, np.asarray(kernel, dtype=np.float64) / fill_s)


def launches_per_op(graph: DataflowGraph) -> np.ndarray:
    """``(N,)`` kernel launches of each op: the steps of an imported program op (each an aten
    call the host makes), else 1."""
    out = np.ones(graph.num_nodes)
    for v, spec in enumerate(graph.specs or ()):
        if spec is not None and spec.kind == "program" and spec.program is not None:
            out[v] = max(1, len(spec.program.steps))
    return out


def _mean_loads(
    trace: Any, ops: np.ndarray, dev: np.ndarray, sharing: Sharing
) -> tuple[float, float]:
    """The mean number of other devices busy (on the host; on a copy's GPU) over the run."""
    span = max(float(trace.makespan), 1e-30)
    busy = np.zeros(len(sharing.gpu_of))
    np.add.at(busy, dev[ops], trace.end[ops] - trace.start[ops])
    share = busy / span
    gpu_of = np.asarray(sharing.gpu_of)
    host = max(float(share.sum()) - 1.0, 0.0)
    per_gpu = [share[gpu_of == g].sum() for g in np.unique(gpu_of)]
    return host, max(float(max(per_gpu)) - 1.0, 0.0) if sharing.shared else 0.0


def contended_makespan(
    graph: DataflowGraph,
    cluster: Cluster,
    cost_model: CostModel,
    placement: Any,
    sharing: Sharing,
    dispatch_s: float | None = None,
) -> float:
    """The makespan (seconds) of ``placement`` with contention for shared GPUs and the host.

    Args:
        graph, cluster: what is placed where.
        cost_model: op times alone (e.g. a calibrated cost model); its compute includes the
            dispatch gap, which ``dispatch_s`` (default ``sharing.host_s``) names.
        placement: a placement or device array.
        sharing: which devices share a GPU, the host's time per launch.
    """
    from ..ir.placement import Placement
    from .sim import Simulator

    if len(sharing.gpu_of) != cluster.num_devices:
        raise ConfigError(
            f"sharing names {len(sharing.gpu_of)} devices, cluster {cluster.name!r} has "
            f"{cluster.num_devices}"
        )
    unit = graph.time_scale
    pl = placement if isinstance(placement, Placement) else Placement(np.asarray(placement))
    dev = np.asarray(pl.device, dtype=np.int64)
    ops = graph.compute_nodes
    base = cost_model.compute  # (N, D) raw units, dispatch gap included
    gap = sharing.host_s if dispatch_s is None else dispatch_s
    alone = base[np.arange(graph.num_nodes), np.maximum(dev, 0)] * unit
    launches = launches_per_op(graph)
    kernel = np.maximum(alone - gap, 0.0)
    sim = Simulator(graph, cluster, "wc", cost_model=cost_model)
    trace = sim.run(pl)
    times = alone.copy()
    for _ in range(sharing.passes):
        new = contended_times(kernel, sharing.host_s, dev, trace, ops, sharing, launches)
        times[ops] = 0.5 * (times[ops] + new)  # damped: the first pass overshoots
        cm = copy.copy(cost_model)
        comp = np.array(base, dtype=np.float64)
        comp[ops, dev[ops]] = times[ops] / unit
        comp.setflags(write=False)
        cm.compute = comp
        # copies wait for the host's polls and share the GPU: stretched by the mean load
        load_host, load_gpu = _mean_loads(trace, ops, dev, sharing)
        cm.latency = cost_model.latency * (1.0 + load_host)
        cm.inv_bandwidth = cost_model.inv_bandwidth * (1.0 + load_gpu)
        for cached in ("mean_compute",):
            cm.__dict__.pop(cached, None)
        trace = Simulator(graph, cluster, "wc", cost_model=cm).run(pl)
    return max(
        float(trace.makespan), serial_bound(graph, cost_model, dev, sharing, kernel, launches)
    )


def serial_bound(
    graph: DataflowGraph,
    cost_model: CostModel,
    dev: np.ndarray,
    sharing: Sharing,
    kernel: np.ndarray,
    launches: np.ndarray,
) -> float:
    """The busiest shared GPU's serial time (seconds): the kernels of all its logical devices,
    each scaled by the share of the GPU it fills (``alpha``), their launches, and every copy into
    or out of it (one per producer and receiving device, at its link's latency and bandwidth:
    the round trip of the host's polls that the GPU waits through). 0 without shared GPUs.

    Where kernels fill the GPU (``alpha`` = 1), its logical devices take turns: the fixed point's
    averaged loads under-count the copies' round trips, which this sum does not."""
    if not sharing.shared:
        return 0.0
    gpu_of = np.asarray(sharing.gpu_of)
    ops = graph.compute_nodes
    per_op = kernel[ops] * fill_share(kernel[ops], sharing.fill_s) + sharing.host_s * launches[ops]
    busy = np.bincount(gpu_of[dev[ops]], weights=per_op, minlength=int(gpu_of.max()) + 1)
    unit = graph.time_scale
    src, dst = graph.edge_src, graph.edge_dst
    seen: set[tuple[int, int]] = set()
    for e in np.flatnonzero(~graph.is_input[src] & (dev[src] != dev[dst])):
        u, b = int(src[e]), int(dev[dst[e]])
        if (u, b) in seen:
            continue
        seen.add((u, b))
        a = int(dev[u])
        t = cost_model.transfer_time(int(e), a, b) * unit
        busy[gpu_of[a]] += t
        if gpu_of[b] != gpu_of[a]:
            busy[gpu_of[b]] += t
    shared = [g for g in np.unique(gpu_of) if (gpu_of == g).sum() > 1]
    return float(max(busy[shared])) if shared else 0.0


__all__ = [
    "DEFAULT_FILL_S",
    "Sharing",
    "contended_makespan",
    "contended_times",
    "fill_share",
    "launches_per_op",
    "op_time",
    "serial_bound",
]
