"""``doppler-lab bench general``: the general policy ``doppler/general`` on graphs and clusters
it never saw in training (:func:`doppler_lab.train.general_policy.held_out_tasks`).

Three parts, written into ``reports/bench/general.{json,md}``:

- **zero-shot**: per held-out task the Critical Path teacher (mean over ``cp_seeds`` tie seeds),
  HEFT, and the general policy's greedy rollout and the protocol's best of greedy + ``samples``
  sampled rollouts (mean over ``seeds``), with the milliseconds of the placer's ``place`` call
  on one core (``torch.set_num_threads(1)``; the encoder, the rollouts and the simulator calls
  that judge them, the placer built and warmed up before), the improvement over CP, the
  distance to HEFT and to YARDSTICK's best known (paper graphs);
- **budget**: the placer ``doppler --budget N`` (the general policy with ``N`` simulator calls)
  against ``local-search --budget N`` per task at ``budget`` (win/tie/loss counts), and the budget
  curve (makespan against simulator calls for both, per task and as a geometric mean of the ratio
  to CP), also written to ``general/budget_curve.json`` and ``general/budget_curve.html``;
- **fine-tuning**: on the paper graphs (4 and 8 devices) the general policy fine-tuned for
  ``finetune_episodes`` simulator calls (by default the per-instance adapter,
  :mod:`doppler_lab.search.adapter`: a node x device bias on PLC's logits trained with the network
  frozen; ``finetune_method="network"``: Stage II of the network's weights) against per-graph
  training from fresh weights (Stage I + II, ``scratch_episodes`` in all): the protocol's final
  makespans, the distance to best known, the training seconds, and the training curves
  (``general/training_curves.json``).

Every expensive case (a task's zero-shot rows, a task's budget runs per method, a training run)
writes ``result.json`` under ``runs_dir/<part>/<task>/<key>/`` (``runs/bench_general``; the key is
the configuration, the code version and, where it matters, the checkpoint's content digest) and is
skipped on a rerun; training runs resume in their folder. A target line per issue target says
whether it passed.

This module is the entry (the targets, :func:`evaluate`, :func:`run`, the report) and keeps
every name the bench had; each part lives in its own module: the settings, tasks and run cache
in :mod:`~doppler_lab.lab.bench.general_config`, the zero-shot part in
:mod:`~doppler_lab.lab.bench.zero_shot`, the budget table and curve in
:mod:`~doppler_lab.lab.bench.budget_curve`, fine-tuning against scratch in
:mod:`~doppler_lab.lab.bench.finetuning`.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ...house.atomic import atomic_writer
from ...house.jsonutil import write_json
from ...house.runners import Run, Runner, make_runner
from ...train.general_policy import Task
from ._report import write_report
from .budget_curve import (
    BUDGET_COLUMNS,
    BUDGET_METHODS,
    CURVE_COLUMNS,
    ILS_CLUSTERING_OPTIONS,
    ILS_HEFT_OPTIONS,
    budget_case,
    budget_figure,
    budget_rows,
    doppler_takes_budget,
    ils_comparison,
)
from .finetuning import (
    LONG_METHOD,
    TRAIN_COLUMNS,
    _training_setup,  # noqa: F401 - the tests' handle on a run's stages
    best_found,
    curve_records,
    finetune_note,
    long_comparison,
    training_case,
    training_rows,
)
from .general_config import (
    BENCH_GENERAL_RUNS,
    FINETUNE_FIXED,
    FINETUNE_METHODS,
    GROUPS,
    MATCH_RTOL,
    TIE_RTOL,
    GeneralBenchConfig,
    bench_tasks,
    checkpoint_digest,
    make_config,
    parse_budgets,
    quick_config,
)
from .zero_shot import ZERO_COLUMNS, zero_shot_case, zero_shot_rows

#: the issue's targets
TARGET_VS_CP = 0.15  # zero-shot geometric mean at least this far below CP
TARGET_MS = 100.0  # milliseconds per graph of about 250 nodes, one core
TARGET_BEST_KNOWN = 0.05  # fine-tuned within this of YARDSTICK's best known
#: compute-node counts that count as "a graph of about 250 nodes" for the speed target
SPEED_NODES = (200, 320)
#: the folder (beside the report) of the budget curve and the training curves
DATA_DIR = "general"


def target_rows(
    cfg: GeneralBenchConfig,
    zero: Sequence[Mapping[str, Any]],
    budget: Sequence[Mapping[str, Any]],
    training: Sequence[Mapping[str, Any]],
) -> list[dict[str, Any]]:
    """One line per target of the issue: the measured value, the threshold, passed or not
    (``None``: not measured in this run)."""
    tasks = [r for r in zero if r["task"] != "geometric mean"]
    out: list[dict[str, Any]] = []

    def line(target: str, value: Any, threshold: str, passed: bool | None) -> None:
        out.append({"target": target, "value": value, "threshold": threshold, "passed": passed})

    gm = zero[-1]["vs_cp"] if tasks else None
    line("zero-shot: geometric mean below CP", gm, f">= {TARGET_VS_CP:.0%}",
         None if gm is None else gm >= TARGET_VS_CP)  # fmt: skip
    worse = [r["task"] for r in tasks if r["general"] > r["heft"] * (1 + TIE_RTOL)]
    line("zero-shot: graphs worse than HEFT", ", ".join(worse) or 0, "none",
         None if not tasks else not worse)  # fmt: skip
    if cfg.partitions or cfg.clustering:  # the same two for the rollouts alone (no heuristics)
        gm = zero[-1]["policy_vs_cp"] if tasks else None
        line("zero-shot, the policy's rollouts alone: geometric mean below CP", gm,
             f">= {TARGET_VS_CP:.0%}", None if gm is None else gm >= TARGET_VS_CP)  # fmt: skip
        worse = [r["task"] for r in tasks if r["policy"] > r["heft"] * (1 + TIE_RTOL)]
        line("zero-shot, the policy's rollouts alone: graphs worse than HEFT",
             ", ".join(worse) or 0, "none", None if not tasks else not worse)  # fmt: skip
    lo, hi = SPEED_NODES
    around = [r["ms"] for r in tasks if lo <= r["nodes"] <= hi]
    slowest = max(around) if around else None
    line(f"zero-shot: ms per graph of {lo}-{hi} nodes (slowest, one core)", slowest,
         f"<= {TARGET_MS:g}", None if slowest is None else slowest <= TARGET_MS)  # fmt: skip
    res = [r["result"] for r in budget if r.get("result") in ("win", "tie", "loss")]
    losses = res.count("loss")
    line(f"budget {cfg.budget}: doppler no worse than local-search on every task",
         f"{losses} losses of {len(res)}" if res else None, "0 losses",
         None if not res else losses == 0)  # fmt: skip
    wins = res.count("win")
    line(f"budget {cfg.budget}: doppler better on most tasks",
         f"{wins} wins of {len(res)}" if res else None, "> half",
         None if not res else wins > len(res) / 2)  # fmt: skip
    by = {(r["task"], r["method"]): r for r in training}
    paper = [t for t, m in by if m == "fine-tuned" and by[(t, m)].get("best_known")]
    match = [
        by[(t, "fine-tuned")]["makespan"] <= by[(t, "scratch")]["makespan"] * (1 + MATCH_RTOL)
        for t in dict.fromkeys(t for t, m in by if m == "fine-tuned")
        if (t, "scratch") in by
    ]
    line(f"fine-tuned ({cfg.finetune_episodes}) matches scratch ({cfg.scratch_episodes})",
         f"{sum(match)} of {len(match)}" if match else None, f"all, within {MATCH_RTOL:.0%}",
         None if not match else all(match))  # fmt: skip
    far = [-by[(t, "fine-tuned")]["vs_best_known"] for t in paper]  # above best known
    worst = max(far) if far else None
    line("fine-tuned: paper graphs within 5% of best known (worst)", worst,
         f"<= {TARGET_BEST_KNOWN:.0%}", None if worst is None else worst <= TARGET_BEST_KNOWN)  # fmt: skip
    return out


@dataclass
class GeneralBenchResult:
    """What :func:`evaluate` returns (rows of the report's tables, and its notes)."""

    tasks: list[Task]
    zero_shot: list[dict[str, Any]]
    budget: list[dict[str, Any]]
    curve: list[dict[str, Any]]
    training: list[dict[str, Any]]
    curves: list[dict[str, Any]]
    targets: list[dict[str, Any]]
    notes: list[str]


def evaluate(
    cfg: GeneralBenchConfig,
    root: str | Path,
    progress: bool = False,
    runner: str | Runner = "local",
    keep_going: bool = False,
) -> GeneralBenchResult:
    """Run (or resume from ``root``) the three parts; see the module docstring."""
    tasks = bench_tasks(cfg)
    checkpoint_digest(cfg.checkpoint)  # a missing checkpoint: one error now, not one per case
    root = str(root)
    Path(root).mkdir(parents=True, exist_ok=True)
    run = make_runner(runner)
    notes: list[str] = []

    def sweep(runs: list[Run], desc: str) -> list[Any]:
        s = run.run(runs, desc=desc, progress=progress, keep_going=keep_going)
        notes.extend(s.notes())
        return s.done()

    zero = sweep(
        [Run(zero_shot_case, (cfg, t, root), label=f"zero-shot {t.name}") for t in tasks],
        "bench general: zero-shot",
    )
    if not doppler_takes_budget():
        notes.append(
            "the doppler placer takes no budget in this version: its budget column is empty"
        )
    budget = sweep(
        [
            Run(budget_case, (cfg, t, m, root), label=f"budget {m} {t.name}")
            for t in tasks
            for m in BUDGET_METHODS
        ],
        "bench general: budgets",
    )
    trained: list[dict[str, Any]] = []
    paper = [t for t in tasks if t.group == "paper"]
    if not cfg.skip_training:
        # the paper graphs; without them (quick runs, missing files) the first task stands in
        targets = paper or tasks[:1]
        if not paper:
            notes.append(f"no paper graph in the run: fine-tuning measured on {tasks[0].name}")
        trained = sweep(
            [
                Run(training_case, (cfg, t, mode, s, root), label=f"{mode} {t.name} seed {s}")
                for t in targets
                for mode in ("finetune", "finetune-long", "scratch")
                if mode != "finetune-long" or cfg.finetune_long
                for s in range(
                    cfg.seed,
                    cfg.seed + (cfg.finetune_seeds if mode == "finetune" else cfg.train_seeds),
                )
            ],
            "bench general: training",
        )
    zrows = zero_shot_rows(zero)
    btable, curve = budget_rows(budget, zero, cfg.budget)
    trows = training_rows(trained, zero)
    return GeneralBenchResult(
        tasks=tasks,
        zero_shot=zrows,
        budget=btable,
        curve=curve,
        training=trows,
        curves=curve_records(trained),
        targets=target_rows(cfg, zrows, btable, trows),
        notes=notes,
    )


def run(
    out_dir: Path,
    quick: bool = False,
    config: GeneralBenchConfig | None = None,
    progress: bool = True,
    runner: str | Runner = "local",
    keep_going: bool = False,
    **changes: Any,
) -> dict[str, Any]:
    """Run (or resume) the benchmark and write ``general.json`` / ``general.md``, the budget
    curve (``general/budget_curve.{json,html}``) and the training curves
    (``general/training_curves.json``) into ``out_dir``.

    ``changes``: :class:`GeneralBenchConfig` fields set on top of the default (or quick)
    configuration; ``curve`` may be a string ``"100,250"`` and ``groups`` ``"paper,cluster"``,
    ``tasks`` a sequence of task-name parts (the filter).
    """
    cfg = make_config(quick, config, **changes)
    out_dir = Path(out_dir)
    root = Path(cfg.runs_dir + ("_quick" if quick else ""))
    t0 = time.perf_counter()
    res = evaluate(cfg, root, progress=progress, runner=runner, keep_going=keep_going)
    write_json(
        root / "bench_config.json", {**asdict(cfg), "tasks": [t.to_dict() for t in res.tasks]}
    )
    write_curves(out_dir, cfg, res)
    summary = run_summary(cfg, res, time.perf_counter() - t0)
    quick_flag = " --quick" if quick else ""
    return write_report(
        out_dir,
        "general",
        "The general policy on held-out graphs and clusters",
        {
            "Targets": (res.targets, ["target", "value", "threshold", "passed"]),
            (
                f"Zero-shot: general policy (greedy + {cfg.samples} samples"
                + (" + clustering" if cfg.clustering else "")
                + f" + {cfg.partitions} partitions) vs CP and HEFT"
            ): (
                res.zero_shot,
                ZERO_COLUMNS,
            ),
            f"Budget {cfg.budget} simulator calls: doppler vs local-search": (
                res.budget,
                BUDGET_COLUMNS,
            ),
            "Budget curve (makespan against simulator calls)": (res.curve, CURVE_COLUMNS),
            (
                f"Fine-tuning ({cfg.finetune_episodes} episodes) vs training from scratch "
                f"({cfg.scratch_episodes} episodes)"
            ): (res.training, TRAIN_COLUMNS),
        },
        summary=summary,
        notes=res.notes + report_notes(cfg, root),
        command="doppler-lab bench general" + quick_flag,
    )


def write_curves(out_dir: Path, cfg: GeneralBenchConfig, res: GeneralBenchResult) -> None:
    """The budget curve (data and figure) and the training curves, in ``out_dir/general/``."""
    # beside the report, in a folder: reports/bench/*.json are benchmark records
    data = out_dir / DATA_DIR
    data.mkdir(parents=True, exist_ok=True)
    write_json(data / "budget_curve.json", {"budget": cfg.budget, "curve": res.curve})
    if res.curve:
        with atomic_writer(data / "budget_curve.html", "w") as fh:
            budget_figure(res.curve).write_html(fh, include_plotlyjs="cdn")
    write_json(data / "training_curves.json", {"curves": res.curves})


def run_summary(cfg: GeneralBenchConfig, res: GeneralBenchResult, wall_s: float) -> dict[str, Any]:
    """The report's summary: each target's verdict, what the policy adds to the search, the
    equal-episodes comparison; ``wall_s`` of this invocation (cached cases are free)."""
    summary: dict[str, Any] = {
        "checkpoint": cfg.checkpoint,
        "tasks": len(res.tasks),
        "wall_s": round(wall_s, 1),  # of this invocation (cached cases free)
    }
    for t in res.targets:
        mark = {True: "pass", False: "FAIL", None: "not measured"}[t["passed"]]
        summary[t["target"]] = f"{mark} ({_show(t['value'])}; target {t['threshold']})"
    for start, label in (("heft", "HEFT"), ("clustering", "the clustering")):
        policy_adds = ils_comparison(res.budget, start)
        if policy_adds:
            summary[
                f"budget {cfg.budget}: doppler vs the same search from {label} (ils-{start})"
            ] = policy_adds
    long = long_comparison(res.training)
    if long:
        summary[f"equal episodes: network fine-tuned ({cfg.scratch_episodes}) vs scratch"] = long
    return summary


def report_notes(cfg: GeneralBenchConfig, root: Path) -> list[str]:
    """The report's notes: what each table's columns mean and how they were made."""
    return [
        f"Checkpoint: {cfg.checkpoint} ({checkpoint_digest(cfg.checkpoint)}).",
        f"Tasks: the held-out set of doppler_lab.train.general_policy (groups {', '.join(cfg.groups)})"
        if not cfg.tasks
        else "Tasks: the quick set (tiny generated graphs).",
        f"cp: mean over {cfg.cp_seeds} tie seeds; general: the doppler placer, best of the "
        f"greedy rollout, {cfg.samples} sampled rollouts"
        + (", the clustering proposal (placer clustering)" if cfg.clustering else "")
        + f" and {cfg.partitions} METIS "
        f"partition proposals (placer partition; equal ones judged once), mean over "
        f"{cfg.seeds} seeds; of the samples, the last one or two are greedy rollouts on "
        "the first half of the devices and on 2 (the placer's fewer_devices, on clusters "
        "of more than 2 devices); policy: the best of the rollouts alone (the same "
        "rollouts); clustering: the clustering placer alone (deterministic: Sarkar's "
        "edge-zeroing clustering mapped onto the devices, no simulator call); partition: "
        "the best partition proposal alone; from_clustering / from_partition / "
        "from_fewer: seeds whose winner is the clustering / a partition / a rollout on "
        "fewer devices; "
        "greedy: the greedy rollout alone. Makespans by the simulator of the task's "
        "semantics, noise 0.",
        "ms: median wall milliseconds of the doppler placer's place() call on one torch "
        "thread (encoder, rollouts, the simulator calls judging them), the placer built and "
        "called once before (registry lookup, checkpoint load, compilation: once per "
        "process, not counted); greedy_ms: the same with samples=0. ms_per_250_nodes: ms "
        "scaled to 250 compute nodes.",
        "cp_rollout: the rollout over deterministic CP (placer cp-rollout, one run, "
        "cp_rollout_s seconds; a search of N x D simulator calls, for reference); "
        "vs_cp_rollout = 1 - makespan / cp_rollout. Every vs_X says how far below X the "
        "makespan is (> 0: better than X): vs_cp = (cp - makespan) / cp; vs_heft = 1 - "
        "makespan / heft; vs_best_known = 1 - makespan / best known (paper graphs); the geometric "
        "mean row holds ratios only (vs_cp = 1 - geometric mean of general / cp; no mean of "
        "raw makespans, whose scales differ by task).",
        f"Budget: each placer gets N simulator calls (--budget N), mean over {cfg.seeds} "
        f"seeds; result: doppler vs local-search (tie within {TIE_RTOL:g} relative). "
        "ils_heft: the same iterated local search as doppler's, without the policy (placer "
        "local-search with method=ils, start=heft): what the policy's proposals add; "
        "doppler_vs_ils_heft = (ils_heft - doppler) / ils_heft (> 0: the policy helps); "
        "ils_clustering and doppler_vs_ils_clustering: the same from the clustering "
        "placer's placement (start=clustering), which doppler also judges among its "
        "proposals; policy_alone: the doppler search from the policy's rollouts alone "
        "(doppler:proposals=none, no heuristic proposal among its starts). Curve: "
        f"{', '.join(map(str, cfg.budgets))} calls, geometric mean of makespan / cp over the "
        f"tasks; figure {DATA_DIR}/budget_curve.html, data {DATA_DIR}/budget_curve.json.",
        finetune_note(cfg) + "; scratch: Stage I "
        f"({cfg.scratch_imitation_episodes}) + Stage II "
        f"({cfg.scratch_episodes - cfg.scratch_imitation_episodes}) from fresh weights of "
        f"the general architecture; {cfg.train_seeds} seed(s); protocol: best of greedy + "
        f"{cfg.samples} samples of the final policy (no heuristic proposals; the zero-shot "
        "row: the general policy's rollouts alone). 'matches': fine-tuned at most "
        f"{MATCH_RTOL:.0%} worse than scratch. "
        + (
            f"'{LONG_METHOD}': Stage II of the general policy's weights for "
            f"{cfg.scratch_episodes} episodes, as many as scratch (sim preset"
            + (f", changes {cfg.long_train}" if cfg.long_train else "")
            + "), judged the same way; found: the best placement sampled on the way. "
            if cfg.finetune_long
            else ""
        )
        + "Training curves: general/training_curves.json."
        + (" Skipped (--skip-training)." if cfg.skip_training else ""),
        f"Runs: {root} (each case's result.json; a rerun skips finished cases).",
    ]


def _show(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    return "-" if v is None else str(v)


__all__ = [
    "BENCH_GENERAL_RUNS",
    "BUDGET_COLUMNS",
    "BUDGET_METHODS",
    "CURVE_COLUMNS",
    "DATA_DIR",
    "FINETUNE_FIXED",
    "FINETUNE_METHODS",
    "GROUPS",
    "GeneralBenchConfig",
    "GeneralBenchResult",
    "ILS_CLUSTERING_OPTIONS",
    "ILS_HEFT_OPTIONS",
    "LONG_METHOD",
    "MATCH_RTOL",
    "SPEED_NODES",
    "TARGET_BEST_KNOWN",
    "TARGET_MS",
    "TARGET_VS_CP",
    "TIE_RTOL",
    "TRAIN_COLUMNS",
    "ZERO_COLUMNS",
    "bench_tasks",
    "best_found",
    "budget_case",
    "budget_figure",
    "budget_rows",
    "checkpoint_digest",
    "curve_records",
    "doppler_takes_budget",
    "evaluate",
    "finetune_note",
    "ils_comparison",
    "long_comparison",
    "make_config",
    "parse_budgets",
    "quick_config",
    "run",
    "target_rows",
    "training_case",
    "training_rows",
    "zero_shot_case",
    "zero_shot_rows",
]
