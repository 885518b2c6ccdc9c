"""``doppler-lab runs status|cells|keep|restore|recheck``: the committed run store behind the report site.

A report-size sweep (hundreds of training runs) outlives one machine: ``keep`` records the
finished runs of a run cache in ``data/runs/<cache>/`` (small JSON files, committed with the
site), and a sweep on another checkout gets them back (``restore``, which every sweep over a
stored cache does by itself) instead of training them again. ``cells`` reads the store and
trains nothing: per (graph, method, stage budget), which seeds this code version has, which it
would adopt, which wait for a check seed and which it must train again. ``recheck`` runs
each failed adoption check again with the older version's code on this machine, so that a
check failed by another machine's rounding does not retrain a cell. See
:mod:`doppler_lab.house.runstore` and :mod:`doppler_lab.lab.bench.adopt`.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

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
        "cells": "per cell of the store (graph, method, stage budget): seeds this code version "
        "has, would adopt, must check first or must train again (reads, trains nothing)",
        "keep": "record the cache's finished runs in the store (commit data/runs afterwards)",
        "recheck": "train each failed adoption check's seed again with the older version's code "
        "(its commit, in a git worktree) on this machine: equal to the current code's check "
        "run, the failure was the machine's and the cell is adopted",
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
        if action == "recheck":
            a.add_argument(
                "--jobs",
                type=int,
                default=os.cpu_count() or 1,
                metavar="N",
                help="checks trained at once (default: one per core)",
            )
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
    if args.action == "cells":
        rows = cells(store)
        if args.json:
            print_json({"store": str(store), "code_version": _current(), "cells": rows})
        else:
            print(cells_text(rows, store))
        return 0
    if args.action == "recheck":
        return _recheck(root, args.json, args.jobs)
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


def _recheck(root: Path, as_json: bool, jobs: int) -> int:
    """``runs recheck``: :func:`~doppler_lab.lab.bench.recheck.recheck` over the cache, a line
    per failed check (restored from the store first, as a sweep would)."""
    from ..house import runstore
    from ..house.errors import ConfigError
    from ..lab.bench import recheck

    restored = runstore.restore_for(root)
    if restored and not as_json:
        print(restored)
    checks = recheck.failed_checks(root)
    if not as_json:
        print(
            f"{len(checks)} failed adoption check(s) of code version {_current()} to recheck "
            f"on this machine ({recheck.machine()})"
        )
    if jobs < 1:
        raise ConfigError(f"--jobs must be >= 1, got {jobs}")
    rows = recheck.recheck(root, report=None if as_json else print, jobs=jobs)
    if as_json:
        print_json({"cache": str(root), "machine": recheck.machine(), "rechecks": rows})
    return 0


#: what this code version would do with a stored seed of a cell, in the order a seed takes the
#: first that applies
SEED_STATES = ("current", "adoptable", "to_check", "retrain")


def _current() -> str:
    from ..house import codeversion

    return codeversion.code_version()


def _budget(result: dict[str, Any]) -> str:
    """A run's stage budget: Stage I + Stage II episodes (``2000+2000``: the paper's)."""
    episodes, rl = int(result.get("episodes") or 0), int(result.get("rl_episodes") or 0)
    return f"{episodes - rl}+{rl}"


def cells(store: Path) -> list[dict[str, Any]]:
    """Per (cell folder, stage budget) of the store: its seeds and what the current code would
    do with each (:data:`SEED_STATES`): ``current`` (a run by this version is stored),
    ``adoptable`` (an older version's run, of a version a check seed of this cell reproduced),
    ``to_check`` (an older version's run that no check has judged yet: a sweep trains one check
    seed per cell and version, or compares a seed this version already has, then adopts or
    retrains), ``retrain`` (every stored version failed its check). Reads; trains nothing."""
    from ..house.errors import FormatError
    from ..house.validate import read_json_object
    from ..lab.bench import adopt

    current = _current()
    seeds: dict[tuple[str, str], dict[int, set[str]]] = {}
    for path in sorted(Path(store).rglob("seed*.json")):
        doc = read_json_object(path, "a stored run")
        result = doc.get("result")
        if not isinstance(result, dict) or not isinstance(result.get("seed"), int):
            raise FormatError(f"{path}: a stored run needs a 'result' with an integer 'seed'")
        cell = path.parent.relative_to(store).as_posix()
        by_seed = seeds.setdefault((cell, _budget(result)), {})
        by_seed.setdefault(result["seed"], set()).add(str(result.get("code_version", "?")))
    rows = []
    for (cell, budget), by_seed in sorted(seeds.items()):
        entries = adopt.ledger(Path(store) / cell)
        # versions a check showed equal form one class: one check seed serves them all
        # (adopt's own grouping; private there, as adopt is code a run's numbers depend on)
        classes = adopt._classes(entries)
        verdicts: dict[str, bool | None] = {}
        states: dict[str, list[int]] = {s: [] for s in SEED_STATES}
        versions: dict[str, int] = {}
        checks: dict[str, bool] = {}  # class of an unchecked version: a seed of it is here too
        for seed, held in sorted(by_seed.items()):
            for v in held:
                versions[v] = versions.get(v, 0) + 1
            older = sorted(held - {current})
            for v in older:
                if v not in verdicts:
                    verdicts[v] = adopt._verdict(entries, v)
                if verdicts[v] is None:
                    key = classes.get(v, v)
                    checks[key] = checks.get(key, False) or current in held
            if current in held:
                state = "current"
            elif any(verdicts[v] is True for v in older):
                state = "adoptable"
            elif any(verdicts[v] is None for v in older):
                state = "to_check"
            else:
                state = "retrain"
            states[state].append(seed)
        rows.append(
            {
                "cell": cell,
                "budget": budget,
                "seeds": sorted(by_seed),
                "by_version": dict(sorted(versions.items())),
                **states,
                "checks": {
                    v: ("compare" if here else "train") for v, here in sorted(checks.items())
                },
            }
        )
    return rows


def cells_text(rows: list[dict[str, Any]], store: Path) -> str:
    """:func:`cells` as a table, with the totals and what a sweep at this version needs."""
    current = _current()
    head = ("cell", "I+II", "seeds", "current", "adoptable", "to check", "retrain", "stored by")
    table = [head]
    for r in rows:
        table.append(
            (
                r["cell"],
                r["budget"],
                str(len(r["seeds"])),
                *(str(len(r[s])) for s in SEED_STATES),
                ", ".join(f"{v}: {n}" for v, n in r["by_version"].items()),
            )
        )
    widths = [max(len(row[i]) for row in table) for i in range(len(head))]
    lines = [f"store {store}, code version {current}"]
    lines += ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) for row in table]
    total = {s: sum(len(r[s]) for r in rows) for s in SEED_STATES}
    # one check per (cell folder, class of versions), whatever the stage budget: a seed this
    # version has is compared as it is, in any budget of the folder
    checks: dict[tuple[str, str], bool] = {}
    for r in rows:
        for v, how in r["checks"].items():
            checks[(r["cell"], v)] = checks.get((r["cell"], v), False) or how == "compare"
    lines.append(
        f"{sum(len(r['seeds']) for r in rows)} stored seed(s) in {len(rows)} cell(s): "
        + ", ".join(f"{n} {s.replace('_', ' ')}" for s, n in total.items())
    )
    if checks:
        to_train = sum(not here for here in checks.values())
        lines.append(
            f"a sweep at {current} first checks {len(checks)} (cell, older version) pair(s), "
            f"{to_train} by training one seed again and {len(checks) - to_train} by comparing "
            "a seed this version already has; each then adopts that version's seeds or trains "
            "them again"
        )
    return "\n".join(lines)
