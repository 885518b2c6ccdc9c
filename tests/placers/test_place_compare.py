"""``doppler-lab place GRAPH --placer cp,heft,...``: one table, a JSON list of the single runs,
one Gantt page; bad lists are one-line errors; a single placer prints what it always printed."""

from __future__ import annotations

import json
import re

import pytest

from doppler_lab.cli import main
from doppler_lab.commands import _compare
from doppler_lab.commands._compare import column_unit, fixed, format_table, produced_by

TINY = "chainmm:scale=0.05"
BASE = ["place", TINY, "--devices", "2", "--no-progress"]


def _run(capsys, argv):
    code = main(argv)
    out = capsys.readouterr()
    return code, out.out, out.err


def _single(capsys, name: str) -> dict:
    code, out, _ = _run(capsys, [*BASE, "--placer", name, "--json"])
    assert code == 0
    return json.loads(out)


def test_json_is_the_list_of_the_single_runs(capsys):
    code, out, _ = _run(capsys, [*BASE, "--placer", "cp,heft,round-robin", "--json"])
    assert code == 0
    results = json.loads(out)
    assert [r["placer"] for r in results] == ["cp", "heft", "round-robin"]
    for r in results:
        single = _single(capsys, r["placer"])
        r.pop("runtime_s"), single.pop("runtime_s")  # wall time, the one field that varies
        assert r == single


def test_table_has_one_row_per_placer_with_units_and_ratios(capsys):
    code, out, err = _run(capsys, [*BASE, "--placer", "cp, heft"])
    assert code == 0 and err == ""
    head, header, *rows = out.splitlines()
    assert head.startswith("chainmm on uniform2 (wc): lower bound ")
    assert header.split() == [
        "placer", "makespan", "(us)", "ratio", "to", "lower", "bound", "placer", "time", "(s)",
        "result", "from",
    ]  # fmt: skip
    assert [r.split()[0] for r in rows] == ["cp", "heft"]
    for row in rows:
        single = _single(capsys, row.split()[0])
        cells = row.split()
        assert cells[1] == fixed(single["makespan"] / 1e-6)
        assert cells[2] == f"{single['ratio_to_lower_bound']:.3f}"
        assert " ".join(cells[4:]) == f"{single['placer']} placement"


def test_gantt_writes_one_page_with_a_chart_per_placer(capsys, tmp_path):
    page = tmp_path / "cmp.html"
    code, out, _ = _run(capsys, [*BASE, "--placer", "cp,heft", "--gantt", str(page)])
    assert code == 0 and out.splitlines()[-1] == f"wrote {page}"
    text = page.read_text()
    for name in ("cp", "heft"):
        makespan = _single(capsys, name)["makespan"]
        assert re.search(rf"{name}: makespan {makespan / 1e-6:.4g} (us|\\u00b5s)", text), name
    assert text.count("<table") == 1


def test_a_comparison_never_writes_its_page_over_a_users_file(capsys, tmp_path):
    notes = tmp_path / "notes.html"
    notes.write_text("my notes")
    code, _, err = _run(capsys, [*BASE, "--placer", "cp,heft", "--gantt", str(notes)])
    assert code == 2 and "--gantt" in err and "--force" in err
    assert notes.read_text() == "my notes"
    code, _, _ = _run(capsys, [*BASE, "--placer", "cp,heft", "--gantt", str(notes), "--force"])
    assert code == 0 and notes.read_text() != "my notes"


def test_doppler_in_a_comparison_says_what_won_and_that_it_loads(capsys, monkeypatch):
    monkeypatch.setattr(_compare, "learned_loaded", lambda: False)  # as in a fresh process
    code, out, err = _run(capsys, ["place", TINY, "--devices", "2", "--placer", "cp,doppler"])
    assert code == 0
    assert err.splitlines() == ["doppler: loading torch and the learned policy (a few seconds) ..."]
    single = _single(capsys, "doppler")
    row = out.splitlines()[-1]
    assert row.startswith("doppler") and row.endswith(produced_by(single))
    assert "rollout" in row or "placement" in row or "partition" in row


@pytest.mark.parametrize(
    ("placers", "extra", "message"),
    [
        ("cp,,heft", [], "--placer 'cp,,heft' has an empty name"),
        ("cp,heft,cp", [], "--placer 'cp,heft,cp' names 'cp' twice"),
        ("cp,nope", [], "unknown placer 'nope'"),
        ("cp,heft", ["--out", "p.json"], "--out writes one placement"),
        ("cp,heft", ["--budget", "10"], "--budget: no placer of --placer 'cp,heft' takes 'budget'"),
        ("cp,heft", ["-o", "nosuch=1"], "-o nosuch=1: no placer of --placer 'cp,heft' takes"),
    ],
)
def test_bad_lists_are_one_line_errors(capsys, tmp_path, monkeypatch, placers, extra, message):
    monkeypatch.chdir(tmp_path)
    code, out, err = _run(capsys, [*BASE, "--placer", placers, *extra])
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and message in err
    assert not (tmp_path / "p.json").exists()


def test_single_placer_output_is_unchanged(capsys):
    """The lines users script against: the same words as before the comparison existed."""
    code, out, err = _run(capsys, [*BASE, "--placer", "cp"])
    assert code == 0 and err == ""
    lines = out.splitlines()
    assert lines[0] == "cp on chainmm (uniform2, wc): makespan 53.46 us"
    assert re.fullmatch(
        r"  lower bound 53\.46 us \(ratio 1\.000\), placer time [0-9.e-]+ s", lines[1]
    )
    assert lines[2:] == [
        "  own schedule (wc): 53.46 us",
        "  memory       5.88 MB/none 6.05 MB/none  (peak/memory per device)",
    ]


def test_a_column_has_one_unit_and_no_exponent():
    assert column_unit([0.08322, 0.1014], "s") == (1e-3, "ms")
    assert column_unit([5.3e-5, 2.0], "s") == (1e-6, "us")
    assert column_unit([1900084.0], "cost units") == (1.0, "cost units")
    assert [fixed(v) for v in (1900084.0, 83.2215, 0.012345, 0.0)] == [
        "1900084",
        "83.22",
        "0.01235",
        "0",
    ]
    rows = [
        {"placer": "cp", "makespan (ms)": "83.22"},
        {"placer": "heft", "makespan (ms)": "101.4"},
    ]
    assert format_table(rows) == [
        "placer  makespan (ms)",
        "cp              83.22",
        "heft            101.4",
    ]


def test_options_go_to_the_placers_that_take_them(capsys):
    """``--budget`` reaches local-search (its result equals its own run) and not cp; a search
    placer says on stderr that it is placing."""
    argv = ["place", TINY, "--devices", "2", "--placer", "cp,local-search", "--budget", "30"]
    code, out, err = _run(capsys, argv)
    assert code == 0 and "placing with local-search (2 of 2) ..." in err
    code, out, _ = _run(capsys, [*argv, "--json"])
    cp, search = json.loads(out)
    assert cp == {**_single(capsys, "cp"), "runtime_s": cp["runtime_s"]}
    code, out, _ = _run(capsys, [*BASE, "--placer", "local-search", "--budget", "30", "--json"])
    alone = json.loads(out)
    assert search["options"]["budget"] == 30 and search["placement"] == alone["placement"]
    assert search["makespan"] == alone["makespan"] and search["sim_calls"] == alone["sim_calls"]


def test_a_single_learned_placer_says_it_is_loading_on_stderr_only(capsys, monkeypatch):
    monkeypatch.setattr(_compare, "learned_loaded", lambda: False)  # as in a fresh process
    argv = ["place", TINY, "--devices", "2", "--placer", "doppler"]
    code, out, err = _run(capsys, argv)
    assert code == 0 and out.startswith("doppler on chainmm (uniform2, wc): makespan ")
    assert err == "doppler: loading torch and the learned policy (a few seconds) ...\n"
    code, out, err = _run(capsys, [*argv, "--json"])  # --json: no notes
    assert code == 0 and err == "" and json.loads(out)["placer"] == "doppler"


def test_what_produced_a_result_in_words():
    assert produced_by({"placer": "cp"}) == "cp placement"
    assert produced_by({"placer": "doppler", "source": "clustering"}) == "clustering placement"
    assert produced_by({"placer": "doppler", "source": "greedy"}) == "greedy rollout"
    assert produced_by({"placer": "exact", "optimal": True}) == "proven optimal"
    assert produced_by({"placer": "cp", "memory_fit": "repaired"}) == (
        "cp placement (repaired to fit memory)"
    )
    given = {"placer": "doppler", "source": "greedy", "produced_by": "budget search"}
    assert produced_by(given) == "budget search"


def test_a_graph_in_cost_units_is_compared_in_cost_units(capsys):
    """The unit comes from the graph (``time_unit``), not from whether it carries costs."""
    code, out, err = _run(
        capsys, ["place", "random_dag", "--devices", "2", "--no-progress", "--placer", "cp,heft"]
    )
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0].endswith(" cost units") and "lower bound" in lines[0]
    assert "makespan (cost units)" in lines[1]
