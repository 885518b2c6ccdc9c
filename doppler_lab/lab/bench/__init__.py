"""Benchmarks: each writes JSON and Markdown into ``reports/bench/`` (see ``doppler-lab bench``).

A benchmark module exposes ``run(out_dir: Path, quick: bool = False) -> dict`` and returns the
record it wrote. Benchmarks report numbers; tests never assert wall time.
"""

from __future__ import annotations

from typing import Any

BENCHMARKS: dict[str, str] = {
    "sim": "doppler_lab.lab.bench.sim",
    "quality": "doppler_lab.lab.bench.quality",
    "policy": "doppler_lab.lab.bench.policy",
    "policy-wc": "doppler_lab.lab.bench.policy_wc",
    "executor": "doppler_lab.lab.bench.executor",
    "allocator": "doppler_lab.lab.bench.held_memory",
    "fidelity": "doppler_lab.lab.bench.fidelity",
    "import": "doppler_lab.lab.bench.importing",
    "general": "doppler_lab.lab.bench.general",
    "general-alone": "doppler_lab.lab.bench.general_alone",
    "memory": "doppler_lab.lab.bench.memory_bound",
    "memory-fidelity": "doppler_lab.lab.bench.memory_fidelity",
    "learner": "doppler_lab.lab.bench.learner",
    "stuck": "doppler_lab.lab.bench.stuck",
    "stuck-split": "doppler_lab.lab.bench.stuck_split",
}

__all__ = ["BENCHMARKS", "write_report"]


def __getattr__(name: str) -> Any:
    """``write_report`` on first use: the report writer loads pandas and the plotting stack,
    which every command would pay for at start (the CLI's parser reads :data:`BENCHMARKS`)."""
    if name == "write_report":
        from ._report import write_report

        return write_report
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
