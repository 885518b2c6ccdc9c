"""``doppler-lab report``: execute the notebooks and build the HTML report site (reports/site/)."""

from __future__ import annotations

import argparse
import contextlib
import shlex
import sys
from pathlib import Path
from typing import Any

from ..house.progress import format_seconds, show_progress
from ..house.runfolder import add_force_argument, run_folder
from ._common import int_arg

NAME = "report"
HELP = "execute every notebook, render each to HTML, and write reports/site/index.html"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--only",
        nargs="+",
        metavar="NAME",
        help="notebooks to run, by stem, number or name (00_quickstart, 00, quickstart); "
        "the index keeps the others' earlier results",
    )
    p.add_argument(
        "--out",
        help="site folder (default: reports/site, the copy kept in git; with --quick: "
        "reports/quick)",
    )
    p.add_argument("--notebooks", metavar="DIR", help="notebooks folder (default: notebooks/)")
    p.add_argument(
        "--params-file",
        metavar="JSON",
        help='per-notebook parameter overrides: {"00_quickstart": {"scale": 0.1}, ...}',
    )
    p.add_argument(
        "--quick",
        action="store_true",
        help="each notebook's quick profile (small settings kept in its metadata, see --list): "
        "the whole site in a few minutes on 2 cores",
    )
    p.add_argument(
        "--keep-going",
        action="store_true",
        help="run the other notebooks after a failure (the exit code is still 1)",
    )
    p.add_argument(
        "--timeout",
        type=int_arg(1, "MAX_SECONDS"),
        default=3600,
        metavar="S",
        help="limit per cell (default 3600 s)",
    )
    p.add_argument(
        "--rerun",
        action="store_true",
        help="execute every notebook named, even one whose earlier run in the site folder had "
        "the same code version, notebook cells and parameters (by default that run is reused)",
    )
    p.add_argument("--list", action="store_true", help="list the notebooks and their quick profile")
    p.add_argument(
        "--status",
        action="store_true",
        help="run nothing: per page of the site folder, when it was built, by which code "
        "version and in how long, and whether a build now would reuse it or run it again, and "
        "why (takes --only, --quick, --params-file, --out as a build would)",
    )
    add_force_argument(p)
    p.add_argument(
        "--refresh",
        action="store_true",
        help="run no notebook: draw anew the index and the pages whose 'built from an older "
        "version' marks are out of date (after the code changed)",
    )
    p.add_argument(
        "--render",
        metavar="NOTEBOOK",
        help="only render NOTEBOOK (one you ran, e.g. in JupyterLab) to one HTML page that draws "
        "offline: plotly.js in it once, widgets as their static view, nothing from a CDN; "
        "--out names the page (default: the notebook's name with .html)",
    )


def run(args: argparse.Namespace) -> int:
    from ..house.errors import ConfigError
    from ..lab.reporting.site import (
        DEFAULT_SITE,
        QUICK_SITE,
        find_notebooks,
        notebook_info,
        quick_parameters,
        read_params_file,
        version_mark,
    )

    if args.timeout < 1:
        raise ConfigError(f"--timeout must be >= 1 second, got {args.timeout}")
    if args.render:
        return _render(args)
    if args.list:
        for path in find_notebooks(args.only, args.notebooks):
            quick = quick_parameters(path)
            shown = "no quick profile" if quick is None else f"quick: {quick}"
            print(f"{path.stem:34s} {notebook_info(path).title}\n{'':34s} {shown}")
        return 0
    if args.status:
        return _status(args)
    if args.refresh:
        from ..lab.reporting.site import refresh_site

        site = refresh_site(args.out, args.notebooks, command=_command_line(args))
        stale = [r.stem for r in site.results if r.code_version and version_mark(r)]
        print(f"wrote {site.index}" + (f"; older version: {', '.join(stale)}" if stale else ""))
        return 0
    overrides = read_params_file(args.params_file) if args.params_file else None
    out = args.out if args.out is not None else QUICK_SITE if args.quick else DEFAULT_SITE
    # one build at a time, and only in a site folder (marked as report's) or a new one
    with run_folder(out, NAME, force=args.force, own=_is_site):
        # the finished runs go to the store during the build and once more at its end, also
        # when a timeout or Ctrl-C stops it
        with _keeping_runs(out):
            site = _build(args, args.out, overrides)
    print(f"wrote {site.index}")
    if not site.ok:
        print(f"failed or not run: {', '.join(site.failed)}", file=sys.stderr)
        if not show_progress(args):  # the progress lines that name the errors were off
            by_stem = {r.stem: r for r in site.results}
            for stem in site.failed:
                if by_stem[stem].error:
                    print(f"  {stem}: {by_stem[stem].error}", file=sys.stderr)
        return 1
    return 0


#: seconds between two keepings of the finished runs while a build of the site runs
KEEP_EVERY = 600.0


def _keeping_runs(out: str) -> contextlib.AbstractContextManager[None]:
    """While a build of this checkout's site (``reports/site``) runs: record the finished runs
    of the stored run caches in the run store (``data/runs``, committed with the site; see
    :mod:`doppler_lab.house.runstore`) every :data:`KEEP_EVERY` seconds and when it ends, so a
    build on another machine reuses them. Other sites keep nothing."""
    from ..house import runstore
    from ..house.paths import REPO_ROOT
    from ..lab.reporting.site import DEFAULT_SITE

    if Path(out).resolve() != (REPO_ROOT / DEFAULT_SITE).resolve():
        return contextlib.nullcontext()
    return runstore.keeping(KEEP_EVERY, report=lambda line: print(line, file=sys.stderr))


def _status(args: argparse.Namespace) -> int:
    """``--status``: the site folder's pages against what a build would run now."""
    from ..house import codeversion
    from ..lab.reporting.site import read_params_file, site_folder, site_status

    overrides = read_params_file(args.params_file) if args.params_file else None
    folder = site_folder(args.out, args.quick)
    pages = site_status(args.out, args.only, overrides, args.quick, args.notebooks)
    print(f"site {folder} (code version now {codeversion.code_version()})")
    rows = [("page", "last build", "code version", "took", "a build now")]
    for st in pages:
        r = st.result
        built = r is not None and r.status != "not run"
        rows.append(
            (
                st.stem,
                (r.finished or "?").replace("T", " ")[:16] if built else "-",
                (r.code_version or "?") if built else "-",
                _took(r.seconds) if built else "-",
                "reuses it" if st.reuse else f"runs it: {st.why}",
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())
    runs = [st for st in pages if not st.reuse]
    known = [st.result.seconds for st in runs if st.result is not None and st.result.seconds]
    took = (
        f"; the last builds of {len(known)} of them took {_took(sum(known))} in all (cached "
        "training runs can make a run shorter)"
        if known
        else ""
    )
    print(f"a build now runs {len(runs)} of {len(pages)} notebooks{took}")
    return 0


def _took(seconds: float | None) -> str:
    return format_seconds(seconds) if seconds else "?"


def _is_site(folder: Path) -> bool:
    """Whether ``folder`` holds a report site (its ``site.json``) made before the marker."""
    from ..house.userfiles import json_document
    from ..lab.reporting.site import SITE_FORMAT

    return (folder / "site.json").is_file() and json_document(SITE_FORMAT)(folder / "site.json")


def _build(args: argparse.Namespace, out: str | None, overrides: Any):
    from ..lab.reporting.site import build_site

    return build_site(
        out,
        only=args.only,
        parameters=overrides,
        quick=args.quick,
        keep_going=args.keep_going,
        progress=show_progress(args),
        timeout_s=args.timeout,
        notebooks_dir=args.notebooks,
        command=_command_line(args),
        rerun=args.rerun,
    )


def _command_line(args: argparse.Namespace) -> str:
    """The command as the index page shows it (rebuilt from the parsed options)."""
    parts = ["doppler-lab", "report"]
    if args.only:
        parts += ["--only", *args.only]
    if args.out is not None:
        parts += ["--out", args.out]
    if args.notebooks:
        parts += ["--notebooks", args.notebooks]
    if args.params_file:
        parts += ["--params-file", args.params_file]
    flags = (
        ("--quick", args.quick),
        ("--keep-going", args.keep_going),
        ("--rerun", args.rerun),
        ("--refresh", getattr(args, "refresh", False)),
    )
    parts += [flag for flag, on in flags if on]
    return " ".join(shlex.quote(p) for p in parts)


def _render(args: argparse.Namespace) -> int:
    """``--render``: one executed notebook to one page."""
    from ..house.errors import ConfigError
    from ..lab.reporting.notebook_runs import render_html
    from ..lab.reporting.site import notebook_info

    notebook = Path(args.render)
    if notebook.suffix != ".ipynb" or not notebook.is_file():
        raise ConfigError(f"--render {args.render}: expected an existing .ipynb file")
    page = Path(args.out) if args.out else notebook.with_suffix(".html")
    from ..house.userfiles import check_output, html_page

    check_output(page, what="--out", inputs=[notebook], own=html_page, force=args.force)
    print(f"wrote {render_html(notebook, page, title=notebook_info(notebook).title)}")
    return 0
