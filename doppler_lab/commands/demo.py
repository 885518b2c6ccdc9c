"""``doppler-lab demo``: the main job; writes an HTML report to reports/demo/."""

from __future__ import annotations

import argparse

from ..house.errors import ConfigError
from ..house.progress import show_progress
from ._common import int_arg, number_arg

NAME = "demo"
HELP = "run the end-to-end demo and write reports/demo/index.html"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", default="reports/demo", help="output folder (default: reports/demo)")
    p.add_argument(
        "--scale",
        type=number_arg(above=0),
        default=1.0,
        help="tensor-size scale of the workloads (default 1)",
    )
    p.add_argument("--seed", type=int_arg(0), default=0, help="seed (default 0)")
    p.add_argument("--quick", action="store_true", help="smallest settings, for a smoke run")
    p.add_argument(
        "--paper-graphs", metavar="DIR", help="folder with the paper's compute_graph/*.txt files"
    )


def run(args: argparse.Namespace) -> int:
    from ..house.runfolder import run_folder
    from ..lab.reporting.demo_job import run_demo

    if not args.scale > 0:
        raise ConfigError(f"--scale must be > 0, got {args.scale}")
    with run_folder(args.out, NAME, mark=False):
        path = run_demo(
            args.out,
            scale=args.scale,
            seed=args.seed,
            quick=args.quick,
            paper_graphs=args.paper_graphs,
            progress=show_progress(args),
        )
    print(f"wrote {path}")
    return 0
