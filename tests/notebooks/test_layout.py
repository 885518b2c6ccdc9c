"""Every notebook is covered by a test, stored without outputs, and follows the layout."""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest

from doppler_lab.experiments import NOTEBOOKS_DIR, notebook_parameters

NOTEBOOKS = sorted(NOTEBOOKS_DIR.glob("*.ipynb"))
TESTS = Path(__file__).parent


def test_there_are_notebooks():
    assert NOTEBOOKS, "notebooks/ is empty"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_every_notebook_has_a_test(path):
    assert (TESTS / f"test_{path.stem}.py").exists(), (
        f"no tests/notebooks/test_{path.stem}.py for {path.name}"
    )


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_layout(path):
    nb = nbformat.read(str(path), as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert all(not c.outputs and c.execution_count is None for c in code), "stored with outputs"
    assert nb.cells[0].cell_type == "markdown", "first cell states the question"
    params = notebook_parameters(path)
    for name in ("out_dir", "seed", "interactive"):
        assert name in params, f"parameter {name!r} missing"
    assert "summary.json" in code[-1].source or "write_summary" in code[-1].source, (
        "last cell writes summary.json"
    )
    assert path.stem[:2].isdigit() and path.stem[2] == "_", "named NN_verb_object.ipynb"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_papermill_reads_every_parameter(path):
    """papermill's own parser must see every parameter (a comment containing '=' hides one)."""
    from papermill.inspection import inspect_notebook

    seen = set(inspect_notebook(str(path)))
    assert set(notebook_parameters(path)) <= seen, sorted(set(notebook_parameters(path)) - seen)
