"""``doppler-lab train-general``: train the general DOPPLER policy (``doppler/general``) on a
distribution of graphs and clusters (:mod:`doppler_lab.train.general_policy`); resumable in --out."""

from __future__ import annotations

import argparse
from pathlib import Path
from types import ModuleType
from typing import Any, NamedTuple

from ..house.errors import ConfigError
from ..house.progress import show_progress
from ._common import add_estimator_argument, int_arg, number_arg, print_json

NAME = "train-general"
HELP = "train one DOPPLER policy on many graphs and clusters (doppler/general); resumes in --out"


def add_arguments(p: argparse.ArgumentParser) -> None:
    from ..train import general_policy as g

    p.add_argument(
        "--out",
        default="runs/general",
        metavar="DIR",
        help="run directory (resumed if it holds a run)",
    )
    _stage_arguments(p, g)
    _fresh_policy_arguments(p, g)
    _result_arguments(p, g)


def _stage_arguments(p: argparse.ArgumentParser, g: ModuleType) -> None:
    """The training stages: their episodes, the anchor stage's source, Stage I's teacher,
    Stage II's learning rate and batch."""
    counts = (
        ("--tasks", 1, g.GENERAL_TASKS, "training tasks in the pool"),
        (
            "--imitation-episodes",
            0,
            g.GENERAL_IMITATION_EPISODES,
            "Stage I episodes (0: none, e.g. to continue from --init)",
        ),
        (
            "--anchor-episodes",
            0,
            g.GENERAL_ANCHOR_EPISODES,
            "episodes imitating each task's searched placement, after Stage I (0: none)",
        ),
        ("--anchor-budget", 1, g.ANCHOR_BUDGET, "simulator calls of each task's anchor search"),
        ("--sim-episodes", 0, g.GENERAL_SIM_EPISODES, "Stage II episodes (0: none)"),
    )
    for flag, least, default, text in counts:
        p.add_argument(
            flag, type=int_arg(least, "MAX_BUDGET"), default=default, metavar="N", help=text
        )
    p.add_argument(
        "--anchor-source",
        choices=g.ANCHOR_SOURCES,
        default=g.ANCHOR_SOURCES[0],
        help="the anchor stage's placements: the budget search of the policy it starts from "
        "(policy), local-search from CP, the rollout over deterministic CP (cp-rollout), or "
        "the doppler placer's zero-shot pick with that policy (proposals: its rollouts, the "
        "clustering, the partitions)",
    )
    p.add_argument(
        "--teacher",
        choices=("cp", "cp-rollout", "cluster", "clustering", "hint"),
        default=g.GENERAL_TEACHER,
        help="Stage I's PLC labels: the Critical Path rule (cp), the rollout over "
        "deterministic CP at the visited states (cp-rollout: D simulator calls per label), or "
        "the device of the op's placed clustering mates, else CP's (cluster), or the whole "
        "clustering placer's device of the op (clustering; read by the doppler12 layout), or "
        "the device of the heuristic each task is hinted with (hint; with --hints)",
    )
    p.add_argument(
        "--label-fraction",
        type=number_arg(above=0),
        default=g.GENERAL_LABEL_FRACTION,
        metavar="F",
        help="share of Stage I's states the cp-rollout teacher labels (0 < F <= 1)",
    )
    p.add_argument("--lr", type=number_arg(above=0), help="Stage II learning rate")
    p.add_argument(
        "--graphs-per-step",
        type=int_arg(1, "MAX_BUDGET"),
        metavar="G",
        help="Stage II: average G tasks' gradients into one optimiser step",
    )


def _fresh_policy_arguments(p: argparse.ArgumentParser, g: ModuleType) -> None:
    """What a fresh policy reads (estimate, feature layout) and the task pool's shares."""
    p.add_argument(
        "--estimate",
        "--timing",  # its name before 0.2
        dest="estimate",
        choices=("task", "wc", "est"),
        default=g.GENERAL_ESTIMATE,
        help="episode-state estimate of a fresh policy (task: each task's semantics' model)",
    )
    p.add_argument(
        "--layout",
        choices=("doppler9", "doppler10", "doppler11", "doppler12"),
        default=g.GENERAL_LAYOUT,
        help="feature layout of a fresh policy (doppler10: with the cluster share; doppler11: and "
        "the memory headroom; doppler12: and the clustering placer's device); an --init of "
        "a narrower layout is widened to it",
    )
    for flag, default, what in (
        (
            "--paper-cost-share",
            g.GENERAL_PAPER_COST_SHARE,
            "share of the generator tasks given the paper's cost convention (uniform devices, "
            "paper semantics, transfers 4x the compute)",
        ),
        (
            "--memory-share",
            g.GENERAL_MEMORY_SHARE,
            "share of the tasks given a memory cap that binds (1.25-2x the graph's tensors "
            "over the devices; a doppler11 policy reads each device's headroom)",
        ),
    ):
        p.add_argument(flag, type=share_arg, default=default, metavar="F", help=what)
    p.add_argument(
        "--sample-temperature",
        type=number_arg(above=0),
        metavar="T",
        help="record in the checkpoint PLC's temperature in its sampled rollouts (the doppler "
        "placer's samples; default 1)",
    )
    p.add_argument(
        "--hint-free",
        action="store_true",
        help="doppler12: train each task twice, with and without the clustering's device as a "
        "feature, so that the policy also places without it (the doppler placer draws half its "
        "samples each way)",
    )
    p.add_argument(
        "--hints",
        type=hints_arg,
        metavar="NAMES",
        help="doppler12: the heuristics whose devices the policy reads in turn, comma-separated "
        "(clustering, partition): each task once with each and once without; the doppler "
        "placer draws a group of rollouts with each and one without (--hint-free is "
        "--hints clustering)",
    )


def _result_arguments(p: argparse.ArgumentParser, g: ModuleType) -> None:
    """Seed, start, and what becomes of the result (ship, name, validate, score, output)."""
    p.add_argument("--seed", type=int_arg(0), default=0, help="seed (task pool, weights, rollouts)")
    p.add_argument("--init", metavar="CKPT", help="start Stage I from a checkpoint")
    p.add_argument(
        "--ship",
        metavar="DEST",
        help="copy the result to DEST/doppler/general.pt and record it in DEST/index.json "
        "(data/checkpoints ships it)",
    )
    p.add_argument(
        "--name",
        default=g.GENERAL_CHECKPOINT,
        metavar="doppler/NAME",
        help="the name --ship gives it (default doppler/general, what --placer doppler uses "
        "without --checkpoint)",
    )
    p.add_argument(
        "--validate",
        action="store_true",
        help="score the result on the validation pool (zero-shot protocol vs CP; recorded "
        "with --ship)",
    )
    p.add_argument(
        "--score",
        metavar="CKPT",
        action="append",
        help="only score checkpoints on the validation pool, no training (repeatable)",
    )
    add_estimator_argument(p, "the general policy's Stage II (GENERAL_ESTIMATOR)")
    d = p.add_argument_group("search distillation (expert iteration, --distill ROUNDS)")
    d.add_argument(
        "--distill",
        type=int_arg(1, "MAX_BUDGET"),
        metavar="ROUNDS",
        help="instead of Stages I + II: ROUNDS rounds of the budget search from the policy "
        "(from --init, default doppler/general), Stage I imitating each task's best placement "
        "found, then Stage II (doppler_lab.train.distill); --tasks, --seed, --memory-share "
        "and --paper-cost-share set the pool",
    )
    from ..train import distill as dl

    for flag, least, default, text in (
        ("--distill-budget", 1, dl.DISTILL_BUDGET, "simulator calls of each task's search"),
        (
            "--distill-imitation-episodes",
            0,
            dl.DISTILL_IMITATION_EPISODES,
            "Stage I episodes per round",
        ),
        ("--distill-sim-episodes", 0, dl.DISTILL_SIM_EPISODES, "Stage II episodes per round"),
        ("--jobs", 1, 1, "local processes of the searches (with --runner local)"),
    ):
        d.add_argument(
            flag, type=int_arg(least, "MAX_BUDGET"), default=default, metavar="N", help=text
        )
    d.add_argument(
        "--no-distill-proposals",
        dest="distill_proposals",
        action="store_false",
        help="the search starts from the policy's rollouts alone (default: also from the "
        "clustering and 4 METIS partitions)",
    )
    from ..house.runners import add_runner_arguments

    add_runner_arguments(d)
    from ..house.runfolder import add_force_argument

    add_force_argument(p)
    p.add_argument("--json", action="store_true", help="print the summary as one JSON object")


class _Option(NamedTuple):
    """A flag of train-general beside its default: where it applies (``both``, ``stages``:
    plain Stages I + II, ``distill``: ``--distill ROUNDS``), what to use in the other mode,
    and whether :func:`command_line` records it."""

    flag: str
    key: str
    default: Any
    mode: str = "both"
    instead: str = ""
    recorded: bool = True


def _options() -> tuple[_Option, ...]:
    """train-general's flags that set the result, in :func:`command_line`'s order, and those
    of one mode alone (each refused in the other: it would be ignored in silence)."""
    from ..train import distill as dl
    from ..train import general_policy as g

    none = "leave it out"
    anchor = f"search distillation has no anchor stage ({none})"
    stage_i = f"Stage I imitates the searches' best placements ({none})"
    stage_ii = f"Stage II keeps distillation's settings; --lr sets its learning rate ({none})"
    fresh = f"the policy of --init keeps its own ({none})"
    return (
        _Option("--tasks", "tasks", g.GENERAL_TASKS),
        _Option(
            "--imitation-episodes", "imitation_episodes", g.GENERAL_IMITATION_EPISODES, "stages",
            "use --distill-imitation-episodes (per round)",
        ),
        _Option(
            "--anchor-episodes", "anchor_episodes", g.GENERAL_ANCHOR_EPISODES, "stages", anchor
        ),
        _Option("--anchor-source", "anchor_source", g.ANCHOR_SOURCES[0], "stages", anchor),
        _Option(
            "--anchor-budget", "anchor_budget", g.ANCHOR_BUDGET, "stages",
            "use --distill-budget (each task's search)",
        ),
        _Option(
            "--sim-episodes", "sim_episodes", g.GENERAL_SIM_EPISODES, "stages",
            "use --distill-sim-episodes (per round)",
        ),
        _Option("--teacher", "teacher", g.GENERAL_TEACHER, "stages", stage_i),
        _Option("--label-fraction", "label_fraction", g.GENERAL_LABEL_FRACTION, "stages", stage_i),
        _Option("--lr", "lr", None),
        _Option("--graphs-per-step", "graphs_per_step", None, "stages", stage_ii),
        _Option("--estimator", "estimator", None, "stages", stage_ii),
        _Option("--estimate", "estimate", g.GENERAL_ESTIMATE, "stages", fresh),
        _Option("--layout", "layout", g.GENERAL_LAYOUT, "stages", fresh),
        _Option("--paper-cost-share", "paper_cost_share", g.GENERAL_PAPER_COST_SHARE),
        _Option("--memory-share", "memory_share", g.GENERAL_MEMORY_SHARE),
        _Option("--sample-temperature", "sample_temperature", None),
        _Option("--hint-free", "hint_free", False, "stages", "search distillation trains with the hint"),
        _Option("--hints", "hints", None, "stages", "search distillation trains with the clustering's hint"),
        _Option("--seed", "seed", 0),
        _Option("--init", "init", None),
        _Option("--distill", "distill", None),
        _Option("--distill-budget", "distill_budget", dl.DISTILL_BUDGET, "distill"),
        _Option(
            "--distill-imitation-episodes", "distill_imitation_episodes",
            dl.DISTILL_IMITATION_EPISODES, "distill",
        ),
        _Option(
            "--distill-sim-episodes", "distill_sim_episodes", dl.DISTILL_SIM_EPISODES, "distill"
        ),
        _Option("--name", "name", g.GENERAL_CHECKPOINT),
        _Option(
            "--validate", "validate", False, "stages",
            "score the result afterwards with --score CKPT", recorded=False,
        ),
        _Option("--jobs", "jobs", 1, "distill", recorded=False),
        _Option("--no-distill-proposals", "distill_proposals", True, "distill", recorded=False),
        _Option("--runner", "runner", "local", "distill", recorded=False),
        _Option("--ray-address", "ray_address", None, "distill", recorded=False),
        _Option("--keep-going", "keep_going", False, "distill", recorded=False),
    )  # fmt: skip


def _refuse_other_mode(args: argparse.Namespace) -> None:
    """Refuse an option of the other mode than the one that runs: the options of ``--distill``
    without it (Stages I + II ran with them ignored: ``--runner ray`` trained on this machine,
    ``--jobs 8`` on one process), and those of plain Stages I + II with it (``--distill 2
    --imitation-episodes 100`` ran the distillation's own Stage I episodes)."""
    other = "stages" if args.distill else "distill"
    for o in _options():
        if o.mode != other or getattr(args, o.key) == o.default:
            continue
        if args.distill:
            raise ConfigError(
                f"{o.flag} is an option of Stages I + II without --distill; with --distill "
                f"ROUNDS, {o.instead}"
            )
        raise ConfigError(
            f"{o.flag} is an option of search distillation; expected it with --distill ROUNDS "
            "(Stages I + II run on this machine, in one process)"
        )


def hints_arg(text: str) -> str:
    """An argparse ``type=``: distinct names of :data:`~doppler_lab.policies.features.HINTS`,
    comma-separated (returned as given, without spaces)."""
    from ..house.errors import ConfigError
    from ..policies.features import hint_names

    try:
        names = hint_names(text, "--hints")
    except ConfigError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    if not names:
        raise argparse.ArgumentTypeError(
            f"{text!r}: expected names, comma-separated (for no hint, leave --hints out)"
        )
    if "+" in text:
        raise argparse.ArgumentTypeError(
            f"{text!r}: expected names, comma-separated (a '+' groups hints in the doppler "
            "placer's hints= option; training takes each task's hint from one list)"
        )
    return ",".join(names)


def share_arg(text: str) -> float:
    """An argparse ``type=``: a share in [0, 1]."""
    value = number_arg(minimum=0)(text)
    if value > 1:
        raise argparse.ArgumentTypeError(f"must be a share in [0, 1], got {text!r}")
    return value


def command_line(args: argparse.Namespace) -> str:
    """The command that trains this run again (recorded with the shipped checkpoint)."""
    parts = ["doppler-lab train-general"]
    for o in _options():
        value = getattr(args, o.key)
        if o.recorded and value is not None and value != o.default:
            parts.append(o.flag if value is True else f"{o.flag} {value}")
    if getattr(args, "distill", None) and not args.distill_proposals:
        parts.append("--no-distill-proposals")
    return " ".join(parts)


def run(args: argparse.Namespace) -> int:
    from ..train import general_policy as g

    # what --ship needs is checked before hours of training, not after
    g.check_general_name(args.name)
    _refuse_other_mode(args)
    if args.hint_free and args.hints:
        raise ConfigError(
            f"--hint-free and --hints {args.hints}: --hint-free is --hints clustering; give one"
        )
    if args.ship is not None:
        from ..house.userfiles import output_folder

        output_folder(args.ship, "--ship")

    if args.score:
        from ..policies.pretrained import resolve_checkpoint

        scores = {
            c: g.validation_score(resolve_checkpoint(c), progress=show_progress(args))
            for c in args.score
        }
        if args.json:
            print_json(scores)
        else:
            for c, sc in scores.items():
                print(
                    f"{c}: geometric mean of policy / CP {sc['ratio_cp']:.4f} over "
                    f"{sc['tasks']} validation tasks"
                )
        return 0
    from ..house.runfolder import run_folder

    with run_folder(args.out, NAME, args.force):
        return _train(args)


def _train(args: argparse.Namespace) -> int:
    from ..train import general_policy as g

    if args.distill:
        return _distill(args)

    init = None
    if args.init is not None:  # '' is an error, not "no warm start"
        from ..policies.pretrained import resolve_checkpoint

        init = resolve_checkpoint(args.init)
    changes = {
        k: v
        for k, v in (
            ("lr", args.lr),
            ("graphs_per_step", args.graphs_per_step),
            ("estimator", args.estimator),
        )
        if v is not None
    }
    recipe = g.GeneralRecipe(
        tasks=args.tasks,
        imitation_episodes=args.imitation_episodes,
        sim_episodes=args.sim_episodes,
        anchor_episodes=args.anchor_episodes,
        seed=args.seed,
        estimate=args.estimate,
        layout=args.layout,
        anchor_source=args.anchor_source,
        anchor_budget=args.anchor_budget,
        teacher=args.teacher,
        label_fraction=args.label_fraction,
        paper_cost_share=args.paper_cost_share,
        memory_share=args.memory_share,
        sim_changes=changes,
        hint_free=args.hint_free,
        hints=tuple(args.hints.split(",")) if args.hints else (),
    )
    results = g.train_general(args.out, recipe, init, show_progress(args), args.force)
    stages = recipe.stages()
    record = g.run_record(
        results, stages, args.tasks, args.seed, args.init, args.paper_cost_share, args.memory_share
    )
    if args.sample_temperature is not None:
        from ..policies.checkpoint import set_sample_temperature

        set_sample_temperature(results[-1].checkpoint, args.sample_temperature)
        record["sample_temperature"] = float(args.sample_temperature)
    if args.hint_free:
        record["hint_free"] = True
    if args.hints:
        record["hints"] = args.hints.split(",")
    if args.validate:
        score = g.validation_score(results[-1].checkpoint, progress=show_progress(args))
        record["validation_ratio_cp"] = round(score["ratio_cp"], 4)
    summary = {"out": str(Path(args.out)), "checkpoint": str(results[-1].checkpoint), **record}
    lines = [
        f"general policy: {record['tasks']} tasks, {args.imitation_episodes} + "
        f"{args.anchor_episodes} + {args.sim_episodes} episodes (I, anchor, II), "
        f"{record['train_s']:.0f} s of updates",
        f"checkpoint: {summary['checkpoint']}",
    ]
    if args.validate:
        lines.append(f"validation: geometric mean of policy / CP {record['validation_ratio_cp']}")
    return _ship_and_show(args, summary, record, results[-1].checkpoint, lines)


def _ship_and_show(
    args: argparse.Namespace, summary: dict, record: dict, checkpoint: Any, lines: list[str]
) -> int:
    """Ship ``checkpoint`` with ``record`` when ``--ship`` says so, then print the summary
    (``--json``) or ``lines``."""
    from types import SimpleNamespace

    from ..train import general_policy as g

    if args.ship:
        done = [SimpleNamespace(checkpoint=checkpoint)]
        summary["shipped"] = str(
            g.ship_general(done, args.ship, command_line(args), record, args.name)
        )
        lines.append(f"shipped: {summary['shipped']}")
    if args.json:
        print_json(summary)
    else:
        for line in lines:
            print(line)
    return 0


def _distill(args: argparse.Namespace) -> int:
    """``--distill ROUNDS``: search distillation (:mod:`doppler_lab.train.distill`)."""
    from ..house.runners import runner_from_args
    from ..policies.pretrained import resolve_checkpoint
    from ..train import distill as dl
    from ..train import general_policy as g

    recipe = dl.DistillRecipe(
        rounds=args.distill,
        tasks=args.tasks,
        budget=args.distill_budget,
        imitation_episodes=args.distill_imitation_episodes,
        sim_episodes=args.distill_sim_episodes,
        seed=args.seed,
        proposals=args.distill_proposals,
        memory_share=args.memory_share,
        paper_cost_share=args.paper_cost_share,
        **({"sim_lr": args.lr} if args.lr is not None else {}),
    )
    init = resolve_checkpoint(args.init if args.init is not None else g.GENERAL_CHECKPOINT)
    record = dl.distill(
        args.out, recipe, init, runner=runner_from_args(args), jobs=args.jobs,
        progress=show_progress(args),
    )  # fmt: skip
    summary = {"out": str(Path(args.out)), **record}
    if args.sample_temperature is not None:
        from ..policies.checkpoint import set_sample_temperature

        set_sample_temperature(record["checkpoint"], args.sample_temperature)
        summary["sample_temperature"] = float(args.sample_temperature)
    ship = {k: v for k, v in summary.items() if k not in ("out", "checkpoint")}
    ship["init"] = args.init or g.GENERAL_CHECKPOINT
    lines = [
        f"search distillation: {recipe.rounds} round(s) on {record['tasks']} tasks, "
        f"budget {recipe.budget}, {recipe.imitation_episodes} + {recipe.sim_episodes} "
        "episodes (I, II) per round",
        *dl.describe_rounds(record),
        f"checkpoint: {record['checkpoint']}",
    ]
    return _ship_and_show(args, summary, ship, record["checkpoint"], lines)
