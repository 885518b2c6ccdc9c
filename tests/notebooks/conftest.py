"""Notebook tests: execute with papermill and tiny parameters, then assert on summary.json.

Each notebook ``notebooks/NN_name.ipynb`` has its own ``tests/notebooks/test_NN_name.py`` that
calls the ``run_notebook`` fixture; ``test_layout.py`` checks that every notebook is covered and
stored clean. Every test here that uses the fixture carries the ``notebook`` marker, so
``pytest -m "not slow and not notebook"`` leaves the papermill tier out (the layout checks stay).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from doppler_lab.reporting.notebook_runs import NOTEBOOKS_DIR
from doppler_lab.reporting.notebook_runs import run_notebook as _run


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark the tests of this folder that execute a notebook (they use ``run_notebook``)."""
    here = Path(__file__).parent
    for item in items:
        if item.path.is_relative_to(here) and "run_notebook" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.notebook)


def check_findings(summary: dict) -> None:
    """Every notebook ends with findings (doppler_lab.reporting.findings.finish): a paragraph and
    headline results that read as results (labels, values with units; no paths or raw keys)."""
    text = summary.get("findings")
    assert isinstance(text, str) and len(text) > 80 and text.startswith("The question is")
    assert "nan" not in text.split() and "None" not in text
    headline = summary.get("headline")
    assert isinstance(headline, list) and headline
    for h in headline:
        assert set(h) == {"label", "value", "unit", "target", "passed"}
        assert " " in h["label"] or h["label"].isalpha()  # words, not a raw key like a.b_c
        assert "/" not in str(h["value"]) or "@" in str(h["value"])  # no file paths


@pytest.fixture
def run_notebook(tmp_path: Path):
    """``run_notebook("00_quickstart.ipynb", **params) -> summary dict`` (its findings checked)."""

    def run(name: str, **params):
        summary = _run(NOTEBOOKS_DIR / name, tmp_path / Path(name).stem, params, timeout_s=600)
        check_findings(summary)
        return summary

    return run
