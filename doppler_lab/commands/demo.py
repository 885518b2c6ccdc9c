"""``doppler-lab demo``: the main job; writes an HTML report to reports/demo/."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..house.errors import ConfigError
from ..house.progress import show_progress
from ..house.runfolder import add_force_argument
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
    add_force_argument(p)


def run(args: argparse.Namespace) -> int:
    from ..house.paths import paper_graphs_dir
    from ..house.runfolder import run_folder
    from ..lab.reporting.demo_job import run_demo

    if not args.scale > 0:
        raise ConfigError(f"--scale must be > 0, got {args.scale}")
    # a folder the user names is used or refused, never left out of the report in silence
    if args.paper_graphs is not None and paper_graphs_dir(args.paper_graphs or ".") is None:
        raise ConfigError(
            f"--paper-graphs {args.paper_graphs!r} holds no paper graph (*.txt); expected the "
            "folder of the paper's compute_graph/ files (or leave it out: the demo then looks "
            "where `doppler-lab data paper-graphs` installs them)"
        )
    # only into a folder demo wrote (its marker, or its page from before the marker) or a new
    # one: the page and summary.json would replace a user's own files of those names
    with run_folder(args.out, NAME, force=args.force, own=_is_demo):
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


def _is_demo(folder: Path) -> bool:
    """Whether ``folder`` holds a demo report made before the marker (its page, which
    doppler-lab's HTML writer marks)."""
    from ..house.userfiles import html_page

    return html_page(folder / "index.html")
