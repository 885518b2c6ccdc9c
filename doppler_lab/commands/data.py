"""``doppler-lab data paper-graphs|where``: install the paper's released graphs; show where
data is looked up."""

from __future__ import annotations

import argparse
from typing import Any

from ..io.datasets import DOWNLOAD_DEADLINE_S, MAX_DOWNLOAD_BYTES
from ._common import number_arg, print_json

NAME = "data"
HELP = "install the paper's released graphs (pinned, sha256-checked) or show where data is found"


def add_arguments(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="action", metavar="ACTION")
    sub.required = True
    gp = sub.add_parser(
        "paper-graphs",
        help="download the paper's six graphs at a pinned commit, check each sha256, install them",
        description=(
            "Download the DOPPLER paper's six graphs (github.com/xinyuyao/Doppler, "
            "compute_graph/) at a pinned commit, check each file's sha256, and install them "
            "where every command and notebook finds them."
        ),
    )
    gp.add_argument(
        "--dest",
        metavar="DIR",
        help="install here (default: the per-user folder, $XDG_DATA_HOME/doppler_lab/paper-graphs "
        "or ~/.local/share/doppler_lab/paper-graphs)",
    )
    gp.add_argument(
        "--from",
        dest="from_dir",
        metavar="DIR",
        help="install from a local copy of compute_graph/ instead of downloading (checked too)",
    )
    gp.add_argument(
        "--base-url",
        metavar="URL",
        help="raw-file server (default: $DOPPLER_LAB_PAPER_GRAPHS_URL or "
        "https://raw.githubusercontent.com)",
    )
    gp.add_argument("--force", action="store_true", help="fetch again files already installed")
    gp.add_argument(
        "--time-limit",
        type=number_arg(above=0),
        default=DOWNLOAD_DEADLINE_S,
        metavar="S",
        help=f"seconds all downloads together may take (default {DOWNLOAD_DEADLINE_S:g}); files "
        f"over {MAX_DOWNLOAD_BYTES // 1024 // 1024} MiB are refused",
    )
    gp.add_argument("--json", action="store_true", help="print JSON")
    wp = sub.add_parser("where", help="the folders searched for paper graphs and checkpoints")
    wp.add_argument("--json", action="store_true", help="print JSON")


def _paper_graphs(args: argparse.Namespace) -> int:
    from pathlib import Path

    from ..house.paths import PAPER_GRAPHS_ENV, paper_graph_dirs, user_paper_graphs_dir
    from ..io.datasets import PAPER_COMMIT, PAPER_REPO, install_paper_graphs

    dest = Path(args.dest) if args.dest else user_paper_graphs_dir()
    status = install_paper_graphs(
        dest, args.base_url, args.from_dir, args.force, deadline_s=args.time_limit
    )
    searched = any(d.resolve() == dest.resolve() for d in paper_graph_dirs())
    result: dict[str, Any] = {
        "dest": str(dest),
        "repository": PAPER_REPO,
        "commit": PAPER_COMMIT,
        "files": status,
        "found_by_default": searched,
    }
    if args.json:
        print_json(result)
        return 0
    done = sum(s == "installed" for s in status.values())
    print(
        f"paper graphs in {dest}: {done} installed, {len(status) - done} already present "
        f"(github.com/{PAPER_REPO} at {PAPER_COMMIT[:10]}, sha256 checked)"
    )
    if not searched:
        print(f"  not a default location: set {PAPER_GRAPHS_ENV}={dest} so commands find them")
    return 0


def _where(args: argparse.Namespace) -> int:
    from ..house.paths import checkpoint_dirs, paper_graph_dirs, paper_graphs_dir

    found = paper_graphs_dir()
    result = {
        "paper_graphs": str(found) if found else None,
        "paper_graph_search": [str(d) for d in paper_graph_dirs()],
        "checkpoint_dirs": [str(d) for d in checkpoint_dirs()],
    }
    if args.json:
        print_json(result)
        return 0
    print(f"paper graphs: {found or 'not found (run `doppler-lab data paper-graphs`)'}")
    print("  searched, in order: " + ", ".join(result["paper_graph_search"]))
    print("checkpoint folders: " + (", ".join(result["checkpoint_dirs"]) or "none found"))
    return 0


def run(args: argparse.Namespace) -> int:
    if args.action == "paper-graphs":
        return _paper_graphs(args)
    return _where(args)
