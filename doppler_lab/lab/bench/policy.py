"""``doppler-lab bench policy``: speed of the learned policies and quality of trained ones.

Three parts, each written into ``reports/bench/policy.{json,md}``:

- **speed** (one CPU core, ``torch.set_num_threads(1)``): milliseconds per inference episode
  (one encoder pass + a greedy rollout) and per training episode (encoder, sampled rollout,
  log-probability recompute, backward), on the paper's 229-node graph for each architecture
  (ours, the released architecture with once-per-pass edge weights, the released NNConv form,
  Placeto, GDP), and microseconds per node from 100 to 10,000 nodes;
- **quality**: each learned method trained per graph within ``episodes`` episodes (Stage I +
  II for DOPPLER, PLACETO and GDP alike), evaluated by the experiment protocol (best of the
  greedy rollout and 16 sampled rollouts of the final policy), over seeds; beside them CP and
  the search placers given as many simulator calls as the learned method used;
- **ablations**: dual vs SEL-only vs PLC-only, and Stages I+II vs II alone vs I alone.

Every (graph, method, seed) trains in its own resumable run directory under ``runs_dir``
(default ``runs/bench_policy``, beside the reports, never committed), named by the
configuration and the code version (:func:`doppler_lab.house.codeversion.versioned_key`), and writes
``result.json`` when evaluated; a rerun of the same code skips finished cases and resumes
unfinished ones, so the full benchmark can be stopped and restarted, while changed code trains
anew unless :mod:`~doppler_lab.lab.bench.adopt` shows, by training one check seed per
(graph, method) again, that the new code reproduces the old runs exactly (notebook 07 reuses
these runs). Trained policies are also
copied to ``<runs_dir>/checkpoints/<placer>/<graph>.pt`` where ``bench quality`` finds them.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch

from ...hardware.cluster import make_cluster
from ...house import codeversion, runstore
from ...house.atomic import atomic_copy
from ...house.codeversion import versioned_key
from ...house.errors import ConfigError
from ...house.jsonutil import write_json
from ...house.paths import (
    BENCH_POLICY_RUNS,
    PAPER_GRAPHS_HINT,
    REPO_ROOT,
    bench_checkpoints_dir,
    paper_graphs_dir,
)
from ...house.runfolder import run_folder
from ...house.runners import Run, Runner, make_runner
from ...placers import place
from ...policies.checkpoint import make_policy
from ...policies.policy_config import POLICY_PRESETS
from ...policies.speed import episode_times
from ...search.learned import best_of_rollouts
from ...timing.sim import Simulator
from ...train.pipeline import run_pipeline
from ...train.train_config import check_learner, preset
from ...workloads.specs import cluster_from_spec, graph_from_spec, parse_graph_spec
from ..experiments.common import interval_table, paired_table
from . import adopt
from ._report import write_report
from .quality import PAPER_GRAPHS, WORKLOADS
from .yardstick import YARDSTICK, best_known

SPEED_GRAPH = "full_transformer_layer_261nodes"
#: how a sweep's local processes start: ``spawn``, as a sweep's process has often run torch
#: already (an adoption check compares weights, a notebook trained before): a process forked
#: from it dies ("fork() called from a process already using GNU OpenMP") or hangs
SWEEP_START = "spawn"


@dataclass(frozen=True)
class Method:
    """A trained method of the tables.

    Attributes:
        kind: the policy kind.
        stages: ``I+II`` (imitation then simulator RL), ``II`` (RL only) or ``I`` (imitation).
        policy: policy-config changes (``preset`` names a :data:`POLICY_PRESETS` entry).
        train: Stage II config changes.
        released_training: use the released training presets (``released-imitation`` and
            ``released-sim``) instead of ours.
    """

    kind: str
    stages: str = "I+II"
    policy: dict[str, Any] = field(default_factory=dict)
    train: dict[str, Any] = field(default_factory=dict)
    released_training: bool = False


METHODS: dict[str, Method] = {
    "doppler": Method("dual"),
    "placeto": Method("placeto"),
    "gdp": Method("gdp"),
    "sel-only": Method("sel-only"),
    "plc-only": Method("plc-only"),
    "doppler-II-only": Method("dual", "II"),
    "doppler-I-only": Method("dual", "I"),
    # design ablations: what each speed/quality choice costs
    "doppler-shared-encoder": Method("dual", policy={"shared_encoder": True}),
    "doppler-1-basis": Method("dual", policy={"num_bases": 1}),
    "doppler-released-features": Method(
        "dual", policy={"layout": "doppler5", "estimate": "additive"}
    ),
    "doppler-released-arch": Method("dual", policy={"preset": "released"}),
    "doppler-released-training": Method("dual", released_training=True),
    "doppler-no-sil": Method("dual", train={"sil_coef": 0.0}),
    "doppler-lr1e-3": Method("dual", train={"lr": 1e-3}),
    # the placed-set normalisation before the fix (z-score: its 1 / std gradient froze Stage II)
    "doppler-zscore": Method("dual", policy={"placed_norm": "zscore"}),
    # the episode state's estimate before wc had its own (no links, a transfer per edge);
    # a row of the workloads table (on the paper graphs est is already the default)
    "doppler-est-timing": Method("dual", policy={"estimate": "est"}),
}
DESIGN_ABLATIONS: tuple[str, ...] = tuple(
    m
    for m in METHODS
    if m.startswith("doppler-")
    and m not in ("doppler-II-only", "doppler-I-only", "doppler-est-timing")
)
PLACER_OF_KIND = {"dual": "doppler", "sel-only": "doppler", "plc-only": "doppler"}


@dataclass(frozen=True)
class PolicyBenchConfig:
    """Settings of ``bench policy``.

    Attributes:
        paper_graphs: paper graph names (4 devices, paper semantics).
        paper_dir: their folder (default: the search of
            :func:`doppler_lab.house.paths.paper_graphs_dir`).
        workloads: generated workloads (p100x4, ``workload_semantics``).
        workload_semantics: simulator semantics of the workloads.
        workload_methods: methods of the workloads table (``doppler`` and its estimate ablation).
        methods: methods of the quality table (keys of :data:`METHODS`).
        ablations: methods of the ablation table.
        ablation_graphs: graphs of the ablation table.
        design_ablations: methods of the design-ablation table (architecture, features,
            training settings: what each choice costs in quality).
        design_graphs: graphs of the design-ablation table.
        design_seeds: seeds of the design-ablation table.
        seeds: training seeds per (graph, method).
        episodes: episode budget per graph (Stage I + Stage II).
        imitation_episodes: Stage I's share of the budget.
        samples: sampled rollouts besides the greedy one (protocol: 16).
        search_placers: non-learned search placers run with the learned method's simulator calls.
        speed_sizes: graph sizes (nodes) of the per-node speed table.
        speed_repeats: repetitions per speed measurement (the median is reported).
        jobs: training processes in parallel.
        policy: policy-config overrides for every run.
        train: training-config overrides for every Stage II run.
        method_train: further Stage II overrides per method (the baselines' learning rate;
            how it was chosen: reports/notes/bench_notes.md).
        method_seeds: fewer seeds for a method (Placeto's episodes cost more: reports/notes/bench_notes.md).
        ablation_seeds: seeds of the ablation table's methods.
        workload_seeds: seeds on the generated workloads.
        runs_dir: where the runs are cached (``<runs_dir>_quick`` for ``--quick``).
        learner: the training preset of Stage II (a ``sim`` preset of
            :data:`~doppler_lab.train.train_config.TRAIN_PRESETS`; the released-training
            method keeps its own).
    """

    paper_graphs: tuple[str, ...] = PAPER_GRAPHS
    paper_dir: str | None = None
    workloads: tuple[str, ...] = WORKLOADS
    workload_semantics: str = "wc"
    workload_methods: tuple[str, ...] = ("doppler", "doppler-est-timing")
    methods: tuple[str, ...] = (
        "doppler",
        "placeto",
        "gdp",
    )
    ablations: tuple[str, ...] = ("sel-only", "plc-only", "doppler-II-only", "doppler-I-only")
    ablation_graphs: tuple[str, ...] = (
        "transformer_block_215nodes",
        "full_transformer_layer_261nodes",
    )
    design_ablations: tuple[str, ...] = DESIGN_ABLATIONS
    design_graphs: tuple[str, ...] = ("transformer_block_215nodes", "ffnn_192nodes")
    design_seeds: int = 1
    seeds: int = 3
    episodes: int = 4000
    imitation_episodes: int = 400
    samples: int = 16
    search_placers: tuple[str, ...] = ("local-search", "enumerative")
    speed_sizes: tuple[int, ...] = (100, 1000, 10000)
    speed_repeats: int = 5
    jobs: int = 2
    policy: dict[str, Any] = field(default_factory=dict)
    train: dict[str, Any] = field(default_factory=dict)
    method_train: dict[str, dict[str, Any]] = field(
        default_factory=lambda: {"placeto": {"lr": 3e-2}, "gdp": {"lr": 3e-3}}
    )
    method_seeds: dict[str, int] = field(default_factory=lambda: {"placeto": 1})
    ablation_seeds: int = 2
    workload_seeds: int = 2
    runs_dir: str = BENCH_POLICY_RUNS
    learner: str = "sim"

    def __post_init__(self) -> None:

        check_learner(self.learner, "bench policy")
        named = self.methods + self.workload_methods + self.ablations + self.design_ablations
        bad = [m for m in named if m not in METHODS]
        if bad:
            raise ConfigError(
                f"bench policy: unknown method {bad[0]!r}; expected one of {list(METHODS)}"
            )
        if not 0 <= self.imitation_episodes < self.episodes:
            raise ConfigError(
                f"bench policy: imitation_episodes {self.imitation_episodes} must lie in "
                f"[0, episodes={self.episodes})"
            )
        if self.seeds < 1 or self.jobs < 1:
            raise ConfigError("bench policy: seeds and jobs must be >= 1")
        if self.samples < 1:  # best_of_rollouts judges no candidate when the greedy one is alone
            raise ConfigError(
                f"bench policy: samples must be >= 1 (sampled rollouts judged beside the greedy "
                f"one, the evaluation protocol), got {self.samples}"
            )

    @classmethod
    def of_graphs(cls, graphs: Sequence[str], **settings: Any) -> PolicyBenchConfig:
        """The settings of :func:`ablation_rows` on ``graphs`` (graph specs,
        :mod:`doppler_lab.workloads.specs`: paper graph names, ``paper:NAME``, workload specs):
        the paper graphs and the workloads among them, no ablation table, one job, no search
        placers and no policy or training overrides unless ``settings`` say otherwise."""

        specs = [parse_graph_spec(g) for g in graphs]
        chosen: dict[str, Any] = {
            "paper_graphs": tuple(s.target for s in specs if s.kind == "paper"),
            "workloads": tuple(s.text for s in specs if s.kind != "paper"),
            "ablations": (),
            "jobs": 1,
            "search_placers": (),
            "policy": {},
            "train": {},
        }
        chosen.update(settings)
        for key in ("methods", "search_placers"):
            chosen[key] = tuple(chosen.get(key, getattr(cls, key, ())))
        return cls(**chosen)


def quick_config() -> PolicyBenchConfig:
    """A smoke run: one small paper graph, one workload, tiny budgets."""
    return PolicyBenchConfig(
        paper_graphs=("chain_mm_112nodes",),
        workloads=("chainmm:matrices=3,scale=0.01",),
        workload_methods=("doppler",),
        ablation_graphs=("chain_mm_112nodes",),
        design_ablations=("doppler-shared-encoder", "doppler-released-training"),
        design_graphs=("chain_mm_112nodes",),
        design_seeds=1,
        ablation_seeds=1,
        workload_seeds=1,
        seeds=1,
        episodes=64,
        imitation_episodes=16,
        samples=4,
        speed_sizes=(100, 1000),
        speed_repeats=2,
        jobs=1,
        policy={"hidden": 32, "mp_steps": 2, "placeto_hidden": 8},
    )


# -- cases --------------------------------------------------------------------------------
@dataclass(frozen=True)
class _Case:
    name: str
    group: str
    spec: str  # how a worker rebuilds the graph: a graph spec (a paper .txt file, a workload)
    cluster: str
    devices: int
    semantics: str


def _cases(cfg: PolicyBenchConfig) -> tuple[list[_Case], list[str]]:

    folder = paper_graphs_dir(cfg.paper_dir)
    cases, notes = [], []
    for name in cfg.paper_graphs:
        path = Path(folder) / f"{name}.txt" if folder else None
        if path is None or not path.exists():
            notes.append(f"paper graph {name} not found: {PAPER_GRAPHS_HINT}")
            continue
        devices = int(YARDSTICK.get(name, {}).get("devices", 4))  # 8 for the 8gpu_* graphs
        cases.append(_Case(name, "paper", str(path), "uniform", devices, "paper"))
    for spec in cfg.workloads:
        g = graph_from_spec(spec)
        cases.append(_Case(g.name, "workload", spec, "p100x4", 4, cfg.workload_semantics))
    return cases, notes


def _load(case: _Case):

    devices = case.devices if case.cluster == "uniform" else None
    return graph_from_spec(case.spec), cluster_from_spec(case.cluster, devices)


# -- one (graph, method, seed) --------------------------------------------------------------
def _stages(cfg: PolicyBenchConfig, method: str, semantics: str, seed: int) -> list:

    spec = METHODS[method]
    common = {"semantics": semantics, "seed": seed}
    over = {**common, **cfg.train, **cfg.method_train.get(method, {}), **spec.train}
    prefix = "released-" if spec.released_training else ""
    learner = "released-sim" if spec.released_training else cfg.learner
    n1 = cfg.imitation_episodes
    imit = preset(prefix + "imitation", episodes=max(n1, 1), **common)
    if spec.stages == "I+II":
        return [imit, preset(learner, **{**over, "episodes": cfg.episodes - n1})]
    if spec.stages == "II":
        return [preset(learner, **{**over, "episodes": cfg.episodes})]
    return [imit]


def _run_parts(cfg: PolicyBenchConfig, case: _Case, method: str, seed: int) -> tuple[Any, list]:
    """The policy config and the stage configs of one (graph, method, seed)."""
    spec = METHODS[method]
    changes = {**cfg.policy, **spec.policy}
    base = POLICY_PRESETS[changes.pop("preset", "default")]
    pcfg = base.replace(kind=spec.kind, **changes)
    return pcfg, _stages(cfg, method, case.semantics, seed)


def case_run_dir(
    cfg: PolicyBenchConfig,
    case: _Case,
    method: str,
    seed: int,
    root: Path,
    version: str | None = None,
) -> Path:
    """The run directory of one (graph, method, seed) under ``root``: keyed by everything that
    shapes the result (a changed configuration or changed code trains anew instead of reusing a
    stale result); ``version`` names the folder an older code version used."""
    pcfg, stages = _run_parts(cfg, case, method, seed)
    key = versioned_key(pcfg, [c.to_dict() for c in stages], cfg.samples, version=version)
    return Path(root) / case.name / method / f"seed{seed}-{key}"


def run_case(
    cfg: PolicyBenchConfig,
    case: _Case,
    method: str,
    seed: int,
    root: Path,
    adopt_older: bool = True,
) -> dict[str, Any]:
    """Train (or resume) and evaluate one (graph, method, seed); cached in ``result.json``.
    With ``adopt_older``, a finished run of an older code version is returned instead where the
    run's cell passed :func:`~doppler_lab.lab.bench.adopt.verify_adoptions`."""

    pcfg, stages = _run_parts(cfg, case, method, seed)
    run_dir = case_run_dir(cfg, case, method, seed, root)
    result_path = run_dir / "result.json"
    if result_path.exists():
        return json.loads(result_path.read_text())
    if adopt_older:
        # an older code's run of the same configuration, in a cell whose check seed this code
        # reproduced exactly (adopt.verify_adoptions ran the check before the sweep)
        adopted = adopted_result(cfg, case, method, seed, root)
        if adopted is not None:
            return adopted
    # one writer per run folder: a second process on the same run (two checks of one cell, two
    # sweeps sharing a cache) stops with one line naming the holder instead of writing beside it
    with run_folder(run_dir, "bench", mark=False):
        if result_path.exists():  # finished by another process while this one waited
            return json.loads(result_path.read_text())
        return _train_and_evaluate(cfg, case, method, seed, run_dir, pcfg, stages)


def _train_and_evaluate(
    cfg: PolicyBenchConfig,
    case: _Case,
    method: str,
    seed: int,
    run_dir: Path,
    pcfg: Any,
    stages: list,
) -> dict[str, Any]:
    """:func:`run_case`'s training and evaluation, in its locked run folder."""
    spec = METHODS[method]
    kind, kind_stages = spec.kind, spec.stages
    torch.set_num_threads(1)
    graph, cluster = _load(case)
    results = run_pipeline(stages, [graph], cluster, pcfg, run_dir, progress=False)
    # the trainers' own clocks: a run resumed after an interruption counts every session
    train_s = sum(float(r.summary.get("train_s", 0.0)) for r in results)
    policy = results[-1].policy
    res = best_of_rollouts(
        policy, graph, cluster, cfg.samples, np.random.default_rng(1000 + seed), case.semantics
    )
    episodes = sum(s.episodes for s in stages)
    sim_episodes = sum(s.episodes for s in stages if s.stage != "imitation")
    out = {
        "graph": case.name,
        "group": case.group,
        "method": method,
        "kind": kind,
        "stages": kind_stages,
        "seed": seed,
        "makespan": res.best_cost,
        "greedy": res.greedy_cost,
        "episodes": episodes,
        # every episode is simulated (Stage I for monitoring), plus the 1 + samples of the protocol
        "sim_calls": episodes + 1 + cfg.samples,
        "rl_episodes": sim_episodes,
        "train_s": train_s,
        "best_seen": min(r.summary["best_cost"][graph.name] for r in results),
        "checkpoint": str(results[-1].checkpoint),
        "code_version": codeversion.code_version(),
    }
    write_json(run_dir / "result.json", out)
    return out


def _say(notes: Sequence[str]) -> None:
    for line in notes:
        print(line, file=sys.stderr)


def adopted_result(
    cfg: PolicyBenchConfig, case: _Case, method: str, seed: int, root: Path
) -> dict[str, Any] | None:
    """An older code version's finished run of this (graph, method, seed) that the current code
    may return instead of training (:mod:`~doppler_lab.lab.bench.adopt`), or None."""
    return adopt.adopted(lambda v: case_run_dir(cfg, case, method, seed, root, v))


def adopted_sweep(
    tasks: Sequence[tuple[PolicyBenchConfig, _Case, str, int, Path]],
    runs: Sequence[Run],
    desc: str,
    runner: str | Runner = "local",
    jobs: int | None = 1,
    progress: bool = False,
    keep_going: bool = False,
) -> tuple[Any, list[str], float]:
    """The sweep of a bench's training ``runs`` over ``tasks`` (``(cfg, case, method, seed,
    root)``, one per run), after :func:`verify_adoptions` checked which older runs it may
    adopt: on ``runner`` with spawned processes (:data:`SWEEP_START`). A cache with a run
    store (:mod:`~doppler_lab.house.runstore`: ``runs/bench_policy``) first gets its stored
    runs back. Returns the finished sweep, the restore's and the checks' notes and the sweep's
    own wall seconds (the checks not counted)."""
    roots = sorted({Path(t[4]) for t in tasks}, key=str)
    notes = [line for root in roots if (line := runstore.restore_for(root))]
    notes += verify_adoptions(list(tasks), runner, jobs, progress, keep_going)
    t0 = time.perf_counter()
    sweep = make_runner(runner, jobs=jobs, start_method=SWEEP_START).run(
        list(runs), desc=desc, progress=progress, keep_going=keep_going
    )
    return sweep, notes, time.perf_counter() - t0


def verify_adoptions(
    tasks: Sequence[tuple[PolicyBenchConfig, _Case, str, int, Path]],
    runner: str | Runner = "local",
    jobs: int | None = 1,
    progress: bool = False,
    keep_going: bool = False,
) -> list[str]:
    """Check, cell by cell, that the current code reproduces the older code versions' runs
    that a sweep of ``tasks`` (``(cfg, case, method, seed, root)``) could adopt: one check seed
    per cell is trained anew (or compared as it is, when finished) and compared with its older
    run (:func:`~doppler_lab.lab.bench.adopt.differences`). Returns one note per verdict, for
    the report."""
    checks = adopt.checks_needed(
        (t, t[3], lambda v, t=t: case_run_dir(*t, version=v)) for t in tasks
    )
    if not checks:
        return []
    # one run per run folder: checks of several older versions of a cell on the same seed
    # compare with the same new run (run twice at once, they would write one folder together)
    to_run = list({case_run_dir(*c[0]): c for c in checks if c[4]}.values())
    sweep = make_runner(runner, jobs=jobs, start_method=SWEEP_START).run(
        [
            Run(
                run_case,
                (cfg, case, m, s, root),
                {"adopt_older": False},
                label=f"check {case.name}/{m}/seed{s}",
            )
            for (cfg, case, m, s, root), *_ in to_run
        ],
        desc="checks before adopting older runs",
        progress=progress,
        keep_going=keep_going,
    )
    notes = sweep.notes()
    for (cfg, case, m, s, root), _, version, old_dir, _ in checks:
        new_dir = case_run_dir(cfg, case, m, s, root)
        if (new_dir / "result.json").exists():
            notes.append(adopt.record(new_dir.parent, version, old_dir, new_dir, s))
    return notes


def case_runs(
    cfg: PolicyBenchConfig, tasks: Sequence[tuple[_Case, str, int]], root: Path
) -> list[Run]:
    """One :class:`~doppler_lab.house.runners.Run` of :func:`run_case` per (case, method, seed)."""
    return [
        Run(run_case, (cfg, case, m, s, root), label=f"{case.name}/{m}/seed{s}")
        for case, m, s in tasks
    ]


def training_runs(
    cfg: PolicyBenchConfig, methods: Sequence[str], seeds: Sequence[int], root: Path
) -> list[Run]:
    """The runs of ``methods`` x ``seeds`` on every graph of ``cfg`` (cached under ``root``)."""
    cases, _ = _cases(cfg)
    return case_runs(cfg, [(c, m, s) for c in cases for m in methods for s in seeds], root)


def _reference_rows(cfg: PolicyBenchConfig, case: _Case, budget: int) -> list[dict[str, Any]]:
    """CP over the seeds and the search placers with ``budget`` simulator calls."""

    graph, cluster = _load(case)
    sim = Simulator(graph, cluster, case.semantics)  # type: ignore[arg-type]
    rows = []
    for name in ("cp",) + tuple(cfg.search_placers):
        opts: dict[str, Any] = {}
        if name != "cp":
            opts = {"budget": int(budget), "semantics": case.semantics}
            if name == "enumerative":
                opts["passes"] = 10
        ms = [sim.makespan(place(name, graph, cluster, seed=s, **opts)) for s in range(cfg.seeds)]
        rows.append(
            {
                "graph": case.name,
                "method": name,
                "makespans": ms,
                "sim_calls": budget if name != "cp" else 0,
                "episodes": 0,
            }
        )
    return rows


# -- tables ------------------------------------------------------------------------------
def _row(
    case: _Case, method: str, ms: Sequence[float], lb: float, cp: float | None, **extra: Any
) -> dict[str, Any]:
    a = np.asarray(ms, dtype=np.float64)
    known = best_known(case.name)
    mean = float(a.mean())
    return {
        "graph": case.name,
        "method": method,
        "makespan": mean,
        "std": float(a.std()),
        "best": float(a.min()),
        "ratio_lb": mean / lb,
        "vs_best_known": 1.0 - mean / known if known else None,
        "vs_cp": (cp - mean) / cp if cp else None,
        **extra,
    }


def _lower_bound(case: _Case) -> float:

    g, cl = _load(case)
    return Simulator(g, cl, case.semantics).lower_bound()  # type: ignore[arg-type]


def quality_tables(
    cfg: PolicyBenchConfig,
    cases: list[_Case],
    results: list[dict[str, Any]],
    methods: Sequence[str],
) -> list[dict[str, Any]]:
    """Rows per (graph, method): learned methods, CP and equal-budget search."""
    rows: list[dict[str, Any]] = []
    for case in cases:
        mine = [r for r in results if r["graph"] == case.name and r["method"] in methods]
        if not mine:
            continue
        lb = _lower_bound(case)
        budget = int(max(r["sim_calls"] for r in mine))
        refs = _reference_rows(cfg, case, budget)
        cp = float(np.mean(refs[0]["makespans"]))
        for ref in refs:
            rows.append(
                _row(
                    case,
                    ref["method"],
                    ref["makespans"],
                    lb,
                    cp,
                    sim_calls=ref["sim_calls"],
                    episodes=0,
                )
            )
        for m in methods:
            rs = [r for r in mine if r["method"] == m]
            if not rs:
                continue
            rows.append(
                _row(
                    case,
                    m,
                    [r["makespan"] for r in rs],
                    lb,
                    cp,
                    greedy=float(np.mean([r["greedy"] for r in rs])),
                    episodes=rs[0]["episodes"],
                    sim_calls=rs[0]["sim_calls"],
                    train_s=float(np.mean([r["train_s"] for r in rs])),
                    seeds=len(rs),
                )
            )
    return rows


def seed_frame(rows: Sequence[dict[str, Any]], runs: Sequence[dict[str, Any]]) -> Any:
    """The per-seed results ``runs`` (of :func:`ablation_rows`) as a frame with each seed's
    ``vs_cp`` (how far below the mean CP makespan of its graph, a fraction) and
    ``vs_best_known`` (how far below the best known placement; None off the paper's graphs):
    the points behind each cell's mean and interval."""

    cp = {r["graph"]: r["makespan"] for r in rows if r["method"] == "cp"}
    frame = pd.DataFrame(list(runs))
    if frame.empty:
        return frame
    ref = frame.graph.map(cp)
    known = frame.graph.map(lambda g: best_known(g) or np.nan)
    return frame.assign(
        vs_cp=(ref - frame.makespan) / ref, vs_best_known=1.0 - frame.makespan / known
    )


# -- speed -------------------------------------------------------------------------------
def speed_rows(cfg: PolicyBenchConfig, paper_case: _Case | None) -> tuple[list, list]:
    """The architecture table (229-node graph) and the per-node scaling table."""

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        arch = []
        if paper_case is not None:
            graph, cluster = _load(paper_case)
            variants = [
                ("doppler (ours)", POLICY_PRESETS["default"]),
                (
                    "doppler (ours, shared encoder)",
                    POLICY_PRESETS["default"].replace(shared_encoder=True),
                ),
                ("doppler (released arch, edge weights once per pass)", POLICY_PRESETS["released"]),
                (
                    "doppler (released NNConv, edge net every step)",
                    POLICY_PRESETS["released-nnconv"],
                ),
                ("placeto", POLICY_PRESETS["default"].replace(kind="placeto")),
                ("gdp", POLICY_PRESETS["default"].replace(kind="gdp")),
            ]
            for label, pc in variants:
                pol = make_policy(
                    pc.replace(**{k: v for k, v in cfg.policy.items() if k in ("placeto_hidden",)}),
                    4,
                )
                reps = 1 if pc.edge_mode == "nnconv" or pc.kind == "placeto" else cfg.speed_repeats
                t = episode_times(
                    pol, graph, cluster, reps, batch=4 if pc.kind == "placeto" else 16
                )
                arch.append(
                    {
                        "policy": label,
                        "graph": paper_case.name,
                        "nodes": graph.compute_nodes.size,
                        "params": pol.num_parameters(),
                        **t,
                    }
                )
        scale = []
        pol = make_policy(POLICY_PRESETS["default"], 4)
        for n in cfg.speed_sizes:
            g = graph_from_spec(f"random_dag:num_nodes={n},width=16")
            t = episode_times(
                pol,
                g,
                make_cluster("uniform", 4),
                max(1, cfg.speed_repeats if n <= 1000 else 1),
                batch=4,
            )
            scale.append(
                {
                    "graph": f"random_dag {n}",
                    "nodes": n,
                    **t,
                    "inference_us_per_node": t["inference_ms"] * 1e3 / n,
                    "train_us_per_node": t["train_ms"] * 1e3 / n,
                }
            )
    finally:
        torch.set_num_threads(threads)
    return arch, scale


def ablation_rows(
    config: PolicyBenchConfig,
    out_dir: str | Path,
    runner: str | Runner = "local",
    keep_going: bool = False,
    progress: bool = False,
    jobs: int | None = 1,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Train and evaluate the config's ``methods`` (keys of :data:`METHODS`) on its paper
    graphs and workloads (:meth:`PolicyBenchConfig.of_graphs`) over its ``seeds``; cached per
    (graph, method, seed) under ``out_dir``.

    ``runner`` (``local``, ``ray``, ``auto`` or a :class:`~doppler_lab.house.runners.Runner`,
    with ``jobs`` local processes, None: one per core) runs the (graph, method, seed) trainings; with ``keep_going`` a failed one is left out (the others'
    rows remain), without it the first failure raises :class:`~doppler_lab.house.errors.RunError`.

    Returns:
        The table rows (mean over seeds, with CP and ``search_placers`` at the same simulator
        calls) and the per-seed results.
    """
    cfg, methods = config, config.methods
    cases, _ = _cases(cfg)
    root = Path(out_dir)
    tasks = [(c, m, s) for c in cases for m in methods for s in range(cfg.seeds)]
    sweep, checked, _ = adopted_sweep(
        [(cfg, *t, root) for t in tasks],
        case_runs(cfg, tasks, root),
        "training runs",
        runner,
        jobs,
        progress,
        keep_going,
    )
    _say(checked)
    results = sweep.done()
    return quality_tables(cfg, cases, results, methods), results


@dataclass(frozen=True)
class SeedCells:
    """Trained methods over seeds, cell by cell (what pages 03 and 07 show).

    Attributes:
        rows: mean per (graph, method) with CP beside (:func:`quality_tables`).
        runs: every (graph, method, seed) result.
        points: ``runs`` as a frame with each seed's ``vs_cp`` and ``vs_best_known``
            (:func:`seed_frame`).
        cells: per (graph, method): the means of ``vs_cp`` and ``vs_best_known`` over seeds,
            each with its 95% bootstrap interval (``*_low``, ``*_high``), and ``seeds``.
        paired: the reference method against each other one, paired by graph and seed
            (:func:`~doppler_lab.lab.experiments.paired_table`).
    """

    rows: list[dict[str, Any]]
    runs: list[dict[str, Any]]
    points: Any
    cells: Any
    paired: Any


def seed_cells(
    config: PolicyBenchConfig,
    out_dir: str | Path,
    reference: str = "doppler",
    runner: str | Runner = "local",
    jobs: int | None = 1,
    progress: bool = False,
    keep_going: bool = False,
) -> SeedCells:
    """:func:`ablation_rows` (cached per graph, method, seed, settings and code version under
    ``out_dir``) with each cell's mean, 95% interval and seeds, and ``reference`` against the
    config's other methods paired by graph and seed. Graphs that are missing give empty
    frames, not an error."""

    rows, runs = ablation_rows(config, out_dir, runner, keep_going, progress, jobs)
    points = seed_frame(rows, runs)
    order = list(config.methods)
    if points.empty:
        return SeedCells(rows, runs, points, pd.DataFrame(), pd.DataFrame())
    by = ["graph", "method"]
    cells = interval_table(points, by, "vs_cp", order=order)
    known = interval_table(points, by, "vs_best_known", order=order)
    cells = cells.merge(known.drop(columns="seeds"), on=by, how="left")
    paired = paired_table(points, reference, [m for m in order if m != reference])
    return SeedCells(rows, runs, points, cells, paired)


def bench_runs_dir() -> Path:
    """The benchmark's run cache at the project root (``runs/bench_policy``): notebooks that
    train the same (graph, method, seed) configurations reuse what ``bench policy`` trained."""
    return REPO_ROOT / BENCH_POLICY_RUNS


# -- the benchmark -----------------------------------------------------------------------
def run(
    out_dir: Path,
    quick: bool = False,
    config: PolicyBenchConfig | None = None,
    progress: bool = True,
    runner: str | Runner = "local",
    keep_going: bool = False,
) -> dict[str, Any]:
    """Run (or resume) the benchmark and write ``policy.json`` / ``policy.md``.

    The training runs go to ``runner``: ``local`` (``cfg.jobs`` processes), ``ray`` (one Ray
    task each) or a :class:`~doppler_lab.house.runners.Runner`; with ``keep_going`` a failed run is
    named in the report's notes and the tables are made of the others.
    """
    cfg = config or (quick_config() if quick else PolicyBenchConfig())
    out_dir = Path(out_dir)
    root = Path(cfg.runs_dir + ("_quick" if quick else ""))
    root.mkdir(parents=True, exist_ok=True)
    write_json(root / "bench_config.json", asdict(cfg))
    t0 = time.perf_counter()
    cases, notes = _cases(cfg)
    paper = [c for c in cases if c.group == "paper"]
    speed_case = next((c for c in paper if c.name == SPEED_GRAPH), paper[0] if paper else None)
    tasks = training_tasks(cfg, cases)
    # one bar over (graph, method, seed) runs; cached runs tick at once
    sweep, checked, _ = adopted_sweep(
        [(cfg, *t, root) for t in tasks],
        case_runs(cfg, tasks, root),
        "bench policy: training runs",
        runner,
        cfg.jobs,
        progress,
        keep_going,
    )
    notes += checked
    results = sweep.done()
    notes = notes + sweep.notes()
    _export_checkpoints(results, root)
    # speed last, after the training processes are gone
    arch, scale = cached_speed_rows(cfg, speed_case, root)
    quality = quality_tables(cfg, [c for c in cases if c.group == "paper"], results, cfg.methods)
    workloads = quality_tables(
        cfg, [c for c in cases if c.group == "workload"], results, cfg.workload_methods
    )
    ablation = quality_tables(
        cfg,
        [c for c in cases if c.name in cfg.ablation_graphs],
        results,
        ("doppler",) + tuple(cfg.ablations),
    )
    design = quality_tables(
        cfg,
        [c for c in cases if c.name in cfg.design_graphs],
        results,
        ("doppler",) + tuple(cfg.design_ablations),
    )
    summary = _summary(quality, ablation, arch, scale)
    summary["wall_s"] = time.perf_counter() - t0  # of this invocation (cached runs are free)
    summary["training_runs"] = len(results)
    summary["train_s_total"] = float(sum(r["train_s"] for r in results))
    cols = [
        "graph",
        "method",
        "makespan",
        "std",
        "best",
        "ratio_lb",
        "vs_best_known",
        "vs_cp",
        "greedy",
        "episodes",
        "sim_calls",
        "train_s",
    ]
    return write_report(
        out_dir,
        "policy",
        "Learned policies: speed and quality",
        {
            "Speed on one CPU core (229-node paper graph)": (arch, None),
            "Speed per node (random DAGs, width 16)": (scale, None),
            "Quality: paper graphs (4 devices, paper semantics)": (quality, cols),
            f"Quality: generated workloads (p100x4, {cfg.workload_semantics} semantics)": (
                workloads,
                cols,
            ),
            "Ablations: dual vs one learned half; training stages": (ablation, cols),
            "Design ablations (architecture, features, training)": (design, cols),
        },
        summary=summary,
        notes=notes + protocol_notes(cfg, root),
        command="doppler-lab bench policy" + (" --quick" if quick else ""),
    )


def training_tasks(cfg: PolicyBenchConfig, cases: list[_Case]) -> list[tuple[_Case, str, int]]:
    """The (case, method, seed) training runs of every table, each once: cheap and headline
    methods first, Placeto (the slowest) last."""
    tasks = []
    for case in cases:
        seeds = cfg.seeds if case.group == "paper" else cfg.workload_seeds
        methods = list(cfg.methods if case.group == "paper" else cfg.workload_methods)
        for m in methods:
            for s in range(min(seeds, cfg.method_seeds.get(m, seeds))):
                tasks.append((case, m, s))
        if case.name in cfg.ablation_graphs:
            for m in cfg.ablations:
                for s in range(cfg.ablation_seeds):
                    tasks.append((case, m, s))
        if case.name in cfg.design_graphs:
            for m in cfg.design_ablations:
                for s in range(cfg.design_seeds):
                    tasks.append((case, m, s))
    # cheap and headline cases first, Placeto (the slowest) last
    first = (
        tuple(m for m in cfg.methods if m != "placeto")
        + tuple(cfg.ablations)
        + tuple(cfg.design_ablations)
    )
    order = {m: i for i, m in enumerate(first + ("placeto",))}
    # a method in several tables (e.g. doppler in the quality and the design tables) trains once
    tasks = list({(t[0].name, t[1], t[2]): t for t in tasks}.values())
    tasks.sort(key=lambda t: (order.get(t[1], len(order)), t[0].group != "paper", t[2]))
    return tasks


def cached_speed_rows(
    cfg: PolicyBenchConfig, speed_case: _Case | None, root: Path
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """:func:`speed_rows`, cached in ``root/speed.json`` for this code version (delete it to
    remeasure; a file from other code, or from before versions, is remeasured)."""
    speed_path = root / "speed.json"
    cached = json.loads(speed_path.read_text()) if speed_path.exists() else None
    if isinstance(cached, dict) and cached.get("code_version") == codeversion.code_version():
        return cached["arch"], cached["scale"]
    arch, scale = speed_rows(cfg, speed_case)
    speed = {"code_version": codeversion.code_version(), "arch": arch, "scale": scale}
    write_json(speed_path, speed)
    return arch, scale


def protocol_notes(cfg: PolicyBenchConfig, root: Path) -> list[str]:
    """The report's notes on how each table was made."""
    return [
        f"Each learned method: Stage I ({cfg.imitation_episodes} episodes) + Stage II "
        f"({cfg.episodes - cfg.imitation_episodes}) per graph and seed ({cfg.seeds} seeds); "
        "II-only: all episodes in Stage II; I-only: Stage I alone.",
        "Design ablations: shared-encoder (one encoder for SEL and PLC), 1-basis (edge "
        "messages nearly independent of the edge), released-features (doppler5 layout, "
        "the released additive estimate), released-arch (width 128, 6 steps, doppler5, paper "
        "estimate), released-training (the released presets: one episode per update, "
        "epsilon-greedy around the argmax, lr 1e-3/1e-4, running-mean baseline), no-sil "
        "(plain REINFORCE), lr1e-3 (Stage II at a thirtieth of our rate), zscore (PLC's "
        "placed-set sums divided by their standard deviation over the devices, as before "
        "the fix: its gradient grows as 1 / std and froze Stage II on some graphs).",
        "Workloads: doppler's episode state (features, CP teacher) uses the estimate of "
        "the semantics (wc: link resources and one transfer per tensor and device); "
        "doppler-est-timing keeps est (no links, a transfer per edge), as before.",
        f"Protocol: the best of the final policy's greedy rollout and {cfg.samples} sampled "
        "rollouts, by the simulator; never the best placement seen during training.",
        "Search placers (local-search, enumerative) get the learned method's simulator calls "
        "(every training episode, Stage I included, plus the protocol's rollouts).",
        "vs_cp = (cp - makespan) / cp with cp the mean over the same seeds; vs_best_known = "
        "1 - makespan / best known; ratio_lb = makespan / lower bound.",
        f"Runs and checkpoints: {root}",
    ]


def _export_checkpoints(results: list[dict[str, Any]], root: Path) -> None:
    """Copy seed 0's policy of each (graph, method) to ``checkpoints/<placer>/<graph>.pt``."""
    for r in results:
        if r["seed"] != 0 or r["method"] not in ("doppler", "placeto", "gdp"):
            continue
        dest = bench_checkpoints_dir(root) / r["method"] / f"{r['graph']}.pt"
        if Path(r["checkpoint"]).exists():
            atomic_copy(r["checkpoint"], dest)


def _summary(quality, ablation, arch, scale) -> dict[str, Any]:
    out: dict[str, Any] = {}
    ours = next((a for a in arch if a["policy"] == "doppler (ours)"), None)
    if ours:
        out["inference_ms_229"] = round(ours["inference_ms"], 2)
        out["train_ms_229"] = round(ours["train_ms"], 2)
    for r in quality:
        if r["method"] == "doppler":
            out[f"{r['graph']}: doppler vs cp"] = (
                round(r["vs_cp"], 4) if r["vs_cp"] is not None else None
            )
    if scale:
        per = [s["inference_us_per_node"] for s in scale]
        out["inference_us_per_node (min..max)"] = f"{min(per):.1f}..{max(per):.1f}"
    return out


__all__ = [
    "METHODS",
    "PolicyBenchConfig",
    "ablation_rows",
    "case_runs",
    "quick_config",
    "training_runs",
    "run",
    "run_case",
]
