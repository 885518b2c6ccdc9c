"""Where the tests find the paper's released graphs (never copied into the repository): the
package's own search (:func:`doppler_lab.house.paths.paper_graphs_dir`), so tests look where every
command and notebook looks."""

from __future__ import annotations

from pathlib import Path

import pytest

from doppler_lab.house.paths import PAPER_GRAPHS_HINT, paper_graphs_dir

PAPER_GRAPHS_4GPU = (
    "chain_mm_112nodes",
    "ffnn_192nodes",
    "transformer_block_215nodes",
    "full_transformer_layer_261nodes",
)
PAPER_GRAPHS_8GPU = ("8gpu_transformer_block", "8gpu_full_transformer")


def paper_dir_or_skip() -> Path:
    """The folder of the paper's graphs; skips the calling test when none is found."""
    folder = paper_graphs_dir()
    if folder is None:
        pytest.skip(f"paper graphs not found; {PAPER_GRAPHS_HINT}")
    return folder


def paper_graph_path(name: str) -> Path:
    """The path of a paper graph; skips the calling test when the file is absent."""
    path = paper_dir_or_skip() / f"{name}.txt"
    if not path.exists():
        pytest.skip(f"paper graph {path} not found; {PAPER_GRAPHS_HINT}")
    return path
