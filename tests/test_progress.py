"""Long runs say what they do: progress on stderr (off with --no-progress or --json), and
``execute`` predicts its cost up front and suggests a smaller ``:scale=`` when it is long."""

from __future__ import annotations

import importlib
import json

import numpy as np
import pytest

from doppler_lab.cli import COMMAND_MODULES, main
from doppler_lab.executor.cost import predict_execution
from doppler_lab.hardware.cluster import make_cpu
from doppler_lab.house.progress import format_seconds, note, progress, timer
from doppler_lab.ir.placement import round_robin, single_device
from doppler_lab.timing.sim import Simulator
from doppler_lab.workloads import build, build_from_spec
from doppler_lab.workloads.sizing import scale_within, with_scale

TINY = "chainmm:scale=0.01"


def run_cli(capsys, *argv: str) -> tuple[int, str, str]:
    rc = main(list(argv))
    captured = capsys.readouterr()
    return rc, captured.out, captured.err


# -- the helper -----------------------------------------------------------------------------
def test_progress_bar_writes_to_stderr_only_when_enabled(capsys):
    assert list(progress(range(3), desc="counting", enabled=True)) == [0, 1, 2]
    out, err = capsys.readouterr()
    assert out == "" and "counting" in err
    assert list(progress(range(3), desc="counting", enabled=False)) == [0, 1, 2]
    assert capsys.readouterr() == ("", "")


def test_timer_and_note_write_to_stderr_only_when_enabled(capsys):
    with timer("solving", total_s=5.0, enabled=True):
        pass
    note("a note", enabled=True)
    out, err = capsys.readouterr()
    assert out == "" and "solving: 0 s of ~5 s" in err and "a note" in err
    with timer("solving", enabled=False):
        pass
    note("a note", enabled=False)
    assert capsys.readouterr() == ("", "")


@pytest.mark.parametrize(
    "seconds,text", [(0.0042, "4.2 ms"), (42.0, "42 s"), (150.0, "2.5 min"), (7200.0, "2.0 h")]
)
def test_format_seconds(seconds, text):
    assert format_seconds(seconds) == text


# -- every subcommand takes --no-progress --------------------------------------------------
@pytest.mark.parametrize("module", COMMAND_MODULES)
def test_every_subcommand_has_no_progress(capsys, module):
    name = importlib.import_module(f"doppler_lab.commands.{module}").NAME
    with pytest.raises(SystemExit) as exc:
        main([name, "--help"])
    assert exc.value.code == 0 and "--no-progress" in capsys.readouterr().out


# -- search placers from the command line --------------------------------------------------
@pytest.mark.parametrize(
    "placer,extra,label",
    [
        ("local-search", ["--budget", "40"], "local-search"),
        ("enumerative", ["--budget", "40"], "enumerative"),
        ("exact", ["--time-limit", "0.5"], "exact"),
    ],
)
def test_place_shows_search_progress_on_stderr(capsys, placer, extra, label):
    argv = ["place", TINY, "--placer", placer, "--devices", "2", *extra]
    rc, out, err = run_cli(capsys, *argv)
    assert rc == 0 and f"{label} chainmm" in err and f"{placer} on chainmm" in out
    rc, out, err = run_cli(capsys, *argv, "--json")
    assert rc == 0 and err == "" and json.loads(out)["placer"] == placer
    rc, out, err = run_cli(capsys, *argv, "--no-progress")
    assert rc == 0 and err == "" and "makespan" in out


def test_simulate_with_a_search_placer_shows_its_progress(capsys):
    rc, _, err = run_cli(capsys, "simulate", TINY, "--devices", "2", "--placement", "enumerative")
    assert rc == 0 and "enumerative chainmm" in err


# -- execute: the up-front prediction, the bar, --dry-run ----------------------------------
def test_execute_predicts_then_shows_runs_on_stderr(capsys):
    argv = ["execute", TINY, "--devices", "2", "--repeats", "2", "--check"]
    rc, out, err = run_cli(capsys, *argv)
    assert rc == 0 and "match the reference" in out
    assert "execute: the cost model predicts" in err and "3 runs of" in err
    assert "chainmm on cpu" in err and "timed 2/2" in err and "reference" in err
    assert "predicts" not in out
    rc, out, err = run_cli(capsys, *argv, "--json")
    doc = json.loads(out)
    assert rc == 0 and err == "" and doc["outputs_match"] is True and doc["predicted_s"] > 0
    rc, out, err = run_cli(capsys, *argv, "--no-progress")
    assert rc == 0 and err == ""


def test_execute_dry_run_suggests_a_scale_for_a_long_command(capsys):
    argv = ["execute", "ffnn", "--cluster", "cpu", "--devices", "2", "--check", "--dry-run"]
    rc, out, err = run_cli(capsys, *argv)
    assert rc == 0 and err == ""
    assert "the cost model predicts" in out and "try ffnn:scale=" in out
    rc, out, _ = run_cli(capsys, *argv, "--json")
    doc = json.loads(out)
    assert rc == 0 and doc["predicted_s"] > 60 and doc["runs"] == 4
    assert doc["suggested_spec"].startswith("ffnn:scale=") and doc["suggested_predicted_s"] <= 60
    assert doc["predicted_s"] == pytest.approx(
        4 * doc["predicted_run_s"] + doc["predicted_reference_s"]
    )


def test_execute_dry_run_of_a_short_command_suggests_nothing(capsys):
    rc, out, _ = run_cli(capsys, "execute", TINY, "--devices", "2", "--dry-run", "--json")
    doc = json.loads(out)
    assert rc == 0 and doc["predicted_s"] < 60 and doc["suggested_spec"] is None


# -- the library side ------------------------------------------------------------------------
def test_predict_execution_is_the_simulated_makespan_times_the_runs():
    g = build("chainmm", scale=0.01)
    cluster = make_cpu(2)
    pl = round_robin(g, 2)
    p = predict_execution(g, cluster, pl, runs=3, reference=True)
    run_s = Simulator(g, cluster, "wc").makespan(pl)
    ref_s = Simulator(g, cluster, "wc").makespan(single_device(g, 2))
    assert p.run_s == pytest.approx(run_s) and p.reference_s == pytest.approx(ref_s)
    assert p.total_s == pytest.approx(3 * run_s + ref_s)
    assert p.flops == pytest.approx(float(g.flops[g.compute_nodes].sum()))
    assert predict_execution(g, cluster, pl).reference_s == 0.0


def test_scale_within_picks_the_largest_round_scale_that_fits():
    def flops_s(g):  # one teraflop a second
        return float(np.sum(g.flops)) / 1e12

    whole = flops_s(build_from_spec("chainmm"))  # chainmm's flops grow with scale ** 3
    scale, seconds = scale_within("chainmm", flops_s, budget_s=whole / 4)
    assert scale == 0.5 and seconds == pytest.approx(flops_s(build("chainmm", scale=0.5)))
    assert scale_within("chainmm", flops_s, budget_s=whole / 40)[0] == 0.25
    assert scale_within("chainmm:scale=0.5", flops_s, budget_s=whole / 40)[0] == 0.25
    assert scale_within("chainmm:scale=0.5", flops_s, budget_s=whole)[0] == 0.25  # below 0.5
    # files and imported models get no suggestion
    assert scale_within("graph.json", flops_s) is None
    assert scale_within("model.py:make", flops_s) is None


@pytest.mark.parametrize(
    "spec,scale,expected",
    [
        ("ffnn", 0.25, "ffnn:scale=0.25"),
        ("ffnn:layers=2", 0.1, "ffnn:layers=2,scale=0.1"),
        ("ffnn:scale=0.5,layers=2", 0.25, "ffnn:layers=2,scale=0.25"),
    ],
)
def test_with_scale(spec, scale, expected):
    assert with_scale(spec, scale) == expected


def test_format_time_picks_a_unit_per_value():
    from doppler_lab.house.progress import format_time

    assert format_time(5.2357e-4) == "523.6 us"
    assert format_time(0.0012345) == "1.234 ms"
    assert format_time(2.5) == "2.5 s"
    assert format_time(3e-9) == "3 ns"
    assert format_time(1700.12, in_seconds=False) == "1700.12 units"


def test_the_exact_placer_line_says_what_its_gap_is_against():
    from doppler_lab.commands.place import exact_line

    line = exact_line(
        {
            "optimal": False,
            "status": "FEASIBLE",
            "bound": 1e-4,
            "gap": 0.2,
            "schedule_makespan": 1.25e-4,
        },
        "wc",
    )
    assert "not proven optimal" in line and "CP-SAT's own delay model" in line
    assert "schedule 125 us, proven bound 100 us, gap 20.000% between the two" in line
    assert "the wc simulator's" in line
