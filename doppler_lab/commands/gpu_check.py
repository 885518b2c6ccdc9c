"""``doppler-lab gpu-check``: the GPU tests and the GPU figures, on a machine with CUDA.

One command, sized to finish within 8 minutes on one GPU, that imports only torch, numba, PyG,
transformers and pytest (no plot or notebook stack). Sections (:mod:`doppler_lab.lab.bench.gpu`):
the ``gpu`` tests (pytest over ``tests/executor``), dispatch overhead per op on ``cuda`` and
``cuda-shared``, GPU fidelity (calibrated simulator against measured makespans on
``cuda-shared:4``, with and without the shared-GPU model), Stage III from the shipped general
policy, and the 10k-node Llama graphs. A section that fails is recorded in one line and the next
one runs. Results go to ``--out`` as ``gpu_check.{json,md}``, with the pytest log, the
calibration profile and the raw measurements (``fidelity_raw.json.gz``: the calibration's every
op, transfer and dispatch gap, and every timed run of every fidelity placement;
``doppler-lab calibrate --from`` refits the profile from it).
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

from ..house.errors import ConfigError
from ..house.progress import show_progress, timer
from ..house.validate import exception_line
from ._common import int_arg

NAME = "gpu-check"
HELP = "run the GPU tests and the executor benchmark on CUDA (a few minutes); write a report"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--out", default="reports/gpu-check", help="output folder (default: reports/gpu-check)"
    )
    p.add_argument(
        "--tests",
        default="tests/executor",
        help="test folder holding the gpu-marked tests (default: tests/executor)",
    )
    p.add_argument("--skip-tests", action="store_true", help="skip the pytest part")
    p.add_argument("--skip-paper-size", action="store_true", help="skip the 10k-node Llama graphs")
    p.add_argument(
        "--episodes",
        type=int_arg(1, "MAX_BUDGET"),
        default=16,
        help="Stage III episodes on the GPU (default: 16)",
    )
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
    from ..house.atomic import atomic_write

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


def _section(summary: dict[str, Any], key: str, fn: Any) -> Any:
    """Run one section; a failure is recorded (one line) and the next section still runs."""
    t0 = time.perf_counter()
    try:
        return fn()
    except Exception as exc:  # noqa: BLE001 - every section reports, none stops the check
        line = exception_line(exc, typed=True)
        summary.setdefault("section_errors", {})[key] = line
        print(f"gpu-check: {key} failed after {time.perf_counter() - t0:.0f} s: {line}", flush=True)
        return None


def run(args: argparse.Namespace) -> int:
    import torch

    cuda = torch.cuda.is_available()
    if not cuda and not args.allow_cpu:
        raise ConfigError(
            "no CUDA device is visible; gpu-check needs one (--allow-cpu runs the same steps on CPU devices)"
        )
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(out / "stage3", ignore_errors=True)  # a fresh Stage III run each time
    t0 = time.perf_counter()
    summary = _machine_summary(cuda)
    tables: dict[str, Any] = {}
    shown = show_progress(args)
    if not args.skip_tests:
        print("gpu-check: gpu tests ...", flush=True)
        with timer("gpu-check: pytest -m gpu", enabled=shown):
            tests = run_gpu_tests(args.tests, out)
        summary["tests"] = {k: v for k, v in tests.items() if k != "failed_tests"}
        summary["failed_tests"] = tests.get("failed_tests", [])
    _dispatch_step(cuda, summary, tables)
    _fidelity_step(cuda, out, summary, tables, shown)
    _stage3_step(cuda, args.episodes, out, summary, shown)
    if not args.skip_paper_size:
        _paper_size_step(cuda, summary, tables)
    return _finish(args, out, summary, tables, t0)


def _machine_summary(cuda: bool) -> dict[str, Any]:
    """The summary's first fields: when, which code, torch and CUDA, the GPUs."""
    import torch

    from ..house.codeversion import code_version

    return {
        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
        "code_version": code_version(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cuda_available": cuda,
        "gpus": [torch.cuda.get_device_name(d) for d in range(torch.cuda.device_count())]
        if cuda
        else [],
    }


def _on_backend(kind: str, num_devices: int, fn: Any) -> Any:
    """``fn(backend)`` on a fresh ``kind`` backend of ``num_devices`` devices, closed after."""
    from ..executor import make_backend

    be = make_backend(kind, num_devices)
    try:
        return fn(be)
    finally:
        be.close()


def _shared_kind(cuda: bool) -> str:
    """The backend of the sections that share devices: ``cuda-shared``, or ``cpu`` without CUDA."""
    return "cuda-shared" if cuda else "cpu"


def _dispatch_step(cuda: bool, summary: dict[str, Any], tables: dict[str, Any]) -> None:
    """Executor overhead per op on ``cuda`` and ``cuda-shared`` (CPU workers without CUDA)."""
    from ..executor import make_backend
    from ..lab.bench import gpu as sections

    print("gpu-check: dispatch overhead ...", flush=True)

    def dispatch() -> Any:
        bes = (
            [make_backend("cuda"), make_backend("cuda-shared", 2)]
            if cuda
            else [make_backend("cpu", 2)]
        )
        try:
            return sections.dispatch_section(bes, 500 if cuda else 200)
        finally:
            for be in bes:
                be.close()

    d = _section(summary, "dispatch", dispatch)
    if d is not None:
        summary["dispatch"] = d["summary"]
        tables["Dispatch overhead per op"] = (
            d["rows"],
            ["backend", "case", "ops", "op_us", "overhead_gaps_us", "wall_per_op_us", "hop_us"],
        )


def _fidelity_step(
    cuda: bool, out: Path, summary: dict[str, Any], tables: dict[str, Any], shown: bool
) -> None:
    """Calibrated simulator against measured makespans on 4 shared devices; writes the profile
    and the raw measurements beside the report."""
    from ..lab.bench import gpu as sections
    from ..timing.raw_data import RAW_FILE, write_raw

    kind = _shared_kind(cuda)
    print(f"gpu-check: fidelity on {kind}:4 ...", flush=True)

    specs = sections.GPU_FIDELITY_WORKLOADS if cuda else sections.CPU_FIDELITY_WORKLOADS
    f = _section(
        summary,
        "fidelity",
        lambda: _on_backend(
            kind, 4, lambda be: sections.fidelity_section(be, specs, quick=not cuda, progress=shown)
        ),
    )
    if f is None:
        return
    summary["fidelity"] = f["summary"]
    f["profile"].save(out / "profile.json")
    write_raw(
        out / RAW_FILE,
        "gpu-check",
        f["calibration"],
        f["raw"],
        {"probe": f["probe"], "sharing": f["sharing"], "gpus": summary["gpus"]},
    )
    cols = ["workload", "ops", "placements", "measured_min_ms", "measured_max_ms"]
    for label in ("nominal", "calibrated", "shared", "host"):
        cols += [f"spearman_{label}", f"mre_{label}"]
    tables["GPU fidelity"] = (f["rows"], cols + ["nominal_ratio_min", "nominal_ratio_max"])
    tables["Interference probe"] = (
        f["probe"],
        ["n", "devices", "kernel_s", "period_alone_s", "period_all_s"],
    )


def _stage3_step(
    cuda: bool, episodes: int, out: Path, summary: dict[str, Any], shown: bool
) -> None:
    """Stage III from the shipped general policy on 2 shared devices."""
    from ..lab.bench import gpu as sections

    kind = _shared_kind(cuda)
    print(f"gpu-check: Stage III on {kind}:2 ...", flush=True)

    spec = sections.GPU_FIDELITY_WORKLOADS["hf-llama"] if cuda else "mlp"
    s3 = _section(
        summary,
        "stage3",
        lambda: _on_backend(
            kind,
            2,
            lambda be: sections.stage3_section(be, spec, episodes, out / "stage3", progress=shown),
        ),
    )
    if s3 is not None:
        summary["stage3"] = s3["summary"]


#: the columns of the paper-sized graphs' table
PAPER_SIZE_COLUMNS = [
    "graph",
    "nodes",
    "placement",
    "place_s",
    "makespan_ms",
    "overhead_per_op_us",
    "host_wall_per_op_us",
    "transfers",
    "outputs_match",
    "max_rel_error",
    "worst_output",
]


def _paper_size_step(cuda: bool, summary: dict[str, Any], tables: dict[str, Any]) -> None:
    """10k-node Llama graphs under cp and doppler placements on 4 shared devices."""
    from ..lab.bench import gpu as sections

    kind = _shared_kind(cuda)
    print(f"gpu-check: paper-sized graphs on {kind}:4 ...", flush=True)

    specs = sections.PAPER_SIZE if cuda else sections.PAPER_SIZE_CPU
    p = _section(
        summary,
        "paper_size",
        lambda: _on_backend(kind, 4, lambda be: sections.paper_size_section(be, specs)),
    )
    if p is not None:
        tables["Paper-sized graphs"] = (p["rows"], PAPER_SIZE_COLUMNS)
        summary["paper_size"] = {
            f"{r['graph']}/{r['placement']}": r["makespan_ms"] for r in p["rows"]
        }


def _finish(
    args: argparse.Namespace, out: Path, summary: dict[str, Any], tables: dict[str, Any], t0: float
) -> int:
    """The verdict, the report, its last lines; the exit status (0: every test and section
    passed)."""
    from ..lab.bench import write_report
    from ..timing.raw_data import RAW_FILE

    tests_ok = args.skip_tests or (summary["tests"].get("returncode") == 0)
    summary["ok"] = bool(tests_ok and not summary.get("section_errors"))
    summary["seconds"] = round(time.perf_counter() - t0, 1)
    write_report(
        out,
        "gpu_check",
        "GPU check: tests, dispatch, fidelity, Stage III, paper-sized graphs",
        tables,
        summary=summary,
        notes=[
            "fidelity: nominal = the uncalibrated GPU (published rates, doppler_lab.hardware.gpu_specs) "
            "with sharing; calibrated = the calibrated profile, devices independent; shared = "
            "the calibrated profile with shared GPUs and one host dispatcher "
            "(doppler_lab.timing.contention); host = the calibrated profile with its fitted host "
            "thread as a resource of the wc simulator (doppler_lab.hardware.host). Spearman per "
            "workload (mean) and pooled.",
            f"Raw measurements for replay and refitting: {out / RAW_FILE}; profile: "
            f"{out / 'profile.json'}; tests: {out / 'gpu_tests.log'}.",
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
