"""``doppler-lab gpu-check`` on CPU devices (``--allow-cpu``), in the environment of the GPU
machines: torch, numba, PyG, transformers and pytest, but none of the plot and notebook stack."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

from doppler_lab.timing.calibration import Profile
from doppler_lab.timing.raw_data import read_raw

#: what the GPU image lacks (device README): gpu-check must not need any of them
MISSING_ON_GPU_MACHINES = ("plotly", "papermill", "nbconvert", "ortools", "pymetis", "ray")


def test_gpu_check_runs_without_the_notebook_stack(tmp_path):
    script = textwrap.dedent(
        f"""
        import importlib.util, sys
        blocked = {MISSING_ON_GPU_MACHINES!r}
        for name in blocked:
            sys.modules[name] = None
        real = importlib.util.find_spec
        importlib.util.find_spec = lambda name, *a, **k: (
            None if name.split(".")[0] in blocked else real(name, *a, **k)
        )
        from doppler_lab.cli import main
        rc = main(["gpu-check", "--allow-cpu", "--skip-tests", "--skip-paper-size",
                   "--episodes", "2", "--no-progress", "--out", {str(tmp_path)!r}])
        loaded = [m for m in blocked if sys.modules.get(m) is not None]
        print("LOADED", loaded)
        sys.exit(rc)
        """
    )
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "LOADED []" in proc.stdout
    assert "Traceback" not in proc.stderr
    # the missing METIS is one warning line, not a failure
    assert proc.stderr.count("pymetis") <= 1
    report = json.loads((tmp_path / "gpu_check.json").read_text())
    summary = report["summary"]
    assert summary["ok"] and "section_errors" not in summary
    fid = summary["fidelity"]
    for label in ("nominal", "calibrated", "shared", "host"):
        assert -1.0 <= fid[f"{label}_spearman_pooled"] <= 1.0
    assert summary["stage3"]["episodes"] == 2 and summary["stage3"]["greedy_after_ms"] > 0
    raw = read_raw(tmp_path / "fidelity_raw.json.gz")
    assert set(raw["workloads"]) == {"chainmm", "ffnn", "llama_block", "hf-llama"}
    for w in raw["workloads"].values():
        assert len(w["placements"]) >= 12 and len(w["measured_s"]) == len(w["placements"])
    assert raw["source"] == "gpu-check" and raw["probe"]
    assert (tmp_path / "profile.json").exists() and (tmp_path / "gpu_check.md").exists()
    # the raw calibration refits the run's profile, number for number
    assert raw["calibration"].fit().to_dict() == Profile.load(tmp_path / "profile.json").to_dict()
