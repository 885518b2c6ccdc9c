"""``doppler-lab train``: train a placement policy (Stage I imitation, Stage II simulator RL,
Stage III real-system RL), resumable in its run directory."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from ..house.errors import ConfigError
from ..house.progress import show_progress
from ..house.settings import given_once, parse_items
from ._common import (
    add_cluster_arguments,
    add_estimator_argument,
    add_semantics_argument,
    int_arg,
    number_arg,
    print_json,
    resolve_cluster,
)

NAME = "train"
HELP = "train a placement policy (imitation, simulator RL, real-system RL); resumes in --out"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--stage",
        default="sim",
        metavar="STAGE[,STAGE]",
        help="imitation, sim or real; several comma-separated run in sequence, each warm-starting "
        "from the previous (e.g. imitation,sim)",
    )
    p.add_argument(
        "--graph",
        action="append",
        required=True,
        metavar="GRAPH",
        help="a workload name (chainmm, llama_block:layers=2, ...), a JSON graph or a paper .txt; "
        "repeat for several graphs (updates cycle through them)",
    )
    add_cluster_arguments(p)
    add_semantics_argument(p)
    p.add_argument(
        "--noise",
        type=number_arg(minimum=0, limit="MAX_NOISE"),
        help="simulator duration noise sigma (default 0)",
    )
    p.add_argument(
        "--episodes", type=int_arg(1, "MAX_BUDGET"), metavar="N", help="episodes per stage"
    )
    p.add_argument(
        "--episodes-per-update",
        type=int_arg(1, "MAX_BUDGET"),
        metavar="K",
        help="episodes per update",
    )
    p.add_argument("--lr", type=number_arg(above=0), help="learning rate (both optimisers)")
    p.add_argument("--seed", type=int_arg(0), help="seed (weights, rollouts, noise); default 0")
    p.add_argument(
        "--sel-temperature-end",
        type=number_arg(minimum=0),
        metavar="T",
        help="RL stages (sim, real): SEL's sampling temperature falls linearly from its start "
        "(1) to T over the stage (default: constant; see bench stuck)",
    )
    p.add_argument(
        "--out", required=True, metavar="DIR", help="run directory (resumed if it holds a run)"
    )
    p.add_argument(
        "--init", metavar="CKPT", help="warm start from a checkpoint (path or shipped name)"
    )
    p.add_argument(
        "--policy",
        choices=("dual", "sel-only", "plc-only", "placeto", "gdp"),
        help="policy kind for a fresh start (default dual)",
    )
    p.add_argument(
        "--preset",
        choices=("ours", "released"),
        default="ours",
        help="training and architecture settings: ours (default) or the released code's",
    )
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="any training-config field, e.g. --set sil_coef=1 --set explore=perturb",
    )
    p.add_argument(
        "--policy-set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="any policy-config field for a fresh start, e.g. --policy-set hidden=128",
    )
    p.add_argument(
        "--repeats",
        type=int_arg(1, "MAX_REPEATS"),
        help="real stage: timed runs per cost evaluation",
    )
    p.add_argument(
        "--allow-device-change",
        action="store_true",
        help="fine-tune an --init checkpoint trained on another device count",
    )
    p.add_argument(
        "--device-curriculum",
        type=int_arg(0),
        metavar="K",
        help="on more than K devices, run Stage I and the first half of Stage II on K of them "
        "(default 4 for a DOPPLER policy trained from scratch with imitation,sim on more than 4 "
        "devices, where training on all of them at once is less reliable: on the paper's "
        "8-GPU block, 400 + 3600 episodes, seeds 0-2 reach 0.52 / 0.52 / 0.72 of the Critical "
        "Path's makespan without it and 0.52 each with it; 0: off)",
    )
    add_estimator_argument(p, "reinforce (the paper's); applies to the sim and real stages")
    from ..house.runfolder import add_force_argument

    add_force_argument(p)
    p.add_argument("--json", action="store_true", help="print the summary as one JSON object")


def stage_configs(args: argparse.Namespace, default_semantics: str) -> list:
    """The training configurations of ``--stage`` with the command-line overrides."""
    from ..train.train_config import STAGES, preset

    stages = [s.strip() for s in args.stage.split(",") if s.strip()]
    bad = [s for s in stages if s not in STAGES]
    if bad or not stages:
        raise ConfigError(f"--stage {args.stage!r}: expected one or more of {', '.join(STAGES)}")
    common: dict[str, Any] = {"semantics": args.semantics or default_semantics}
    given: dict[str, Any] = {}
    for key in ("semantics", "noise", "episodes", "episodes_per_update", "lr", "seed", "repeats"):
        if getattr(args, key) is not None:
            common[key] = given[key] = getattr(args, key)
    prefix = "released-" if args.preset == "released" else ""
    own: dict[str, Any] = {} if args.estimator is None else {"estimator": args.estimator}
    if getattr(args, "sel_temperature_end", None) is not None:
        own["sel_temperature_end"] = args.sel_temperature_end
    settings = parse_items(args.set, "train config")
    merged = dict(settings)  # (only checked: --set applies to every stage, own to some)
    for key, value in {**given, **own}.items():
        there = f"in --set {key}={settings.get(key)}"
        given_once(merged, key, value, there, f"--{key.replace('_', '-')} {value}", "setting")
    common.update(settings)
    return [preset(prefix + s, **{**common, **({} if s == "imitation" else own)}) for s in stages]


def policy_config(args: argparse.Namespace):
    from ..policies.policy_config import POLICY_PRESETS

    base = POLICY_PRESETS["released" if args.preset == "released" else "default"]
    changes = parse_items(args.policy_set, "policy config")
    if args.policy:
        there = f"in --policy-set kind={changes.get('kind')}"
        given_once(changes, "kind", args.policy, there, f"--policy {args.policy}", "setting")
    return base.replace(**changes)


def device_curriculum(args, configs, pcfg, init, num_devices: int) -> int | None:
    """``--device-curriculum`` resolved: the default is on for a DOPPLER policy trained from
    scratch through Stage I and II on more than 4 devices."""
    from ..policies.checkpoint import DEVICE_FREE_KINDS
    from ..train.pipeline import DEFAULT_CURRICULUM_DEVICES

    if args.device_curriculum is not None:
        return args.device_curriculum or None
    stages = [c.stage for c in configs]
    scratch = init is None and stages[:1] == ["imitation"] and "sim" in stages
    if scratch and pcfg.kind in DEVICE_FREE_KINDS and num_devices > DEFAULT_CURRICULUM_DEVICES:
        return DEFAULT_CURRICULUM_DEVICES
    return None


def run(args: argparse.Namespace) -> int:
    from ..house.runfolder import run_folder
    from ..house.runners import torch_threads

    # one intra-op thread whatever the process had: the tensors are small (one thread is the
    # fastest), and two runs of one command agree to the bit (sums in one order)
    with run_folder(args.out, NAME, args.force), torch_threads(1):
        return _run(args)


def _run(args: argparse.Namespace) -> int:
    from ..train.pipeline import run_pipeline
    from ..workloads.specs import graph_from_spec

    graphs = [graph_from_spec(g) for g in args.graph]
    cluster = resolve_cluster(args, graphs[0])
    explicit = all(g.compute_cost is not None for g in graphs)
    configs = stage_configs(args, "paper" if explicit else "wc")
    pcfg = policy_config(args)
    init = None
    if args.init is not None:  # '' is an error, not "no warm start"
        from ..policies.pretrained import resolve_checkpoint

        init = resolve_checkpoint(args.init)
    out = Path(args.out)
    curriculum = device_curriculum(args, configs, pcfg, init, cluster.num_devices)
    results = (
        run_pipeline(
            configs,
            graphs,
            cluster,
            pcfg,
            out if len(configs) > 1 else None,
            init,
            curriculum,
            progress=show_progress(args),
            allow_device_change=args.allow_device_change,
            force=args.force,
        )
        if len(configs) > 1
        else None
    )
    if results is None:
        from ..train.loop import Trainer

        results = [
            Trainer(
                configs[0],
                graphs,
                cluster,
                pcfg,
                out,
                init=init,
                progress=show_progress(args),
                allow_device_change=args.allow_device_change,
                force=args.force,
            ).run()
        ]
    summary = {
        "out": str(out),
        "stages": [r.summary for r in results],
        "checkpoint": str(results[-1].checkpoint),
    }
    if args.json:
        print_json(summary)
    else:
        for r in results:
            s = r.summary
            best = ", ".join(f"{g} {c:.6g}" for g, c in s["best_cost"].items())
            print(f"{s['stage']}: {s['episodes']} episodes, best cost seen {best}")
        print(f"checkpoint: {results[-1].checkpoint}")
        from ..house.jsonutil import write_json

        write_json(out / "train_summary.json", summary, default=str)
    return 0
