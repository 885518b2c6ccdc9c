"""Notebooks stay clean in git however they are run: the ``doppler-nbclean`` filter strips
outputs on commit, and what is committed has none."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from doppler_lab.reporting.notebook_runs import NOTEBOOKS_DIR
from doppler_lab.house.nbclean import clean_text

REPO = NOTEBOOKS_DIR.parent
NOTEBOOKS = sorted(NOTEBOOKS_DIR.glob("*.ipynb"))


def with_outputs(text: str) -> str:
    """``text`` as JupyterLab saves it after a run: outputs, counts, widget state."""
    nb = json.loads(text)
    for i, cell in enumerate(nb["cells"]):
        if cell["cell_type"] == "code":
            cell["execution_count"] = i
            cell["outputs"] = [{"output_type": "stream", "name": "stdout", "text": ["hi\n"]}]
            cell["metadata"]["execution"] = {"iopub.status.busy": "2026-12-04T00:00:00Z"}
    nb["metadata"]["widgets"] = {"application/vnd.jupyter.widget-state+json": {"state": {}}}
    return json.dumps(nb, indent=1)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_a_clean_notebook_passes_through_byte_for_byte(path):
    text = path.read_text(encoding="utf-8")
    assert clean_text(text) == text


def test_a_run_notebook_is_cleaned_to_its_source():
    text = NOTEBOOKS[0].read_text(encoding="utf-8")
    assert clean_text(with_outputs(text)) == text


def test_not_a_notebook_is_refused():
    with pytest.raises(ValueError, match="not a notebook"):
        clean_text('{"cells": 3}')


def _git(*args: str, cwd: Path) -> str:
    return subprocess.run(
        ["git", *args], cwd=cwd, check=True, capture_output=True, text=True
    ).stdout


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_the_filter_strips_outputs_on_commit(tmp_path):
    """A repository with the attributes and the filter installed as ``make venv`` does: a
    notebook saved with outputs is committed without them."""
    _git("init", "-q", cwd=tmp_path)
    _git("config", "user.email", "t@example.invalid", cwd=tmp_path)
    _git("config", "user.name", "t", cwd=tmp_path)
    clean = f"{sys.executable} -m doppler_lab.house.nbclean"
    _git("config", "filter.doppler-nbclean.clean", clean, cwd=tmp_path)
    _git("config", "filter.doppler-nbclean.smudge", "cat", cwd=tmp_path)
    shutil.copy(REPO / ".gitattributes", tmp_path / ".gitattributes")
    (tmp_path / "notebooks").mkdir()
    source = NOTEBOOKS[0].read_text(encoding="utf-8")
    target = tmp_path / "notebooks" / NOTEBOOKS[0].name
    target.write_text(with_outputs(source), encoding="utf-8")
    _git("add", ".", cwd=tmp_path)
    _git("commit", "-qm", "run in JupyterLab", cwd=tmp_path)
    committed = _git("show", f"HEAD:notebooks/{NOTEBOOKS[0].name}", cwd=tmp_path)
    assert committed == source


def test_the_attributes_name_the_filter_and_make_venv_installs_it():
    attributes = (REPO / ".gitattributes").read_text()
    assert "notebooks/*.ipynb filter=doppler-nbclean" in attributes
    makefile = (REPO / "Makefile").read_text()
    assert "filter.doppler-nbclean.clean" in makefile


@pytest.mark.skipif(
    shutil.which("git") is None or not (REPO / ".git").exists(), reason="needs a git checkout"
)
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_what_is_committed_has_no_outputs(path):
    """The layout test reads the working copy; this one reads what git holds (HEAD), so a
    notebook run in JupyterLab in this checkout does not hide a committed output."""
    try:
        text = _git("show", f"HEAD:notebooks/{path.name}", cwd=REPO)
    except subprocess.CalledProcessError:
        pytest.skip(f"{path.name} is not committed yet")
    nb = json.loads(text)
    code = [c for c in nb["cells"] if c["cell_type"] == "code"]
    assert all(not c["outputs"] and c["execution_count"] is None for c in code)
    assert "widgets" not in nb["metadata"]
