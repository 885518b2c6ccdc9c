"""``doppler-lab calibrate``: measure real devices with the executor and write a profile; or,
with ``--from``, refit one offline from the raw measurements a ``bench fidelity`` or
``gpu-check`` run kept (:mod:`doppler_lab.timing.raw_data`)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import numpy as np

from ..house.errors import ConfigError
from ..house.progress import show_progress
from ..house.userfiles import add_force_output_argument, guard_outputs, json_document
from ._common import int_arg, print_json
from .execute import add_device_arguments

NAME = "calibrate"
HELP = "measure devices with the executor (ops, dispatch, links) and write a calibration profile"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--out",
        required=True,
        metavar="FILE.json",
        help="where to write the profile (e.g. data/profiles/cpu2.json)",
    )
    add_device_arguments(p)
    add_force_output_argument(p)
    p.add_argument(
        "--from",
        dest="raw",
        metavar="RAW",
        help="refit the profile from a run's raw measurements (fidelity_raw.json.gz beside a "
        "bench fidelity or gpu-check report) instead of measuring; no device is used",
    )
    p.add_argument(
        "--graph",
        action="append",
        default=[],
        metavar="GRAPH",
        help="a workload spec or JSON graph whose ops to measure exactly (repeatable)",
    )
    p.add_argument(
        "--bench-workloads",
        action="store_true",
        help="also measure the workloads of 'doppler-lab bench fidelity' at their sizes",
    )
    p.add_argument("--name", help="profile label (default: the file name)")
    p.add_argument("--seed", type=int_arg(0), default=0, help="placements and inputs (default 0)")
    p.add_argument("--quick", action="store_true", help="fewer sizes and repeats (a smoke run)")
    p.add_argument("--json", action="store_true", help="print a JSON summary")


def run(args: argparse.Namespace) -> int:
    from ..executor import make_backend
    from ..executor.profiling import calibrate
    from ..executor.torchrun import TorchrunBackend, coordinate_or_serve
    from ..lab.bench.fidelity import CPU_WORKLOADS
    from ..timing.calibration import PROFILE_FORMAT, Profile

    out = Path(args.out)
    if out.suffix != ".json":
        raise ConfigError(f"--out {args.out!r}: expected a .json file name")
    guard_outputs(args, {"out": json_document(PROFILE_FORMAT)})
    if args.devices is not None and args.devices < 1:
        raise ConfigError(f"--devices must be >= 1, got {args.devices}")
    from ..workloads.specs import graph_from_spec

    graphs = [graph_from_spec(s) for s in args.graph]
    if args.bench_workloads:
        graphs += [graph_from_spec(s) for s in CPU_WORKLOADS.values()]
    if args.raw is not None:
        return _refit(args, out, graphs)
    backend = make_backend(args.cluster, args.devices, args.threads)

    def measure() -> Profile:
        return calibrate(
            backend,
            graphs,
            name=args.name or out.stem,
            quick=args.quick,
            seed=args.seed,
            progress=show_progress(args),
        )

    if isinstance(backend, TorchrunBackend):  # rank 0 measures every link, the others serve
        profile = coordinate_or_serve(backend, NAME, measure)
        if profile is None:
            return 0
    else:
        try:
            profile = measure()
        finally:
            backend.close()
    profile.save(out)
    return _report(args, out, profile, graphs)


def _refit(args: argparse.Namespace, out: Path, graphs: list) -> int:
    """``--from RAW``: the profile refitted from a run's raw calibration measurements."""
    from ..timing.raw_data import refit_profile

    if args.quick or args.cluster != "cpu" or args.devices is not None:
        raise ConfigError(
            "--from refits from the measurements in the file; --cluster, --devices and "
            "--quick are for measuring"
        )
    profile = refit_profile(args.raw, args.name)
    profile.save(out)
    return _report(args, out, profile, graphs)


def _report(args: argparse.Namespace, out: Path, profile: Any, graphs: list) -> int:
    """The summary of a written profile (JSON or lines)."""
    summary: dict[str, Any] = {
        "profile": str(out),
        "name": profile.name,
        "backend": profile.backend,
        "num_devices": profile.num_devices,
        "dispatch_us": [round(g * 1e6, 2) for g in profile.dispatch_s],
        "flops_per_s": [d.rate("float32") for d in profile.devices],
        "mem_bytes_per_s": [d.mem_bytes_per_s for d in profile.devices],
        "launch_overhead_us": [round(d.launch_overhead_s * 1e6, 2) for d in profile.devices],
        "op_signatures": len(profile.op_times),
        "graphs": [g.name for g in graphs],
        "coverage": {g.name: round(profile.coverage(g), 4) for g in graphs},
    }
    if profile.num_devices > 1:
        off = ~np.eye(profile.num_devices, dtype=bool)
        summary["latency_us"] = float(profile.latency_s[off].mean() * 1e6)
        summary["bandwidth_gb_per_s"] = float(
            profile.cluster.bandwidth_bytes_per_s[off].mean() / 1e9
        )
    if profile.host is not None:
        h = profile.host
        summary["host_launch_us"] = round(h.launch_s * 1e6, 2)
        summary["host_copy_us"] = round(h.copy_s * 1e6, 2)
        summary["host_parallel_capacity"] = h.parallel_capacity
        if h.cores:
            summary["host_cores"] = round(h.cores, 3)
    capacity = profile.meta.get("parallel_capacity")
    if capacity is not None:
        summary["parallel_capacity"] = round(capacity, 2)
        if capacity < 0.9 * profile.num_devices:
            summary["warning"] = (
                f"only {capacity:.2f} of {profile.num_devices} devices could run at once: other "
                "processes held cores, so this profile reflects the machine's load"
            )
    if args.json:
        print_json(summary)
    else:
        print(
            f"wrote {out}: {profile.num_devices} {profile.backend} devices, {len(profile.op_times)} op signatures"
        )
        for k, v in summary.items():
            if k not in ("profile", "name"):
                print(f"  {k}: {v}")
    return 0
