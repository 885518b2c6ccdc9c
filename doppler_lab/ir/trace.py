"""Traces: what ran where and when, from the simulator or from a real run."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..house.deps import require
from .graph import NODE_KINDS, DataflowGraph


@dataclass(frozen=True, eq=False)
class Trace:
    """Per-op and per-transfer records of one execution, in reported time units.

    Attributes:
        graph_name: the graph's name.
        names: node names; ``kinds``: node kind names.
        device: ``(N,)`` device of each node (-1 for inputs, which are not run).
        start, end: ``(N,)`` op start and end (NaN for inputs).
        transfer_src: ``(T,)`` producing node of each transfer.
        transfer_dst: ``(T,)`` a consuming node (the first one, when one copy serves several).
        transfer_src_device, transfer_dst_device: ``(T,)`` endpoints.
        transfer_start, transfer_end: ``(T,)``.
        transfer_link: ``(T,)`` first link resource used (-1: none modelled).
        num_devices: devices of the cluster.
        semantics: ``paper``, ``wc``, ``bsp`` or ``measured``.
        link_names: label per link resource.
        meta: free-form (seed, noise, cluster, repeats).
        peak_memory_bytes: ``(D,)`` the most bytes resident on each device at once (the
            simulator's memory model, :mod:`doppler_lab.timing.sim.footprint`, or the executor's
            measured live tensors), or ``None`` when the producer did not record it (older
            trace files).
    """

    graph_name: str
    names: tuple[str, ...]
    kinds: tuple[str, ...]
    device: np.ndarray
    start: np.ndarray
    end: np.ndarray
    transfer_src: np.ndarray
    transfer_dst: np.ndarray
    transfer_src_device: np.ndarray
    transfer_dst_device: np.ndarray
    transfer_start: np.ndarray
    transfer_end: np.ndarray
    transfer_link: np.ndarray
    num_devices: int
    semantics: str
    link_names: tuple[str, ...] = ()
    meta: Mapping[str, Any] = field(default_factory=dict)
    peak_memory_bytes: np.ndarray | None = None

    def __post_init__(self) -> None:
        for name in (
            "device",
            "transfer_src",
            "transfer_dst",
            "transfer_src_device",
            "transfer_dst_device",
            "transfer_link",
        ):
            object.__setattr__(self, name, np.asarray(getattr(self, name), dtype=np.int64))
        for name in ("start", "end", "transfer_start", "transfer_end"):
            object.__setattr__(self, name, np.asarray(getattr(self, name), dtype=np.float64))
        object.__setattr__(self, "meta", dict(self.meta))
        if self.peak_memory_bytes is not None:
            peak = np.asarray(self.peak_memory_bytes, dtype=np.float64).reshape(-1)
            if peak.shape != (self.num_devices,):
                from ..house.errors import FormatError

                raise FormatError(
                    f"peak_memory_bytes has {peak.size} entries for {self.num_devices} devices"
                )
            object.__setattr__(self, "peak_memory_bytes", peak)

    @property
    def makespan(self) -> float:
        """Time at which the last op ends."""
        ran = ~np.isnan(self.end)
        return float(self.end[ran].max()) if ran.any() else 0.0

    @property
    def num_transfers(self) -> int:
        return int(self.transfer_src.size)

    def busy_time(self) -> np.ndarray:
        """Compute time per device."""
        ran = self.device >= 0
        return np.bincount(
            self.device[ran], weights=(self.end - self.start)[ran], minlength=self.num_devices
        )

    def utilisation(self) -> np.ndarray:
        """Busy fraction of the makespan per device."""
        m = self.makespan
        return self.busy_time() / m if m > 0 else np.zeros(self.num_devices)

    def to_frame(self):
        """A pandas frame, one row per op and per transfer: ``record`` (op/transfer), ``name``,
        ``kind``, ``node``, ``lane``, ``device``, ``start``, ``end``, ``duration``,
        ``src_device``, ``dst_device``."""
        pd = require("pandas", "Trace.to_frame")

        ran = np.flatnonzero(self.device >= 0)
        ops = pd.DataFrame(
            {
                "record": "op",
                "name": [self.names[v] for v in ran],
                "kind": [self.kinds[v] for v in ran],
                "node": ran,
                "lane": [f"device {d}" for d in self.device[ran]],
                "device": self.device[ran],
                "start": self.start[ran],
                "end": self.end[ran],
                "src_device": self.device[ran],
                "dst_device": self.device[ran],
            }
        )
        tr = pd.DataFrame(
            {
                "record": "transfer",
                "name": [
                    f"{self.names[u]} -> {self.names[w]}"
                    for u, w in zip(self.transfer_src, self.transfer_dst)
                ],
                "kind": "transfer",
                "node": self.transfer_src,
                "lane": [
                    f"link {a}->{b}"
                    for a, b in zip(self.transfer_src_device, self.transfer_dst_device)
                ],
                "device": self.transfer_dst_device,
                "start": self.transfer_start,
                "end": self.transfer_end,
                "src_device": self.transfer_src_device,
                "dst_device": self.transfer_dst_device,
            }
        )
        df = pd.concat([ops, tr], ignore_index=True)
        df["duration"] = df["end"] - df["start"]
        return df

    def check(self, graph: DataflowGraph, atol: float = 1e-9) -> list[str]:
        """Problems with this trace as an execution of ``graph`` (empty when consistent):
        every op ran once on one device, no two ops overlap on a device, an op starts after its
        local inputs end and after the transfers of its remote inputs arrive, a transfer starts
        after its producer ends."""
        problems: list[str] = []
        comp = graph.compute_nodes
        tol = atol * max(1.0, self.makespan)
        if np.isnan(self.start[comp]).any():
            v = int(comp[np.isnan(self.start[comp])][0])
            problems.append(f"node {graph.names[v]!r} never ran")
            return problems
        if (self.end[comp] < self.start[comp] - tol).any():
            v = int(comp[np.argmax(self.end[comp] < self.start[comp] - tol)])
            problems.append(f"node {graph.names[v]!r} ends before it starts")
        for d in range(self.num_devices):
            on = comp[self.device[comp] == d]
            order = on[np.lexsort((self.end[on], self.start[on]))]
            gaps = self.start[order[1:]] - self.end[order[:-1]]
            if (gaps < -tol).any():
                k = int(np.argmax(gaps < -tol))
                problems.append(
                    f"device {d}: {graph.names[int(order[k])]!r} and {graph.names[int(order[k + 1])]!r} overlap"
                )
        arrival: dict[tuple[int, int], float] = {}
        for k in range(self.num_transfers):
            u, b = int(self.transfer_src[k]), int(self.transfer_dst_device[k])
            if self.transfer_start[k] < self.end[u] - tol:
                problems.append(
                    f"transfer of {graph.names[u]!r} to device {b} starts before its producer ends"
                )
            key = (u, b)
            arrival[key] = min(arrival.get(key, np.inf), float(self.transfer_end[k]))
        for u, v in zip(graph.edge_src, graph.edge_dst):
            if graph.is_input[u]:
                continue
            a, b = int(self.device[u]), int(self.device[v])
            ready = self.end[u] if a == b else arrival.get((int(u), b), np.nan)
            if np.isnan(ready):
                problems.append(
                    f"edge {graph.names[u]!r} -> {graph.names[v]!r} crosses devices with no transfer"
                )
            elif self.start[v] < ready - tol:
                problems.append(
                    f"node {graph.names[v]!r} starts before its input {graph.names[u]!r} is ready"
                )
        return problems

    def to_dict(self) -> dict[str, Any]:
        def arr(a: np.ndarray) -> list[Any]:
            return [None if (isinstance(x, float) and np.isnan(x)) else x for x in a.tolist()]

        return {
            "format": "doppler_lab.trace",
            "version": 1,
            "graph": self.graph_name,
            "names": list(self.names),
            "kinds": list(self.kinds),
            "num_devices": self.num_devices,
            "semantics": self.semantics,
            "makespan": self.makespan,
            "ops": {"device": self.device.tolist(), "start": arr(self.start), "end": arr(self.end)},
            "transfers": {
                "src": self.transfer_src.tolist(),
                "dst": self.transfer_dst.tolist(),
                "src_device": self.transfer_src_device.tolist(),
                "dst_device": self.transfer_dst_device.tolist(),
                "start": self.transfer_start.tolist(),
                "end": self.transfer_end.tolist(),
                "link": self.transfer_link.tolist(),
            },
            "link_names": list(self.link_names),
            "meta": self.meta,
        } | (
            {}
            if self.peak_memory_bytes is None
            else {"peak_memory_bytes": self.peak_memory_bytes.tolist()}
        )

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Trace:
        from ..house.errors import FormatError

        try:
            ops, tr = d["ops"], d["transfers"]

            def f(xs: list[Any]) -> np.ndarray:
                return np.array([np.nan if x is None else x for x in xs], dtype=np.float64)

            return cls(
                graph_name=d["graph"],
                names=tuple(d["names"]),
                kinds=tuple(d["kinds"]),
                device=np.array(ops["device"]),
                start=f(ops["start"]),
                end=f(ops["end"]),
                transfer_src=np.array(tr["src"], dtype=np.int64),
                transfer_dst=np.array(tr["dst"], dtype=np.int64),
                transfer_src_device=np.array(tr["src_device"], dtype=np.int64),
                transfer_dst_device=np.array(tr["dst_device"], dtype=np.int64),
                transfer_start=f(tr["start"]),
                transfer_end=f(tr["end"]),
                transfer_link=np.array(tr["link"], dtype=np.int64),
                num_devices=int(d["num_devices"]),
                semantics=d["semantics"],
                link_names=tuple(d.get("link_names", ())),
                meta=d.get("meta", {}),
                peak_memory_bytes=(
                    None if d.get("peak_memory_bytes") is None else f(d["peak_memory_bytes"])
                ),
            )
        except KeyError as exc:
            raise FormatError(f"trace lacks the field {exc.args[0]!r}") from None


def kind_names(graph: DataflowGraph) -> tuple[str, ...]:
    return tuple(NODE_KINDS[int(k)] for k in graph.kinds)
