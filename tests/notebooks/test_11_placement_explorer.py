from __future__ import annotations

import nbformat
from papermill.translators import PythonTranslator

from doppler_lab.reporting.notebook_runs import NOTEBOOKS_DIR, notebook_parameters


def test_placement_explorer_defaults_step_the_learned_policy(run_notebook):
    s = run_notebook("11_placement_explorer.ipynb", workload="chainmm", scale="tiny", noise_seeds=2)
    assert set(s["makespans"]) == {"cp", "doppler [llama_block]"}  # CP vs a shipped DOPPLER
    assert s["stepped"] == "doppler [llama_block]" and 0 < s["steps"] < s["num_nodes"]


def test_placement_explorer(run_notebook):
    s = run_notebook(
        "11_placement_explorer.ipynb",
        workload="chainmm",
        scale="tiny",
        noise_seeds=2,
        show_steps="0,3,100000",
        first="round-robin",
        second="cp",
        second_checkpoint="",
        stepped="cp",
    )
    assert set(s["makespans"]) == {"round-robin", "cp"}
    assert all(m >= s["lower_bound"] * (1 - 1e-9) for m in s["makespans"].values())
    assert all(r >= 1 - 1e-9 for r in s["ratio_lb"].values())
    assert s["stepped"] == "cp" and "cp" in s["steppable"]
    assert s["same_as_placer"] is True  # the stepped episode is place("cp", ...) exactly
    assert 0 < s["steps"] < s["num_nodes"]  # every compute node, no input
    assert s["mean_candidates"] >= 1
    assert set(s["key_numbers"]) >= {"workload", "makespan", "improvement"}


def test_papermill_reads_every_parameter():
    nb = nbformat.read(str(NOTEBOOKS_DIR / "11_placement_explorer.ipynb"), as_version=4)
    cell = next(c for c in nb.cells if "parameters" in c.metadata.get("tags", []))
    seen = {p.name for p in PythonTranslator.inspect(cell)}
    assert seen == set(notebook_parameters(NOTEBOOKS_DIR / "11_placement_explorer.ipynb"))
