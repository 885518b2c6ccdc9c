"""Baselines without a model: ``random``, ``round-robin``, ``single``.

Memory: where a device's cap can bind (:class:`~doppler_lab.timing.fit.MemoryGuard`),
``random`` draws each op's device among those with room (in topological order), and
``round-robin`` moves an op on to the next device with room; ``single`` raises when the graph
does not fit its one device.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from ..hardware.cluster import Cluster
from ..house.errors import ConfigError
from ..ir.graph import DataflowGraph
from ..ir.placement import Placement, random_placement, round_robin, single_device
from ..timing.fit import MemoryGuard
from .repair import fit_devices


@dataclass(frozen=True)
class RandomPlacer:
    """A uniformly random device per node."""

    name: ClassVar[str] = "random"

    def place(self, graph: DataflowGraph, cluster: Cluster, rng: np.random.Generator) -> Placement:
        mem = MemoryGuard(graph, cluster, self.name)
        if not mem.active:
            return random_placement(graph, cluster.num_devices, rng)
        dev = np.zeros(graph.num_nodes, dtype=np.int64)
        for v in graph.topo_order[~graph.is_input[graph.topo_order]]:
            room = mem.room(int(v))
            ok = np.flatnonzero(room) if room is not None and room.any() else None
            d = int(rng.integers(cluster.num_devices)) if ok is None else int(rng.choice(ok))
            mem.assign(int(v), d)
            dev[v] = d
        p = Placement(dev, placer=self.name).with_inputs_filled(graph)
        return p  # fitted by the registry


@dataclass(frozen=True)
class RoundRobinPlacer:
    """Node i on device ``i mod D`` (the paper's round-robin baseline)."""

    name: ClassVar[str] = "round-robin"

    def place(self, graph: DataflowGraph, cluster: Cluster, rng: np.random.Generator) -> Placement:
        mem = MemoryGuard(graph, cluster, self.name)
        ndev = cluster.num_devices
        if not mem.active:
            return round_robin(graph, ndev)
        dev = np.arange(graph.num_nodes) % ndev
        for v in graph.topo_order[~graph.is_input[graph.topo_order]]:
            room = mem.room(int(v))
            if room is not None and room.any() and not room[dev[v]]:
                dev[v] = next(d % ndev for d in range(dev[v], dev[v] + ndev) if room[d % ndev])
            mem.assign(int(v), int(dev[v]))
        p = Placement(dev, placer=self.name).with_inputs_filled(graph)
        return p  # fitted by the registry


@dataclass(frozen=True)
class SinglePlacer:
    """Every node on one device.

    Attributes:
        device: the device id (default 0).
    """

    device: int = 0
    name: ClassVar[str] = "single"

    def __post_init__(self) -> None:
        if not isinstance(self.device, int | np.integer) or self.device < 0:
            raise ConfigError(f"placer 'single': device = {self.device!r}, expected an id >= 0")

    def place(self, graph: DataflowGraph, cluster: Cluster, rng: np.random.Generator) -> Placement:
        p = single_device(graph, cluster.num_devices, int(self.device))
        fit_devices(graph, cluster, p.device, self.name, fix=False)
        return p
