"""The report site in a real browser: headless Chromium draws the plotly charts offline."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from doppler_lab.lab.reporting.site import build_site

pytestmark = pytest.mark.browser


def _chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        if path := shutil.which(name):
            return path
    pytest.skip("needs Chromium")


def dump_dom(page: Path, profile: Path) -> str:
    """The DOM of ``page`` after scripts ran, with the network cut (charts must draw offline)."""
    cmd = [
        _chromium(),
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        "--host-resolver-rules=MAP * ~NOTFOUND",  # no CDN: everything must be embedded
        f"--user-data-dir={profile}",
        "--virtual-time-budget=15000",
        "--dump-dom",
        page.as_uri(),
    ]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    out = tmp_path_factory.mktemp("site")
    built = build_site(
        out,
        only=["00_quickstart", "11_placement_explorer"],
        parameters={
            "00": {"scale": 0.05},
            "11": {"workload": "chainmm", "scale": "tiny", "noise_seeds": 2, "show_steps": "0"},
        },
        progress=False,
    )
    assert built.ok, [(r.stem, r.error) for r in built.results if r.status == "failed"]
    return built


def test_index_page_links_the_notebook(site, tmp_path):
    dom = dump_dom(site.index, tmp_path / "profile")
    assert "doppler_lab: experiment reports" in dom
    assert 'href="00_quickstart/00_quickstart.html"' in dom
    assert re.search(r'class="status ok"', dom)
    assert 'class="findings"' in dom  # the page's findings, from summary.json
    assert "makespans.cp" not in dom  # headline results with units, never raw keys


def test_notebook_page_draws_the_gantt_chart(site, tmp_path):
    page = site.out_dir / "00_quickstart" / "00_quickstart.html"
    # plotly.js is the site's one copy, beside the pages (no CDN)
    assert '<script src="../assets/plotly.min.js"' in page.read_text()
    assert "plotly.js v" in (site.out_dir / "assets" / "plotly.min.js").read_text()[:200]
    dom = dump_dom(page, tmp_path / "profile")
    assert dom.count('class="main-svg"') >= 2  # plotly drew its SVG layers
    assert 'class="trace bars"' in dom  # the Gantt bars
    assert re.search(r'class="point"', dom)  # individual bars were drawn


def test_explorer_page_draws_the_explorer_offline(site, tmp_path):
    """Where JupyterLab shows the explorer's widgets, the page draws their first view: the
    table and the Gantt charts, with the network cut."""
    page = site.out_dir / "11_placement_explorer" / "11_placement_explorer.html"
    dom = dump_dom(page, tmp_path / "profile")
    view = dom[dom.index('class="doppler-explorer-static"') :]
    assert "makespan (us)" in view[:50_000]  # the metrics table
    assert view.count('class="main-svg"') >= 2  # plotly drew the Gantt charts there
    assert 'class="trace bars"' in view
