"""Dense views of a workload's block tensors (uses torch; import it explicitly).

A generated graph records in ``graph.meta["inputs"]`` and ``graph.meta["outputs"]`` the block
grid of node ids, the partition and the dense shape of every logical tensor. These helpers
rebuild the dense tensors, e.g. to run the same model densely and compare::

    values = evaluate(graph, seed=0)
    y = dense_outputs(graph, values)["y"]
    x = dense_inputs(graph, seed=0)["x"]
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from ..executor.torch_ops import input_seed, make_input
from ..house.errors import GraphError
from ..ir.graph import DataflowGraph


def assemble(entry: Mapping[str, Any], values: Mapping[int, torch.Tensor]) -> torch.Tensor:
    """The dense tensor described by a meta ``entry`` from the block ``values`` (node id -> tensor)."""
    ids = np.asarray(entry["ids"], dtype=np.int64)

    def cat(grid: np.ndarray, dim: int) -> torch.Tensor:
        if grid.ndim == 0:
            v = int(grid)
            if v not in values:
                raise GraphError(f"no value for block node {v}")
            return values[v]
        return torch.cat([cat(grid[k], dim + 1) for k in range(grid.shape[0])], dim=dim)

    out = cat(ids, 0)
    if tuple(out.shape) != tuple(entry["shape"]):
        raise GraphError(f"assembled shape {tuple(out.shape)}, expected {tuple(entry['shape'])}")
    return out


def _tensors(graph: DataflowGraph, key: str) -> Mapping[str, Any]:
    if key not in graph.meta:
        raise GraphError(
            f"graph {graph.name!r} has no meta[{key!r}]; expected a generated workload"
        )
    return graph.meta[key]


def dense_inputs(graph: DataflowGraph, seed: int = 0) -> dict[str, torch.Tensor]:
    """Every logical input tensor, materialised as :func:`~doppler_lab.executor.torch_ops.evaluate`
    does for a run seeded ``seed``."""
    out = {}
    for name, entry in _tensors(graph, "inputs").items():
        ids = np.asarray(entry["ids"], dtype=np.int64).reshape(-1)
        blocks = {int(v): make_input(graph.specs[v], input_seed(seed, int(v))) for v in ids}  # type: ignore[index]
        out[name] = assemble(entry, blocks)
    return out


def dense_outputs(
    graph: DataflowGraph, values: Mapping[int, torch.Tensor]
) -> dict[str, torch.Tensor]:
    """Every logical output tensor from the values of a run (node id -> tensor)."""
    return {name: assemble(entry, values) for name, entry in _tensors(graph, "outputs").items()}
