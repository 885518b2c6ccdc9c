"""How good placements on the paper's released graphs can be: the one home of those numbers.

From the project's YARDSTICK.md ("Yardstick: how good placements on the paper's graphs can be"):
paper semantics (the released simulator), makespans / 1e10, measured with an independent
reference simulator and a long simulated-annealing search (tens of millions of simulations per
graph). Columns:

- ``nodes`` (compute nodes, inputs dropped) and ``devices`` (the setting: 4, or 8 for ``8gpu_*``);
- ``one_device`` / ``round_robin``: the released simulator's makespan on one device and under
  round robin;
- ``lower_bound``: max(critical path without communication, total work / devices);
- ``cp_mean`` / ``cp_best``: the critical-path teacher with the released estimate, mean and
  best over 20 tie seeds;
- ``cp_hill``: CP followed by a hill climb;
- ``best_known``: the best placement found (on ``chain_mm_112nodes`` and ``ffnn_192nodes`` it
  meets the lower bound: optimal).

The demo, ``bench quality``, ``bench policy`` and the tests read them from here.
"""

from __future__ import annotations

YARDSTICK: dict[str, dict[str, float]] = {
    "chain_mm_112nodes": {"nodes": 76, "devices": 4, "lower_bound": 1200.07, "one_device": 4800.28, "round_robin": 2000.14, "cp_mean": 1695.08, "cp_best": 1500.05, "cp_hill": 1400.07, "best_known": 1200.07},
    "ffnn_192nodes": {"nodes": 180, "devices": 4, "lower_bound": 56.696, "one_device": 226.78, "round_robin": 84.18, "cp_mean": 83.98, "cp_best": 77.74, "cp_hill": 76.24, "best_known": 56.696},
    "transformer_block_215nodes": {"nodes": 182, "devices": 4, "lower_bound": 97.17, "one_device": 388.68, "round_robin": 255.02, "cp_mean": 247.59, "cp_best": 226.51, "cp_hill": 172.75, "best_known": 166.74},
    "full_transformer_layer_261nodes": {"nodes": 229, "devices": 4, "lower_bound": 97.24, "one_device": 388.98, "round_robin": 274.88, "cp_mean": 233.42, "cp_best": 212.43, "cp_hill": 165.90, "best_known": 122.11},
    "8gpu_transformer_block": {"nodes": 302, "devices": 8, "lower_bound": 97.15, "one_device": 777.22, "round_robin": 342.04, "cp_mean": 336.23, "cp_best": 321.07, "cp_hill": 279.83, "best_known": 166.80},
    "8gpu_full_transformer": {"nodes": 367, "devices": 8, "lower_bound": 97.23, "one_device": 777.86, "round_robin": 323.61, "cp_mean": 277.52, "cp_best": 265.48, "cp_hill": 219.52, "best_known": 166.85},
}  # fmt: skip


def best_known(graph: str) -> float | None:
    """The best known makespan of a paper graph (paper semantics / 1e10); ``None`` for others."""
    return YARDSTICK.get(graph, {}).get("best_known")


def lower_bound(graph: str) -> float | None:
    """The makespan lower bound of a paper graph (paper semantics / 1e10); ``None`` for others."""
    return YARDSTICK.get(graph, {}).get("lower_bound")


__all__ = ["YARDSTICK", "best_known", "lower_bound"]
