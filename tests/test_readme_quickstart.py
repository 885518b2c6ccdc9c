"""The README's quick start: at the top, every step there, and its table the command's numbers."""

from __future__ import annotations

import json
from pathlib import Path

from doppler_lab.cli import main

README = Path(__file__).resolve().parents[1] / "README.md"


def _quick_start() -> str:
    lines = README.read_text().splitlines()
    start = lines.index("## Quick start")
    opening = lines.index("```console", start)
    end = lines.index("```", opening + 1)  # the commands and their output
    assert end < 40, "the quick start ends within the README's first 40 lines"
    return "\n".join(lines[start:end])


def test_quick_start_is_at_the_top_with_every_step():
    text = _quick_start()
    for step in (
        "make venv",
        "doppler-lab place llama_block --placer doppler",
        "doppler-lab place llama_block --placer cp,heft,doppler --gantt compare.html",
        "doppler-lab explore llama_block",
        "doppler-lab import my_model.py:make",
    ):
        assert f"$ {step}" in text, step


def test_quick_start_table_has_the_commands_numbers(capsys):
    assert main(["place", "llama_block", "--placer", "cp,heft", "--json"]) == 0
    text = _quick_start()
    for r in json.loads(capsys.readouterr().out):
        row = next(line for line in text.splitlines() if line.startswith(f"{r['placer']} "))
        cells = row.split()
        assert (
            cells[1] == f"{r['makespan'] * 1e3:.4g}"
            and cells[2] == f"{r['ratio_to_lower_bound']:.3f}"
        )
