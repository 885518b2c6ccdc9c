"""``doppler-lab demo --quick``: every step runs and the report holds every section."""

from __future__ import annotations

import json

import pytest

from doppler_lab.cli import main
from doppler_lab.lab.reporting.demo_job import STEPS


@pytest.fixture(scope="module")
def quick_demo(tmp_path_factory):
    out = tmp_path_factory.mktemp("demo")
    assert main(["demo", "--quick", "--out", str(out)]) == 0
    return out, json.loads((out / "summary.json").read_text())


def test_every_step_ran(quick_demo):
    _, summary = quick_demo
    assert list(summary["timings"]) == [label for label, _ in STEPS]
    assert {"baselines", "paper", "training", "executor"} <= set(summary)


def test_training_step_compares_start_trained_and_teacher(quick_demo):
    _, summary = quick_demo
    t = summary["training"]
    assert t["start"].startswith(("shipped", "stage I"))
    assert [r["label"] for r in t["rows"]] == ["cp", "start", "stage II"]
    assert all(r["ratio_lb"] >= 1 - 1e-9 for r in t["rows"])


def test_executor_step_matches_the_reference(quick_demo):
    _, summary = quick_demo
    rows = summary["executor"]["rows"]
    assert [r["placement"] for r in rows] == ["round-robin", "cp"]
    for r in rows:
        assert r["outputs_match"] is True
        assert r["measured_s"] > 0 and r["simulated_calibrated_s"] > 0


def test_report_has_every_section(quick_demo):
    out, _ = quick_demo
    html = (out / "index.html").read_text()
    for heading in (
        "Baseline placers",
        "paper",
        "Learning placements: a short DOPPLER training",
        "A real run on CPU worker devices",
        "Step timings",
    ):
        assert heading in html
    assert html.count('class="plotly-graph-div"') >= 5


def test_bad_scale_is_refused(capsys):
    assert main(["demo", "--scale", "0", "--out", "unused"]) == 2
    assert "--scale" in capsys.readouterr().err


def test_imported_model_step_shows_placers_that_differ(quick_demo):
    """The bring-your-own-model section is sized so that it shows something: cp and doppler
    place the imported Llama differently, and not all on one device."""
    _, summary = quick_demo
    rows = summary["imported"]["rows"]
    assert [r["placer"] for r in rows] == ["cp", "doppler"]
    assert rows[0]["makespan"] != pytest.approx(rows[1]["makespan"], rel=1e-3)
    assert max(r["devices_used"] for r in rows) > 1
