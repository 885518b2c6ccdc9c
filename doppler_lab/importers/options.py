"""Import options shared by the importer's front door and its export pipeline (no torch)."""

from __future__ import annotations

#: how ops are grouped into nodes: one aten op a node, or contiguous runs of one module scope
GRANULARITIES: tuple[str, ...] = ("scope", "op")
