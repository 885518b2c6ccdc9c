"""The report site: notebook discovery, key numbers, quick profiles, the build and its index."""

from __future__ import annotations

import json
import re
import tempfile
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

from doppler_lab.cli import main
from doppler_lab.house.errors import ConfigError
from doppler_lab.lab.reporting.notebook_runs import NOTEBOOKS_DIR
from doppler_lab.lab.reporting.site import (
    build_site,
    find_notebooks,
    key_numbers,
    notebook_info,
    quick_parameters,
    read_params_file,
    read_site,
)


def _notebook(folder: Path, stem: str, body: str, quick: dict | None = None) -> Path:
    """A small notebook in the house layout whose last cell writes ``summary.json``."""
    nb = new_notebook(
        cells=[
            new_markdown_cell(f"# Title of {stem}\n\n**Question.** Does {stem}\nwork?\n\nMore."),
            new_code_cell("from doppler_lab.lab.reporting.notebook_runs import write_summary"),
            new_code_cell(
                'value = 1.5  # a number\nseed = 0  # seed\ninteractive = True  # widgets\nout_dir = "."  # output',
                metadata={"tags": ["parameters"]},
            ),
            new_code_cell(body),
            new_code_cell(
                'write_summary(out_dir, {"value": value, "name": "x", "rows": [1, 2], '
                '"by": {"a": 1, "b": 2}, "interactive": interactive})'
            ),
        ]
    )
    nb.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3",
        "language": "python",
    }
    if quick is not None:
        nb.metadata["doppler_lab"] = {"quick": quick}
    path = folder / f"{stem}.ipynb"
    nbformat.write(nb, str(path))
    return path


@pytest.fixture
def notebooks(tmp_path: Path) -> Path:
    folder = tmp_path / "notebooks"
    folder.mkdir()
    _notebook(folder, "00_fails", "raise ValueError('bad value ' + str(value))")
    _notebook(folder, "01_works", "value = value * 2", quick={"value": 0.5})
    return folder


def test_key_numbers_pick_flat_fields():
    summary = {
        "workload": "llama_block",
        "num_nodes": 201,
        "ok": True,
        "long": "x" * 200,
        "rows": [{"a": 1}],
        "makespans": {"cp": 1.0, "heft": 0.9},
        "nested": {"deep": {"x": 1}},
        "missing": None,
    }
    assert key_numbers(summary) == {
        "workload": "llama_block",
        "num_nodes": 201,
        "ok": True,
        "makespans.cp": 1.0,
        "makespans.heft": 0.9,
    }
    assert len(key_numbers({f"k{i}": i for i in range(30)})) == 10
    assert key_numbers({"a": 1, "key_numbers": {"b": 2, "c": {"d": 3}}}) == {"b": 2, "c.d": 3}


def test_notebook_info(notebooks):
    info = notebook_info(notebooks / "01_works.ipynb")
    assert info.title == "Title of 01_works"
    assert info.question == "**Question.** Does 01_works work?"
    real = notebook_info(NOTEBOOKS_DIR / "00_quickstart.ipynb")
    assert real.title.startswith("Quickstart") and real.question.startswith("**Question.**")


def test_find_notebooks(notebooks):
    assert [p.stem for p in find_notebooks(None, notebooks)] == ["00_fails", "01_works"]
    for name in ("01_works", "01", "works", "01_works.ipynb"):
        assert [p.stem for p in find_notebooks([name], notebooks)] == ["01_works"]
    with pytest.raises(ConfigError, match="'nope' matches no notebook; expected one of: 00_fails"):
        find_notebooks(["nope"], notebooks)
    with pytest.raises(ConfigError, match="no notebooks"):
        find_notebooks(None, notebooks / "missing")


def test_quick_parameters(notebooks, tmp_path):
    assert quick_parameters(notebooks / "01_works.ipynb") == {"value": 0.5}
    assert quick_parameters(notebooks / "00_fails.ipynb") is None
    stale = _notebook(tmp_path, "02_stale", "pass", quick={"value": 0.5, "gone": 1})
    with pytest.raises(
        ConfigError, match=r"02_stale.ipynb: metadata doppler_lab.quick names \['gone'\]"
    ):
        quick_parameters(stale)
    odd = _notebook(tmp_path, "03_odd", "pass", quick=[1])
    with pytest.raises(ConfigError, match="expected an object of parameter -> value"):
        quick_parameters(odd)


def test_read_params_file(tmp_path):
    good = tmp_path / "p.json"
    good.write_text(json.dumps({"00": {"scale": 0.1}}))
    assert read_params_file(good) == {"00": {"scale": 0.1}}
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"00": 3}))
    with pytest.raises(ConfigError, match="expected an object of notebook name"):
        read_params_file(bad)
    bad.write_text("{")
    with pytest.raises(ConfigError, match="is not JSON"):
        read_params_file(bad)
    with pytest.raises(ConfigError, match="does not exist"):
        read_params_file(tmp_path / "none.json")


def test_build_site_stops_at_a_failure_then_keeps_going(notebooks, tmp_path):
    out = tmp_path / "site"
    site = build_site(out, notebooks_dir=notebooks, progress=False)
    status = {r.stem: r.status for r in site.results}
    assert status == {"00_fails": "failed", "01_works": "not run"}
    assert not site.ok and site.failed == ["00_fails", "01_works"]
    failed = site.results[0]
    assert "ValueError: bad value 1.5" in failed.error
    assert failed.page == "00_fails/00_fails.html"  # the traceback is readable on its page
    assert "ValueError" in (out / failed.page).read_text()
    assert 'href="../index.html"' in (out / failed.page).read_text()  # back to the index
    page = site.index.read_text()
    assert "ValueError: bad value 1.5" in page and "not run" in page

    site = build_site(
        out,
        notebooks_dir=notebooks,
        keep_going=True,
        quick=True,
        parameters={"works": {"seed": 3}},
        progress=False,
    )
    works = {r.stem: r for r in site.results}["01_works"]
    assert works.status == "ok" and works.profile == "custom"
    assert works.parameters == {"value": 0.5, "seed": 3}
    # papermill runs pass interactive=False (the notebook's own default is True)
    assert works.key_numbers == {
        "value": 1.0,
        "name": "x",
        "by.a": 1,
        "by.b": 2,
        "interactive": False,
    }
    assert (out / "01_works" / "summary.json").exists()
    assert (out / "01_works" / "01_works.html").exists()
    page = site.index.read_text()
    assert 'href="01_works/01_works.html"' in page and "Title of 01_works" in page
    assert "Does 01_works work?" in page and "More." not in page
    assert [r.stem for r in read_site(out)] == ["00_fails", "01_works"]


def test_build_site_only_keeps_earlier_results(notebooks, tmp_path):
    out = tmp_path / "site"
    site = build_site(out, only=["01"], notebooks_dir=notebooks, progress=False)
    assert site.ok and site.ran == ["01_works"]
    assert [r.status for r in site.results] == ["not run", "ok"]
    first_run = site.results[1].finished
    site = build_site(
        out, only=["00"], notebooks_dir=notebooks, keep_going=True, progress=False
    )  # 00 fails; 01 keeps its earlier result
    assert [r.status for r in site.results] == ["failed", "ok"]
    assert site.results[1].finished == first_run and site.failed == ["00_fails"]
    with pytest.raises(ConfigError, match="notebook 'nope', which is not being run"):
        build_site(out, notebooks_dir=notebooks, parameters={"nope": {}}, progress=False)


def test_index_recovers_results_an_interrupted_build_left(notebooks, tmp_path):
    out = tmp_path / "site"
    build_site(
        out, only=["01"], notebooks_dir=notebooks, parameters={"01": {"value": 2.0}}, progress=False
    )
    (out / "site.json").unlink()  # as if the build was killed before writing its index
    site = build_site(out, only=["00"], notebooks_dir=notebooks, keep_going=True, progress=False)
    works = {r.stem: r for r in site.results}["01_works"]
    assert works.status == "ok" and works.page == "01_works/01_works.html"
    assert works.key_numbers["value"] == 4.0 and works.parameters == {"value": 2.0}
    assert works.profile == "custom" and works.seconds > 0
    doc = json.loads((out / "site.json").read_text())  # an index that lists it as never run
    for r in doc["notebooks"]:
        if r["stem"] == "01_works":
            r.update(status="not run", page=None, key_numbers={})
    (out / "site.json").write_text(json.dumps(doc))
    site = build_site(out, only=["00"], notebooks_dir=notebooks, keep_going=True, progress=False)
    assert {r.stem: r.status for r in site.results}["01_works"] == "ok"
    (out / "01_works" / "summary.json").unlink()  # incomplete leftovers are not shown as ok
    site = build_site(out, only=["00"], notebooks_dir=notebooks, keep_going=True, progress=False)
    assert {r.stem: r.status for r in site.results}["01_works"] == "ok"  # site.json has it now
    (out / "site.json").unlink()
    site = build_site(out, only=["00"], notebooks_dir=notebooks, keep_going=True, progress=False)
    assert {r.stem: r.status for r in site.results}["01_works"] == "not run"


def test_report_command(notebooks, tmp_path, capsys):
    out = tmp_path / "site"
    params = tmp_path / "params.json"
    params.write_text(json.dumps({"01_works": {"value": 4}}))
    args = ["report", "--notebooks", str(notebooks), "--out", str(out), "--no-progress"]
    assert main([*args, "--list"]) == 0
    assert "01_works" in capsys.readouterr().out
    assert main([*args, "--only", "01", "--params-file", str(params)]) == 0
    assert read_site(out)[1].key_numbers["value"] == 8
    assert "--params-file" in (out / "index.html").read_text()
    assert main([*args, "--only", "00", "--keep-going"]) == 1
    assert "failed or not run: 00_fails" in capsys.readouterr().err
    assert main([*args, "--only", "zz"]) == 2
    assert "'zz' matches no notebook" in capsys.readouterr().err


def test_report_status_says_what_a_build_would_run_and_why(
    notebooks, tmp_path, capsys, monkeypatch
):
    """``--status`` runs nothing: per page, its last build and whether a build now reuses it or
    runs it again (never built, failed, code changed, notebook edited, other parameters)."""
    from doppler_lab.house import codeversion
    from doppler_lab.lab.reporting.site import site_status

    out = tmp_path / "site"
    args = ["report", "--notebooks", str(notebooks), "--out", str(out), "--no-progress"]
    assert [st.why for st in site_status(out, notebooks_dir=notebooks)] == ["never built"] * 2
    assert main([*args, "--keep-going"]) == 1  # 00 fails, 01 works
    capsys.readouterr()
    assert main([*args, "--status"]) == 0
    text = capsys.readouterr().out
    now = codeversion.code_version()
    assert f"code version now {now}" in text
    assert re.search(r"00_fails .*runs it: failed last time", text)
    assert re.search(
        rf"01_works +\d{{4}}-\d\d-\d\d \d\d:\d\d +{now} +[\d.]+ (ms|s|min) +reuses it", text
    )
    assert "a build now runs 1 of 2 notebooks" in text
    status = {st.stem: st for st in site_status(out, notebooks_dir=notebooks)}
    assert status["01_works"].reuse and status["01_works"].result.status == "ok"
    # what would make a build run it again
    quick = site_status(out, only=["01"], quick=True, notebooks_dir=notebooks)
    assert [st.why for st in quick] == ["other parameters"]  # its quick profile, same folder
    other = site_status(out, ["01"], {"01": {"value": 3.0}}, notebooks_dir=notebooks)
    assert [st.why for st in other] == ["other parameters"]
    monkeypatch.setattr(codeversion, "code_version", lambda: "0123456789ab")
    assert [st.why for st in site_status(out, ["01"], notebooks_dir=notebooks)] == ["code changed"]
    monkeypatch.undo()
    _notebook(notebooks, "01_works", "value = value * 3", quick={"value": 0.5})
    assert [st.why for st in site_status(out, ["01"], notebooks_dir=notebooks)] == [
        "notebook edited"
    ]
    assert not (out / "02").exists() and len(read_site(out)) == 2  # nothing ran or was written


def test_notebooks_run_their_kernel_over_ipc_not_tcp():
    """No kernel port on the network, and no 'running over TCP without encryption' warning
    once per notebook of a report."""
    from doppler_lab.lab.reporting.notebook_runs import IpcKernelManager

    assert IpcKernelManager().transport == "ipc"


def test_a_kernels_sockets_live_in_their_own_folder_and_leave_with_it(tmp_path, monkeypatch):
    """jupyter_client's default puts a kernel's IPC sockets in the working directory
    (``kernel-ipc-N``): a stopped report build left them in ``notebooks/``. Ours are in a private
    temporary folder, gone when the kernel shuts down."""
    from doppler_lab.lab.reporting.notebook_runs import IpcKernelManager

    monkeypatch.chdir(tmp_path)
    before = set(Path(tempfile.gettempdir()).glob("doppler-kernel-*"))
    km = IpcKernelManager(kernel_name="python3")
    # no folder until the kernel starts: a manager never started leaves nothing behind
    assert set(Path(tempfile.gettempdir()).glob("doppler-kernel-*")) == before
    km.start_kernel(cwd=str(tmp_path))
    socket_dir = Path(km.ip).parent
    assert socket_dir.is_dir() and socket_dir.name.startswith("doppler-kernel-")
    try:
        client = km.client()
        client.start_channels()
        client.wait_for_ready(timeout=60)
        client.stop_channels()
        assert any(p.is_socket() for p in socket_dir.iterdir())
    finally:
        km.shutdown_kernel(now=True)
    assert list(tmp_path.iterdir()) == []
    assert not socket_dir.exists()


# -- pages people read: findings, headline cards, titles, the quick banner --------------------------
def test_every_notebook_ends_with_its_findings():
    """Each notebook's last cell is ``finish("<its stem>", ...)``, and each has a findings
    function (doppler_lab.lab.reporting.findings.PAGES)."""
    from doppler_lab.lab.reporting.findings import PAGES

    stems = [p.stem for p in find_notebooks()]
    assert sorted(PAGES) == sorted(s.partition("_")[0] for s in stems)
    for path in find_notebooks():
        nb = nbformat.read(str(path), as_version=4)
        last = [c for c in nb.cells if c.cell_type == "code"][-1].source
        # the cell's last statement, so the findings are the page's last output
        assert f'\nfinish("{path.stem}", out_dir, {{' in "\n" + last, path.name
        assert last.rstrip().endswith("})"), path.name
        assert "write_summary" not in "".join(c.source for c in nb.cells), path.name


def test_key_numbers_leave_out_paths():
    summary = {"graph": "chainmm", "checkpoint": "/tmp/run/policy.pt", "run": "runs/x/metrics.csv"}
    assert key_numbers(summary) == {"graph": "chainmm"}


def _headline_notebook(folder: Path, stem: str, title: str) -> Path:
    """A notebook whose summary carries findings and headline results (two with targets)."""
    path = _notebook(folder, stem, "pass", quick={"value": 0.5})
    nb = nbformat.read(str(path), as_version=4)
    nb.cells[0].source = f"# {title}\n\n**Question.** Does it work?"
    nb.cells[-1].source = (
        "write_summary(out_dir, {'checkpoint': '/tmp/x/policy.pt', 'findings': 'The question is "
        "whether it works. It does.', 'headline': ["
        "{'label': 'makespan', 'value': 0.0123, 'unit': 's', 'target': None, 'passed': None}, "
        "{'label': 'below cp', 'value': 0.25, 'unit': '%', 'target': '>= 15%', 'passed': True}, "
        "{'label': 'speed', 'value': None, 'unit': 'ms', 'target': '<= 100', 'passed': None}]})"
    )
    nbformat.write(nb, str(path))
    return path


def test_index_cards_pages_and_titles(tmp_path):
    folder = tmp_path / "notebooks"
    folder.mkdir()
    _headline_notebook(folder, "00_mine", "Where should the ops of *my* `model` go?")
    out = tmp_path / "site"
    site = build_site(out, notebooks_dir=folder, quick=True, progress=False)
    assert site.ok
    r = site.results[0]
    assert r.findings == "The question is whether it works. It does." and len(r.headline) == 3
    index = site.index.read_text()
    # the card: headline results with units and verdicts, the findings; no raw keys or paths
    assert "<b>12.3 ms</b>" in index and "<b>25 %</b>" in index
    assert "target &gt;= 15%: met" in index and "<b>not measured</b>" in index
    assert "targets: 1 of 2 met, 1 not measured" in index
    assert "It does." in index
    assert "/tmp/x/policy.pt" not in index and "checkpoint" not in index
    # rendered titles; which profile built the site; the quick banner
    assert "<em>my</em>" in index and "*my*" not in index and "<code>model</code>" in index
    assert "built with the quick profile (smoke-test sizes)" in index
    assert "quick profile: smoke-test sizes" in index
    assert json.loads((out / "site.json").read_text())["profile"] == "quick"
    page = (out / r.page).read_text()
    assert "<title>Where should the ops of my model go? · doppler_lab</title>" in page
    assert 'class="doppler-banner"' in page and "smoke-test sizes" in page
    # report-sized defaults: no banner
    site = build_site(out, notebooks_dir=folder, progress=False)
    assert "doppler-banner" not in (out / site.results[0].page).read_text()
    assert "built with the report-sized defaults" in site.index.read_text()
    assert "smoke-test" not in site.index.read_text()


def test_findings_show_in_the_notebook_and_the_summary(tmp_path):
    from doppler_lab.lab.reporting.findings import finish

    summary = {
        "workload": "llama_block",
        "cluster": "p100x4",
        "semantics": "wc",
        "num_nodes": 201,
        "lower_bound": 0.0002,
        "makespans": {"round-robin": 0.0013, "cp": 0.0011, "doppler": 0.0012},
    }
    shown = finish("00_quickstart", tmp_path, summary)
    written = json.loads((tmp_path / "summary.json").read_text())
    assert written["findings"] == shown.text and written["headline"] == shown.headline
    assert "9.1% above cp's" in shown.text and "does not support the claim" in shown.text
    assert "<h2>Findings</h2>" in shown._repr_html_() and "best makespan (cp): 1.1 ms" in repr(
        shown
    )
    with pytest.raises(ConfigError, match="no findings for notebook '99_x'"):
        finish("99_x", tmp_path, summary)


# -- the shipped site: plotly.js once, the code version on every page, runs reused --------------
FIGURE = (
    "import plotly.graph_objects as go\n"
    "from doppler_lab.lab.reporting.notebook_runs import setup_notebook\n"
    "setup_notebook(interactive)\n"
    "go.Figure(go.Bar(x=[1, 2], y=[3, value]))"
)


def test_pages_load_plotly_once_from_the_site(tmp_path):
    from doppler_lab.house.codeversion import code_version

    folder = tmp_path / "notebooks"
    folder.mkdir()
    for stem in ("00_chart", "01_chart"):
        _notebook(folder, stem, FIGURE)
    out = tmp_path / "site"
    site = build_site(out, notebooks_dir=folder, progress=False)
    assert site.ok
    asset = out / "assets" / "plotly.min.js"
    assert asset.stat().st_size > 1_000_000  # the library, once for the site
    for r in site.results:
        page = (out / r.page).read_text()
        # referenced, not inlined: the page is small and draws with the shared copy
        assert page.count('<script src="../assets/plotly.min.js"') == 1
        assert "plotly.js v" not in page and "Plotly.newPlot" in page
        # so is nbconvert's style sheet (a quarter of a megabyte)
        css = re.findall(r'<link rel="stylesheet" href="\.\./assets/(notebook-\w+\.css)">', page)
        assert len(css) == 1 and (out / "assets" / css[0]).stat().st_size > 100_000
        assert "<style" not in page[: page.index("</head>")]
        assert len(page.encode()) < 100_000
        executed = (out / r.stem / f"{r.stem}.ipynb").read_text()
        assert "plotly.js v" not in executed  # the kept run does not carry it either
        # no CDN: nothing the page loads comes from another host
        assert not re.search(r'<script[^>]+src="https?://', page)
        # stamped with the code version that made its numbers
        assert r.code_version == code_version()
        assert f"code version <code>{code_version()}</code>" in page
    index = site.index.read_text()
    assert f"code version <code>{code_version()}</code>" in index
    assert json.loads((out / "site.json").read_text())["code_version"] == code_version()


def test_a_build_reuses_runs_of_the_same_code_parameters_and_notebook(
    notebooks, tmp_path, monkeypatch
):
    import doppler_lab.lab.reporting.site as site_module

    out = tmp_path / "site"
    first = build_site(out, only=["01"], notebooks_dir=notebooks, quick=True, progress=False)
    run = {r.stem: r for r in first.results}["01_works"]
    assert run.status == "ok" and not run.reused
    page = out / run.page
    page.write_text("stale")  # a reused run's page is drawn anew from its executed copy
    executed: list[str] = []
    real = site_module.run_notebook

    def counting(path, *args, **kwargs):
        executed.append(Path(path).stem)
        return real(path, *args, **kwargs)

    monkeypatch.setattr(site_module, "run_notebook", counting)
    again = build_site(out, only=["01"], notebooks_dir=notebooks, quick=True, progress=False)
    kept = {r.stem: r for r in again.results}["01_works"]
    assert executed == [] and kept.reused and kept.status == "ok"
    assert kept.finished == run.finished and kept.key_numbers == run.key_numbers
    assert "Title of 01_works" in page.read_text()
    assert "reused by this build" in again.index.read_text()
    # a changed parameter runs it again
    changed = build_site(
        out,
        only=["01"],
        notebooks_dir=notebooks,
        parameters={"01": {"value": 3.0}},
        progress=False,
    )
    assert executed == ["01_works"]
    assert {r.stem: r for r in changed.results}["01_works"].key_numbers["value"] == 6.0
    # so does --rerun, another code version, or an edited notebook
    build_site(
        out,
        only=["01"],
        notebooks_dir=notebooks,
        parameters={"01": {"value": 3.0}},
        progress=False,
        rerun=True,
    )
    assert executed == ["01_works"] * 2
    monkeypatch.setattr("doppler_lab.house.codeversion.code_version", lambda: "0" * 12)
    build_site(
        out, only=["01"], notebooks_dir=notebooks, parameters={"01": {"value": 3.0}}, progress=False
    )
    assert executed == ["01_works"] * 3
    monkeypatch.undo()
    monkeypatch.setattr(site_module, "run_notebook", counting)
    nb = nbformat.read(str(notebooks / "01_works.ipynb"), as_version=4)
    nb.cells[3].source = "value = value * 3"
    nbformat.write(nb, str(notebooks / "01_works.ipynb"))
    edited = build_site(
        out, only=["01"], notebooks_dir=notebooks, parameters={"01": {"value": 3.0}}, progress=False
    )
    assert executed == ["01_works"] * 4
    assert {r.stem: r for r in edited.results}["01_works"].key_numbers["value"] == 9.0


def test_report_command_default_folders(monkeypatch, tmp_path):
    """``doppler-lab report`` builds reports/site (kept in git), ``--quick`` reports/quick."""
    import doppler_lab.lab.reporting.site as site_module

    seen = []

    def fake(out_dir=None, **kwargs):
        seen.append((out_dir, kwargs["quick"], kwargs["rerun"], kwargs["command"]))
        return site_module.Site(tmp_path, tmp_path / "index.html", [], [])

    monkeypatch.setattr(site_module, "build_site", fake)
    monkeypatch.chdir(tmp_path)  # the command locks and marks the default folders
    assert main(["report", "--no-progress"]) == 0
    assert main(["report", "--quick", "--rerun", "--no-progress"]) == 0
    assert seen == [
        (None, False, False, "doppler-lab report"),
        (None, True, True, "doppler-lab report --quick --rerun"),
    ]
    assert (site_module.DEFAULT_SITE, site_module.QUICK_SITE) == ("reports/site", "reports/quick")


def test_a_build_of_the_checkouts_site_keeps_its_runs_while_it_runs(monkeypatch, tmp_path):
    """Only a build of ``reports/site`` of this checkout records finished runs in the run store
    (``runstore.keeping``: during the build and when it stops); other folders keep none."""
    import contextlib

    from doppler_lab.commands import report
    from doppler_lab.house import runstore
    from doppler_lab.house.paths import REPO_ROOT

    seen = []
    monkeypatch.setattr(
        runstore, "keeping", lambda every, report: seen.append(every) or contextlib.nullcontext()
    )
    report._keeping_runs(str(tmp_path / "reports" / "site"))
    assert seen == []
    report._keeping_runs(str(REPO_ROOT / "reports" / "site"))
    assert seen == [report.KEEP_EVERY]


def test_reports_index_opens_the_shipped_site():
    page = (NOTEBOOKS_DIR.parent / "reports" / "index.html").read_text()
    assert 'content="0; url=site/index.html"' in page and 'href="site/index.html"' in page


def test_render_command_checks_its_notebook(tmp_path, capsys):
    assert main(["report", "--render", str(tmp_path / "none.ipynb")]) == 2
    assert "expected an existing .ipynb file" in capsys.readouterr().err


def test_widgets_are_drawn_static_without_a_manager():
    """A rendered page never fetches a widget manager: saved widget state is dropped, a widget
    view gives way to the output's static view, a widget with none gets a note."""
    from doppler_lab.lab.reporting.notebook_runs import (
        WIDGET_NOTE,
        WIDGET_VIEW,
        static_widget_outputs,
    )

    view = {WIDGET_VIEW: {"model_id": "m1", "version_major": 2, "version_minor": 0}}
    nb = new_notebook(
        cells=[
            new_code_cell(
                "x",
                outputs=[
                    nbformat.v4.new_output(
                        "display_data", {**view, "text/html": "<b>static</b>", "text/plain": "x"}
                    ),
                    nbformat.v4.new_output(
                        "display_data", {**view, "text/plain": "VBox(children=(Button(),))"}
                    ),
                    nbformat.v4.new_output("display_data", {**view, "text/plain": "100%| 4/4"}),
                ],
            )
        ]
    )
    nb.metadata["widgets"] = {"application/vnd.jupyter.widget-state+json": {"state": {"m1": {}}}}
    assert static_widget_outputs(nb) == 3
    first, bare, bar = (o["data"] for o in nb.cells[0].outputs)
    assert "widgets" not in nb.metadata
    assert first == {"text/html": "<b>static</b>", "text/plain": "x"}
    assert bare == {"text/html": WIDGET_NOTE}
    assert bar == {"text/plain": "100%| 4/4"}  # a progress bar keeps its text


def test_pages_built_from_an_older_version_say_so(notebooks, tmp_path, monkeypatch):
    """A page kept from a build with other code carries a visible mark (put in when the page is
    drawn: the pages are static HTML); ``report --refresh`` draws the marks anew, running
    nothing."""
    from test_pages import page_problems

    from doppler_lab.house.codeversion import code_version

    out = tmp_path / "site"
    build_site(out, only=["01"], notebooks_dir=notebooks, progress=False)
    now, later = code_version(), "f" * 12
    page = out / "01_works" / "01_works.html"
    assert "older version" not in page.read_text()
    assert "older version" not in (out / "index.html").read_text()
    assert page_problems(page, out) == [] and page_problems(out / "index.html", out) == []
    monkeypatch.setattr("doppler_lab.house.codeversion.code_version", lambda: later)
    build_site(out, only=["00"], notebooks_dir=notebooks, keep_going=True, progress=False)
    mark = f"built from an older version ({now}; code is now {later})"
    assert mark in page.read_text()  # the kept page, drawn anew with its mark
    index = (out / "index.html").read_text()
    assert mark in index and "1 of 2 pages built from an older version" in index
    assert "doppler-lab report --only 01" in index
    monkeypatch.undo()  # the code is back at the page's version: --refresh takes the mark off
    args = ["report", "--notebooks", str(notebooks), "--out", str(out), "--no-progress"]
    assert main([*args, "--refresh"]) == 0
    assert "older version" not in page.read_text()
    assert (
        f"built from an older version ({later}; code is now {now})"
        in (out / "index.html").read_text()
    )  # 00 ran with the other code
    with pytest.raises(ConfigError, match="no report site to refresh"):
        from doppler_lab.lab.reporting.site import refresh_site

        refresh_site(tmp_path / "none")


@pytest.mark.parametrize("same_text", [True, False])
def test_refresh_draws_kept_headlines_anew_from_their_summaries(tmp_path, same_text):
    """Findings code reads a page's numbers and makes none (it is outside the code version):
    a kept page's headline is drawn anew from its ``summary.json`` (here: the numbers behind
    page 06's verdict, which an older build did not write), but only where the paragraph it
    draws is the one the page shows."""
    from doppler_lab.lab.reporting.findings import STAGE3_ONE_POLICY, page_findings
    from doppler_lab.lab.reporting.site import refresh_site

    base = [0.030, 0.031, 0.029, 0.032, 0.030, 0.031]
    summary = {
        "parallel_capacity": 1.9,
        "devices": 2,
        "measured_runs": {"stage II": base, "stage III": [x - 0.002 for x in base]},
    }
    found = page_findings("06", summary)
    old = [{k: v for k, v in h.items() if k != "detail"} for h in found.headline]
    text = found.text if same_text else found.text + " An older sentence."
    folder = tmp_path / "notebooks"
    folder.mkdir()
    stem = "06_stage3_real_system_rl"
    doc = {**summary, "headline": old, "findings": text}
    _notebook(folder, stem, f"import json\nsummary = json.loads({json.dumps(json.dumps(doc))})")
    nb = nbformat.read(str(folder / f"{stem}.ipynb"), as_version=4)
    nb.cells[-1].source = "write_summary(out_dir, summary)"
    nbformat.write(nb, str(folder / f"{stem}.ipynb"))
    out = tmp_path / "site"
    build_site(out, notebooks_dir=folder, progress=False)
    verdict = {h["label"]: h for h in read_site(out)[0].headline}[STAGE3_ONE_POLICY]
    assert verdict["value"] == "supports" and "detail" not in verdict  # as the page wrote it
    refresh_site(out, folder)
    kept = {h["label"]: h for h in read_site(out)[0].headline}[STAGE3_ONE_POLICY]
    written = json.loads((out / stem / "summary.json").read_text())
    if same_text:
        assert kept["detail"].startswith("stage II minus stage III: 2 ms, 95% interval")
        assert kept["detail"].endswith("6 pairs")
        assert written["headline"] == read_site(out)[0].headline and written["findings"] == text
        assert "6 pairs" in (out / "index.html").read_text()  # the claims table's numbers
    else:  # the page would now read differently: it keeps what it ran with
        assert "detail" not in kept and written["headline"] == old
