"""Placements: a device per node and, optionally, a priority order."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..house.errors import PlacementError
from ..house.jsonutil import to_jsonable
from ..house.validate import show
from .graph import DataflowGraph


@dataclass(frozen=True, eq=False)
class Placement:
    """A device for every node of a graph.

    Attributes:
        device: ``(N,)`` device id per node. Entries of input nodes are not used by the simulator
            or executor (inputs are resident wherever they are consumed); placers set them to the
            device of the node's first consumer so that charts read naturally.
        priority: optional ``(N,)`` dispatch priority (smaller runs first among ready ops on a
            device) used by ``dispatch="priority"``; a placer's selection order, for instance.
        placer: name of the placer that made it.
        meta: free-form (schedule makespan, solver status, seeds).
    """

    device: np.ndarray
    priority: np.ndarray | None = None
    placer: str = ""
    meta: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        dev = np.array(self.device)
        if dev.ndim != 1:
            raise PlacementError(f"a placement is a 1-D array of device ids, got shape {dev.shape}")
        if dev.size and not np.issubdtype(dev.dtype, np.integer):
            if not np.all(np.isfinite(dev)) or not np.all(dev == np.round(dev)):
                bad = int(np.flatnonzero(~np.isfinite(dev) | (dev != np.round(dev)))[0])
                raise PlacementError(
                    f"node {bad} has device {show(dev[bad])}; expected an integer id"
                )
        dev = dev.astype(np.int64)
        dev.setflags(write=False)
        object.__setattr__(self, "device", dev)
        if self.priority is not None:
            pr = np.array(self.priority, dtype=np.float64).reshape(-1)
            if pr.shape != dev.shape:
                raise PlacementError(f"priority has {pr.size} entries for {dev.size} nodes")
            if not np.all(np.isfinite(pr)):
                raise PlacementError(
                    f"priority of node {int(np.flatnonzero(~np.isfinite(pr))[0])} is not finite"
                )
            pr.setflags(write=False)
            object.__setattr__(self, "priority", pr)
        object.__setattr__(self, "meta", dict(self.meta))

    def __len__(self) -> int:
        return int(self.device.size)

    def validate(self, graph: DataflowGraph, num_devices: int) -> Placement:
        """Raise :class:`PlacementError` unless this placement fits ``graph`` on ``num_devices``."""
        if self.device.size != graph.num_nodes:
            raise PlacementError(
                f"placement has {self.device.size} entries but graph {graph.name!r} has "
                f"{graph.num_nodes} nodes"
            )
        comp = graph.compute_nodes
        d = self.device[comp]
        bad = np.flatnonzero((d < 0) | (d >= num_devices))
        if bad.size:
            v = int(comp[bad[0]])
            raise PlacementError(
                f"node {v} ({graph.names[v]!r}) is on device {int(self.device[v])}, "
                f"expected 0..{num_devices - 1}"
            )
        return self

    def with_inputs_filled(self, graph: DataflowGraph) -> Placement:
        """A copy whose input nodes sit on the device of their first consumer."""
        dev = self.device.copy()
        inputs = np.flatnonzero(graph.is_input)
        ptr = graph.succ_ptr
        has = ptr[inputs + 1] > ptr[inputs]
        first = graph.succ_idx[ptr[inputs[has]]]
        if graph.is_input[first].any():  # an input feeding an input: in node order, one by one
            for v in inputs:
                succ = graph.successors(int(v))
                dev[v] = dev[succ[0]] if succ.size else 0
        else:
            dev[inputs[has]] = dev[first]
            dev[inputs[~has]] = 0
        return Placement(dev, self.priority, self.placer, self.meta)

    def devices_used(self, graph: DataflowGraph) -> np.ndarray:
        return np.unique(self.device[graph.compute_nodes])

    def to_dict(
        self, graph: DataflowGraph | None = None, num_devices: int | None = None
    ) -> dict[str, Any]:
        d: dict[str, Any] = {
            "format": "doppler_lab.placement",
            "version": 1,
            "device": self.device.tolist(),
            "priority": None if self.priority is None else self.priority.tolist(),
            "placer": self.placer,
            "meta": to_jsonable(self.meta),
        }
        if graph is not None:
            d["graph"] = graph.name
            d["graph_digest"] = graph.structure_digest
            d["num_nodes"] = graph.num_nodes
        if num_devices is not None:
            d["num_devices"] = num_devices
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Placement:
        if "device" not in d:
            raise PlacementError("placement description lacks the field 'device'")
        return cls(np.array(d["device"]), d.get("priority"), d.get("placer", ""), d.get("meta", {}))


def round_robin(graph: DataflowGraph, num_devices: int) -> Placement:
    """Node i on device ``i mod D`` (the paper's round-robin baseline)."""
    return Placement(
        np.arange(graph.num_nodes) % num_devices, placer="round-robin"
    ).with_inputs_filled(graph)


def single_device(graph: DataflowGraph, num_devices: int = 1, device: int = 0) -> Placement:
    if not 0 <= device < num_devices:
        raise PlacementError(f"device {device} is not in 0..{num_devices - 1}")
    return Placement(np.full(graph.num_nodes, device), placer="single")


def random_placement(graph: DataflowGraph, num_devices: int, rng: np.random.Generator) -> Placement:
    return Placement(
        rng.integers(0, num_devices, graph.num_nodes), placer="random"
    ).with_inputs_filled(graph)
