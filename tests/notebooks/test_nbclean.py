"""Notebooks stay clean in git however they are run: the ``doppler-nbclean`` filter strips
outputs on commit, and what is committed has none."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from doppler_lab.house.nbclean import clean_text
from doppler_lab.lab.reporting.notebook_runs import NOTEBOOKS_DIR

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
    # the filter imports the package these tests import (a relative PYTHONPATH would not)
    pythonpath = os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])
    return subprocess.run(
        ["git", *args],
        cwd=cwd,
        check=True,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": pythonpath},
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
    assert "core.fsmonitor" in makefile and "doppler_lab.house.nbclean --fsmonitor" in makefile


def test_the_monitor_names_every_tracked_path_but_notebooks_that_clean_to_their_blob(tmp_path):
    from doppler_lab.house.nbclean import _blob_id, fsmonitor_paths

    clean = _small_notebook(NOTEBOOKS[0].read_text(encoding="utf-8"))
    ran = json.loads(clean)
    ran["cells"][-1]["outputs"] = [{"name": "stdout", "output_type": "stream", "text": "2"}]
    (tmp_path / "a.ipynb").write_text(json.dumps(ran), encoding="utf-8")  # run: same source
    (tmp_path / "b.ipynb").write_text("{not json", encoding="utf-8")  # broken: git looks
    blob = _blob_id(clean.encode("utf-8"))
    index = "".join(
        f"100644 {blob} 0\t{name}\0" for name in ("a.ipynb", "b.ipynb", "c.ipynb", "d.py")
    )
    filtered = {"a.ipynb", "b.ipynb", "c.ipynb"}
    assert fsmonitor_paths(tmp_path, index.encode(), filtered) == ["b.ipynb", "c.ipynb", "d.py"]
    # a notebook the filter does not clean (the site keeps its outputs) is always named
    assert fsmonitor_paths(tmp_path, index.encode(), {"b.ipynb"})[0] == "a.ipynb"


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


def _small_notebook(source: str) -> str:
    """A notebook of the house layout (a real one's metadata, markdown and parameters cell)
    whose code cells are quick: what a kernel writes into it is what matters here."""
    nb = json.loads(source)
    for cell in nb["cells"]:
        if cell["cell_type"] == "code":
            tags = cell["metadata"].get("tags", [])
            cell["source"] = (
                ["seed = 0  # seed\n", "out_dir = 'x'"]
                if "parameters" in tags
                else ["print(1 + 1)"]
            )
    return clean_text(json.dumps(nb))


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
@pytest.mark.parametrize("runner", ["nbclient", "papermill"])
def test_a_notebook_run_in_place_by_a_kernel_leaves_git_status_clean(tmp_path, runner):
    """Run and saved in place by a real kernel (``jupyter execute --inplace``'s nbclient, or
    papermill with the notebook as its own output), a notebook reads as unchanged to git in a
    checkout set up as ``make venv`` sets it (the filter, the file-system monitor and one
    refresh of the index): ``git status`` and ``git diff`` are clean. An edit to a cell still
    shows, and so do other files' changes."""
    import nbformat

    from doppler_lab.lab.reporting.notebook_runs import _kernel_name

    _git("init", "-q", cwd=tmp_path)
    _git("config", "user.email", "t@example.invalid", cwd=tmp_path)
    _git("config", "user.name", "t", cwd=tmp_path)
    _git(
        "config",
        "filter.doppler-nbclean.clean",
        f"{sys.executable} -m doppler_lab.house.nbclean",
        cwd=tmp_path,
    )
    _git("config", "filter.doppler-nbclean.smudge", "cat", cwd=tmp_path)
    shutil.copy(REPO / ".gitattributes", tmp_path / ".gitattributes")
    (tmp_path / "notebooks").mkdir()
    path = tmp_path / "notebooks" / NOTEBOOKS[0].name
    path.write_text(_small_notebook(NOTEBOOKS[0].read_text(encoding="utf-8")), encoding="utf-8")
    _git("add", ".", cwd=tmp_path)
    _git("commit", "-qm", "clean", cwd=tmp_path)
    # what make venv does after a clone
    monitor = f"{sys.executable} -m doppler_lab.house.nbclean --fsmonitor"
    _git("config", "core.fsmonitor", monitor, cwd=tmp_path)
    _git("update-index", "-q", "--refresh", cwd=tmp_path)
    time.sleep(1.1)  # the run writes in a later second than the refresh saw (git's racy check)
    if runner == "nbclient":
        from nbclient import NotebookClient

        nb = nbformat.read(str(path), as_version=4)
        NotebookClient(nb, kernel_name=_kernel_name(), timeout=120).execute()
        nbformat.write(nb, str(path))
    else:
        import papermill

        papermill.execute_notebook(
            str(path),
            str(path),
            parameters={"seed": 3},
            kernel_name=_kernel_name(),
            progress_bar=False,
        )
    ran = json.loads(path.read_text(encoding="utf-8"))
    assert any(c.get("outputs") for c in ran["cells"])  # it did run and save its outputs
    assert _git("status", "--porcelain", cwd=tmp_path) == ""  # nothing to commit
    assert _git("diff", "--stat", cwd=tmp_path) == ""  # the run's traces are all filtered
    # a real edit to a cell shows, and so does another file's change or a new file
    ran["cells"][-1]["source"] = "print(2 + 2)"
    path.write_text(json.dumps(ran, indent=1), encoding="utf-8")
    (tmp_path / ".gitattributes").write_text("# edited\n", encoding="utf-8")
    (tmp_path / "new.txt").write_text("x", encoding="utf-8")
    assert _git("status", "--porcelain", cwd=tmp_path).splitlines() == [
        " M .gitattributes",
        " M " + path.relative_to(tmp_path).as_posix(),
        "?? new.txt",
    ]


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_a_notebook_kept_with_its_outputs_shows_when_only_its_outputs_change(tmp_path):
    """The monitor skips only notebooks the filter cleans: a notebook outside ``notebooks/``
    (the report site keeps its pages with their outputs) shows as modified when only its
    outputs change, even from a clean source."""
    _git("init", "-q", cwd=tmp_path)
    _git("config", "user.email", "t@example.invalid", cwd=tmp_path)
    _git("config", "user.name", "t", cwd=tmp_path)
    shutil.copy(REPO / ".gitattributes", tmp_path / ".gitattributes")
    page = tmp_path / "reports" / "site" / "p.ipynb"
    page.parent.mkdir(parents=True)
    clean = _small_notebook(NOTEBOOKS[0].read_text(encoding="utf-8"))
    page.write_text(clean, encoding="utf-8")
    _git("add", ".", cwd=tmp_path)
    _git("commit", "-qm", "site", cwd=tmp_path)
    monitor = f"{sys.executable} -m doppler_lab.house.nbclean --fsmonitor"
    _git("config", "core.fsmonitor", monitor, cwd=tmp_path)
    _git("update-index", "-q", "--refresh", cwd=tmp_path)
    time.sleep(1.1)
    nb = json.loads(clean)
    nb["cells"][-1]["outputs"] = [{"name": "stdout", "output_type": "stream", "text": "2"}]
    page.write_text(json.dumps(nb, indent=1), encoding="utf-8")
    assert _git("status", "--porcelain", cwd=tmp_path) == " M reports/site/p.ipynb\n"


def test_the_command_names_an_unreadable_notebook_and_prints_its_usage(tmp_path, capsys):
    from doppler_lab.house.nbclean import main

    assert main([str(tmp_path / "missing.ipynb")]) == 2
    assert "missing.ipynb" in capsys.readouterr().err
    assert main(["--help"]) == 0
    assert "usage:" in capsys.readouterr().out
