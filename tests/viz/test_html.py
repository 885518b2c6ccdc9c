"""The self-contained HTML report."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest
from plotly.offline import get_plotlyjs

from doppler_lab.house.errors import ConfigError
from doppler_lab.ir.graph import DataflowGraph
from doppler_lab.ir.trace import Trace
from doppler_lab.viz import HtmlReport, bar_compare, gantt, markdown_to_html, plot_graph

from viz_helpers import blocked_mlp, round_robin_wc

PLOTLY_HEAD = get_plotlyjs()[:200]


@pytest.fixture(scope="module")
def mlp() -> DataflowGraph:
    return blocked_mlp()


@pytest.fixture(scope="module")
def mlp_wc(mlp: DataflowGraph) -> Trace:
    return round_robin_wc(mlp)


@pytest.fixture
def report(mlp: DataflowGraph, mlp_wc: Trace) -> HtmlReport:
    r = HtmlReport("Demo <report>", subtitle="`doppler-lab demo`")
    r.heading("Gantt").text("Round robin on **p100x4**.").figure(gantt(mlp_wc, mlp), caption="ops")
    r.heading("Graph").figure(plot_graph(mlp))
    r.heading("Quality").figure(bar_compare([{"graph": "g", "method": "m", "ratio": 1.5}]))
    r.table(
        pd.DataFrame(
            {
                "method": ["rr", "<single>"],
                "makespan": [0.000821, 0.000369],
                "calls": [1200, 3],
                "ratio": [1.23456, np.nan],
            }
        ),
        caption="results",
        units={"makespan": "s"},
    )
    return r


def test_one_self_contained_file(tmp_path, report: HtmlReport) -> None:
    path = report.write(tmp_path / "out" / "report.html")
    page = path.read_text(encoding="utf-8")
    assert page.startswith("<!DOCTYPE html>")
    assert page.count(PLOTLY_HEAD) == 1  # plotly.js embedded once for three figures
    assert report.num_figures == 3 and page.count("Plotly.newPlot(") == 3
    assert not re.search(r"<script[^>]+src=", page)  # nothing fetched: works offline
    assert "relu0_1" in page and "mm0_0_0" in page  # the figures' data
    assert "Demo &lt;report&gt;" in page and "<strong>p100x4</strong>" in page
    assert '<nav class="toc">' in page and 'href="#quality"' in page


def test_tables_are_formatted_per_column(report: HtmlReport) -> None:
    page = report.to_html()
    assert '<th class="num">makespan (us)</th>' in page  # the unit that reads best
    assert '<td class="num">821</td>' in page and '<td class="num">369</td>' in page
    assert '<td class="num">1,200</td>' in page and '<td class="num">3</td>' in page
    assert '<td class="num">1.235</td>' in page
    assert '<td class="num"></td>' in page  # NaN: an empty cell
    assert "<td>&lt;single&gt;</td>" in page  # text is escaped


def test_table_from_rows_and_errors() -> None:
    r = HtmlReport("t").table([{"a": 1, "b": "x"}, {"a": 2.5, "b": "y"}], columns=["b", "a"])
    page = r.to_html()
    assert page.index("<th>b</th>") < page.index('<th class="num">a</th>')
    assert PLOTLY_HEAD not in page  # no figures, no plotly.js
    with pytest.raises(ConfigError, match="no column 'c'"):
        HtmlReport("t").table([{"a": 1}], columns=["c"])
    with pytest.raises(ConfigError, match="expected a plotly Figure"):
        HtmlReport("t").figure({"data": []})
    with pytest.raises(ConfigError, match="heading level 9"):
        HtmlReport("t").heading("x", level=9)


def test_markdown_subset() -> None:
    out = markdown_to_html(
        "# Title\n\nSome *em* and `a<b` with [a link](https://x.org).\n\n- one\n- two\n\n"
        "```\nmake demo\n```\n\n| a | b |\n|---|---|\n| 1 | 2 |"
    )
    assert "<h1>Title</h1>" in out and "<em>em</em>" in out and "<code>a&lt;b</code>" in out
    assert '<a href="https://x.org">a link</a>' in out
    assert "<ul><li>one</li><li>two</li></ul>" in out
    assert "<pre><code>make demo</code></pre>" in out
    assert "<td>1</td><td>2</td>" in out
    assert HtmlReport("t").text("<p>raw</p>").to_html().count("<p>raw</p>") == 1


def test_viz_does_not_import_ipywidgets() -> None:
    code = "import sys, doppler_lab.viz; print(json.dumps('ipywidgets' in sys.modules))"
    out = subprocess.run(
        [sys.executable, "-c", "import json; " + code], capture_output=True, text=True, check=True
    )
    assert json.loads(out.stdout) is False


@pytest.mark.browser
def test_figures_render_in_a_browser(tmp_path, report: HtmlReport) -> None:
    path = report.write(tmp_path / "report.html")
    browser = next(
        shutil.which(b)
        for b in ("chromium", "chromium-browser", "google-chrome")
        if shutil.which(b)
    )
    dom = subprocess.run(
        [
            browser,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--disable-background-networking",
            "--virtual-time-budget=5000",
            "--dump-dom",
            path.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=90,
    ).stdout
    assert dom.count('class="main-svg"') >= 3  # every figure drew its SVG
