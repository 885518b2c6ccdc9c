"""``doppler-lab runs status|keep|restore``: the committed run store behind the report site.

A report-size sweep (hundreds of training runs) outlives one machine: ``keep`` records the
finished runs of a run cache in ``data/runs/<cache>/`` (small JSON files, committed with the
site), and a sweep on another checkout gets them back (``restore``, which every sweep over a
stored cache does by itself) instead of training them again. See
:mod:`doppler_lab.house.runstore`.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from ._common import print_json

NAME = "runs"
HELP = (
    "the committed run store (data/runs): keep a run cache's finished runs there, restore "
    "them into a cache, or show how the two stand"
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="action", metavar="ACTION")
    sub.required = True
    helps = {
        "status": "runs finished in the cache, stored, still to keep and to restore",
        "keep": "record the cache's finished runs in the store (commit data/runs afterwards)",
        "restore": "write stored runs back into the cache where it lacks them",
    }
    for action, text in helps.items():
        a = sub.add_parser(action, help=text, description=text)
        a.add_argument(
            "--cache",
            default="bench_policy",
            metavar="NAME",
            help="the run cache under runs/ (default bench_policy; stored: %(default)s)",
        )
        a.add_argument("--json", action="store_true", help="print JSON")
        if action == "keep":
            a.add_argument(
                "--every",
                type=_minutes,
                default=None,
                metavar="MINUTES",
                help="keep again every MINUTES until Ctrl-C (beside a long sweep that is not a "
                "report build, which keeps by itself)",
            )


def run(args: argparse.Namespace) -> int:
    from ..house import runstore
    from ..house.errors import ConfigError
    from ..house.paths import REPO_ROOT

    if args.cache not in runstore.STORED_CACHES:
        raise ConfigError(
            f"--cache {args.cache!r} has no run store; expected one of "
            f"{', '.join(runstore.STORED_CACHES)} (their pages need no weights)"
        )
    root = REPO_ROOT / "runs" / args.cache
    store = runstore.store_for(root)
    assert store is not None  # a stored cache under the checkout's runs/
    if args.action == "status":
        doc = runstore.status(root, store)
        if args.json:
            print_json(doc)
            return 0
        print(f"cache {doc['cache']}: {doc['finished_here']} finished run(s)")
        print(f"store {doc['store']}: {doc['stored']} run(s)", end="")
        by = doc["stored_by_version"]
        print(" (code " + ", ".join(f"{v}: {n}" for v, n in by.items()) + ")" if by else "")
        print(f"to keep: {len(doc['to_keep'])}; to restore: {len(doc['to_restore'])}")
        return 0
    if args.action == "keep" and args.every is not None:
        return _keep_every(root, store, args.every)
    counts = runstore.keep(root, store) if args.action == "keep" else runstore.restore(store, root)
    if args.json:
        print_json(
            {
                "action": args.action,
                "cache": str(root),
                "store": str(store),
                "written": counts.written,
                "unchanged": counts.unchanged,
                "skipped": counts.skipped,
                "ledgers": counts.ledgers,
            }
        )
        return 0
    verb = "kept" if args.action == "keep" else "restored"
    print(counts.line(verb, Path(store)))
    return 0


def _minutes(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"expected a positive number of minutes, got {text!r}")
    return value


def _wait_for_ctrl_c() -> None:
    """Block until Ctrl-C (``KeyboardInterrupt``)."""
    import threading

    threading.Event().wait()


def _keep_every(root: Path, store: Path, minutes: float) -> int:
    """``keep --every``: keep now, then under :func:`~doppler_lab.house.runstore.keeping` (every
    ``minutes``, and once more at Ctrl-C), a line for each keeping that wrote runs."""
    import time

    from ..house import runstore

    def say(line: str) -> None:
        print(f"{time.strftime('%H:%M:%S')} {line}", flush=True)

    print(f"keeping the finished runs of {root} every {minutes:g} min (Ctrl-C stops)")
    say(runstore.keep(root, store).line("kept", store))
    try:
        with runstore.keeping(60 * minutes, report=say):
            _wait_for_ctrl_c()
    except KeyboardInterrupt:
        print("stopped")
    return 0
