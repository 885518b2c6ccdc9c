"""``doppler-lab explore GRAPH [--cluster SPEC]``: the placement explorer notebook, parameterised
for a graph, opened in JupyterLab (or, without a browser, the command that opens it).

The notebook (``notebooks/11_placement_explorer.ipynb``) is copied with its parameters set the
way papermill sets them (a cell tagged ``injected-parameters`` after the ``parameters`` cell),
nothing executed; JupyterLab's "Run all" then draws the comparison and the widgets.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import webbrowser
from pathlib import Path
from typing import Any

from ..house.errors import ConfigError

NAME = "explore"
HELP = "open the placement explorer notebook for a graph in JupyterLab (or print the command)"

EXPLORER = "11_placement_explorer"
#: where the prepared notebooks go (relative to the current folder)
DEFAULT_DIR = Path("reports") / "explore"
#: the notebook metadata key that marks a notebook this command wrote (it may replace it)
MARK = "doppler_lab_explore"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "graph",
        metavar="GRAPH",
        help="a graph spec: a workload (llama_block), paper:NAME, a graph JSON, a model",
    )
    p.add_argument("--cluster", metavar="SPEC", help="a cluster spec (default: the notebook's)")
    p.add_argument("--first", metavar="NAME", help="first placer (default: the notebook's, cp)")
    p.add_argument(
        "--second", metavar="NAME", help="second placer (default: the notebook's, doppler)"
    )
    p.add_argument(
        "-p",
        "--param",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="another notebook parameter, e.g. -p noise=0 (the names: the notebook's parameters cell)",
    )
    p.add_argument(
        "--out",
        metavar="FILE.ipynb",
        help=f"where the prepared notebook goes (default: {DEFAULT_DIR}/explorer-GRAPH-CLUSTER.ipynb)",
    )
    p.add_argument(
        "--print",
        dest="print_only",
        action="store_true",
        help="prepare the notebook and print the command that opens it, start nothing",
    )
    p.add_argument("--json", action="store_true", help="print one JSON object (implies --print)")


def explorer_notebook() -> Path:
    """The explorer notebook of this checkout.

    Raises:
        ConfigError: the notebooks are not here (a package installed without its repository).
    """
    from ..lab.reporting.notebook_runs import NOTEBOOKS_DIR

    path = NOTEBOOKS_DIR / f"{EXPLORER}.ipynb"
    if not path.is_file():
        raise ConfigError(
            f"the explorer notebook {path} is not there; expected a clone of the repository "
            "(the notebooks are not installed with the package)"
        )
    return path


def explorer_parameters(args: argparse.Namespace, defaults: dict[str, Any]) -> dict[str, Any]:
    """The notebook parameters for the command line: ``workload`` and ``cluster_name`` from
    GRAPH and ``--cluster``, the placers, then ``-p`` items (each a name the notebook has).

    Raises:
        ConfigError: an unknown parameter, a bad graph or cluster spec.
    """
    from ..house.settings import given_once, parse_items
    from ..workloads.specs import cluster_from_spec, parse_graph_spec

    # a missing file is said now, not in the notebook; the kernel runs in another folder
    graph = _absolute(parse_graph_spec(args.graph).check_files())
    params: dict[str, Any] = {"workload": graph}
    if args.cluster:
        cluster_from_spec(args.cluster)
        params["cluster_name"] = args.cluster
    if graph != defaults.get("workload"):  # the shipped checkpoint is the default graph's
        params["second_checkpoint"] = ""
    for key, value in (("first", args.first), ("second", args.second)):
        if value is not None:  # '' is no placer either
            from ..placers.registry import placer_spec

            placer_spec(value)
            params[key] = value
    extra = parse_items(args.param, "explore -p", "parameter")
    for key, value in extra.items():
        if key not in defaults:
            raise ConfigError(
                f"explore -p: the explorer has no parameter {key!r}; expected one of: "
                f"{', '.join(defaults)}"
            )
        # the ones GRAPH, --cluster, --first and --second set get their checks too
        if key == "workload":
            extra[key] = _absolute(parse_graph_spec(str(value)).check_files())
        elif key == "cluster_name":
            cluster_from_spec(str(value))
        elif key in ("first", "second"):
            from ..placers.registry import placer_spec

            placer_spec(str(value))
        elif key == "semantics" and value not in _semantics():
            raise ConfigError(
                f"explore -p: parameter semantics={value!r}; expected one of "
                f"{', '.join(_semantics())}"
            )
    # GRAPH, --cluster, --first and --second again by -p: harmless with the same value
    flags = {
        "workload": "GRAPH",
        "cluster_name": "--cluster",
        "first": "--first",
        "second": "--second",
    }
    for key, value in extra.items():
        if key in flags and key in params:
            there = f"as {flags[key]} {params[key]}"
            given_once(params, key, value, there, f"as -p {key}={value}", "explore: parameter")
        params[key] = value
    return params


def _semantics() -> tuple[str, ...]:
    from ..timing.sim import SEMANTICS

    return SEMANTICS


def _absolute(spec: Any) -> str:
    """The text of the graph spec ``spec`` with the file it names made absolute (a graph file,
    ``FILE.py:FUNC``, ``FILE.pt2``, also inside ``model:`` and ``paper_costs:``)."""
    if spec.kind == "paper_costs":
        return f"paper_costs:{_absolute(spec.inner)}"
    if spec.kind in ("json", "paper_file"):
        return str(Path(spec.target).expanduser().resolve())
    if spec.kind in ("function", "program"):
        file = spec.target.rpartition(":")[0] if spec.kind == "function" else spec.target
        body = spec.body
        assert body.startswith(file)
        text = str(Path(file).expanduser().resolve()) + body[len(file) :]
        return f"model:{text}" if spec.prefix else text
    return spec.text


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", Path(text).stem if "/" in text else text)[:60]


def prepare(source: Path, out: Path, params: dict[str, Any]) -> Path:
    """Write ``source`` with ``params`` injected (papermill's way) to ``out``; a file there is
    replaced only when this command wrote it.

    Raises:
        ConfigError: ``out`` exists and is not a notebook this command wrote.
    """
    from ..house.atomic import atomic_write
    from ..house.deps import require

    nbformat = require("nbformat", "doppler-lab explore")
    pm_io = require("papermill.iorw", "doppler-lab explore", "papermill")
    from papermill.parameterize import parameterize_notebook

    if out.exists() or out.is_symlink():
        try:
            ours = MARK in json.loads(out.read_text(encoding="utf-8")).get("metadata", {})
        except (OSError, ValueError, AttributeError):
            ours = False
        if not ours or not out.is_file() or out.is_symlink():
            raise ConfigError(
                f"--out {out}: a file this command did not write is there; expected a new "
                "path (or one an earlier explore wrote)"
            )
    nb = parameterize_notebook(pm_io.load_notebook_node(str(source)), params)
    nb.metadata[MARK] = {"source": source.name, "parameters": params}
    nb.metadata.pop("papermill", None)
    out.parent.mkdir(parents=True, exist_ok=True)
    return atomic_write(out, nbformat.writes(nb))


def lab_command(notebook: Path) -> list[str]:
    """The command that opens ``notebook`` in JupyterLab: ``jupyter lab`` when it is on the
    PATH, else this interpreter's ``-m jupyterlab``."""
    if shutil.which("jupyter-lab"):
        return ["jupyter", "lab", str(notebook)]
    return [sys.executable, "-m", "jupyterlab", str(notebook)]


def has_browser() -> bool:
    """Whether a graphical browser can open here: a display on Linux and a browser Python's
    :mod:`webbrowser` finds."""
    if sys.platform.startswith("linux") and not (
        os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")
    ):
        return False
    try:
        webbrowser.get()
    except webbrowser.Error:
        return False
    return True


def run(args: argparse.Namespace) -> int:
    from ..lab.reporting.notebook_runs import notebook_parameters
    from ._common import print_json

    source = explorer_notebook()
    defaults = notebook_parameters(source)
    params = explorer_parameters(args, defaults)
    cluster = params.get("cluster_name", defaults.get("cluster_name", ""))
    out = (
        Path(args.out)
        if args.out
        else DEFAULT_DIR / (f"explorer-{_slug(params['workload'])}-{_slug(str(cluster))}.ipynb")
    )
    path = prepare(source, out, params)
    command = lab_command(path)
    opens = not (args.print_only or args.json) and has_browser()
    if args.json:
        print_json({"notebook": str(path), "parameters": params, "command": command})
        return 0
    print(f"wrote {path} (the explorer with {', '.join(f'{k}={v!r}' for k, v in params.items())})")
    if not opens:
        why = "" if args.print_only else "no browser here; "
        print(f"{why}open it with: {shlex.join(command)}")
        return 0
    print(f"starting JupyterLab: {shlex.join(command)} (Ctrl-C stops it)")
    sys.stdout.flush()
    try:
        return subprocess.call(command)
    except FileNotFoundError:
        raise ConfigError(f"{command[0]!r} is not installed; expected JupyterLab") from None
