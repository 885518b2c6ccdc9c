"""Benchmarks: each writes JSON and Markdown into ``reports/bench/`` (see ``doppler-lab bench``).

A benchmark module exposes ``run(out_dir: Path, quick: bool = False) -> dict`` and returns the
record it wrote. Benchmarks report numbers; tests never assert wall time.
"""

from __future__ import annotations

from ._report import write_report

BENCHMARKS: dict[str, str] = {
    "sim": "doppler_lab.bench.sim",
    "quality": "doppler_lab.bench.quality",
    "policy": "doppler_lab.bench.policy",
    "policy-wc": "doppler_lab.bench.policy_wc",
    "executor": "doppler_lab.bench.executor",
    "fidelity": "doppler_lab.bench.fidelity",
    "import": "doppler_lab.bench.importing",
    "general": "doppler_lab.bench.general",
    "general-alone": "doppler_lab.bench.general_alone",
    "memory": "doppler_lab.bench.memory_bound",
    "memory-fidelity": "doppler_lab.bench.memory_fidelity",
    "learner": "doppler_lab.bench.learner",
    "stuck": "doppler_lab.bench.stuck",
}

__all__ = ["BENCHMARKS", "write_report"]
