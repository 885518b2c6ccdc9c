"""Search distillation (expert iteration) for the general policy: the budget search improves on
the policy, the policy imitates what the search found, RL refines it, and the search starts
again from the new policy (``doppler-lab train-general --distill ROUNDS``).

One round, from the policy ``P`` reached so far (the ``init`` checkpoint in round 0):

1. **search**: for each task of the pool the ``doppler`` placer's budget search
   (:func:`~doppler_lab.search.budget.policy_search`, ``budget`` simulator calls) from ``P``'s
   rollouts (and, with ``proposals``, the clustering and METIS partitions as further starts);
   the placement kept is the best of that search and the task's teacher of the round before
   (a teacher never gets worse), settled onto ``P``'s greedy rollout
   (:func:`~doppler_lab.train.general_policy.settle_anchor`: it differs from ``P``'s own
   choices only where that shortens the makespan). Each task writes ``search/tNNN.npz``; the
   tasks go to a :class:`~doppler_lab.house.runners.Runner` (local processes, or Ray);
2. **imitation**: Stage I (:class:`~doppler_lab.train.loop.Trainer`, the ``imitation`` preset
   with DAgger mixing) whose PLC labels come from the teacher placements: a
   :class:`PlacementLabeller` per task on the Stage I label path
   (:attr:`~doppler_lab.policies.rollout.RolloutOptions.plc_labeller`, the path of the
   ``cp-rollout`` and ``cluster`` teachers). Under full teacher forcing the episode reproduces
   the teacher placement exactly (:func:`replay_labels`);
3. **RL**: Stage II (the ``sim`` preset with the general policy's settings) from there.

Every step resumes: a task's search file, each Trainer's own checkpoints, and ``round.json``
once a round is done; a run killed anywhere and started again with the same arguments
finishes with the checkpoint an uninterrupted run makes.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from ..house.atomic import atomic_copy, atomic_write, atomic_writer
from ..house.errors import ConfigError
from ..house.runners import LocalRunner, Run, Runner, make_runner
from .general_policy import Task, sample_tasks, settle_anchor, task_costs

#: the search's simulator calls per task and round. Measured with these defaults (6 rounds, 32
#: tasks, a quarter memory-bound, from ``doppler/general``; ``bench general-alone``, 10 seeds):
#: the policy alone 12.9% worse than ``doppler/general`` on the held-out set (95% CI +7.7,
#: +20.3), 4.0% after one round, Stage I of round 1 alone level with it; Stage II on the small
#: pool is what hurt, and with it cut to 256 episodes at lr 2e-4 repeated imitation ran the
#: pool's greedy rollouts to 2.6 times their start in three rounds (README, "Search
#: distillation")
DISTILL_BUDGET = 400
#: Stage I and II episodes per round
DISTILL_IMITATION_EPISODES = 512
DISTILL_SIM_EPISODES = 1024
#: the rounds' Stage I learning rate (PLC); SEL barely moves (:data:`DISTILL_SEL_LR`): the
#: search's placements label devices, not an order, and Stage I's SEL labels are CP's
DISTILL_IMITATION_LR = 1e-3
DISTILL_SEL_LR = 1e-6
#: the rounds' Stage II learning rate (the shipped policy's fine-tuning rate)
DISTILL_SIM_LR = 2e-3
#: the file a finished round writes, and the final checkpoint's name in the run folder
ROUND_RECORD = "round.json"
DISTILLED = "distilled.pt"


@dataclass(frozen=True)
class DistillRecipe:
    """A distillation run's settings (``train-general --distill``'s flags).

    Attributes:
        rounds: search -> imitation -> RL rounds.
        tasks: training tasks (:func:`~doppler_lab.train.general_policy.sample_tasks`).
        budget: the search's simulator calls per task and round.
        imitation_episodes, sim_episodes: Stage I and II episodes per round.
        seed: seed of the pool, the searches and the stages.
        proposals: the search also starts from the clustering and 4 METIS partitions (the
            ``doppler`` placer's proposals); otherwise from the policy's rollouts alone.
        memory_share, paper_cost_share: see :func:`~doppler_lab.train.general_policy.sample_task`.
        imitation_lr, sim_lr: the stages' learning rates.
    """

    rounds: int = 3
    tasks: int = 32
    budget: int = DISTILL_BUDGET
    imitation_episodes: int = DISTILL_IMITATION_EPISODES
    sim_episodes: int = DISTILL_SIM_EPISODES
    seed: int = 0
    proposals: bool = True
    memory_share: float = 0.25
    paper_cost_share: float = 0.0
    imitation_lr: float = DISTILL_IMITATION_LR
    sim_lr: float = DISTILL_SIM_LR

    def __post_init__(self) -> None:
        for name in ("rounds", "tasks", "budget"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise ConfigError(f"distillation: {name} = {v!r}, expected an integer >= 1")
        for name in ("imitation_episodes", "sim_episodes"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < 0:
                raise ConfigError(f"distillation: {name} = {v!r}, expected an integer >= 0")
        if not self.imitation_episodes and not self.sim_episodes:
            raise ConfigError("distillation: a round needs imitation or sim episodes")

    def stages(self, round_index: int) -> list[Any]:
        """Round ``round_index``'s Stage I and II configurations (seeded by round)."""
        from .general_policy import general_stages

        stages = general_stages(
            self.imitation_episodes,
            self.sim_episodes,
            self.seed * 1000 + round_index,
            teacher="cp",
            label_fraction=1.0,
            lr=self.sim_lr,
        )
        return [
            replace(s, lr=self.imitation_lr, lr_sel=DISTILL_SEL_LR) if s.stage == "imitation" else s
            for s in stages
        ]


class PlacementLabeller:
    """PLC labels that lead an episode to a given placement (a Stage I ``plc_labeller``).

    The label of node ``v`` is the device holding most of the already-placed nodes that the
    teacher put with ``v`` (its device mates), else the teacher's device of ``v``. Under
    teacher forcing every mate sits on its teacher device, so the label is exactly the
    teacher's and the episode ends on the teacher placement; where the policy's own choices
    renamed a group's device (devices of one kind are interchangeable), the label follows it.

    Args:
        device: the teacher placement's device per node (``(N,)``).
    """

    def __init__(self, device: np.ndarray):
        self.device = np.asarray(device, dtype=np.int64)
        order = np.argsort(self.device, kind="stable")
        counts = np.bincount(self.device, minlength=int(self.device.max()) + 1)
        self.ptr = np.concatenate([[0], np.cumsum(counts)])
        self.members = order

    def __call__(self, state, v: int, est: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """The label devices of node ``v`` in ``state`` (``est``, ``rng`` unused)."""
        from ..placers.placer_base import ties

        d = int(self.device[v])
        mates = self.members[self.ptr[d] : self.ptr[d + 1]]
        mates = mates[state.device[mates] >= 0]
        if mates.size == 0:
            return np.array([d])
        share = np.bincount(state.device[mates], minlength=state.num_devices)
        return ties(share.astype(np.float64), "max", 0.0)


def replay_labels(
    policy: Any, graph: Any, cluster: Any, device: np.ndarray, semantics: str = "wc", seed: int = 0
) -> tuple[Any, Any]:
    """Replay the placement ``device`` through ``policy``'s episode under full teacher forcing
    with a :class:`PlacementLabeller`: returns the episode record (its ``plc_teacher`` holds the
    state-action labels) and the placement it ends on (the teacher's, node for node)."""
    from ..policies.actions import ActionMode
    from ..policies.context import GraphContext
    from ..policies.rollout import RolloutOptions, run_episodes

    ctx = GraphContext.for_policy(graph, cluster, policy.config, semantics)
    enc = policy.encode(ctx)
    forced = ActionMode(True, 0.0, 1.0)
    options = RolloutOptions(record_teacher=True, plc_labeller=PlacementLabeller(device))
    rng = np.random.default_rng(seed)
    episodes = run_episodes(policy, ctx, enc, 1, rng, forced, forced, options)
    return episodes, episodes.placements[0]


def search_task(
    task: dict[str, Any],
    policy: str,
    budget: int,
    seed: int,
    proposals: bool,
    previous: str | None,
    out_file: str,
) -> dict[str, Any]:
    """One task's teacher of a round (see the module docstring, step 1), written to
    ``out_file`` (``.npz``: ``device``, ``cost``, ``search_cost``, ``rollout_cost``,
    ``greedy_cost``); read back when it exists. A module-level function: a Runner's run."""
    out = Path(out_file)
    if out.exists():
        with np.load(out) as z:
            return {k: z[k] for k in z.files}
    from ..placers import place
    from ..timing.sim import Simulator

    t = Task(**task)
    graph, cluster = t.build()
    sim = Simulator(graph, cluster, t.semantics)  # type: ignore[arg-type]
    heuristics = {"partitions": 4, "clustering": True} if proposals else {}
    plain = {"partitions": 0, "clustering": False, "fewer_devices": False}
    opts = {**plain, **heuristics, "checkpoint": policy, "semantics": t.semantics}
    found = place("doppler", graph, cluster, seed=seed, budget=budget, **opts)
    greedy = place("doppler", graph, cluster, seed=0, **{**opts, **plain, "samples": 0})
    dev = found.device.astype(np.int64)
    search_cost = float(sim.makespan(dev))
    if previous is not None:
        with np.load(previous) as z:
            if float(z["cost"]) < search_cost:
                dev = z["device"].astype(np.int64)
    settled = settle_anchor(sim, dev, greedy.device.astype(np.int64), graph.compute_nodes)
    result = {
        "device": settled,
        "cost": float(sim.makespan(settled)),
        "search_cost": search_cost,
        "rollout_cost": float(found.meta.get("rollout_cost", np.nan)),
        "greedy_cost": float(sim.makespan(greedy.device)),
    }
    with atomic_writer(out, "wb") as fh:
        np.savez(fh, **result)
    return result


def _round_dir(out: Path, r: int) -> Path:
    return out / f"round-{r + 1}"


def distill(
    out_dir: str | Path,
    recipe: DistillRecipe,
    init: str | Path,
    tasks: Sequence[Task] | None = None,
    runner: str | Runner = "local",
    jobs: int = 1,
    progress: bool = True,
) -> dict[str, Any]:
    """Run (or resume) ``recipe``'s rounds from the checkpoint ``init`` in ``out_dir``; returns
    the run's record (``checkpoint``: ``out_dir/distilled.pt``; ``rounds``: each round's
    teacher and policy costs).

    ``tasks``: an explicit pool in place of :func:`sample_tasks` (tests, small runs).
    ``runner``/``jobs``: where the tasks' searches run (:func:`~doppler_lab.house.runners.make_runner`).
    """
    import torch

    from ..policies.checkpoint import read_checkpoint, set_sample_temperature
    from .loop import Trainer
    from .pipeline import stage_dir

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    pool = (
        list(tasks)
        if tasks is not None
        else sample_tasks(recipe.tasks, recipe.seed, recipe.paper_cost_share, recipe.memory_share)
    )
    atomic_write(out / "tasks.json", json.dumps([t.to_dict() for t in pool], indent=1))
    torch.set_num_threads(1)
    built = [t.build() for t in pool]
    graphs, clusters = [g for g, _ in built], [c for _, c in built]
    sems = [t.semantics for t in pool]
    costs = task_costs(pool, built, recipe.seed)
    # spawned, not forked: the searches of round 2 on run beside a process that trained
    run = LocalRunner(jobs, "spawn") if runner == "local" else make_runner(runner, jobs=jobs)
    temperature = read_checkpoint(init)["meta"].get("sample_temperature")
    policy = str(init)
    rounds: list[dict[str, Any]] = []
    for r in range(recipe.rounds):
        rdir = _round_dir(out, r)
        record_file = rdir / ROUND_RECORD
        if record_file.exists():
            rec = json.loads(record_file.read_text())
            rounds.append(rec)
            policy = str(out / rec["checkpoint"])
            continue
        sdir = rdir / "search"
        sdir.mkdir(parents=True, exist_ok=True)
        prev = _round_dir(out, r - 1) / "search" if r else None
        runs = [
            Run(
                search_task,
                (
                    t.to_dict(),
                    policy,
                    recipe.budget,
                    recipe.seed * 1_000_003 + r * 10_007 + i,
                    recipe.proposals,
                    str(prev / f"t{i:03d}.npz") if prev is not None else None,
                    str(sdir / f"t{i:03d}.npz"),
                ),
                label=f"round {r + 1} search {t.name}",
            )
            for i, t in enumerate(pool)
        ]
        found = run.run(runs, desc=f"distill round {r + 1}: search", progress=progress).values
        labellers = [PlacementLabeller(f["device"]) for f in found]
        previous: str = policy
        for i, cfg in enumerate(recipe.stages(r)):
            trainer = Trainer(
                cfg,
                graphs,
                clusters,
                None,
                stage_dir(rdir, i, cfg),
                init=previous,
                cost_fns=costs,
                progress=progress,
                semantics=sems,
            )
            if cfg.stage == "imitation":
                trainer.labellers = list(labellers)  # the search's placements as Stage I labels
            previous = str(trainer.run().checkpoint)
        ckpt = rdir / "policy.pt"
        atomic_copy(previous, ckpt)
        if temperature is not None:  # the trainer keeps no sampling temperature: the init's
            set_sample_temperature(ckpt, temperature)
        rec = {
            "round": r + 1,
            "checkpoint": str(ckpt.relative_to(out)),
            "teacher_cost": [float(f["cost"]) for f in found],
            "search_cost": [float(f["search_cost"]) for f in found],
            "rollout_cost": [float(f["rollout_cost"]) for f in found],
            "greedy_cost": [float(f["greedy_cost"]) for f in found],
        }
        atomic_write(record_file, json.dumps(rec, indent=1))
        rounds.append(rec)
        policy = str(ckpt)
    final = out / DISTILLED
    atomic_copy(policy, final)
    record = {
        "checkpoint": str(final),
        "init": str(init),
        "recipe": asdict(recipe),
        "tasks": len(pool),
        "rounds": [_round_summary(rec) for rec in rounds],
    }
    atomic_write(out / "distill.json", json.dumps(record, indent=1))
    return record


def _round_summary(rec: dict[str, Any]) -> dict[str, Any]:
    """A round's geometric means: the policy's best rollout (greedy + samples, the search's
    start) and the teacher kept, over the policy's greedy rollout."""

    def gm(a: str, b: str) -> float:
        x = np.asarray(rec[a], dtype=np.float64) / np.asarray(rec[b], dtype=np.float64)
        return float(np.exp(np.mean(np.log(x))))

    return {
        "round": rec["round"],
        "checkpoint": rec["checkpoint"],
        "rollouts_vs_greedy": gm("rollout_cost", "greedy_cost"),
        "teacher_vs_greedy": gm("teacher_cost", "greedy_cost"),
        "teacher_vs_rollouts": gm("teacher_cost", "rollout_cost"),
    }


def describe_rounds(record: dict[str, Any]) -> list[str]:
    """One line per round of a :func:`distill` record."""
    return [
        f"round {s['round']}: teacher / policy greedy {s['teacher_vs_greedy']:.4f}, "
        f"policy best of rollouts / greedy {s['rollouts_vs_greedy']:.4f}"
        for s in record["rounds"]
    ]


__all__ = [
    "DistillRecipe",
    "PlacementLabeller",
    "describe_rounds",
    "distill",
    "replay_labels",
    "search_task",
]
