"""``doppler-lab simulate``: JSON output, paper graphs, placement files, bad input."""

from __future__ import annotations

import json

import numpy as np
import pytest

from doppler_lab.cli import main
from doppler_lab.io.documents import save_placement
from doppler_lab.ir.placement import Placement
from doppler_lab.lab.bench.yardstick import lower_bound

from paper_graphs import paper_graph_path


def run_json(capsys, *argv) -> dict:
    assert main(["simulate", *argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_paper_graph_round_robin(capsys):
    path = paper_graph_path("chain_mm_112nodes")
    out = run_json(capsys, str(path), "--devices", "4")
    assert out["semantics"] == "paper" and out["num_devices"] == 4 and out["num_nodes"] == 76
    assert out["makespan"] == pytest.approx(2000.14, abs=0.006)
    assert out["lower_bound"] == pytest.approx(lower_bound("chain_mm_112nodes"), abs=0.006)


def test_workload_with_noise_and_gantt(capsys, tmp_path):
    html = tmp_path / "g.html"
    a = run_json(
        capsys,
        "chainmm:scale=0.1",
        "--cluster",
        "v100x8",
        "--noise",
        "0.2",
        "--seed",
        "5",
        "--gantt",
        str(html),
    )
    b = run_json(
        capsys, "chainmm:scale=0.1", "--cluster", "v100x8", "--noise", "0.2", "--seed", "5"
    )
    assert a["makespan"] == b["makespan"] and a["semantics"] == "wc" and a["num_devices"] == 8
    assert html.exists() and "plotly" in html.read_text()[:200000]
    assert set(a) >= {"makespan", "lower_bound", "num_nodes", "num_devices", "semantics"}


def test_placement_file(capsys, tmp_path):
    path = paper_graph_path("ffnn_192nodes")
    pl = save_placement(Placement(np.zeros(180, dtype=int)), tmp_path / "p.json")
    out = run_json(capsys, str(path), "--devices", "4", "--placement", str(pl))
    assert out["makespan"] == pytest.approx(226.78, abs=0.006)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["no_such_workload"], "unknown workload 'no_such_workload'"),
        (["missing.json"], "graph file 'missing.json' does not exist"),
        (["chainmm", "--cluster", "tpu"], "unknown cluster 'tpu'"),
        (["chainmm", "--placement", "psychic"], "unknown placement 'psychic'"),
        (["chainmm", "--noise", "-1"], "--noise must be >= 0"),
        (["chainmm", "--cluster", "cpu", "--devices", "0"], "--devices must be >= 1"),
    ],
)
def test_bad_input_exits_2_with_one_line(capsys, argv, message):
    assert main(["simulate", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and "\n" not in err


def test_calibration_profile_as_cluster(capsys, tmp_path):
    """--cluster PROFILE.json simulates with the profile's measured op times."""
    from doppler_lab.hardware.cluster import make_cpu
    from doppler_lab.timing.calibration import Profile, op_signature
    from doppler_lab.workloads import build_from_spec

    graph = build_from_spec("chainmm:scale=0.05")
    cpu = make_cpu(2)
    op_times = {
        op_signature(s): [1e-3, 1e-3] for s in graph.specs if s is not None and s.kind != "input"
    }
    profile = Profile(
        "test",
        "cpu",
        cpu.devices,
        cpu.bandwidth_bytes_per_s,
        cpu.latency_s,
        cpu.routes,
        cpu.link_names,
        op_times=op_times,
        dispatch_s=(0.0, 0.0),
    )
    path = profile.save(tmp_path / "p.json")
    out = run_json(capsys, "chainmm:scale=0.05", "--cluster", str(path), "--placement", "single")
    n_ops = int(graph.compute_nodes.size)
    assert out["num_devices"] == 2
    assert out["makespan"] == pytest.approx(n_ops * 1e-3, rel=0.05)


def test_memory_fields_and_cap(capsys):
    out = run_json(capsys, "chainmm:scale=0.1", "--cluster", "p100x4")
    peaks = out["peak_memory_bytes"]
    assert len(peaks) == 4 and min(peaks) > 0
    assert out["memory_bytes"] == [16e9] * 4 and out["feasible"] is True
    assert "over_memory" not in out
    tight = run_json(capsys, "chainmm:scale=0.1", "--cluster", "p100x4", "--memory-cap", "1kB")
    assert tight["memory_bytes"] == [1e3] * 4 and tight["feasible"] is False
    worst = tight["over_memory"][0]
    assert worst["excess_bytes"] == pytest.approx(max(peaks) - 1e3)
    assert peaks[worst["device"]] == max(peaks)
    free = run_json(capsys, "chainmm:scale=0.1", "--memory-cap", "none")
    assert free["memory_bytes"] == [None] * 4 and free["feasible"] is True
    assert main(["simulate", "chainmm:scale=0.1", "--memory-cap", "1kB"]) == 0
    text = capsys.readouterr().out
    assert "memory" in text and "/1 kB" in text and "infeasible" in text


def test_place_reports_memory(capsys):
    assert main(["place", "chainmm:scale=0.1", "--placer", "heft", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert len(out["peak_memory_bytes"]) == 4 and out["feasible"] is True
    assert main(["place", "chainmm:scale=0.1", "--placer", "heft", "--memory-cap", "x"]) == 2
