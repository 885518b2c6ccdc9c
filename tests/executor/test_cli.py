"""``doppler-lab execute``, ``calibrate`` and ``gpu-check`` from the command line."""

from __future__ import annotations

import json

import pytest
import torch

from doppler_lab.cli import main
from doppler_lab.io.documents import load_trace, save_graph, save_placement
from doppler_lab.ir.placement import round_robin
from doppler_lab.timing.calibration import Profile

from executor_helpers import toy_graph

TINY = "chainmm:scale=0.01"


def run_cli(capsys, *argv: str) -> tuple[int, str, str]:
    rc = main(list(argv))
    captured = capsys.readouterr()
    return rc, captured.out, captured.err


def test_execute_json_check_on_a_workload(capsys):
    rc, out, _ = run_cli(
        capsys, "execute", TINY, "--devices", "2", "--repeats", "2", "--check", "--json"
    )
    assert rc == 0
    doc = json.loads(out)
    assert doc["num_devices"] == 2 and doc["outputs_match"] is True
    assert doc["makespan"] > 0 and len(doc["makespans"]) == 2
    assert doc["backend"] == "cpu" and doc["num_transfers"] >= 0


def test_execute_graph_and_placement_files(capsys, tmp_path):
    g = toy_graph()
    gpath = save_graph(g, tmp_path / "toy.json")
    ppath = save_placement(round_robin(g, 3), tmp_path / "pl.json", g, 3)
    trace_path = tmp_path / "trace.json"
    rc, out, _ = run_cli(
        capsys,
        "execute",
        str(gpath),
        "--devices",
        "3",
        "--placement",
        str(ppath),
        "--trace",
        str(trace_path),
        "--check",
    )
    assert rc == 0 and "match the reference" in out
    trace = load_trace(trace_path)
    assert trace.semantics == "measured" and trace.check(g) == []


def test_execute_gantt(capsys, tmp_path):
    pytest.importorskip("plotly")
    out_html = tmp_path / "gantt.html"
    rc, _, _ = run_cli(
        capsys,
        "execute",
        TINY,
        "--devices",
        "2",
        "--placement",
        "random",
        "--gantt",
        str(out_html),
        "--json",
    )
    assert rc == 0 and out_html.exists() and "plotly" in out_html.read_text().lower()


@pytest.mark.parametrize(
    "argv,needle",
    [
        (["execute", "nosuchworkload"], "unknown workload"),
        (["execute", TINY, "--repeats", "0"], "--repeats"),
        (["execute", TINY, "--placement", "missing.json"], "does not exist"),
        (["execute", TINY, "--cluster", "tpu"], "unknown backend"),
        (["execute", TINY, "--devices", "0"], "--devices"),
        (["calibrate", "--out", "profile.txt"], ".json"),
    ],
)
def test_bad_input_exits_2_with_one_line(capsys, argv, needle):
    rc, _, err = run_cli(capsys, *argv)
    assert rc == 2
    assert needle in err and len(err.strip().splitlines()) == 1


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-CUDA path")
def test_cuda_without_a_gpu_is_a_clean_error(capsys):
    rc, _, err = run_cli(capsys, "execute", TINY, "--cluster", "cuda")
    assert rc == 2 and "no CUDA device" in err
    rc, _, err = run_cli(capsys, "gpu-check", "--out", "unused")
    assert rc == 2 and "no CUDA device" in err


def test_calibrate_then_execute_on_the_profile(capsys, tmp_path):
    path = tmp_path / "cpu2.json"
    rc, out, _ = run_cli(
        capsys,
        "calibrate",
        "--out",
        str(path),
        "--devices",
        "2",
        "--graph",
        TINY,
        "--quick",
        "--json",
    )
    assert rc == 0
    summary = json.loads(out)
    assert summary["num_devices"] == 2 and summary["coverage"]["chainmm"] == 1.0
    profile = Profile.load(path)
    assert profile.backend == "cpu" and profile.num_devices == 2
    rc, out, _ = run_cli(capsys, "execute", TINY, "--cluster", str(path), "--json")
    assert rc == 0 and json.loads(out)["num_devices"] == 2


@pytest.mark.slow
@pytest.mark.parametrize("name", ["executor", "fidelity"])
def test_benchmarks_write_their_reports(capsys, tmp_path, name):
    rc, out, _ = run_cli(capsys, "bench", name, "--quick", "--out", str(tmp_path))
    assert rc == 0
    record = json.loads((tmp_path / f"{name}.json").read_text())
    assert record["benchmark"] == name and (tmp_path / f"{name}.md").exists()
    if name == "executor":
        assert record["summary"]["all_outputs_match"] is True
    else:
        rows = record["tables"]["Per workload"]
        assert {r["workload"] for r in rows} >= {
            "chainmm",
            "ffnn",
            "llama_block",
            "llama_layer",
            "moe_layer",
        }
        # its raw measurements beside it: every timed run of every placement, and the
        # calibration's samples, which refit to the profile
        from doppler_lab.timing.raw_data import read_raw

        raw = read_raw(tmp_path / "fidelity_raw.json.gz")
        for r in rows:
            w = raw["workloads"][r["workload"]]
            assert len(w["placements"]) == len(w["measured_s"]) == r["placements"]
        assert raw["calibration"].fit().num_devices == 2


def test_execute_against_compares_by_interleaved_pairs(capsys):
    rc, out, _ = run_cli(
        capsys, "execute", TINY, "--devices", "2", "--against", "single", "--repeats", "5", "--json"
    )
    assert rc == 0
    doc = json.loads(out)
    assert doc["placement"] == "round-robin" and doc["against"] == "single"
    assert len(doc["makespans_a"]) == len(doc["makespans_b"]) == doc["pairs"] == 5
    d = doc["difference"]
    assert d["low"] <= d["mean"] <= d["high"] and d["n"] == 5
    assert doc["verdict"] in ("better", "worse", "cannot tell")
    rc, out, _ = run_cli(capsys, "execute", TINY, "--devices", "2", "--against", "single")
    assert rc == 0 and "interleaved pairs" in out and "verdict" in out and "95% interval" in out
    rc, _, err = run_cli(capsys, "execute", TINY, "--against", "single", "--check")
    assert rc == 2 and "--against compares makespans only; --check" in err
