"""Baselines without a model: ``random``, ``round-robin``, ``single``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from ..hardware.cluster import Cluster
from ..house.errors import ConfigError
from ..ir.graph import DataflowGraph
from ..ir.placement import Placement, random_placement, round_robin, single_device


@dataclass(frozen=True)
class RandomPlacer:
    """A uniformly random device per node."""

    name: ClassVar[str] = "random"

    def place(self, graph: DataflowGraph, cluster: Cluster, rng: np.random.Generator) -> Placement:
        return random_placement(graph, cluster.num_devices, rng)


@dataclass(frozen=True)
class RoundRobinPlacer:
    """Node i on device ``i mod D`` (the paper's round-robin baseline)."""

    name: ClassVar[str] = "round-robin"

    def place(self, graph: DataflowGraph, cluster: Cluster, rng: np.random.Generator) -> Placement:
        return round_robin(graph, cluster.num_devices)


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
        return single_device(graph, cluster.num_devices, int(self.device))
