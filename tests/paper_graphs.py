"""Where the tests find the paper's released graphs (never copied into the repository)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PAPER_DIR = Path(
    os.environ.get("DOPPLER_PAPER_GRAPHS", REPO.parent / "shared" / "data" / "doppler-paper")
)
PAPER_GRAPHS_4GPU = (
    "chain_mm_112nodes",
    "ffnn_192nodes",
    "transformer_block_215nodes",
    "full_transformer_layer_261nodes",
)
PAPER_GRAPHS_8GPU = ("8gpu_transformer_block", "8gpu_full_transformer")


def paper_graph_path(name: str) -> Path:
    """The path of a paper graph; skips the calling test when the files are absent."""
    path = PAPER_DIR / f"{name}.txt"
    if not path.exists():
        pytest.skip(f"paper graph {path} not found (set DOPPLER_PAPER_GRAPHS)")
    return path
