from __future__ import annotations

import re

import nbformat
from papermill.translators import PythonTranslator

from doppler_lab.cli import main
from doppler_lab.lab.reporting.notebook_runs import NOTEBOOKS_DIR, notebook_parameters
from doppler_lab.viz.widgets import SNAPSHOT_CLASS

#: round robin against the Critical Path teacher on a tiny chainmm, cp stepped
RR_VS_CP = dict(
    workload="chainmm",
    scale="tiny",
    noise_seeds=2,
    first="round-robin",
    second="cp",
    second_checkpoint="",
    stepped="cp",
)


def test_placement_explorer_defaults_step_the_learned_policy(run_notebook):
    s = run_notebook("11_placement_explorer.ipynb", workload="chainmm", scale="tiny", noise_seeds=2)
    learned = "doppler [llama_block]"
    alone = f"{learned} (policy alone)"  # every doppler row has the policy alone beside it
    assert set(s["makespans"]) == {"cp", learned, alone}  # CP vs a shipped DOPPLER
    made = {r["placer"]: r["produced_by"] for r in s["metrics"]}
    assert made["cp"] == "" and made[learned] and made[alone].split()[0] in ("greedy", "sample")
    assert "policy alone" in s["findings"] and f"{learned}'s result is the" in s["findings"]
    assert s["stepped"] == "doppler [llama_block]" and 0 < s["steps"] < s["num_nodes"]


def test_placement_explorer(run_notebook):
    s = run_notebook("11_placement_explorer.ipynb", **RR_VS_CP, show_steps="0,3,100000")
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


def test_explorer_page_draws_offline(run_notebook, tmp_path):
    """Run as JupyterLab would (the widgets live, their state saved in the notebook, as
    nbconvert --execute saves it), the rendered page draws the explorer's view with no widget
    manager and nothing from the network: the controls' values, the table, the Gantt charts;
    the page's title is the notebook's."""
    run_notebook("11_placement_explorer.ipynb", **RR_VS_CP, show_steps="0", interactive=True)
    executed = tmp_path / "11_placement_explorer" / "11_placement_explorer.ipynb"
    nb = nbformat.read(str(executed), as_version=4)
    assert nb.metadata["widgets"]["application/vnd.jupyter.widget-state+json"]["state"]
    # exported as a user would: doppler-lab report --render (render_html)
    assert main(["report", "--render", str(executed), "--out", str(tmp_path / "page.html")]) == 0
    page = (tmp_path / "page.html").read_text()
    cell = page[page.index('id="Interactive-explorer"') :]
    view = cell[cell.index(SNAPSHOT_CLASS) :]
    assert "Plotly.newPlot" in view[:200_000]  # the Gantt charts are drawn there
    assert "round-robin" in view[:50_000] and "makespan (us)" in view[:50_000]
    assert "widget-view+json" not in page and "widget-state+json" not in page
    assert "html-manager" not in page and "unpkg" not in page
    assert not re.search(r'<script[^>]+src="https?://', page)  # nothing fetched
    assert page.count("plotly.js v") == 1  # a page that opens alone carries plotly.js once
    assert "<title>Placement explorer: two placers side by side" in page
