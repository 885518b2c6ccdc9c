"""The ``doppler-lab`` command.

Each subcommand lives in :mod:`doppler_lab.commands` as a module with ``NAME``, ``HELP``,
``add_arguments(parser)`` and ``run(args) -> int``; each also gets ``--no-progress`` (progress
bars and notes go to stderr, off with it or ``--json``). Bad input exits with code 2 and a
one-line error on stderr; so does a file that cannot be written (:mod:`doppler_lab.atomic`).
A reader that closes the output early (``doppler-lab ... --json | head -c 100``) ends the
command quietly with exit code 0 (what the shell reports of ``head``'s pipeline anyway).
"""

from __future__ import annotations

import argparse
import importlib
import os
import re
import sys
from collections.abc import Sequence
from typing import NoReturn

from .errors import DopplerLabError
from .progress import add_progress_argument
from .trust import trust_pt2
from .validate import one_line

# order = order in --help
COMMAND_MODULES: tuple[str, ...] = (
    "workloads",
    "import_",
    "simulate",
    "place",
    "train",
    "train_general",
    "adapt",
    "execute",
    "calibrate",
    "bench",
    "report",
    "demo",
    "gpu_check",
    "data",
)


def _load_commands() -> list:
    mods = []
    for name in COMMAND_MODULES:
        try:
            mods.append(importlib.import_module(f"doppler_lab.commands.{name}"))
        except ModuleNotFoundError as exc:
            if exc.name != f"doppler_lab.commands.{name}":
                raise
    return mods


class _BadArguments(Exception):
    def __init__(self, prog: str, message: str):
        super().__init__(message)
        self.prog = prog


class _Parser(argparse.ArgumentParser):
    """Errors in one line (no usage block), returned by :func:`main` as exit code 2; an
    option's own message reads after its name (``--devices must be >= 1, got '0'``)."""

    def error(self, message: str) -> NoReturn:
        message = re.sub(r"^argument (\S+): must ", r"\1 must ", message)
        raise _BadArguments(self.prog, f"{message} (see {self.prog} --help)")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="doppler-lab",
        description="DOPPLER workbench: dataflow graphs, simulators, placers, learned policies.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for mod in _load_commands():
        p = sub.add_parser(mod.NAME, help=mod.HELP, description=mod.HELP)
        mod.add_arguments(p)
        add_progress_argument(p)
        p.add_argument(
            "--trust-pt2",
            action="store_true",
            help="load saved programs (.pt2) given as a graph: torch.export.load can run code "
            "stored in the file, so only for files you trust (like FILE.py:FUNC)",
        )
        p.set_defaults(_run=mod.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except _BadArguments as exc:
        print(f"{exc.prog}: error: {one_line(exc, 2000)}", file=sys.stderr)
        return 2
    try:
        with trust_pt2(True if args.trust_pt2 else None):
            code = int(args._run(args) or 0)
        sys.stdout.flush()  # a closed pipe shows here, not in the interpreter's last flush
        return code
    except DopplerLabError as exc:
        print(f"doppler-lab {args.command}: error: {one_line(exc, 2000)}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        return _broken_pipe()
    except FileNotFoundError as exc:
        print(
            f"doppler-lab {args.command}: error: {exc.filename or exc}: no such file",
            file=sys.stderr,
        )
        return 2
    except OSError as exc:  # a file the command could not read or write
        where = f"{exc.filename}: " if exc.filename else ""
        why = exc.strerror or one_line(exc, 2000)
        print(f"doppler-lab {args.command}: error: {where}{why}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"doppler-lab {args.command}: interrupted", file=sys.stderr)
        return 130


def _broken_pipe() -> int:
    """The reader of stdout went away: point stdout at /dev/null so that the interpreter's
    final flush does not fail again, and end quietly (exit code 0)."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):  # stdout is no real file (a test's capture)
        pass
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
