"""``bench general``'s settings and tasks: :class:`GeneralBenchConfig` (and the quick one),
the held-out tasks of a run, the run cache's keys, and the helpers every part's table shares."""

from __future__ import annotations

import functools
import hashlib
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from ...hardware.cluster import Cluster
from ...house.errors import ConfigError
from ...house.jsonutil import write_json
from ...ir.graph import DataflowGraph
from ...policies.pretrained import resolve_checkpoint
from ...search.adapter import AdaptConfig
from ...train.general_policy import GENERAL_CHECKPOINT, Task, held_out_tasks
from ...train.train_config import TrainConfig, preset
from ...workloads.specs import parse_graph_spec
from .yardstick import best_known

#: the run cache (relative to the working folder; ``_quick`` appended for ``--quick``)
BENCH_GENERAL_RUNS = "runs/bench_general"
#: groups of the held-out set (see :func:`~doppler_lab.train.general_policy.held_out_tasks`)
GROUPS: tuple[str, ...] = ("generator", "cluster", "paper", "model")
#: ... and those asked for by name (``--groups memory``: the memory-bound held-out tasks)
ALL_GROUPS: tuple[str, ...] = (*GROUPS, "memory")
#: relative difference below which two makespans tie (budget table, fine-tune vs scratch)
TIE_RTOL = 1e-6
#: fine-tuned "matches" scratch when at most this much worse
MATCH_RTOL = 0.01


@dataclass(frozen=True)
class GeneralBenchConfig:
    """Settings of ``bench general``.

    Attributes:
        checkpoint: the general policy (a path or a shipped name).
        groups: held-out groups (:data:`GROUPS`, or ``memory`` too: :data:`ALL_GROUPS`).
        tasks: explicit tasks instead of the held-out set (tests, quick runs).
        task_filter: keep only the tasks whose name contains one of these (empty: all).
        seeds: seeds of the sampled rollouts and of the search placers per task (why 10:
            reports/notes/bench_notes.md).
        seed: the first seed (of every seed range: CP's ties, rollouts, search, training).
        cp_seeds: tie seeds of the Critical Path teacher.
        samples: sampled rollouts besides the greedy one (protocol: 16).
        partitions: METIS partition proposals the ``doppler`` placer judges with its rollouts
            (zero-shot and budget; its default, 4); the policy's rollouts alone are reported
            beside it. Fine-tuning and scratch are compared by the rollouts alone.
        clustering: the ``doppler`` placer (zero-shot and budget) and the adapter also judge
            the ``clustering`` placer's placement (their default); reported alone beside it.
        budget: simulator calls of the budget table.
        curve: simulator-call budgets of the budget curve.
        train_seeds: seeds of the scratch runs and of the network's long fine-tuning.
        finetune_seeds: seeds of the short fine-tuning runs (cheap; why 8: reports/notes/bench_notes.md).
        finetune_episodes: episodes (simulator calls) of fine-tuning the general policy.
        scratch_episodes: episodes of per-graph training from fresh weights (Stage I + II).
        scratch_imitation_episodes: Stage I's share of ``scratch_episodes``.
        finetune_eval_every: updates between greedy evaluations when fine-tuning (curves).
        scratch_eval_every: updates between greedy evaluations from scratch (curves).
        finetune_method: ``adapter`` (default): a per-instance bias table on PLC's logits
            trained with the network frozen (:func:`doppler_lab.search.adapter.adapt`; its
            proposals are the ``doppler`` placer's, ``samples`` and ``partitions``, within the
            episodes); ``network``: Stage II of the network's weights (``finetune_train``).
        finetune_adapter: :class:`~doppler_lab.search.adapter.AdaptConfig` changes (not
            ``episodes``, ``samples``, ``partitions``: the bench's own).
        finetune_train: Stage II changes for fine-tuning (learning rate, warm-up, ...).
        finetune_long: also fine-tune the general policy's weights for as many episodes as
            scratch trains (Stage II, the sim preset with ``long_train``'s changes): the two
            starting points at equal episodes (run ``finetune-long``, rows "fine-tuned,
            network"), beside the short fine-tuning the targets ask about.
        long_train: Stage II changes of the ``finetune-long`` runs.
        policy: policy-config changes of the scratch policies (on the general architecture).
        skip_training: leave the fine-tuning part out.
        runs_dir: the run cache.
    """

    checkpoint: str = GENERAL_CHECKPOINT
    groups: tuple[str, ...] = GROUPS
    tasks: tuple[Task, ...] = ()
    task_filter: tuple[str, ...] = ()
    seeds: int = 10
    seed: int = 0
    cp_seeds: int = 5
    samples: int = 16
    partitions: int = 4
    clustering: bool = True
    budget: int = 2000
    curve: tuple[int, ...] = (100, 250, 500, 1000, 2000)
    train_seeds: int = 2
    finetune_seeds: int = 8
    finetune_episodes: int = 200
    scratch_episodes: int = 4000
    scratch_imitation_episodes: int = 400
    finetune_eval_every: int = 1
    scratch_eval_every: int = 5
    finetune_method: str = "adapter"
    finetune_adapter: dict[str, Any] = field(default_factory=dict)
    # the sim preset's rate (3e-2) with fresh Adam states jolted the policy in 200 episodes
    # (8-GPU block: 310 zero-shot -> 321; 254 with these)
    finetune_train: dict[str, Any] = field(
        default_factory=lambda: {"lr": 1e-2, "lr_warmup": 3, "tempered_loss": True}
    )
    finetune_long: bool = True
    long_train: dict[str, Any] = field(default_factory=dict)
    policy: dict[str, Any] = field(default_factory=dict)
    skip_training: bool = False
    runs_dir: str = BENCH_GENERAL_RUNS

    def __post_init__(self) -> None:
        bad = [g for g in self.groups if g not in ALL_GROUPS]
        if bad or not self.groups:
            raise ConfigError(
                f"bench general: group {bad[0] if bad else '(none)'!r}; expected some of "
                f"{ALL_GROUPS}"
            )
        for name in (
            "seeds", "cp_seeds", "budget", "train_seeds", "finetune_seeds", "finetune_episodes"
        ):  # fmt: skip
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise ConfigError(f"bench general: {name} = {v!r}, expected an integer >= 1")
        for name in ("seed", "samples", "partitions", "finetune_eval_every", "scratch_eval_every"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < 0:
                raise ConfigError(f"bench general: {name} = {v!r}, expected an integer >= 0")
        if not self.curve or any(
            not isinstance(n, int) or isinstance(n, bool) or n < 1 for n in self.curve
        ):
            raise ConfigError(
                f"bench general: curve = {self.curve!r}, expected budgets that are integers >= 1"
            )
        if not isinstance(self.clustering, bool):
            raise ConfigError(
                f"bench general: clustering = {self.clustering!r}, expected true or false"
            )
        _check_finetune_train(self.finetune_train)
        _check_finetune_train(self.long_train)
        if not isinstance(self.finetune_long, bool):
            raise ConfigError(
                f"bench general: finetune_long = {self.finetune_long!r}, expected true or false"
            )
        if self.finetune_method not in FINETUNE_METHODS:
            raise ConfigError(
                f"bench general: finetune_method = {self.finetune_method!r}, expected one of "
                f"{FINETUNE_METHODS}"
            )
        acfg = self.adapt_config()  # its errors name the bad field
        need = acfg.proposal_calls()  # on any graph the clustering fits
        if self.finetune_method == "adapter" and self.finetune_episodes < need:
            raise ConfigError(
                f"bench general: finetune_episodes = {self.finetune_episodes} do not cover the "
                f"adapter's proposals ({acfg.proposal_set().describe()}); expected at least {need}"
            )
        if not 0 <= self.scratch_imitation_episodes < self.scratch_episodes:
            raise ConfigError(
                f"bench general: scratch_imitation_episodes {self.scratch_imitation_episodes} "
                f"must lie in [0, scratch_episodes={self.scratch_episodes})"
            )

    def adapt_config(self) -> Any:
        """The adapter's settings of a fine-tuning run."""

        fixed = {"episodes", "samples", "partitions", "clustering"}
        bad = sorted(fixed & set(self.finetune_adapter))
        if bad:
            raise ConfigError(
                f"bench general: finetune_adapter sets {bad[0]!r}, which the bench sets itself "
                "(--finetune-episodes, --samples, --partitions, clustering); expected another "
                "adapter field"
            )
        known = set(AdaptConfig.setting_names())
        unknown = sorted(set(self.finetune_adapter) - known)
        if unknown:
            raise ConfigError(
                f"bench general: finetune_adapter field {unknown[0]!r}, expected one of "
                f"{sorted(known - fixed)}"
            )
        return AdaptConfig.from_dict(
            {
                **self.finetune_adapter,
                "episodes": self.finetune_episodes,
                "samples": self.samples,
                "partitions": self.partitions,
                "clustering": self.clustering,
            }
        )

    @property
    def seed_range(self) -> range:
        """The seeds of the rollouts and the search placers."""
        return range(self.seed, self.seed + self.seeds)

    @property
    def budgets(self) -> tuple[int, ...]:
        """The budgets run: the curve's and the table's."""
        return tuple(sorted({*self.curve, self.budget}))


#: how fine-tuning trains (:attr:`GeneralBenchConfig.finetune_method`)
FINETUNE_METHODS: tuple[str, ...] = ("adapter", "network")
#: Stage II fields the bench sets itself for each fine-tuning run
FINETUNE_FIXED: tuple[str, ...] = ("stage", "episodes", "semantics", "seed", "eval_every")


def _check_finetune_train(changes: Mapping[str, Any]) -> None:
    """Fine-tuning's Stage II changes name :class:`~doppler_lab.train.train_config.TrainConfig`
    fields the bench leaves to the user, with values that field takes."""

    if not isinstance(changes, Mapping):
        raise ConfigError(
            f"bench general: finetune_train = {changes!r}, expected a mapping of Stage II fields"
        )
    known = set(TrainConfig.__dataclass_fields__)
    for key in changes:
        if key in FINETUNE_FIXED:
            raise ConfigError(
                f"bench general: fine-tuning setting {key!r} is set by the bench (episodes: "
                "--finetune-episodes); expected another Stage II field"
            )
        if key not in known:
            raise ConfigError(
                f"bench general: fine-tuning setting {key!r} is not a Stage II field; expected "
                f"one of {sorted(known - set(FINETUNE_FIXED))}"
            )
    try:
        preset("sim", **changes)
    except TypeError as exc:  # a value of the wrong kind for the dataclass itself
        raise ConfigError(f"bench general: fine-tuning settings {dict(changes)}: {exc}") from None


def quick_config() -> GeneralBenchConfig:
    """A smoke run: two tiny generated tasks (4 and 3 devices), tiny budgets and training."""
    return GeneralBenchConfig(
        tasks=(
            Task("chainmm:matrices=3,scale=0.01", "p100x4", "wc", "generator"),
            Task("ffnn:layers=2,scale=0.01", "uniform:3", "wc", "cluster"),
        ),
        seeds=1,
        cp_seeds=2,
        train_seeds=1,
        finetune_seeds=1,
        samples=2,
        budget=20,
        curve=(10, 20),
        finetune_episodes=16,
        scratch_episodes=24,
        scratch_imitation_episodes=8,
        finetune_eval_every=1,
        scratch_eval_every=1,
        policy={"hidden": 16, "mp_steps": 1},
    )


def parse_budgets(text: str) -> tuple[int, ...]:
    """``"100,250,500"`` as budgets (integers >= 1)."""
    parts = [p.strip() for p in str(text).split(",") if p.strip()]
    if not parts or not all(p.isdigit() and int(p) >= 1 for p in parts):
        raise ConfigError(f"--curve {text!r}: expected budgets like 100,250,500 (integers >= 1)")
    return tuple(int(p) for p in parts)


def make_config(
    quick: bool = False, config: GeneralBenchConfig | None = None, **changes: Any
) -> GeneralBenchConfig:
    """``config`` (default: the full or the quick configuration) with ``changes``: config fields,
    ``curve`` may be a string ``"100,250"``, ``groups`` ``"paper,cluster"``, ``tasks`` task-name
    parts (the filter, also as a comma-separated string), ``finetune_set`` Stage II changes
    merged into ``finetune_train`` (``--finetune-set KEY=VALUE``); None values are left out."""
    base = config or (quick_config() if quick else GeneralBenchConfig())
    changes = dict(changes)
    sets = changes.pop("finetune_set", None)
    out = _config_changes(changes)
    if sets:
        method = out.get("finetune_method", base.finetune_method)
        name = "finetune_adapter" if method == "adapter" else "finetune_train"
        out[name] = {**out.get(name, getattr(base, name)), **sets}
    return replace(base, **out)


def _config_changes(changes: Mapping[str, Any]) -> dict[str, Any]:
    """CLI-style values as config fields (``curve`` and ``groups`` as strings, ``tasks`` as
    the name filter); unknown names are named."""
    out: dict[str, Any] = {}
    known = set(GeneralBenchConfig.__dataclass_fields__)
    for k, v in changes.items():
        if v is None:
            continue
        if k == "curve" and isinstance(v, str):
            v = parse_budgets(v)
        elif k == "groups" and isinstance(v, str):
            v = tuple(g.strip() for g in v.split(",") if g.strip())
        elif k == "tasks" and isinstance(v, str):
            k, v = "task_filter", tuple(p.strip() for p in v.split(",") if p.strip())
        elif k == "tasks" and v and all(isinstance(x, str) for x in v):
            k, v = "task_filter", tuple(v)
        elif k not in known:
            raise ConfigError(
                f"bench general: unknown option {k!r}; expected one of {sorted(known)}"
            )
        out[k] = tuple(v) if isinstance(v, list) else v
    return out


# -- tasks and the run cache ---------------------------------------------------------------
def bench_tasks(cfg: GeneralBenchConfig) -> list[Task]:
    """The tasks of the run: ``cfg.tasks`` or the held-out set, filtered by ``task_filter``."""
    tasks = list(cfg.tasks) if cfg.tasks else held_out_tasks(cfg.groups)
    if cfg.task_filter:
        tasks = [t for t in tasks if any(f in t.name for f in cfg.task_filter)]
        if not tasks:
            raise ConfigError(
                f"bench general: no task matches {list(cfg.task_filter)}; expected part of a "
                "held-out task's name (doppler_lab.train.general_policy.held_out_tasks)"
            )
    return tasks


@functools.lru_cache(maxsize=8)
def built_task(task: Task) -> tuple[DataflowGraph, Cluster]:
    return task.build()  # an imported model takes seconds: build it once per process


def checkpoint_digest(checkpoint: str | Path) -> str:
    """The checkpoint's path and a digest of its bytes (a retrained policy keys anew)."""

    path = resolve_checkpoint(checkpoint, "doppler")
    return f"{path.name}:{hashlib.sha256(path.read_bytes()).hexdigest()[:16]}"


def slug(text: str) -> str:
    keep = [ch if ch.isalnum() or ch in "._-" else "_" for ch in text]
    return "".join(keep).strip("_")[:120]


def yardstick_name(task: Task) -> str:
    """The YARDSTICK name of a paper task (``paper:NAME``), else the spec."""

    spec = parse_graph_spec(task.graph)
    return spec.target if spec.kind == "paper" else task.graph


def cached_case(path: Path, compute) -> dict[str, Any]:
    if path.exists():
        return json.loads(path.read_text())
    out = compute()
    write_json(path, out)
    return out


# -- shared by the tables --------------------------------------------------------------------
def gmean(x: Sequence[float]) -> float:
    a = np.asarray(x, dtype=np.float64)
    return float(np.exp(np.log(a).mean())) if a.size else math.nan


def vs_known(task_graph: str, makespan: float) -> float | None:
    known = best_known(task_graph)
    return 1.0 - makespan / known if known else None
