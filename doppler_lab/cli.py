"""The ``doppler-lab`` command.

Each subcommand lives in :mod:`doppler_lab.commands` as a module with ``NAME``, ``HELP``,
``add_arguments(parser)`` and ``run(args) -> int``; each also gets ``--no-progress`` (progress
bars and notes go to stderr, off with it or ``--json``). Bad input exits with code 2 and a
one-line error on stderr.
"""

from __future__ import annotations

import argparse
import importlib
import re
import sys
from collections.abc import Sequence
from typing import NoReturn

from .errors import DopplerLabError
from .progress import add_progress_argument
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
        return int(args._run(args) or 0)
    except DopplerLabError as exc:
        print(f"doppler-lab {args.command}: error: {one_line(exc, 2000)}", file=sys.stderr)
        return 2
    except FileNotFoundError as exc:
        print(
            f"doppler-lab {args.command}: error: {exc.filename or exc}: no such file",
            file=sys.stderr,
        )
        return 2
    except KeyboardInterrupt:
        print(f"doppler-lab {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
