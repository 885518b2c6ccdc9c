"""A straightforward SimPy implementation of the paper semantics (the released code's approach).

It exists as an independent check of the compiled kernel and as the baseline of
``doppler-lab bench sim``. One SimPy process per edge (wait for the producer, wait the transfer
time if the devices differ) and one per op (wait for all input processes, queue for the device,
compute). Processes are created edges first (by source node, then edge id) and then ops by id,
which fixes SimPy's tie order exactly as in the released simulator.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ...house.deps import require
from ...ir.graph import DataflowGraph
from ..cost_model import CostModel


def simulate_paper_simpy(
    graph: DataflowGraph, cost: CostModel, device: Sequence[int] | np.ndarray
) -> tuple[float, np.ndarray, np.ndarray]:
    """Simulate one placement; returns (makespan, start, end) in reported units."""
    simpy = require("simpy", "the simpy reference simulator")

    dev = np.asarray(device, dtype=np.int64)
    env = simpy.Environment()
    finished = [env.event() for _ in range(graph.num_nodes)]
    resources = {int(d): simpy.Resource(env, capacity=1) for d in np.unique(dev)}
    start = np.full(graph.num_nodes, np.nan)
    end = np.full(graph.num_nodes, np.nan)
    comp = cost.compute

    def transfer(u: int, e: int, delay: float):
        yield finished[u]
        yield env.timeout(delay)

    def operation(v: int, inputs: list):
        yield simpy.AllOf(env, inputs)
        with resources[int(dev[v])].request() as req:
            yield req
            start[v] = env.now
            yield env.timeout(comp[v, dev[v]])
            end[v] = env.now
        finished[v].succeed()

    inputs_of: list[list] = [[] for _ in range(graph.num_nodes)]
    for k in range(graph.num_edges):  # CSR slot order: by source, then edge id
        u = int(graph.succ_ptr.searchsorted(k, side="right") - 1)
        e = int(graph.succ_eid[k])
        v = int(graph.succ_idx[k])
        if graph.is_input[u]:
            continue
        delay = cost.transfer_time(e, int(dev[u]), int(dev[v]))
        inputs_of[v].append(env.process(transfer(u, e, delay)))
    for v in range(graph.num_nodes):
        if not graph.is_input[v]:
            env.process(operation(v, inputs_of[v]))
    env.run()
    scale = graph.time_scale
    return float(np.nanmax(end)) * scale, start * scale, end * scale
