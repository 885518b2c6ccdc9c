"""One DOPPLER policy for any graph and cluster: the task distribution it is trained on, the
held-out set it is judged on, and the resumable training run behind ``doppler/general``.

A *task* is a graph, a cluster and a simulator semantics. Training draws a fixed pool of tasks
from :func:`sample_tasks` (every generator with randomised parameters and scales, random DAGs,
2-8 devices on ``p100x4``, ``v100x8``, ``cpu`` and ``uniform``; ``paper`` and ``wc`` semantics) and runs
Stage I (imitation of the Critical Path teacher) then Stage II (REINFORCE in the simulator)
over it, updates cycling through the pool. The policy's episode state uses the ``wc`` estimate
model whatever the task's semantics (one policy, one feature meaning; ``estimate="task"`` gives
each task its semantics' model instead, measured no better).

:func:`validation_tasks` is a pool of the training distribution drawn with its own seed, for
choosing between runs (:func:`validation_score`; ``doppler-lab train-general --score CKPT``);
the shipped policy is the best of six seeds on it.

:func:`held_out_tasks` is disjoint from anything training can draw: generator settings outside
the training grids, clusters never trained on (``h100x8``, ``uniform`` with 6 devices), the
paper's released graphs and, when transformers is installed, imported models.

``doppler-lab train-general --out runs/general`` trains it (killed and restarted with the same
arguments it resumes from its last checkpoint, stage by stage); ``--ship data/checkpoints``
copies the result to ``<dest>/doppler/general.pt`` and records the command in ``index.json``.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..hardware.cluster import Cluster
from ..house.atomic import atomic_copy, atomic_write
from ..house.deps import require
from ..house.errors import ConfigError
from ..ir.graph import DataflowGraph
from ..policies.features import get_layout, hint_names, uses_clustering_device
from ..workloads.specs import (
    cluster_from_spec,
    graph_from_spec,
    parse_graph_spec,
)

#: the name the general checkpoint ships under (``--placer doppler`` without a checkpoint)
GENERAL_CHECKPOINT = "doppler/general"

#: generator parameters training samples from (every combination is a legal graph)
TRAIN_GRIDS: dict[str, dict[str, tuple[Any, ...]]] = {
    "chainmm": {"matrices": (4, 5, 6, 8), "blocks": (2, 3), "order": ("tree", "left")},
    "ffnn": {"layers": (2, 3, 4, 6), "blocks": (2, 4), "batch_blocks": (2, 4)},
    "llama_block": {"blocks": (2, 4), "batch_blocks": (1, 2), "kv_heads": (8, 32)},
    "llama_layer": {"blocks": (2, 4), "batch_blocks": (1, 2), "kv_heads": (8, 32)},
    "moe_layer": {"experts": (4, 8), "top_k": (1, 2), "batch_blocks": (2, 4)},
}
#: model scales (the generators' ``scale``) training samples from
TRAIN_SCALES: tuple[float, ...] = (0.5, 1.0, 2.0)
#: random DAGs: node counts, widths and communication ratios training samples from
TRAIN_RANDOM_DAG = {"num_nodes": (60, 300), "width": (4, 24), "comm_ratio": (0.2, 3.0)}
#: clusters training samples from for generated models (``cpu:N``: N CPU workers in a host)
TRAIN_CLUSTERS: tuple[str, ...] = (
    "p100x4",
    "v100x8",
    "p100x4",
    "v100x8",
    "cpu:2",
    "cpu:3",
    "cpu:5",
)
#: ... and for random DAGs, whose costs are explicit (``uniform:N``: N identical devices)
TRAIN_DAG_CLUSTERS: tuple[str, ...] = (
    "p100x4",
    "v100x8",
    "uniform:2",
    "uniform:3",
    "uniform:4",
    "uniform:5",
    "uniform:8",
)
TRAIN_SEMANTICS: tuple[str, ...] = ("paper", "wc")
#: paper-cost tasks (graph ``paper_costs:SPEC``, see :func:`paper_cost_graph`;
#: ``train-general --paper-cost-share F``): this share of the generator draws is given the
#: paper's cost convention, on ``uniform`` devices under ``paper`` semantics, the regime of the
#: paper's released graphs (transfers four times the compute), where keeping chains of tensors
#: on one device is what wins. Off for the shipped policy: measured and not adopted (see
#: :data:`GENERAL_LAYOUT`)
GENERAL_PAPER_COST_SHARE = 0.0
#: the clusters of paper-cost tasks (uniform:6 is held out)
PAPER_COST_CLUSTERS: tuple[str, ...] = (
    "uniform:2",
    "uniform:3",
    "uniform:4",
    "uniform:5",
    "uniform:8",
)
#: the training graphs' node limit (bigger draws are drawn again)
MAX_TRAIN_NODES = 360


@dataclass(frozen=True)
class Task:
    """A graph on a cluster under a semantics.

    Attributes:
        graph: a graph spec (:mod:`doppler_lab.workloads.specs`): a workload
            (``llama_block:blocks=2``), ``paper:NAME`` (a released paper graph), ``model:SPEC``
            (a model of the import zoo, ``model:hf-llama:layers=2``) or ``paper_costs:SPEC`` (a
            graph of these with the paper's cost convention, :func:`paper_cost_graph`).
        cluster: a cluster spec: a preset name, ``uniform:N`` or ``cpu:N``.
        semantics: ``paper`` or ``wc``.
        group: where it comes from in a held-out set (``generator``, ``cluster``, ``paper``,
            ``model``, ``memory``); empty for training tasks.
        memory: bytes every device may hold; 0: no cap (the cluster's devices are made
            unconstrained, so a task means the same on every machine: ``cpu:N`` workers would
            otherwise take their caps from this machine's memory).
    """

    graph: str
    cluster: str
    semantics: str
    group: str = ""
    memory: float = 0.0

    @property
    def name(self) -> str:
        cap = f", {self.memory / 1e9:.4g} GB per device" if self.memory else ""
        return f"{self.graph} @ {self.cluster} ({self.semantics}{cap})"

    def build(self) -> tuple[DataflowGraph, Cluster]:
        """The task's graph and cluster (:func:`~doppler_lab.workloads.specs.graph_from_spec`,
        :func:`~doppler_lab.workloads.specs.cluster_from_spec`), the cluster's caps
        :attr:`memory` (none when 0)."""
        cluster = cluster_from_spec(self.cluster).with_memory(self.memory or None)
        return graph_from_spec(self.graph), cluster

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        if not self.memory:
            del out["memory"]  # the tasks of before read the same
        return out


#: memory-bound training tasks (``train-general --memory-share F``): each device may hold this
#: many times the graph's tensors (all outputs and stored inputs) over the device count, a
#: cap that binds (the graph does not fit on one device) but leaves a placement that fits
MEMORY_FACTORS: tuple[float, ...] = (1.25, 1.5, 2.0)
#: the share of training tasks given a memory cap (:func:`sample_task`): 0 for the recorded
#: commands of before; ``doppler/general-memory`` (``doppler11``, the default where a cap can
#: bind) ran at 0.25 (six recipes and their figures: README, "The general policy", Memory)
GENERAL_MEMORY_SHARE = 0.0


def memory_task_cap(graph: DataflowGraph, num_devices: int, factor: float) -> float:
    """The cap of a memory-bound task: ``factor`` times the graph's tensor bytes over
    ``num_devices`` (0 for a graph without sizes)."""
    from ..timing.memory import tensor_bytes

    total = float(np.sum(tensor_bytes(graph)))
    return round(factor * total / num_devices) if total > 0 else 0.0


def _spec(name: str, params: dict[str, Any]) -> str:
    body = ",".join(f"{k}={v}" for k, v in params.items())
    return f"{name}:{body}" if body else name


def sample_task(
    rng: np.random.Generator, paper_cost_share: float = 0.0, memory_share: float = 0.0
) -> Task:
    """One training task (see :data:`TRAIN_GRIDS` and the module docstring); a generator draw
    becomes a paper-cost task (:data:`GENERAL_PAPER_COST_SHARE`) with probability
    ``paper_cost_share``, and a task gets a memory cap (:data:`MEMORY_FACTORS`,
    :func:`memory_task_cap`) with probability ``memory_share`` (no draw from ``rng`` for either
    when its share is 0: the pools stay those of before)."""
    names = (*TRAIN_GRIDS, "random_dag")
    # random DAGs a third: their shapes vary most
    p = [2 / 3 / len(TRAIN_GRIDS)] * len(TRAIN_GRIDS) + [1 / 3]
    name = names[rng.choice(len(names), p=p)]
    if name == "random_dag":
        lo, hi = TRAIN_RANDOM_DAG["num_nodes"]
        wlo, whi = TRAIN_RANDOM_DAG["width"]
        clo, chi = TRAIN_RANDOM_DAG["comm_ratio"]
        params: dict[str, Any] = {
            "num_nodes": int(rng.integers(lo, hi + 1)),
            "width": int(rng.integers(wlo, whi + 1)),
            "max_in_degree": int(rng.integers(2, 5)),
            "comm_ratio": round(float(np.exp(rng.uniform(np.log(clo), np.log(chi)))), 3),
            "seed": int(rng.integers(0, 2**31 - 1)),
        }
    else:
        grid = TRAIN_GRIDS[name]
        params = {k: v[int(rng.integers(len(v)))] for k, v in grid.items()}
        scale = TRAIN_SCALES[int(rng.integers(len(TRAIN_SCALES)))]
        if scale != 1.0:
            params["scale"] = scale
    clusters = TRAIN_DAG_CLUSTERS if name == "random_dag" else TRAIN_CLUSTERS
    cluster = clusters[int(rng.integers(len(clusters)))]
    semantics = TRAIN_SEMANTICS[int(rng.integers(len(TRAIN_SEMANTICS)))]
    if paper_cost_share > 0 and name != "random_dag" and rng.random() < paper_cost_share:
        cluster = PAPER_COST_CLUSTERS[int(rng.integers(len(PAPER_COST_CLUSTERS)))]
        return Task("paper_costs:" + _spec(name, params), cluster, "paper")
    task = Task(_spec(name, params), cluster, semantics)
    if memory_share > 0 and rng.random() < memory_share:
        factor = MEMORY_FACTORS[int(rng.integers(len(MEMORY_FACTORS)))]
        graph = graph_from_spec(task.graph)
        cap = memory_task_cap(graph, cluster_from_spec(cluster).num_devices, factor)
        if cap > 0:
            task = Task(task.graph, cluster, semantics, memory=cap)
    return task


def _fits_somehow(task: Task) -> bool:
    """Whether a placement of a memory-bound task fits its caps (the CP placer finds one)."""
    from ..house.errors import PlacementError
    from ..placers import place

    graph, cluster = task.build()
    try:
        place("cp", graph, cluster, seed=0, semantics=task.semantics)
    except PlacementError:
        return False
    return True


def sample_tasks(
    count: int, seed: int = 0, paper_cost_share: float = 0.0, memory_share: float = 0.0
) -> list[Task]:
    """``count`` distinct training tasks of at most :data:`MAX_TRAIN_NODES` nodes, the same
    for the same seed (and shares of paper-cost and memory-bound tasks, see
    :func:`sample_task`; a memory-bound task no placement fits is drawn again)."""
    for what, share in (("paper_cost_share", paper_cost_share), ("memory_share", memory_share)):
        if not 0.0 <= share <= 1.0:
            raise ConfigError(f"{what} {share!r}: expected a share in [0, 1]")
    rng = np.random.default_rng(np.random.SeedSequence([seed, 0x6E6E]))
    out: list[Task] = []
    seen: set[Task] = set()
    tries = 0
    while len(out) < count:
        tries += 1
        if tries > 50 * count:
            raise ConfigError(f"could not draw {count} distinct training tasks")
        t = sample_task(rng, paper_cost_share, memory_share)
        if t in seen:
            continue
        if graph_from_spec(t.graph).num_nodes > MAX_TRAIN_NODES:
            continue
        if t.memory and not _fits_somehow(t):
            continue
        seen.add(t)
        out.append(t)
    return out


#: the validation pool: tasks of the training distribution drawn with their own seed (model
#: selection between runs; the held-out set stays the test set)
VALIDATION_TASKS = 32
VALIDATION_SEED = 100


def validation_tasks(count: int = VALIDATION_TASKS) -> list[Task]:
    """Tasks of the training distribution for model selection, drawn with
    :data:`VALIDATION_SEED` (a training pool may share a generator task with them: seed 0's
    96 share 1 of the 32)."""
    return sample_tasks(count, VALIDATION_SEED)


def validation_score(
    checkpoint: str | Path,
    tasks: Sequence[Task] | None = None,
    seeds: int = 2,
    samples: int = 16,
    progress: bool = True,
) -> dict[str, Any]:
    """The zero-shot protocol (best of the greedy rollout and ``samples`` samples, mean over
    ``seeds`` seeds) against the Critical Path teacher (mean over ``seeds`` tie seeds) on the
    validation pool; ``ratio_cp`` is the geometric mean of policy / CP (lower is better).
    """
    from ..house.progress import progress as bar
    from ..house.runners import torch_threads
    from ..placers import get_placer, place
    from ..placers.placer_base import make_rng
    from ..timing.sim import Simulator

    tasks = validation_tasks() if tasks is None else list(tasks)
    rows = []
    with torch_threads(1):
        for t in bar(tasks, desc="validation", enabled=progress, unit="task"):
            g, c = t.build()
            sim = Simulator(g, c, t.semantics)  # type: ignore[arg-type]
            cp = np.mean(
                [
                    sim.makespan(place("cp", g, c, seed=k, semantics=t.semantics))
                    for k in range(seeds)
                ]
            )
            placer = get_placer(
                "doppler", checkpoint=checkpoint, samples=samples, semantics=t.semantics
            )
            pol = np.mean([sim.makespan(placer.place(g, c, make_rng(k))) for k in range(seeds)])
            rows.append(
                {"task": t.name, "cp": float(cp), "policy": float(pol), "ratio_cp": float(pol / cp)}
            )
    gm = float(np.exp(np.mean([np.log(r["ratio_cp"]) for r in rows])))
    return {"tasks": len(rows), "seeds": seeds, "samples": samples, "ratio_cp": gm, "rows": rows}


def in_training_distribution(task: Task) -> bool:
    """Whether :func:`sample_task` can draw ``task`` (the held-out set must answer no)."""
    import inspect

    from ..workloads import WORKLOADS

    if task.memory:  # a memory-bound draw: a cap of MEMORY_FACTORS on a task training draws
        plain = Task(task.graph, task.cluster, task.semantics)
        if not in_training_distribution(plain) or plain.graph.startswith("paper_costs:"):
            return False
        graph, cluster = plain.build()
        caps = [memory_task_cap(graph, cluster.num_devices, f) for f in MEMORY_FACTORS]
        return any(abs(task.memory - c) <= 1e-9 * c for c in caps)
    spec = parse_graph_spec(task.graph)
    if spec.kind not in ("workload", "paper_costs") or task.semantics not in TRAIN_SEMANTICS:
        return False
    if spec.kind == "paper_costs":
        assert spec.inner is not None
        inner = Task(spec.inner.text, TRAIN_CLUSTERS[0], "wc")
        return (
            task.cluster in PAPER_COST_CLUSTERS
            and task.semantics == "paper"
            and spec.inner.kind == "workload"
            and spec.inner.target != "random_dag"
            and in_training_distribution(inner)
        )
    name, params = spec.target, dict(spec.params)
    defaults = {k: p.default for k, p in inspect.signature(WORKLOADS[name]).parameters.items()}
    full = {**defaults, **params}
    if name == "random_dag":
        if task.cluster not in TRAIN_DAG_CLUSTERS:
            return False
        ranges = {**TRAIN_RANDOM_DAG, "max_in_degree": (2, 4)}
        inside = all(lo <= full[k] <= hi for k, (lo, hi) in ranges.items())
        return inside and full["integer_costs"] == defaults["integer_costs"]
    if name not in TRAIN_GRIDS or task.cluster not in TRAIN_CLUSTERS:
        return False
    grid = TRAIN_GRIDS[name]
    for key, value in full.items():
        if key in grid:
            if value not in grid[key]:
                return False
        elif key == "scale":
            if float(value) not in TRAIN_SCALES:
                return False
        elif value != defaults[key]:
            return False
    return True


#: generator settings never drawn in training (each has a value outside the grids)
HELD_OUT_GRAPHS: tuple[str, ...] = (
    "chainmm:matrices=7,blocks=3",
    "ffnn:layers=5,blocks=3,batch_blocks=3",
    "llama_block:blocks=8,batch_blocks=1,kv_heads=16",
    "llama_layer:layers=2,blocks=2,batch_blocks=1",
    "moe_layer:experts=6,top_k=2,batch_blocks=3",
    "llama_block:blocks=4,batch_blocks=2,scale=1.5",
    "random_dag:num_nodes=250,width=32,max_in_degree=3,comm_ratio=5.0,seed=7",
)
HELD_OUT_CLUSTERS: tuple[str, ...] = ("h100x8", "uniform:6")
PAPER_TASKS: tuple[tuple[str, int], ...] = (
    ("chain_mm_112nodes", 4),
    ("ffnn_192nodes", 4),
    ("transformer_block_215nodes", 4),
    ("full_transformer_layer_261nodes", 4),
    ("8gpu_transformer_block", 8),
    ("8gpu_full_transformer", 8),
)
MODEL_TASKS: tuple[str, ...] = ("hf-llama:layers=2,hidden=128,seq=64", "hf-gpt2:layers=2,seq=64")
#: memory-bound held-out tasks (group ``memory``, asked for by name): held-out graphs and
#: clusters, each device holding ``factor`` times the graph's tensors over the device count
#: (:func:`memory_task_cap`; none fits on one device)
MEMORY_TASKS: tuple[tuple[str, str, float], ...] = (
    ("llama_layer:layers=2,blocks=2,batch_blocks=1", "p100x4", 1.3),
    ("moe_layer:experts=6,top_k=2,batch_blocks=3", "h100x8", 1.5),
    ("ffnn:layers=5,blocks=3,batch_blocks=3", "v100x8", 1.75),
    ("llama_block:blocks=4,batch_blocks=2,scale=1.5", "p100x4", 1.2),
    ("chainmm:matrices=7,blocks=3", "h100x8", 1.5),
    ("llama_layer", "h100x8", 1.3),
)


def held_out_tasks(
    groups: Sequence[str] = ("generator", "cluster", "paper", "model"),
) -> list[Task]:
    """The held-out set (see the module docstring); the paper graphs only when their files are
    found, the imported models only when transformers imports; ``memory`` (not in the default
    groups): :data:`MEMORY_TASKS`."""
    out: list[Task] = []
    if "generator" in groups:
        for g, cl in zip(HELD_OUT_GRAPHS, itertools.cycle(("p100x4", "v100x8"))):
            out.append(Task(g, cl, "wc", "generator"))
    if "cluster" in groups:
        for g, cl in (
            ("llama_layer", "h100x8"),
            ("moe_layer", "h100x8"),
            ("random_dag:num_nodes=200,width=16,seed=11", "uniform:6"),
            ("ffnn", "uniform:6"),
        ):
            out.append(Task(g, cl, "wc", "cluster"))
    if "paper" in groups:
        from ..house.paths import paper_graphs_dir

        folder = paper_graphs_dir()
        for name, d in PAPER_TASKS:
            if folder is not None and (folder / f"{name}.txt").exists():
                out.append(Task(f"paper:{name}", f"uniform:{d}", "paper", "paper"))
    if "model" in groups:
        try:
            import transformers  # noqa: F401
        except ImportError:
            pass
        else:
            for m in MODEL_TASKS:
                out.append(Task(f"model:{m}", "p100x4", "wc", "model"))
    if "memory" in groups:
        for g, cl, factor in MEMORY_TASKS:
            cap = memory_task_cap(graph_from_spec(g), cluster_from_spec(cl).num_devices, factor)
            out.append(Task(g, cl, "wc", "memory", memory=cap))
    return out


# -- the training run ---------------------------------------------------------------------
#: Stage I and II sizes of the shipped general policy
GENERAL_TASKS = 96
GENERAL_IMITATION_EPISODES = 3072
GENERAL_SIM_EPISODES = 12288


#: Stage I settings of the general policy besides the ``imitation`` preset's: the shipped
#: ``doppler/general`` was trained before that preset warmed its rate up, so its recorded command
#: (``doppler-lab train-general --seed 1``) trains it again only without the warm-up
GENERAL_IMITATION_SETTINGS: dict[str, Any] = {"lr_warmup": 0}
#: Stage II settings of the general policy besides the ``sim`` preset's
#: Stage II's policy-gradient estimator of the general policy (``bench learner``:
#: reports/bench/learner.md)
GENERAL_ESTIMATOR = "reinforce"
GENERAL_SIM_SETTINGS: dict[str, Any] = {
    "lr": 1e-2,
    "lr_warmup": 10,
    "tempered_loss": True,
    "estimator": GENERAL_ESTIMATOR,
}


#: Stage "anchor" settings: imitate a search's placement of each task (the ``doppler`` budget
#: search with the policy reached so far as the proposal, :data:`ANCHOR_BUDGET` simulator calls;
#: or ``local-search`` from CP), its device names matched to each episode's
#: (:class:`~doppler_lab.policies.rollout.AnchorMatch`); DAgger mixing: PLC takes the anchor's
#: device with probability 1 - epsilon (from 0.8 down to 0.2), SEL acts greedily; no policy
#: gradient (the episodes are mostly the anchor's, not the policy's); any better placement found
#: on the way becomes the anchor
GENERAL_ANCHOR_SETTINGS: dict[str, Any] = {
    "anchor": True,
    "sil_coef": 1.0,
    "pg_coef": 0.0,
    "entropy_coef": 0.0,
    "lr": 2e-4,
    "lr_warmup": 5,
    "tempered_loss": True,
    "epsilon_start": 0.2,
    "epsilon_end": 0.8,
}
ANCHOR_BUDGET = 2000
#: where the anchors come from (:func:`search_anchors`)
ANCHOR_SOURCES = ("policy", "local-search", "cp-rollout", "proposals")
#: off by default: it never made the policy better. With local-search anchors, uniform SEL draws
#: and the policy gradient on the anchor's actions, after Stage I: held-out geometric mean vs CP
#: 0.894 -> 0.979 with 6144 episodes (Stage II's 12288: 0.890). From the shipped policy (validation
#: pool, policy / CP 0.929), 3072 episodes, anchors from its own search (2000 calls): from the best
#: sampled rollout, unsettled, lr 3e-3: 1.186; settled, SEL sampled, lr 1e-3: 1.222; from the
#: greedy rollout, settled, SEL greedy, lr 1e-3: 1.222, lr 2e-4: 0.934. The policy's device
#: choices depend on the state more than a node -> device map can say: even on the anchor's own
#: states it gave the anchor's labels 0.63 of its probability at the start and no more later.
#: ``cp-rollout`` anchors (lr 2e-4, 3072 episodes): 0.933 from the previous shipped policy (0.929);
#: after a CP Stage I, then Stage II: 0.938.
#: ``proposals`` anchors (the ``doppler`` placer's zero-shot pick: the policy's rollouts, the
#: clustering or a partition; lr 2e-4, 3072 episodes, 61 s of updates) from the shipped policy:
#: validation 0.929 -> 0.909, but the held-out set of ``bench general`` (rollouts alone, geometric
#: mean vs CP) 0.838 -> 0.850, and the paper graphs unchanged (chain_mm 1480 in the mean of 5
#: seeds); a second round from that policy: validation 0.915. With 32 of the 96 tasks replaced by
#: paper-style cost proxies of generated graphs (``uniform`` clusters, transfers 4x the producer's
#: compute, where the clustering places at 0.47-0.76 of CP and the policy at 0.76-1.0) the policy
#: did not move on them either: PLC gave the anchors' devices 0.5-0.7 of its probability
#: throughout; at lr 3e-3 on 48 such tasks alone it fell to 0.3-0.4 and every rollout got worse
#: (chain_mm 1720, the paper's block 300 against 215).
GENERAL_ANCHOR_EPISODES = 0
#: Stage I's PLC labels: ``cp`` (the Critical Path rule) or ``cp-rollout`` (the rollout over
#: deterministic CP at the visited states), on this share of the states. Validation pool
#: (policy / CP after Stage I + II), seeds 0 / 1 / 2: cp-rollout on 0.25 of the states 0.939 /
#: 0.929 / 0.940 (mean 0.936; seeds 3 / 4 later: 0.938 / 0.938), cp 0.938 / 0.929 / 0.946
#: (mean 0.938; seeds 3-5: 0.939 / 0.940 / 0.941); held-out set of
#: ``bench general`` (not used to choose): 13.2% / 13.7% / 10.3% below CP against 12.1% (seed 2) /
#: 12.4% / 10.8% (seed 3). Stage I's PLC gives the rollout's labels about 0.4 of its probability
#: (CP's: 1.0 after a sixth of the stage): its features do not predict the rollout's choice, and
#: Stage I alone is worse (0.994 against 0.938); Stage II recovers from there. Four times the
#: updates' time of ``cp`` (1421-1490 s against 354 s on one core).
GENERAL_TEACHER = "cp-rollout"
GENERAL_LABEL_FRACTION = 0.25


def general_stages(
    imitation_episodes: int = GENERAL_IMITATION_EPISODES,
    sim_episodes: int = GENERAL_SIM_EPISODES,
    seed: int = 0,
    anchor_episodes: int = GENERAL_ANCHOR_EPISODES,
    teacher: str = GENERAL_TEACHER,
    label_fraction: float = GENERAL_LABEL_FRACTION,
    **sim_changes: Any,
):
    """The general policy's stage configurations (a stage of 0 episodes is left out);
    ``teacher``: Stage I's PLC labels (:attr:`~doppler_lab.train.train_config.TrainConfig.plc_labels`)."""
    from .train_config import preset

    common = {"semantics": "wc", "seed": seed, "checkpoint_every": 20}
    stages = []
    if imitation_episodes:
        labels = {"plc_labels": teacher, "label_fraction": label_fraction}
        stages.append(
            preset(
                "imitation",
                **{**GENERAL_IMITATION_SETTINGS, **common, **labels},
                episodes=imitation_episodes,
            )
        )
    if anchor_episodes:
        stages.append(
            preset("sim", **{**GENERAL_ANCHOR_SETTINGS, **common, "episodes": anchor_episodes})
        )
    if sim_episodes:
        stages.append(
            preset(
                "sim",
                **{**GENERAL_SIM_SETTINGS, **common, "episodes": sim_episodes, **sim_changes},
            )
        )
    if not stages:
        raise ConfigError("the general policy needs at least one stage with episodes")
    return stages


#: the general policy's episode-state estimate: ``wc`` for every task. ``task`` (each task's
#: semantics' model: ``est`` on paper tasks) measured no better on a validation pool of 32 tasks
#: from the training distribution (``sample_tasks(32, 100)``, best of greedy + 16 samples vs CP,
#: geometric mean; seeds 0 / 1): wc 0.938 / 0.929, task 0.940 / 0.933
GENERAL_ESTIMATE = "wc"


#: the feature layout of a fresh general policy: ``doppler/general-v1``'s recorded command trains
#: it again. ``doppler/general`` (the default since 2026-12-03) is ``doppler10`` (the cluster
#: share, the edge-zeroing clustering's co-location, :mod:`doppler_lab.policies.features`) and
#: starts from v1: ``--init doppler/general-v1 --layout doppler10`` widens it (the new column
#: starts as a copy of ``pred_share``'s weights, :data:`GENERAL_WIDEN_LIKE`), Stage I imitates
#: the ``cluster`` labels (:class:`~doppler_lab.placers.clustering.ClusterLabeller`: the device
#: of the op's placed clustering mates, else CP's), Stage II runs at lr 2e-3 (3072 + 6144
#: episodes, 239 s of updates), and its samples draw PLC at temperature 2
#: (``--sample-temperature 2``). Validation pool (best of greedy + 16 samples / CP): v1 0.929;
#: this recipe, seed 1: 0.9188 sampling at 1, 0.9195 at 2; with ``--paper-cost-share 0.4``,
#: seeds 1 / 2 / 3: 0.9227 / 0.9186 / 0.9232. ``bench general`` (reports/bench/general.md,
#: v1's in reports/bench/general-v1/): the rollouts alone 22.5% below CP in geometric mean over
#: the held-out tasks (v1: 16.2%), no held-out graph worse than HEFT (the paper's chain_mm: 1270
#: in the mean of 10 seeds; at temperature 1 it was 1300.1 at every seed, 4e-6 worse than HEFT's
#: 1300.07, and v1's rollouts 1410). Without the cluster labels the new column was not taken up:
#: Stage II alone from the widened policy (6144 episodes, lr 2e-3) 0.907 on the validation pool,
#: the paper graphs within their seed spread (chain_mm 1200-1400, the 8-GPU block 240-253), with
#: or without paper-cost tasks and an anchor stage on the ``proposals`` anchors
GENERAL_LAYOUT = "doppler9"
#: how ``--init`` from a narrower layout is widened: the new column starts as a copy of these
GENERAL_WIDEN_LIKE = {"cluster_share": "pred_share"}


def general_policy_config(estimate: str = GENERAL_ESTIMATE, layout: str = GENERAL_LAYOUT):
    """The general policy's architecture: the default one with the estimate ``estimate``
    (``task``: the model of each task's semantics; ``wc``: the realistic one for every task)
    and the feature layout ``layout``."""
    from ..policies.policy_config import POLICY_PRESETS

    return POLICY_PRESETS["default"].replace(estimate=estimate, layout=layout)


def settle_anchor(
    sim: Any, anchor: np.ndarray, reference: np.ndarray, movable: np.ndarray, rtol: float = 2e-3
) -> np.ndarray:
    """``anchor`` moved as close to ``reference`` as it can be without a longer makespan.

    First the anchor's device names are matched to the reference's (the permutation that
    agrees on the most nodes; devices of one kind are interchangeable, so a search may have
    renamed them; no settling when the anchor is not ``2 rtol`` better: the reference is the
    answer), then each node that still differs goes back to its reference device when
    the makespan stays within ``rtol`` (relative) of the anchor's (one pass, one simulator call
    each, in node order). What is left differs from the reference only where it pays:
    imitation labels without the search's drift across moves that change (almost) nothing.
    """
    require("scipy.optimize", "matching devices to a reference placement")
    from scipy.optimize import linear_sum_assignment

    ndev = int(max(anchor.max(), reference.max())) + 1
    agree = np.zeros((ndev, ndev))
    np.add.at(agree, (anchor[movable], reference[movable]), 1.0)
    rows, cols = linear_sum_assignment(agree + 1e-6 * np.eye(ndev), maximize=True)
    perm = np.arange(ndev)
    perm[rows] = cols
    renamed = anchor.copy()
    renamed[movable] = perm[anchor[movable]]
    cost = sim.makespan(anchor)
    if cost >= sim.makespan(reference) * (1.0 - 2.0 * rtol):  # the search found no more
        return reference.copy()
    out = renamed if sim.makespan(renamed) <= cost else anchor.copy()  # else names matter
    bound = cost * (1.0 + rtol)
    for v in movable[out[movable] != reference[movable]]:
        old = out[v]
        out[v] = reference[v]
        if sim.makespan(out) > bound:
            out[v] = old
    return out


def search_anchors(
    pool: Sequence[Task],
    built: Sequence[tuple[DataflowGraph, Cluster]],
    budget: int = ANCHOR_BUDGET,
    seed: int = 0,
    cache: str | Path | None = None,
    progress: bool = True,
    policy: str | Path | None = None,
    source: str | None = None,
) -> list[np.ndarray]:
    """Each task's searched placement (``budget`` simulator calls under its semantics), read
    from / written to ``cache`` (an ``.npz``) so a resumed run does not search again.

    ``source="cp-rollout"``: the deterministic rollout over CP (:mod:`~doppler_lab.placers.cp_rollout`,
    no budget). ``source="proposals"``: the ``doppler`` placer's zero-shot choice with ``policy``
    (the best of its greedy rollout, 16 samples, the clustering and the partitions; no budget),
    expert iteration: the policy imitates the best of what it and the heuristics propose. Otherwise the search is ``local-search`` (from CP), or with ``policy`` (a checkpoint) the ``doppler``
    placer's budget search from that policy's greedy rollout, settled back onto it
    (:func:`settle_anchor`): labels that differ from the policy's own greedy choices only where
    that shortens the makespan. (The anchor stage's SEL acts greedily, so its episodes visit
    the states of that rollout: a sampled node order puts the policy's own choices on other
    devices at about half the steps, and labels from another order would be noise.)
    """
    from ..house.progress import progress as bar
    from ..placers import place
    from ..timing.sim import Simulator

    if source == "cp-rollout":
        name, options = "cp-rollout", {}
    elif source == "proposals":
        if policy is None:
            raise ConfigError("anchor source 'proposals' needs a policy: Stage I or --init")
        name, options = "doppler", {"checkpoint": str(policy)}
    elif policy is None:
        name, options = "local-search", {"budget": budget}
    else:
        # the policy's own search: no heuristic proposals
        name, options = "doppler", {"checkpoint": str(policy), "samples": 0, "budget": budget}
        options.update(partitions=0, clustering=False)

    if cache is not None and Path(cache).exists():
        with np.load(cache) as z:
            if len(z.files) == len(pool):
                return [z[f"t{i}"] for i in range(len(pool))]
    out = []
    for i, (t, (g, c)) in enumerate(
        zip(pool, bar(built, desc="search anchors", enabled=progress, unit="task"))
    ):
        p = place(name, g, c, seed=seed + i, semantics=t.semantics, **options)
        dev = p.device.astype(np.int64)
        if policy is not None and source not in ("cp-rollout", "proposals"):
            plain = {k: v for k, v in options.items() if k != "budget"}
            greedy = place(name, g, c, seed=0, semantics=t.semantics, **plain)
            sim = Simulator(g, c, t.semantics)  # type: ignore[arg-type]
            dev = settle_anchor(sim, dev, greedy.device, g.compute_nodes)
        out.append(dev)
    if cache is not None:
        from ..house.atomic import atomic_writer

        with atomic_writer(cache, "wb") as fh:
            np.savez(fh, **{f"t{i}": d for i, d in enumerate(out)})
    return out


@dataclass(frozen=True)
class GeneralRecipe:
    """A general-policy run's recipe (``train-general``'s flags; :func:`train_general`).

    Stages: I (imitation of the Critical Path teacher), the anchor stage (imitation of a
    searched placement of each task, exploring around it; skipped when ``anchor_episodes`` is
    0; ``anchor_source``: ``policy``, the budget search of the policy the stage starts from, or
    ``local-search``; ``anchor_budget`` simulator calls each), II (REINFORCE; skipped when
    ``sim_episodes`` is 0).

    Attributes:
        tasks: training tasks (:func:`sample_tasks`).
        imitation_episodes, anchor_episodes, sim_episodes: episodes of each stage.
        seed: seed of the tasks and the stages.
        estimate, layout: the episode state's estimate and the feature layout of a fresh policy
            (:func:`general_policy_config`).
        anchor_source, anchor_budget: the anchor stage's placements (:data:`ANCHOR_SOURCES`)
            and their search's simulator calls.
        teacher, label_fraction: Stage I's PLC labels and the share of states labelled.
        paper_cost_share, memory_share: see :func:`sample_task`.
        sim_changes: Stage II settings besides :data:`GENERAL_SIM_SETTINGS` (``lr``,
            ``graphs_per_step``).
        hint_free: train each task twice, with and without the clustering's device (a
            ``doppler12`` policy; :class:`~doppler_lab.policies.context.GraphContext`'s
            ``hint``), interleaved: the policy learns to place with the hint and without it, and
            the ``doppler`` placer draws half its samples each way (``hints=("clustering",)``).
        hints: the heuristics whose devices the policy reads in turn
            (:data:`~doppler_lab.policies.features.HINTS`): each task once with each and once
            without, interleaved; recorded in the checkpoint
            (:func:`~doppler_lab.policies.checkpoint.set_hints`), so that the ``doppler``
            placer draws a group of rollouts with each and one without. Empty: ``hint_free``'s.
    """

    tasks: int = GENERAL_TASKS
    imitation_episodes: int = GENERAL_IMITATION_EPISODES
    sim_episodes: int = GENERAL_SIM_EPISODES
    anchor_episodes: int = GENERAL_ANCHOR_EPISODES
    seed: int = 0
    estimate: str = GENERAL_ESTIMATE
    layout: str = GENERAL_LAYOUT
    anchor_source: str = ANCHOR_SOURCES[0]
    anchor_budget: int = ANCHOR_BUDGET
    teacher: str = GENERAL_TEACHER
    label_fraction: float = GENERAL_LABEL_FRACTION
    paper_cost_share: float = GENERAL_PAPER_COST_SHARE
    memory_share: float = GENERAL_MEMORY_SHARE
    sim_changes: dict[str, Any] = field(default_factory=dict)
    hint_free: bool = False
    hints: tuple[str, ...] = ()

    def hint_groups(self) -> tuple[str, ...]:
        """The hints each task is trained with besides none (empty: the pool as it is, each
        task with the clustering's hint)."""
        return tuple(self.hints) or (("clustering",) if self.hint_free else ())

    def stages(self) -> list[Any]:
        """The stage configurations (:func:`general_stages`; none without episodes: a run
        that ships its ``--init`` as it is)."""
        if not (self.imitation_episodes or self.anchor_episodes or self.sim_episodes):
            return []
        return general_stages(
            self.imitation_episodes,
            self.sim_episodes,
            self.seed,
            self.anchor_episodes,
            self.teacher,
            self.label_fraction,
            **self.sim_changes,
        )


def train_general(
    out_dir: str | Path,
    recipe: GeneralRecipe | None = None,
    init: str | Path | None = None,
    progress: bool = True,
    force: bool = False,
):
    """Train (or resume) the general policy of ``recipe`` (default :class:`GeneralRecipe`) in
    ``out_dir``; returns each stage's result.

    ``init``: start from a checkpoint instead of fresh weights; an ``init`` of a narrower feature
    layout than the recipe's is widened first
    (:func:`~doppler_lab.policies.checkpoint.widen_checkpoint`, saved in ``out_dir``).
    ``force``: a stage whose checkpoints cannot be read starts again
    (:class:`~doppler_lab.train.loop.Trainer`).
    """
    import torch

    from .loop import Trainer
    from .pipeline import stage_dir

    r = recipe or GeneralRecipe()
    seed, anchor_source, anchor_budget = r.seed, r.anchor_source, r.anchor_budget
    if anchor_source not in ANCHOR_SOURCES:
        raise ConfigError(
            f"anchor source {anchor_source!r}: expected one of {', '.join(ANCHOR_SOURCES)}"
        )
    torch.set_num_threads(1)
    pool = sample_tasks(r.tasks, seed, r.paper_cost_share, r.memory_share)
    out = Path(out_dir)
    if init is not None:
        init = widen_init(init, r.layout, out)
    built = [t.build() for t in pool]
    graphs = [g for g, _ in built]
    clusters = [c for _, c in built]
    costs = task_costs(pool, built, seed)
    sems = [t.semantics for t in pool]
    hints = None
    groups = r.hint_groups()
    if groups:
        what = f"hints {','.join(groups)}" if r.hints else "hint_free"
        if r.anchor_episodes:
            raise ConfigError(
                f"{what}: the anchor stage's pool has each task once (0 anchor episodes)"
            )
        if not uses_clustering_device(get_layout(r.layout)):
            raise ConfigError(f"{what}: layout {r.layout!r} reads no hint; expected doppler12")
        hint_names(list(groups), "hints")
        k = len(groups) + 1
        each = lambda xs: [x for x in xs for _ in range(k)]  # noqa: E731
        graphs, clusters, costs, sems = each(graphs), each(clusters), each(costs), each(sems)
        hints = [*groups, None] * len(pool)
    out.mkdir(parents=True, exist_ok=True)
    stages = r.stages()
    if stages:  # the pool trained on; a run of no episode trains on none (no tasks.json)
        atomic_write(out / "tasks.json", json.dumps([t.to_dict() for t in pool], indent=1))
    results = []
    previous: Any = init
    if not stages:  # no episodes: the init, with this recipe's placing settings (hints)
        if init is None:
            raise ConfigError(
                "no stage to run (0 imitation, anchor and sim episodes): expected episodes, or "
                "--init CKPT to ship that policy as it is with this run's placing settings "
                "(--hints, --sample-temperature)"
            )
        results.append(_untrained_result(init, out))
    for i, cfg in enumerate(stages):
        anchors = None
        if cfg.anchor:
            if anchor_source in ("policy", "proposals") and previous is None:
                raise ConfigError(
                    f"anchor source {anchor_source!r} needs a policy to start from: Stage I or --init"
                )
            anchors = search_anchors(
                pool,
                built,
                anchor_budget,
                seed,
                out / f"anchors-{anchor_source}-{anchor_budget}.npz"
                if anchor_source not in ("cp-rollout", "proposals")
                else out / f"anchors-{anchor_source}.npz",
                progress,
                previous if anchor_source in ("policy", "proposals") else None,
                anchor_source,
            )
        trainer = Trainer(
            cfg,
            graphs,
            clusters,
            general_policy_config(r.estimate, r.layout) if i == 0 else None,
            stage_dir(out, i, cfg),
            init=previous,
            cost_fns=costs,
            progress=progress,
            anchors=anchors,
            semantics=sems,
            force=force,
            hints=hints,
        )
        results.append(trainer.run())
        previous = results[-1].checkpoint
    if r.hints and tuple(r.hints) != ("clustering",):
        from ..policies.checkpoint import set_hints

        set_hints(results[-1].checkpoint, r.hints)
    return results


def _untrained_result(init: str | Path, out: Path) -> Any:
    """A run of no stage: ``init`` copied to ``out/policy.pt`` as its result."""
    from ..policies.checkpoint import load_policy
    from .loop import TrainResult

    target = out / "policy.pt"
    atomic_copy(init, target)
    return TrainResult(load_policy(target)[0], [], out, target, {"train_s": 0.0})


def task_costs(
    pool: Sequence[Task], built: Sequence[tuple[DataflowGraph, Cluster]], seed: int
) -> list[Any]:
    """Each task's training cost: its simulated makespan under its semantics, noise-free
    (:class:`~doppler_lab.train.cost_functions.SimulatorCost`, seeded per task from ``seed``)."""
    from .cost_functions import SimulatorCost

    seeds = np.random.SeedSequence([seed, 0xC057]).spawn(len(pool))
    return [SimulatorCost(g, c, t.semantics, 0.0, s) for (g, c), t, s in zip(built, pool, seeds)]


def widen_init(init: str | Path, layout: str, out_dir: Path) -> str | Path:
    """``init``, or its widening to ``layout`` (``out_dir/init-<layout>.pt``) when its layout is
    narrower (:data:`GENERAL_WIDEN_LIKE`)."""
    from ..policies.checkpoint import read_checkpoint, widen_checkpoint

    saved = read_checkpoint(init)["policy"]["layout"].get("name")
    if saved == layout:
        return init
    old = get_layout(saved).device
    like = {
        k: v
        for k, v in GENERAL_WIDEN_LIKE.items()
        if k in get_layout(layout).device and k not in old  # the new columns only
    }
    return widen_checkpoint(init, layout, out_dir / f"init-{layout}.pt", like)


def check_general_name(name: str) -> str:
    """``name`` if :func:`ship_general` can give it (``doppler/NAME``, NAME one file name).

    Raises:
        ConfigError: naming it and what was expected.
    """
    rest = name[len("doppler/") :] if name.startswith("doppler/") else ""
    if not rest.strip() or "/" in rest or "\\" in rest or rest in (".", ".."):
        raise ConfigError(f"checkpoint name {name!r}: expected doppler/NAME")
    return name


def ship_general(
    results: Sequence[Any],
    dest: str | Path,
    command: str,
    record: dict,
    name: str = GENERAL_CHECKPOINT,
) -> Path:
    """Copy the trained policy to ``<dest>/<name>.pt`` (``doppler/general``: the default of
    ``--placer doppler``) and record it in ``<dest>/index.json``."""
    check_general_name(name)
    dest = Path(dest)
    target = dest / f"{name}.pt"
    target.parent.mkdir(parents=True, exist_ok=True)
    atomic_copy(results[-1].checkpoint, target)
    index_path = dest / "index.json"
    index = json.loads(index_path.read_text()) if index_path.exists() else {"checkpoints": {}}
    index.setdefault("checkpoints", {})[name] = {
        "command": command,
        "policy": "dual",
        "graph": "general",
        "cluster": "any",
        "semantics": "paper, wc",
        **record,
        "size_bytes": target.stat().st_size,
    }
    atomic_write(index_path, json.dumps(index, indent=1) + "\n")
    from .shipped import write_readme

    write_readme(dest)
    return target


def _stage_name(cfg: Any) -> str:
    return "anchor" if cfg.anchor else cfg.stage


def run_record(
    results: Sequence[Any],
    stages: Sequence[Any],
    tasks: int,
    seed: int,
    init: str | None = None,
    paper_cost_share: float = GENERAL_PAPER_COST_SHARE,
    memory_share: float = GENERAL_MEMORY_SHARE,
) -> dict[str, Any]:
    """What ``index.json`` says of a finished general run (``init``: the checkpoint it started
    from, as given). A run of no episode (``stages`` empty: its ``init`` shipped as it is)
    trained on no task: ``tasks`` 0 and no pool shares, whatever the recipe's pool."""
    trained = any(cfg.episodes for cfg in stages)
    extra: dict[str, Any] = {"init": init} if init else {}
    if paper_cost_share and trained:
        extra["paper_cost_share"] = paper_cost_share
    if memory_share and trained:
        extra["memory_share"] = memory_share
    return {
        **extra,
        "tasks": tasks if trained else 0,
        "seed": seed,
        "episodes": {_stage_name(cfg): cfg.episodes for cfg in stages},
        "train_config": {_stage_name(cfg): cfg.to_dict() for cfg in stages},
        "policy_config": results[-1].policy.config.to_dict(),
        # updates' wall time summed over resumed sessions, one torch thread
        "train_s": round(sum(float(r.summary.get("train_s", 0.0)) for r in results), 1),
    }
