"""How long each op and each transfer of a graph takes on a cluster: :class:`CostModel`, and the
makespan :func:`lower_bound` every table reports a ratio to.

The roofline for modelled costs, the graph's explicit costs for the paper's files; the transfer
rule itself is :func:`doppler_lab.hardware.rules.transfer_times` (the cluster's links).
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import cached_property

import numpy as np

from ..hardware.cluster import Cluster
from ..hardware.rules import transfer_times
from ..house.errors import ClusterError, GraphError
from ..house.limits import MAX_TIME
from ..house.validate import show
from ..ir.graph import DataflowGraph


class CostModel:
    """Per-op and per-transfer times of a graph on a cluster, in the graph's raw units.

    Compute time of op v on device d: the graph's explicit cost if it has one, else the
    roofline ``max(flops / rate(dtype), bytes moved / memory bandwidth) + launch overhead``.
    Transfer time of edge u->v between different devices: the graph's explicit edge cost if it has
    one, else ``latency + out_bytes[u] / bandwidth``. Input nodes cost nothing (they are resident).

    Attributes (arrays used by the simulator):
        compute: ``(N, D)`` compute time per node and device.
        edge_fixed: ``(E,)`` explicit transfer cost (0 when modelled).
        edge_bytes: ``(E,)`` bytes moved per edge (0 when explicit).
        latency, inv_bandwidth: ``(D, D)`` in raw units (0 when explicit edge costs are used).
    """

    def __init__(
        self, graph: DataflowGraph, cluster: Cluster, op_scale: Mapping[str, float] | None = None
    ):
        self.graph = graph
        self.cluster = cluster
        n, d = graph.num_nodes, cluster.num_devices
        unit = graph.time_scale  # seconds per raw unit for modelled costs
        cc = graph.compute_cost
        if cc is not None:
            if cc.ndim == 2 and cc.shape[1] != d:
                raise GraphError(
                    f"graph {graph.name!r} has per-device costs for {cc.shape[1]} devices, "
                    f"but cluster {cluster.name!r} has {d}"
                )
            compute = np.broadcast_to(cc.reshape(n, -1), (n, d)).astype(np.float64)
        else:
            with np.errstate(over="ignore"):  # an overflow is named by _check_finite
                compute = self._modelled_compute(op_scale or {}) / unit
        compute = np.where(graph.is_input[:, None], 0.0, compute)
        from_input = graph.is_input[graph.edge_src]
        if graph.edge_cost is not None:
            self.edge_fixed = np.where(from_input, 0.0, graph.edge_cost)
            self.edge_bytes = np.zeros(graph.num_edges)
            self.latency = np.zeros((d, d))
            self.inv_bandwidth = np.zeros((d, d))
        else:
            self.edge_fixed = np.zeros(graph.num_edges)
            self.edge_bytes = np.where(from_input, 0.0, graph.out_bytes[graph.edge_src])
            with np.errstate(over="ignore"):
                self.latency = cluster.latency_s / unit
                self.inv_bandwidth = cluster.inv_bandwidth / unit
        self.compute = compute
        for a in (self.compute, self.edge_fixed, self.edge_bytes, self.latency, self.inv_bandwidth):
            a.setflags(write=False)
        self._check_finite()

    def _check_finite(self) -> None:
        """Every compute and transfer time is finite, and so is their sum (a bound on any
        makespan at noise 0), in reported units: else an error naming the input that overflows
        (a node's cost, a device's launch overhead, a link's bandwidth or latency)."""
        g, c = self.graph, self.cluster
        comp, d, unit = self.compute, c.num_devices, g.time_scale
        explicit = g.compute_cost is not None
        if g.num_nodes and not g.compute_nodes.size:
            raise GraphError(
                f"graph {g.name!r} has only input nodes ({g.num_nodes}); expected at least one "
                "op to place and time"
            )
        bad = np.argwhere(~np.isfinite(comp))
        if bad.size:
            v, j = (int(x) for x in bad[0])
            if explicit:
                raise GraphError(f"node {v} ({g.names[v]!r}) cost {show(comp[v, j])} is not finite")
            raise GraphError(
                f"node {v} ({g.names[v]!r}) has no finite compute time on device {j} "
                f"({c.devices[j].name!r}): flops {show(g.flops[v])}, time_scale {show(unit)}"
                f"{self._scale_note(v)}"
            )
        worst = np.zeros(g.num_edges)
        if d > 1 and g.num_edges:
            off = ~np.eye(d, dtype=bool)
            if not np.isfinite(self.inv_bandwidth[off]).all():
                i, j = (int(x) for x in np.argwhere(off & ~np.isfinite(self.inv_bandwidth))[0])
                raise ClusterError(
                    f"cluster {c.name!r} bandwidth {i}->{j} {show(c.bandwidth_bytes_per_s[i, j])} "
                    "B/s gives an infinite transfer time"
                )
            lat, inv = self.latency[off].max(), self.inv_bandwidth[off].max()
            with np.errstate(over="ignore", invalid="ignore"):
                worst = self.edge_fixed + lat + self.edge_bytes * inv
            if not np.isfinite(worst).all():
                k = int(np.flatnonzero(~np.isfinite(worst))[0])
                raise self._overflow("edge", k, lat, inv, "gives an infinite transfer time")
        per_node = comp.max(axis=1)
        with np.errstate(over="ignore", invalid="ignore"):
            node_sum, edge_sum = per_node.sum(), worst.sum()
            total = (node_sum + edge_sum) * unit
        if not total <= MAX_TIME:
            if node_sum >= edge_sum:
                v = int(per_node.argmax())
                if not explicit:
                    j = int(comp[v].argmax())
                    dev = c.devices[j]
                    if dev.launch_overhead_s * g.num_nodes / unit >= per_node[v]:
                        raise ClusterError(
                            f"cluster {c.name!r} device {j} ({dev.name!r}) launch_overhead_s "
                            f"{show(dev.launch_overhead_s)} makes the makespan overflow"
                        )
                    raise GraphError(
                        f"node {v} ({g.names[v]!r}) flops {show(g.flops[v])}"
                        f"{self._scale_note(v)} make the makespan overflow"
                    )
                raise GraphError(
                    f"node {v} ({g.names[v]!r}) cost {show(per_node[v])} makes the makespan "
                    "overflow"
                )
            k = int(worst.argmax())
            lat, inv = self.latency[~np.eye(d, dtype=bool)].max(), self.inv_bandwidth.max()
            raise self._overflow("edge", k, lat, inv, "makes the makespan overflow")

    def _scale_note(self, v: int) -> str:
        """``" (calibrated op_scale X)"`` when node ``v``'s roofline time is scaled."""
        scale = getattr(self, "_op_scale", None)
        if scale is None or scale[v] == 1.0:
            return ""
        return f" (calibrated op_scale {show(scale[v])})"

    def _overflow(self, _: str, k: int, lat: float, inv: float, what: str) -> Exception:
        """The error naming what makes edge ``k``'s worst transfer time too large."""
        g, c = self.graph, self.cluster
        u, v = int(g.edge_src[k]), int(g.edge_dst[k])
        with np.errstate(over="ignore"):  # bytes over a bandwidth near 0: inf, no warning
            bandwidth = float(self.edge_bytes[k] * inv) if self.edge_bytes[k] else 0.0
        parts = {"fixed": float(self.edge_fixed[k]), "latency": float(lat), "bandwidth": bandwidth}
        cause = max(parts, key=lambda x: parts[x])
        if cause == "fixed":
            return GraphError(
                f"edge {k} ({g.names[u]!r} -> {g.names[v]!r}) cost {show(parts['fixed'])} {what}"
            )
        d = c.num_devices
        off = ~np.eye(d, dtype=bool)
        if cause == "latency":
            i, j = (int(x) for x in np.argwhere(off & (self.latency == lat))[0])
            return ClusterError(
                f"cluster {c.name!r} latency {i}->{j} {show(c.latency_s[i, j])} s {what}"
            )
        i, j = (int(x) for x in np.argwhere(off & (self.inv_bandwidth == inv))[0])
        return ClusterError(
            f"cluster {c.name!r} bandwidth {i}->{j} {show(c.bandwidth_bytes_per_s[i, j])} B/s "
            f"for edge {k} ({g.names[u]!r} -> {g.names[v]!r}, {show(self.edge_bytes[k])} bytes) "
            f"{what}"
        )

    def _modelled_compute(self, op_scale: Mapping[str, float]) -> np.ndarray:
        g, devs = self.graph, self.cluster.devices
        n = g.num_nodes
        dtypes = [s.dtype if s is not None else "float32" for s in (g.specs or [None] * n)]
        moved = np.array(
            [
                s.in_bytes + s.out_bytes if s is not None else 2 * g.out_bytes[v]
                for v, s in enumerate(g.specs or [None] * n)
            ]
        )
        scale = np.ones(n)
        if op_scale and g.specs is not None:
            for v, s in enumerate(g.specs):
                if s is not None:
                    scale[v] = op_scale.get(f"{s.kind}:{s.op}", op_scale.get(s.kind, 1.0))
        self._op_scale = scale  # named by _check_finite when it overflows
        out = np.empty((n, len(devs)))
        kinds, of_node = np.unique(np.array(dtypes, dtype=str), return_inverse=True)
        for j, dev in enumerate(devs):
            rates = np.array([dev.rate(str(t)) for t in kinds])[of_node.reshape(-1)]
            out[:, j] = (
                np.maximum(g.flops / rates, moved / dev.mem_bytes_per_s) * scale
                + dev.launch_overhead_s
            )
        return out

    def host_costs(self) -> tuple[float, ...] | None:
        """The host resource of the ``wc`` simulator in raw units: ``(launch, copy issue,
        parallel capacity or 0, cores or 0)``; ``None`` where the cluster has no
        host that binds (every preset; :class:`~doppler_lab.hardware.host.Host`)."""
        host = self.cluster.host
        if host is None or not host.binds:
            return None
        unit = self.graph.time_scale
        cap = host.parallel_capacity
        return (
            host.launch_s / unit,
            host.copy_s / unit,
            0.0 if cap is None else float(cap),
            host.cores,
        )

    def transfer_time(self, edge: int, src_dev: int, dst_dev: int) -> float:
        if src_dev == dst_dev or self.graph.is_input[self.graph.edge_src[edge]]:
            return 0.0
        return float(
            transfer_times(
                self.edge_fixed[edge],
                self.latency[src_dev, dst_dev],
                self.edge_bytes[edge],
                self.inv_bandwidth[src_dev, dst_dev],
            )
        )

    @cached_property
    def mean_edge_cost(self) -> np.ndarray:
        """Per-edge transfer time averaged over ordered device pairs (for levels and features)."""
        d = self.cluster.num_devices
        if d == 1:
            return np.zeros(self.graph.num_edges)
        off = ~np.eye(d, dtype=bool)
        return transfer_times(
            self.edge_fixed,
            self.latency[off].mean(),
            self.edge_bytes,
            self.inv_bandwidth[off].mean(),
        )

    @cached_property
    def mean_compute(self) -> np.ndarray:
        return self.compute.mean(axis=1)

    def lower_bound(self) -> float:
        """max(critical path with zero communication on each op's fastest device,
        total work / D with each op on its fastest device), in the graph's raw units."""
        g = self.graph
        fastest = self.compute.min(axis=1)
        cp = float(g.b_level(fastest, np.zeros(g.num_edges)).max())
        work = float(fastest.sum()) / self.cluster.num_devices
        return max(cp, work)

    def b_level(self) -> np.ndarray:
        return self.graph.b_level(self.mean_compute, self.mean_edge_cost)

    def t_level(self) -> np.ndarray:
        return self.graph.t_level(self.mean_compute, self.mean_edge_cost)


def lower_bound(graph: DataflowGraph, cluster: Cluster) -> float:
    """The makespan lower bound of ``graph`` on ``cluster`` in reported time units."""
    return CostModel(graph, cluster).lower_bound() * graph.time_scale
