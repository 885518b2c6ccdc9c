"""``doppler-lab bench NAME``: run a benchmark, write JSON + Markdown to reports/bench/."""

from __future__ import annotations

import argparse
import importlib
import inspect
from pathlib import Path

from ..bench import BENCHMARKS
from ..errors import ConfigError
from ..progress import show_progress
from ..runners import add_runner_arguments, runner_from_args

NAME = "bench"
HELP = "run a benchmark (sim, quality, policy, executor, fidelity, import) and write reports/bench/NAME.{json,md}"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("name", metavar="NAME", help=f"one of: {', '.join(BENCHMARKS)}")
    p.add_argument("--out", default="reports/bench", help="output folder (default: reports/bench)")
    p.add_argument("--quick", action="store_true", help="small sizes, for a smoke run")
    add_runner_arguments(p)  # used by the benchmarks that run many runs (policy, quality)


def run(args: argparse.Namespace) -> int:
    if args.name not in BENCHMARKS:
        raise ConfigError(
            f"unknown benchmark {args.name!r}; expected one of {', '.join(BENCHMARKS)}"
        )
    try:
        mod = importlib.import_module(BENCHMARKS[args.name])
    except ModuleNotFoundError as exc:
        if exc.name == BENCHMARKS[args.name]:
            raise ConfigError(f"benchmark {args.name!r} is not available in this version") from None
        raise
    accepted = inspect.signature(mod.run).parameters
    shown = {"progress": show_progress(args)} if "progress" in accepted else {}
    if "runner" in accepted:
        shown["runner"] = runner_from_args(args)
        shown["keep_going"] = args.keep_going
    elif args.runner != "local" or args.keep_going:
        raise ConfigError(
            f"benchmark {args.name!r} has no sweep of runs; expected --runner local and no "
            "--keep-going"
        )
    record = mod.run(Path(args.out), quick=args.quick, **shown)
    print(f"wrote {Path(args.out) / (args.name + '.md')}")
    for k, v in record.get("summary", {}).items():
        print(f"  {k}: {v}")
    return 0
