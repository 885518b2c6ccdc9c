"""``doppler-lab bench NAME``: run a benchmark, write JSON + Markdown to reports/bench/."""

from __future__ import annotations

import argparse
import importlib
import inspect
import tempfile
from pathlib import Path
from typing import Any

from ..house.atomic import atomic_write
from ..house.errors import ConfigError, FormatError
from ..house.jsonutil import write_json
from ..house.progress import show_progress
from ..house.runners import add_runner_arguments, runner_from_args
from ..house.userfiles import output_folder
from ..house.validate import one_line
from ..lab.bench import BENCHMARKS
from ._common import int_arg

NAME = "bench"
HELP = "run a benchmark (sim, quality, policy, policy-wc, executor, allocator, fidelity, import, general, general-alone, memory, memory-fidelity, learner, stuck, stuck-split) and write reports/bench/NAME.{json,md}"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("name", metavar="NAME", help=f"one of: {', '.join(BENCHMARKS)}")
    p.add_argument("--out", default="reports/bench", help="output folder (default: reports/bench)")
    p.add_argument("--quick", action="store_true", help="small sizes, for a smoke run")
    add_runner_arguments(p)  # used by the benchmarks that run many runs (policy, quality)
    g = p.add_argument_group("bench general (the general policy on held-out tasks)")
    g.add_argument(
        "--checkpoint",
        help="the general policy: a path or a shipped name (default doppler/general; also "
        "bench policy-wc's doppler-general-search rows)",
    )
    g.add_argument("--budget", type=int, help="simulator calls of the budget table (default 2000)")
    g.add_argument(
        "--curve",
        metavar="N,N,...",
        help="budgets of the budget curve (default 100,250,500,1000,2000)",
    )
    g.add_argument("--seeds", type=int, help="seeds per task (default 10)")
    g.add_argument(
        "--partitions",
        type=int,
        help="METIS partition proposals of the doppler placer (default 4; 0: its rollouts alone)",
    )
    g.add_argument(
        "--skip-clustering",
        action="store_true",
        help="the doppler placer and the adapter without the clustering placer's placement among "
        "their proposals (default: with it)",
    )
    g.add_argument(
        "--groups",
        help="held-out groups, comma-separated (default generator,cluster,paper,model; "
        "memory: the memory-bound tasks)",
    )
    g.add_argument(
        "--task",
        action="append",
        dest="tasks",
        metavar="TEXT",
        help="only the tasks whose name contains TEXT (repeatable)",
    )
    g.add_argument(
        "--train-seeds",
        type=int,
        help="seeds of each scratch run and long fine-tuning (default 2; the table shows their "
        "mean)",
    )
    g.add_argument(
        "--finetune-seeds",
        type=int,
        help="seeds of each short fine-tuning run (default 8; the table shows their mean)",
    )
    g.add_argument("--finetune-episodes", type=int, help="fine-tuning episodes (default 200)")
    g.add_argument(
        "--scratch-episodes", type=int, help="episodes of training from scratch (default 4000)"
    )
    g.add_argument(
        "--finetune-method",
        choices=("adapter", "network"),
        help="how fine-tuning trains: a per-instance bias table on the frozen network (adapter, "
        "the default) or Stage II of the network's weights (network)",
    )
    g.add_argument(
        "--finetune-set",
        action="append",
        metavar="KEY=VALUE",
        help="a setting of the fine-tuning method on top of the bench's: an adapter field "
        "(doppler_lab.search.adapter.AdaptConfig, e.g. lr=0.5 or temperature=3) or, with "
        "--finetune-method network, a Stage II field (e.g. lr=0.03) (repeatable)",
    )
    g.add_argument(
        "--also",
        action="append",
        metavar="CKPT",
        help="bench general-alone: a further checkpoint shown beside --checkpoint (repeatable; "
        "default: the shipped general policies)",
    )
    g.add_argument("--skip-training", action="store_true", help="leave out fine-tuning vs scratch")
    g.add_argument(
        "--skip-finetune-long",
        action="store_true",
        help="leave out fine-tuning the network for as many episodes as scratch (the "
        "equal-episodes comparison beside the short fine-tuning)",
    )
    f = p.add_argument_group("bench fidelity")
    f.add_argument(
        "--from",
        dest="from_raw",
        metavar="RAW",
        action="append",
        help="measure nothing: score today's simulator models on the measurements kept by an "
        "earlier run (its fidelity_raw.json.gz), on any machine; repeat for several runs: the "
        "host model is then judged against today's model over all of them, paired by run and "
        "workload",
    )
    f.add_argument(
        "--rounds",
        type=rounds_arg,
        metavar="N",
        help="shuffled measuring passes over the placements (default 4, --quick 1): more "
        "passes measure each placement more often and take longer; with --from, score the "
        "first N passes each run kept (how the verdict moves with fewer measurements)",
    )


def rounds_arg(text: str) -> int:
    """An argparse ``type=``: a whole number of measuring passes, 1 to
    :data:`~doppler_lab.house.limits.MAX_REPEATS` (:func:`~doppler_lab.commands._common.int_arg`'s
    parsing)."""
    try:
        return int_arg(1, "MAX_REPEATS")(text)
    except argparse.ArgumentTypeError as exc:
        raise argparse.ArgumentTypeError(
            f"{text!r}: expected a whole number of passes, 1 or more ({exc})"
        ) from None


#: options of ``bench general`` (None / False: not given)
GENERAL_OPTIONS = (
    "checkpoint", "budget", "curve", "seeds", "partitions", "groups", "tasks", "train_seeds",
    "finetune_seeds",
    "finetune_episodes", "scratch_episodes", "finetune_method", "finetune_set", "skip_training",
    "skip_finetune_long", "skip_clustering", "also", "from_raw", "rounds",
)  # fmt: skip
#: the benchmark each option of GENERAL_OPTIONS belongs to, where it is not bench general
OPTION_OF = {"also": "general-alone", "from_raw": "fidelity", "rounds": "fidelity"}


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
    # (identity, not equality: --partitions 0 is given)
    given = {
        k: v for k in GENERAL_OPTIONS if (v := getattr(args, k)) is not None and v is not False
    }
    if "finetune_set" in given:
        from ..house.settings import parse_items

        given["finetune_set"] = parse_items(given["finetune_set"], "train config")
    if args.name == "general":  # (its --skip-* options are turned into run's below)
        foreign = [k for k in given if OPTION_OF.get(k, "general") != "general"]
    else:
        foreign = [k for k in given if k not in accepted]
    if foreign:
        flag = "--" + {"from_raw": "from"}.get(foreign[0], foreign[0].replace("_", "-"))
        raise ConfigError(
            f"{flag} is an option of bench {OPTION_OF.get(foreign[0], 'general')}; expected "
            f"none with bench {args.name}"
        )
    typed = dict(given)  # as given on the command line, before they become run's arguments
    out = Path(args.out) / f"{args.name}.json"
    if "rounds" in given and "from_raw" in given:  # score the first rounds each run kept
        with tempfile.TemporaryDirectory(prefix="doppler-lab-rounds-") as tmp:
            originals = list(given["from_raw"])
            given["from_raw"] = first_rounds(originals, given.pop("rounds"), Path(tmp))
            output_folder(args.out)
            record = mod.run(Path(args.out), quick=args.quick, **shown, **given)
            return _finish(out, record, typed, dict(zip(given["from_raw"], originals)))
    if given.pop("skip_finetune_long", False):
        given["finetune_long"] = False
    if given.pop("skip_clustering", False):
        given["clustering"] = False
    output_folder(args.out)  # before the bench runs, not when it writes
    record = mod.run(Path(args.out), quick=args.quick, **shown, **given)
    return _finish(out, record, typed)


def _finish(path: Path, record: dict, typed: dict, cut_from: dict | None = None) -> int:
    record = _as_given(path, record, typed, cut_from or {})
    print(f"wrote {path.with_suffix('.md')}")
    for k, v in record.get("summary", {}).items():
        print(f"  {k}: {v}")
    return 0


def first_rounds(paths: list[str], rounds: int, tmp: Path) -> list[str]:
    """``bench fidelity --from RAW --rounds K``: each raw file cut to its first ``rounds``
    measuring passes (every placement's runs are kept pass by pass), written under ``tmp`` in a
    folder of its own named like the file's (a run's label in a report over several), so a
    model can be judged on fewer passes of the same measurements. Returns the cut files.

    Raises:
        FormatError: a file that is not a bench fidelity raw file, or has fewer passes, named.
    """
    import gzip
    import json

    cut = []
    for i, raw in enumerate(paths):
        try:
            with gzip.open(raw, "rt", encoding="utf-8") as f:
                doc = json.load(f)
            kept, repeats = int(doc["passes"]["rounds"]), int(doc["passes"]["repeats"])
            workloads = doc["workloads"].values()
        except FileNotFoundError:
            raise  # (the command line says "RAW: no such file")
        except (OSError, EOFError, ValueError, KeyError, TypeError, AttributeError) as exc:
            raise FormatError(
                "not the raw file of a bench fidelity run with its measuring passes "
                f"(expected passes.rounds, passes.repeats and workloads; {one_line(exc, 200)})",
                str(raw),
            ) from None
        if rounds > kept:
            raise FormatError(f"--rounds {rounds}: the run kept {kept} pass(es)", str(raw))
        for w in workloads:
            w["measured_s"] = [row[: rounds * repeats] for row in w["measured_s"]]
        doc["passes"]["rounds"] = rounds
        out = tmp / str(i) / Path(raw).resolve().parent.name / Path(raw).name
        out.parent.mkdir(parents=True)
        # (the document as kept, not parsed and written again: every field stays as it was)
        atomic_write(out, gzip.compress(json.dumps(doc).encode("utf-8")))
        cut.append(str(out))
    return cut


def _as_given(path: Path, record: dict, given: dict, cut_from: dict[str, str]) -> dict:
    """``record``, and its JSON and page at ``path`` redrawn where they change, as the command
    line gave it: its command shows every single-valued option given (a bench's own command
    line may leave one out, e.g. ``--rounds``), so the page's command runs the same bench
    again; the cut copies of ``cut_from`` (cut file: the file given) named as the files given."""
    from ..lab.bench.pages import read_report, rewrite_page

    command = record.get("command") or ""
    missing = []
    for key, value in given.items():
        if isinstance(value, list | tuple | dict) or key == "from_raw":
            continue
        flag = "--" + key.replace("_", "-")
        if f"{flag} " not in f"{command} " and not any(
            f"{flag}=" in part for part in command.split()
        ):
            missing.append(flag if value is True else f"{flag} {value}")

    def as_given(x: Any) -> Any:
        if isinstance(x, str):
            for cut, original in cut_from.items():
                x = x.replace(cut, original)
            return x
        if isinstance(x, list):
            return [as_given(v) for v in x]
        if isinstance(x, dict):
            return {k: as_given(v) for k, v in x.items()}
        return x

    if not command or not path.is_file() or not (missing or cut_from):
        return record
    kept = as_given(read_report(path))
    kept["command"] = " ".join([kept["command"], *missing])
    write_json(path, kept)
    rewrite_page(path)
    return {**as_given(record), "command": kept["command"]}
