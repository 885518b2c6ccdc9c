"""The ``pipeline`` placer: contiguous stages in topological order, stage i on device i, split
where the largest stage's compute is smallest with every stage within its device's memory
(:mod:`doppler_lab.placers.stage_split` says how the split points are chosen). Where no split
keeps every stage within its static bound (every activation resident for the whole run), the
split balanced by compute alone is taken when its simulated peak fits every device
(``meta["memory_fit"] = "simulated"``), else the placer says what the graph needs."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from ..hardware.cluster import Cluster
from ..ir.graph import DataflowGraph
from ..ir.placement import Placement
from ..timing.cost_model import CostModel
from .memory_fit import MemoryGuard, fit_placement, no_fit_error, simulated_fit
from .stage_split import StageSplitter


@dataclass(frozen=True)
class PipelinePlacer:
    """Contiguous stages in topological order, stage i on device i, split where the largest
    stage's compute is smallest with every stage within its device's memory (module docstring).
    Deterministic."""

    name: ClassVar[str] = "pipeline"

    def place(self, graph: DataflowGraph, cluster: Cluster, rng: np.random.Generator) -> Placement:
        guard = MemoryGuard(graph, cluster, self.name)
        caps = guard.caps if guard.active else np.full(cluster.num_devices, np.inf)
        cost = CostModel(graph, cluster)
        splitter = StageSplitter(graph, cost.compute, caps)
        got = splitter.best()
        if got is None and guard.active:
            # no split keeps every stage within its static bound, which holds every activation
            # for the whole run: the split balanced by compute alone, when its simulated peak
            # fits (a model whose activations, not its weights, overflow one device)
            splitter = StageSplitter(graph, cost.compute, np.full(caps.size, np.inf))
            got = splitter.best()
            if got is not None and not simulated_fit(graph, cluster, got[0].clip(0), caps):
                got = None
        if got is None:
            raise no_fit_error(graph, caps, self.name)
        dev, bottleneck = got
        comp = np.asarray(splitter.order, dtype=np.int64)
        priority = np.zeros(graph.num_nodes)
        priority[comp] = np.arange(comp.size)
        stages = np.unique(dev[comp]) if comp.size else np.zeros(0, dtype=np.int64)
        meta = {
            "stages": int(stages.size),
            "bottleneck": float(bottleneck) * graph.time_scale,
        }
        p = Placement(dev.clip(0), priority, self.name, meta).with_inputs_filled(graph)
        return fit_placement(graph, cluster, p, self.name)
