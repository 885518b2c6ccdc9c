"""Every notebook is covered by a test, follows the layout, and has a quick profile for
``doppler-lab report --quick`` (committed without outputs: ``test_nbclean.py``)."""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest

from doppler_lab.house.nbclean import clean_text
from doppler_lab.lab.reporting.notebook_runs import NOTEBOOKS_DIR, notebook_parameters
from doppler_lab.lab.reporting.site import METADATA_KEY, QUICK_KEY, quick_parameters

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
    """The layout of the notebook's source: its working copy as the git filter commits it (a
    run in JupyterLab may have saved outputs into the file; ``test_nbclean.py`` checks that
    what is committed has none)."""
    nb = nbformat.reads(clean_text(path.read_text(encoding="utf-8")), as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert nb.cells[0].cell_type == "markdown", "first cell states the question"
    params = notebook_parameters(path)
    for name in ("out_dir", "seed", "interactive"):
        assert name in params, f"parameter {name!r} missing"
    assert f'finish("{path.stem}", out_dir, {{' in code[-1].source, (
        "last cell writes summary.json and shows the findings (reporting.findings.finish)"
    )
    assert path.stem[:2].isdigit() and path.stem[2] == "_", "named NN_verb_object.ipynb"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_papermill_reads_every_parameter(path):
    """papermill's own parser must see every parameter (a comment containing '=' hides one)."""
    from papermill.inspection import inspect_notebook

    seen = set(inspect_notebook(str(path)))
    assert set(notebook_parameters(path)) <= seen, sorted(set(notebook_parameters(path)) - seen)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_defaults_are_interactive_and_write_under_the_repository(path):
    """Opened in JupyterLab a notebook is interactive (papermill passes ``interactive=False``) and
    writes into ``reports/<notebook>`` of the checkout, whatever the kernel's working directory."""
    params = notebook_parameters(path)
    assert params["interactive"] is True
    assert params["out_dir"] == f"reports/{path.stem}"
    nb = nbformat.read(str(path), as_version=4)
    code = [c.source for c in nb.cells if c.cell_type == "code"]
    assert any(
        c.startswith("setup_notebook(interactive)\nout_dir = repo_path(out_dir)") for c in code
    )
    assert "../reports" not in "".join(code)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_every_notebook_has_a_quick_profile(path):
    """A new notebook needs small settings for ``make reports-quick``: put them in its metadata as
    ``{"doppler_lab": {"quick": {"parameter": value, ...}}}`` (keys from its parameters cell)."""
    nb = nbformat.read(str(path), as_version=4)
    assert QUICK_KEY in nb.metadata.get(METADATA_KEY, {}), (
        f"{path.name} has no quick profile: add metadata "
        f'{{"{METADATA_KEY}": {{"{QUICK_KEY}": {{...}}}}}} with small values of its parameters'
    )
    profile = quick_parameters(path)  # raises on a key the parameters cell does not declare
    assert profile and set(profile) <= set(notebook_parameters(path))
    assert not {"out_dir", "interactive"} & set(profile), "set by the report run"
