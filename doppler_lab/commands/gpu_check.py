"""``doppler-lab gpu-check``: the GPU-marked tests and the executor benchmark on a lent GPU.

One command, sized to finish in a few minutes on one GPU: the ``gpu`` tests (pytest), the
executor benchmark on ``cuda`` (every visible GPU) and ``cuda-shared`` (logical devices sharing
them, which exercises transfers on a single GPU), a quick calibration, and the simulator
fidelity benchmark on CPU worker devices (GPU machines have idle cores to spare; a busy
workstation does not give meaningful CPU fidelity numbers). Results go to ``--out`` as
``gpu_check.{json,md}`` (plus ``executor.{json,md}``, ``fidelity.{json,md}``, the pytest report
and the calibration profile).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

from ..errors import ConfigError
from ..progress import show_progress, timer

NAME = "gpu-check"
HELP = "run the GPU tests and the executor benchmark on CUDA (a few minutes); write a report"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--out", default="reports/gpu-check", help="output folder (default: reports/gpu-check)"
    )
    p.add_argument(
        "--tests", default="tests", help="test folder holding the gpu-marked tests (default: tests)"
    )
    p.add_argument("--skip-tests", action="store_true", help="skip the pytest part")
    p.add_argument("--skip-fidelity", action="store_true", help="skip the CPU fidelity benchmark")
    p.add_argument(
        "--allow-cpu",
        action="store_true",
        help="without CUDA, run the same steps on CPU devices (a smoke test of this command)",
    )


def run_gpu_tests(test_dir: str, out: Path, timeout_s: float = 240.0) -> dict[str, Any]:
    """``pytest -m gpu`` over ``test_dir``; counts from its JUnit report."""
    xml = out / "gpu_tests.xml"
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-m",
        "gpu",
        "-p",
        "no:cacheprovider",
        f"--junitxml={xml}",
        test_dir,
    ]
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
        rc, tail = proc.returncode, (proc.stdout + proc.stderr)[-4000:]
    except subprocess.TimeoutExpired as exc:
        rc, tail = -1, f"pytest timed out after {timeout_s:g} s\n{(exc.stdout or '')[-2000:]}"
    from ..atomic import atomic_write

    atomic_write(out / "gpu_tests.log", tail)
    result: dict[str, Any] = {"returncode": rc, "seconds": round(time.perf_counter() - t0, 1)}
    if xml.exists():
        suite = ET.parse(xml).getroot()
        suite = suite if suite.tag == "testsuite" else suite.find("testsuite")
        if suite is not None:
            for key in ("tests", "failures", "errors", "skipped"):
                result[key] = int(suite.get(key, 0))
            result["passed"] = (
                result["tests"] - result["failures"] - result["errors"] - result["skipped"]
            )
            result["failed_tests"] = [
                f"{case.get('classname')}::{case.get('name')}"
                for case in suite.iter("testcase")
                if case.find("failure") is not None or case.find("error") is not None
            ]
    return result


def run(args: argparse.Namespace) -> int:
    import torch

    from ..bench import executor as bench_executor
    from ..bench import write_report
    from ..executor import make_backend
    from ..executor.profiling import calibrate

    cuda = torch.cuda.is_available()
    if not cuda and not args.allow_cpu:
        raise ConfigError(
            "no CUDA device is visible; gpu-check needs one (--allow-cpu runs the same steps on CPU devices)"
        )
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    env: dict[str, Any] = {
        "torch": torch.__version__,
        "cuda_available": cuda,
        "cuda": torch.version.cuda,
    }
    if cuda:
        env["gpus"] = [torch.cuda.get_device_name(d) for d in range(torch.cuda.device_count())]
    summary: dict[str, Any] = {**env}
    if not args.skip_tests:
        print("gpu-check: gpu tests ...", flush=True)
        with timer("gpu-check: pytest -m gpu", enabled=show_progress(args)):
            tests = run_gpu_tests(args.tests, out)
        summary["tests"] = {k: v for k, v in tests.items() if k != "failed_tests"}
        summary["failed_tests"] = tests.get("failed_tests", [])
    backends = ["cuda", "cuda-shared"] if cuda else ["cpu"]
    print(f"gpu-check: executor benchmark on {', '.join(backends)} ...", flush=True)
    shown = show_progress(args)
    bench = bench_executor.run(out, quick=True, backends=backends, progress=shown)
    summary["executor_bench"] = bench["summary"]
    print("gpu-check: calibration ...", flush=True)
    backend = make_backend("cuda-shared" if cuda else "cpu", 2)
    try:
        profile = calibrate(backend, quick=True, name="gpu-check", progress=shown)
    finally:
        backend.close()
    profile.save(out / "profile.json")
    summary["calibration"] = {
        "dispatch_us": [round(g * 1e6, 2) for g in profile.dispatch_s],
        "flops_per_s": [d.rate("float32") for d in profile.devices],
        "mem_bytes_per_s": [d.mem_bytes_per_s for d in profile.devices],
    }
    if not args.skip_fidelity:
        from ..bench import fidelity as bench_fidelity

        print("gpu-check: simulator fidelity on CPU devices ...", flush=True)
        fid = bench_fidelity.run(out, quick=False, backend="cpu", progress=shown, rounds=1)
        summary["fidelity_cpu"] = fid["summary"]
        summary["fidelity_cpu_per_workload"] = {
            r["workload"]: {
                "spearman": round(r["spearman_calibrated"], 3),
                "mre": round(r["mre_calibrated"], 3),
            }
            for r in fid["tables"]["Per workload"]
        }
    tests_ok = args.skip_tests or (summary["tests"].get("returncode") == 0)
    summary["ok"] = bool(tests_ok and bench["summary"].get("all_outputs_match", False))
    summary["seconds"] = round(time.perf_counter() - t0, 1)
    rows = [{"check": k, "result": str(v)} for k, v in summary.items()]
    write_report(
        out,
        "gpu_check",
        "GPU check: tests, executor benchmark, calibration",
        {"Results": (rows, ["check", "result"])},
        notes=[
            f"Details: {out / 'executor.md'}, {out / 'fidelity.md'}, {out / 'gpu_tests.log'}, "
            f"{out / 'profile.json'}."
        ],
        command=f"doppler-lab gpu-check --out {args.out}",
    )
    print(
        f"gpu-check: {'OK' if summary['ok'] else 'FAILED'} in {summary['seconds']} s; wrote {out / 'gpu_check.md'}"
    )
    if summary.get("failed_tests"):
        print("  failed: " + ", ".join(summary["failed_tests"]))
    return 0 if summary["ok"] else 1


__all__ = ["NAME", "HELP", "add_arguments", "run", "run_gpu_tests"]
