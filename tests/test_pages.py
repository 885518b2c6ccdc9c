"""What a reader meets on the pages: every committed bench page and the pages the report builds
(a quick site's pages are checked where the notebook tests run them, tests/notebooks/conftest.py)
have no scientific notation in tables, no machine paths, no internal references, one unit per
column named in its header."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from doppler_lab.house.paths import REPO_ROOT
from doppler_lab.lab.bench._report import read_report, render_markdown, write_report
from doppler_lab.lab.reporting.page_checks import html_problems, markdown_problems

BENCH = REPO_ROOT / "reports" / "bench"
BENCH_PAGES = sorted(BENCH.rglob("*.md"))
RECORDS = [p for p in sorted(BENCH.rglob("*.json")) if "benchmark" in json.loads(p.read_text())]


@pytest.mark.parametrize("page", BENCH_PAGES, ids=lambda p: p.relative_to(BENCH).as_posix())
def test_every_bench_page_reads_right(page):
    assert markdown_problems(page.read_text(encoding="utf-8"), [str(REPO_ROOT)]) == []


@pytest.mark.parametrize("record", RECORDS, ids=lambda p: p.relative_to(BENCH).as_posix())
def test_committed_bench_pages_are_what_their_record_draws(record):
    """A page drawn by hand or by an older renderer is drawn anew from its JSON
    (``rewrite_page``), so the rules above hold by construction."""
    page = record.with_suffix(".md")
    assert page.read_text(encoding="utf-8") == render_markdown(read_report(record))


def test_the_checks_catch_each_kind_of_problem():
    md = (
        "See issue 35 and YARDSTICK.md; runs in /home/me/x.\n\n"
        "| makespan_s (ms) | cp (ms) | cp (ms) | n |\n|---|---|---|---|\n"
        "| 1.2e-05 | 3 s | 2 | 3 |\n\n"
        "| quantity | value |\n|---|---|\n| best_s | 12 ms |\n"
    )
    problems = markdown_problems(md)
    for needle in (
        "'issue 35'",
        "'YARDSTICK'",
        "'/home/m'",
        "its name says s, its header ms",
        "'1.2e-05' in scientific notation",
        "column 'cp (ms)' holds '3 s'",
        "column 'cp (ms)' appears twice",
        "quantity 'best_s' holds '12 ms'",
    ):
        assert any(needle in p for p in problems), (needle, problems)
    page = (
        "<html><body><p>out_dir = '/srv/site/00_x'</p><table><thead><tr><th>x (s)</th></tr>"
        "</thead><tbody><tr><td>4.1e+04</td></tr></tbody></table></body></html>"
    )
    problems = html_problems(page, ["/srv/site"])
    assert any("'/srv/site'" in p for p in problems)
    assert any("'4.1e+04' in scientific notation" in p for p in problems)
    assert markdown_problems("| a | b |\n|---|---|\n| doppler-lr1e-3 | 1,200 |\n") == []


def test_bench_tables_split_by_unit_and_turn_older_signs(tmp_path):
    """Rows of the paper's graphs (cost units) and of generated ones (seconds) never share a
    makespan column; a record written before the 'below X' convention reads with vs_heft
    turned, so that vs_cp and vs_heft have one sign."""
    rows = [
        {"task": "paper:chain_mm_112nodes @ uniform:4 (paper)", "cp": 1900.084, "vs_heft": 0.1},
        {"task": "ffnn @ p100x4 (wc)", "cp": 0.0021, "vs_heft": -0.2},
    ]
    write_report(tmp_path, "new", "New", {"Rows": (rows, None)})
    page = (tmp_path / "new.md").read_text()
    assert "| task | cp (cost units) | vs_heft (%) |" in page
    assert "1,900" in page and "1,900,084" not in page and "| 2.1 |" in page
    assert "cp (ms)" in page and markdown_problems(page) == []
    record = json.loads((tmp_path / "new.json").read_text())
    assert record["tables"]["Rows"][0]["vs_heft"] == 0.1  # stored as measured
    del record["signs"]  # as written before the convention
    old = render_markdown(record)
    assert "| -10 |" in old and "| 20 |" in old and "turned on this page" in old


def test_pages_show_no_machine_path_in_the_parameters_cell(tmp_path):
    """papermill passes ``out_dir`` absolute; the page shows the folder by its name."""
    from doppler_lab.lab.reporting.notebook_runs import without_machine_paths

    folder = tmp_path / "site" / "00_x"
    text = f'out_dir = "{folder}"\nrun = "{folder}/runs/a"\nsrc = "{REPO_ROOT}/notebooks/n.ipynb"'
    shown = without_machine_paths(text, folder)
    assert shown == 'out_dir = "00_x"\nrun = "00_x/runs/a"\nsrc = "notebooks/n.ipynb"'
    assert html_problems(f"<p>{shown}</p>", [str(tmp_path), str(REPO_ROOT)]) == []


def page_problems(page: Path, site: Path) -> list[str]:
    """The problems of a built page (what tests of the report and of the notebooks assert
    empty)."""
    return html_problems(page.read_text(encoding="utf-8"), [str(site), str(REPO_ROOT)])


def test_a_ratio_under_a_vs_name_is_drawn_as_a_ratio_and_a_case_table_has_no_unit_line(tmp_path):
    """bench memory's ratio_vs_one_device holds makespan / one device's (1.006), not '% below':
    the page draws it as ``ratio_vs_one_device (x)``; a per-case table of ratios has no
    'Makespans in ...' caption (it said 'Makespans in None.')."""
    rows = [{"placer": "cp", "graph": "gpt2", "makespan_s": 1.5, "ratio_vs_one_device": 1.006}]
    cases = [{"case": "gpt2-xl b4", "cp": 1.0, "cp_devices": 1}]
    write_report(tmp_path, "mem", "Mem", {"Rows": (rows, None), "Cases": (cases, None)})
    page = (tmp_path / "mem.md").read_text()
    assert "ratio_vs_one_device (x)" in page and "vs_one_device (%)" not in page
    assert "Makespans in None" not in page and markdown_problems(page) == []
