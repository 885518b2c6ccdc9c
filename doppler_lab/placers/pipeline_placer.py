"""The ``pipeline`` placer: contiguous stages in topological order, stage i on device i, split
where the largest stage's compute is smallest with every stage within its device's memory
(:mod:`doppler_lab.placers.stage_split` says how the split points are chosen). Where no split
keeps every stage within its static bound (every activation resident for the whole run), the
split balanced by compute alone is taken when its simulated peak fits every device
(``meta["memory_fit"] = "simulated"``), else the placer says what the graph needs. Where a cap
binds by the static bound but the whole model fits the device with the most memory by its
simulated peak, memory gives no reason for stages: the split without caps where its list
schedule is shorter, else one stage on that device."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from ..hardware.cluster import Cluster
from ..ir.graph import DataflowGraph
from ..ir.placement import Placement
from ..timing.cost_model import CostModel
from ..timing.fit import MemoryGuard, no_fit_error
from .placer_base import list_schedule
from .repair import pipeline_split


@dataclass(frozen=True)
class PipelinePlacer:
    """Contiguous stages in topological order, stage i on device i, split where the largest
    stage's compute is smallest with every stage within its device's memory (module docstring).
    Deterministic."""

    name: ClassVar[str] = "pipeline"

    @staticmethod
    def _fits_one(
        graph: DataflowGraph, cluster: Cluster, caps: np.ndarray, compute: np.ndarray
    ) -> tuple[np.ndarray, float]:
        """Stages (-1: inputs) and bottleneck of a model that fits one device: the split
        without caps when its list schedule (``est``) is shorter than one stage's."""
        one = int(np.argmax(caps))
        dev = np.where(graph.is_input, -1, one)
        bottleneck = float(compute[graph.compute_nodes, one].sum())
        got = pipeline_split(graph, cluster, np.full(caps.size, np.inf), compute)
        if got is not None:
            cost = CostModel(graph, cluster)
            split = list_schedule(graph, cost, got[0].clip(0)).makespan
            if split < list_schedule(graph, cost, dev.clip(0)).makespan:
                return got
        return dev, bottleneck

    def place(self, graph: DataflowGraph, cluster: Cluster, rng: np.random.Generator) -> Placement:
        guard = MemoryGuard(graph, cluster, self.name)
        caps = guard.caps if guard.active else np.full(cluster.num_devices, np.inf)
        compute = CostModel(graph, cluster).compute
        if guard.binds and not guard.active:
            # the model fits the device with the most memory by its simulated peak: the split
            # without caps where its list schedule is shorter, else one stage on that device
            dev, bottleneck = self._fits_one(graph, cluster, guard.caps, compute)
        else:
            # within the static bound, else balanced by compute alone where its simulated
            # peak fits
            got = pipeline_split(graph, cluster, caps, compute)
            if got is None:
                raise no_fit_error(graph, caps, self.name)
            dev, bottleneck = got
        topo = graph.topo_order
        comp = np.asarray(topo[~graph.is_input[topo]], dtype=np.int64)  # the stages' order
        priority = np.zeros(graph.num_nodes)
        priority[comp] = np.arange(comp.size)
        stages = np.unique(dev[comp]) if comp.size else np.zeros(0, dtype=np.int64)
        meta = {
            "stages": int(stages.size),
            "bottleneck": float(bottleneck) * graph.time_scale,
        }
        p = Placement(dev.clip(0), priority, self.name, meta).with_inputs_filled(graph)
        return p  # fitted by the registry
