"""Notebook tests: execute with papermill and tiny parameters, then assert on summary.json.

Each notebook ``notebooks/NN_name.ipynb`` has its own ``tests/notebooks/test_NN_name.py`` that
calls the ``run_notebook`` fixture; ``test_layout.py`` checks that every notebook is covered and
stored clean. Every test here that uses the fixture carries the ``notebook`` marker, so
``pytest -m "not slow and not notebook"`` leaves the papermill tier out (the layout checks stay).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from doppler_lab.lab.reporting.notebook_runs import NOTEBOOKS_DIR
from doppler_lab.lab.reporting.notebook_runs import run_notebook as _run


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark the tests of this folder that execute a notebook (they use ``run_notebook``)."""
    here = Path(__file__).parent
    for item in items:
        if item.path.is_relative_to(here) and "run_notebook" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.notebook)


def check_findings(summary: dict) -> None:
    """Every notebook ends with findings (doppler_lab.lab.reporting.findings.finish): a paragraph and
    headline results that read as results (labels, values with units; no paths or raw keys)."""
    text = summary.get("findings")
    assert isinstance(text, str) and len(text) > 80 and text.startswith("The question is")
    assert "nan" not in text.split() and "None" not in text
    headline = summary.get("headline")
    assert isinstance(headline, list) and headline
    for h in headline:
        # "claim": the paper's claim whose verdict it holds (the index's claims table), and
        # "detail": the numbers behind a verdict (mean, 95% interval, pairs), both optional
        assert set(h) - {"claim", "detail"} == {"label", "value", "unit", "target", "passed"}
        if "detail" in h:
            assert h["value"] in ("supports", "contradicts", "inconclusive")
            assert "interval" in h["detail"] and "nan" not in h["detail"].split()
        assert " " in h["label"] or h["label"].isalpha()  # words, not a raw key like a.b_c
        assert "/" not in str(h["value"]) or "@" in str(h["value"])  # no file paths


def check_page(executed: Path, params: dict) -> None:
    """The page the report draws of an executed notebook reads right (doppler_lab.lab.reporting.
    page_checks: no scientific notation in tables, no machine paths, no internal references,
    one unit per column): the quick site's pages, checked where the notebooks already run."""
    from doppler_lab.house.paths import REPO_ROOT
    from doppler_lab.lab.reporting.notebook_runs import render_html
    from doppler_lab.lab.reporting.page_checks import html_problems

    site = executed.parent.parent
    page = render_html(executed, executed.with_suffix(".html"), assets_dir=site / "assets")
    given = [v for v in params.values() if isinstance(v, str) and v.startswith("/")]
    text = page.read_text(encoding="utf-8")
    problems = html_problems(text, [str(executed.parent), str(REPO_ROOT)], allowed=given)
    assert problems == [], f"{executed.name}: " + "; ".join(problems)


@pytest.fixture
def run_notebook(tmp_path: Path):
    """``run_notebook("00_quickstart.ipynb", **params) -> summary dict`` (its findings and its
    rendered page checked)."""

    def run(name: str, **params):
        out = tmp_path / Path(name).stem
        summary = _run(NOTEBOOKS_DIR / name, out, params, timeout_s=600)
        check_findings(summary)
        check_page(out / Path(name).name, params)
        return summary

    return run
