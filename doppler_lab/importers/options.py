"""Import options shared by the importer's front door and its export pipeline (no torch)."""

from __future__ import annotations

#: how ops are grouped into nodes: one aten op a node, or contiguous runs of one module scope
GRANULARITIES: tuple[str, ...] = ("scope", "op")

#: where an imported model's parameters come from: their values travel with the graph
#: (``stored``), or each is a seeded recipe made by the device that reads it (``none``)
WEIGHTS: tuple[str, ...] = ("stored", "none")
