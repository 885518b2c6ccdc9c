"""Device memory: tensor sizes, the placers' static bound of the peak, caps and feasibility.

The memory model (the simulator's, :mod:`doppler_lab.timing.sim.footprint`): bytes resident on a
device over time are

- a stored input (weights, graph inputs) on every device that reads it, for the whole run;
- an op's output on its device from the op's start until its last consumer there ends and its
  last transfer out ends (an output nothing consumes, a graph output, stays to the end);
- a received copy from its (first) transfer's start until its last consumer there ends.

A placement is feasible when each device's peak fits its ``memory_bytes`` less its runtime
reserve (the CUDA context and the allocator's slack,
:meth:`~doppler_lab.hardware.cluster.Device.runtime_reserve`: 256 MiB plus 2% of a GPU's
memory by default, none on CPUs; ``--memory-reserve`` sets it): :func:`memory_caps`. Sizes are the
graph's ``out_bytes``, except for cost-only graphs (the paper's files, :func:`cost_graph`),
whose ``out_bytes`` only mirror transfer costs: they have no sizes, and every peak is 0.

:func:`static_peak_bound` needs no schedule: every tensor that could be on a device at once,
an upper bound of the simulated peak for any semantics and order, for placers that build a
placement op by op.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..hardware.cluster import Cluster
from ..house.errors import ConfigError
from ..house.limits import format_bytes
from ..ir.graph import DataflowGraph


def has_sizes(graph: DataflowGraph) -> bool:
    """Whether ``out_bytes`` are tensor sizes: not for a cost-only graph whose ``out_bytes``
    mirror its explicit transfer costs and whose ``flops`` mirror its compute costs (what
    :func:`~doppler_lab.ir.graph.cost_graph` builds, e.g. the paper's files)."""
    if graph.specs is not None or graph.compute_cost is None or graph.edge_cost is None:
        return True
    cost = graph.compute_cost
    mirrored = cost.ndim == 1 and np.array_equal(graph.flops, cost)
    return not (mirrored and np.array_equal(graph.out_bytes[graph.edge_src], graph.edge_cost))


def tensor_bytes(graph: DataflowGraph) -> np.ndarray:
    """``(N,)`` bytes of each node's output as the memory model counts them (zeros for a graph
    without sizes, see :func:`has_sizes`)."""
    if not has_sizes(graph):
        return np.zeros(graph.num_nodes)
    return np.asarray(graph.out_bytes, dtype=np.float64)


def static_peak_bound(
    graph: DataflowGraph, device_of: np.ndarray | Sequence[int], nbytes: np.ndarray | None = None
) -> np.ndarray:
    """``(D,)`` an upper bound of each device's peak under placement ``device_of``, whatever the
    schedule: the stored inputs read there, the outputs of the ops placed there and one copy of
    every tensor received there.

    ``device_of`` may be partial (``-1`` for an op not yet placed): only what the placed ops
    decide is counted, so the bound only grows as a placer assigns more ops. ``D`` is one more
    than the largest device id.
    """
    dev = np.asarray(device_of, dtype=np.int64)
    size = tensor_bytes(graph) if nbytes is None else np.asarray(nbytes, dtype=np.float64)
    is_input = graph.is_input
    placed = (dev >= 0) & ~is_input
    d = int(dev[placed].max()) + 1 if placed.any() else 0
    bound = np.bincount(dev[placed], weights=size[placed], minlength=d)
    src, dst = graph.edge_src, graph.edge_dst
    # a consumer on another device than its producer (an input: no device) holds one copy
    use = placed[dst] & (is_input[src] | (placed[src] & (dev[src] != dev[dst])))
    pairs = np.unique(np.stack([src[use], dev[dst[use]]]), axis=1)
    if pairs.size:
        np.add.at(bound, pairs[1], size[pairs[0]])
    return bound


def memory_caps(
    cluster: Cluster, cap: float | Sequence[float] | None | str = "device"
) -> np.ndarray:
    """``(D,)`` bytes each device may hold (``inf``: unconstrained).

    Args:
        cluster: the devices.
        cap: ``"device"`` (each device's ``memory_bytes`` less its runtime reserve,
            :func:`memory_reserves`), ``None`` or ``"none"`` (no cap), one number for every
            device or one per device (bytes a placement may use, taken as given).
    """
    d = cluster.num_devices
    if isinstance(cap, str):
        if cap == "device":
            memory = np.array([dev.memory_bytes for dev in cluster.devices], dtype=np.float64)
            return memory - memory_reserves(cluster)
        if cap.lower() != "none":
            raise ConfigError(f"memory cap {cap!r}: expected bytes, 'none' or 'device'")
        cap = None
    if cap is None:
        return np.full(d, np.inf)
    arr = np.asarray(cap, dtype=np.float64).reshape(-1)
    if arr.size == 1:
        arr = np.full(d, float(arr[0]))
    if arr.shape != (d,) or not (np.all(arr > 0) and not np.isnan(arr).any()):
        raise ConfigError(
            f"memory cap {cap!r}: expected bytes > 0, one value or one per device ({d})"
        )
    return arr


def memory_reserves(cluster: Cluster) -> np.ndarray:
    """``(D,)`` bytes of each device's memory kept for the runtime
    (:meth:`~doppler_lab.hardware.cluster.Device.runtime_reserve`)."""
    return np.array([dev.runtime_reserve() for dev in cluster.devices], dtype=np.float64)


def memory_report(
    peak: np.ndarray | None, memory: np.ndarray, reserve: np.ndarray | None = None
) -> dict[str, Any]:
    """The memory fields of a JSON result: ``peak_memory_bytes`` and ``memory_bytes`` (one per
    device; ``null`` for no cap), ``feasible``, and when not, ``over_memory``: the devices whose
    peak exceeds their cap, with the excess, largest first. With ``reserve`` (bytes per device
    kept for the runtime, ``memory_reserve_bytes``), a device's cap is its ``memory`` less its
    reserve."""
    caps = memory if reserve is None else memory - reserve
    out: dict[str, Any] = {
        "peak_memory_bytes": None if peak is None else [float(x) for x in peak],
        "memory_bytes": [float(c) if math.isfinite(c) else None for c in memory],
    }
    if reserve is not None:
        out["memory_reserve_bytes"] = [float(r) for r in reserve]
    if peak is None:
        out["feasible"] = None
        return out
    excess = np.asarray(peak, dtype=np.float64) - caps
    over = np.flatnonzero(excess > 0)
    out["feasible"] = not over.size
    if over.size:
        over = over[np.argsort(-excess[over], kind="stable")]
        out["over_memory"] = [
            {"device": int(d), "excess_bytes": float(excess[d])} for d in over.tolist()
        ]
    return out


__all__ = [
    "format_bytes",
    "has_sizes",
    "memory_caps",
    "memory_report",
    "memory_reserves",
    "static_peak_bound",
    "tensor_bytes",
]
