"""The ``doppler-lab`` command.

Each subcommand lives in :mod:`doppler_lab.commands` as a module with ``NAME``, ``HELP``,
``add_arguments(parser)`` and ``run(args) -> int``. Bad input exits with code 2 and a one-line
error on stderr.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from .errors import DopplerLabError

# order = order in --help
COMMAND_MODULES: tuple[str, ...] = (
    "workloads",
    "simulate",
    "place",
    "import_",
    "train",
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


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="doppler-lab",
        description="DOPPLER workbench: dataflow graphs, simulators, placers, learned policies.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for mod in _load_commands():
        p = sub.add_parser(mod.NAME, help=mod.HELP, description=mod.HELP)
        mod.add_arguments(p)
        p.set_defaults(_run=mod.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args._run(args) or 0)
    except DopplerLabError as exc:
        print(f"doppler-lab {args.command}: error: {exc}", file=sys.stderr)
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
