"""The ``doppler-lab`` command.

Each subcommand lives in :mod:`doppler_lab.commands` as a module with ``NAME``, ``HELP``,
``add_arguments(parser)`` and ``run(args) -> int``; each also gets ``--no-progress`` (progress
bars and notes go to stderr, off with it or ``--json``). Bad input exits with code 2 and a
one-line error on stderr; so does a file that cannot be written (:mod:`doppler_lab.house.atomic`).
A reader that closes the output early (``doppler-lab ... --json | head -c 100``) ends the
command quietly with exit code 0 (what the shell reports of ``head``'s pipeline anyway).

The front door is light: ``doppler-lab --help`` and ``--version`` fill in no subcommand's
arguments, and a command line fills in only its own subcommand's, so neither loads torch (only
the commands and graphs that need it do: learned placers, training, models given as graphs).
"""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import os
import re
import sys
from collections.abc import Sequence
from typing import NoReturn

from .house.errors import DopplerLabError
from .house.progress import add_progress_argument
from .house.trust import trust_pt2
from .house.validate import TerminalText, one_line

# order = order in --help
COMMAND_MODULES: tuple[str, ...] = (
    "workloads",
    "import_",
    "simulate",
    "place",
    "explore",
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
    "runs",
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


def version_line() -> str:
    """``doppler-lab --version``: the package version and the code version, one line."""
    try:
        package = importlib.metadata.version("doppler_lab")
    except importlib.metadata.PackageNotFoundError:  # a source tree on PYTHONPATH
        from . import __version__ as package
    from .house.codeversion import code_version

    return f"doppler-lab {package} (code {code_version()})"


class _VersionAction(argparse.Action):
    """``--version``: computed only when asked (the code version reads the sources)."""

    def __init__(self, option_strings: Sequence[str], dest: str = argparse.SUPPRESS, **kw):
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kw)

    def __call__(self, parser, namespace, values, option_string=None) -> NoReturn:
        print(version_line())
        parser.exit()


def _command_of(argv: Sequence[str]) -> str | None:
    """The subcommand named on a command line: its first word that is no option (the
    top-level options take no values), or ``None`` before one."""
    for word in argv:
        if word == "--":
            return None
        if not word.startswith("-"):
            return word
    return None


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The ``doppler-lab`` parser: every subcommand with its arguments, or, given ``command``,
    the arguments of that subcommand only (the others are listed by name and summary; their
    ``add_arguments`` may import torch)."""
    parser = _Parser(
        prog="doppler-lab",
        description="DOPPLER workbench: dataflow graphs, simulators, placers, learned policies.",
    )
    parser.add_argument(
        "--version",
        action=_VersionAction,
        help="print the package version and the code version (a digest of the sources) and exit",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for mod in _load_commands():
        p = sub.add_parser(mod.NAME, help=mod.HELP, description=mod.HELP)
        if command is not None and mod.NAME != command:
            continue
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
    argv = list(sys.argv[1:] if argv is None else argv)
    if sys.stdout.isatty() and not isinstance(sys.stdout, TerminalText):
        sys.stdout = TerminalText(sys.stdout)  # names from files never drive the terminal
    parser = build_parser(_command_of(argv) or "")
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
    except MemoryError as exc:  # a size no reader checked: one line, never a traceback
        why = one_line(exc, 300) or "an allocation failed"
        print(
            f"doppler-lab {args.command}: error: out of memory ({why}); expected smaller sizes",
            file=sys.stderr,
        )
        return 2


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
