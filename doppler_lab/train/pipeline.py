"""Stages in sequence (I -> II -> III): each stage warm-starts from the previous one's policy and
writes its own run directory, so a killed pipeline resumes stage by stage.

Device curriculum: trained from scratch on many devices (the 8-GPU paper graphs), Stage I makes a
confident copy of the Critical Path teacher (PLC entropy ~0.2 nats), and Stage II never leaves it
(321 on the 8-GPU transformer block after 2000 + 2000 episodes, CP 332, best known 166.8; with
the tempered losses, a learning-rate warm-up, hotter sampling and ten times the entropy bonus
alike). The same budget with Stage I and the first half of Stage II on 4 of the devices, then the
second half on all 8, reaches 229 (measured in the issue note). ``device_curriculum=k`` does
that: the DOPPLER networks score each device with shared weights, so the policy moves from k to D
devices unchanged. The curriculum needs the ``sim`` preset's tempered losses as well: without them
(400 + 3600 episodes) the 8-GPU block stays at 311, PLC sampled at 1.5 and trained at 1 drifting
to near uniform on 8 devices (entropy 1.8 nats, ln 8 = 2.08); with them 220 and 174 (seeds 0, 1).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..hardware.cluster import Cluster
from ..house.errors import ConfigError
from ..ir.graph import DataflowGraph
from ..policies.checkpoint import DEVICE_FREE_KINDS
from ..policies.policy_config import PolicyConfig
from .loop import Trainer, TrainResult
from .train_config import TrainConfig

#: the device count of the default curriculum (``doppler-lab train --device-curriculum``)
DEFAULT_CURRICULUM_DEVICES = 4


def stage_dir(out_dir: str | Path, index: int, config: TrainConfig) -> Path:
    """The run directory of stage ``index`` of a pipeline."""
    return Path(out_dir) / f"{index + 1}_{config.stage}"


def curriculum_plan(
    stages: Sequence[TrainConfig], cluster: Cluster, device_curriculum: int | None
) -> list[tuple[TrainConfig, Cluster]]:
    """The stages to run and the cluster of each: with ``device_curriculum=k`` (and more than k
    devices, and a ``sim`` stage) Stage I and the first half of each Stage II run on the first
    k devices (:meth:`~doppler_lab.hardware.Cluster.first`), the second half on all of them."""
    k = device_curriculum
    if not k or cluster.num_devices <= k or not any(c.stage == "sim" for c in stages):
        return [(cfg, cluster) for cfg in stages]
    small = cluster.first(int(k))
    plan: list[tuple[TrainConfig, Cluster]] = []
    for cfg in stages:
        if cfg.stage == "imitation":
            plan.append((cfg, small))
        elif cfg.stage == "sim":
            half = cfg.episodes // 2
            if half:
                plan.append((cfg.replace(episodes=half), small))
            plan.append((cfg.replace(episodes=cfg.episodes - half), cluster))
        else:
            plan.append((cfg, cluster))
    return plan


def run_pipeline(
    stages: Sequence[TrainConfig],
    graphs: Sequence[DataflowGraph],
    cluster: Cluster,
    policy: PolicyConfig | None = None,
    out_dir: str | Path | None = None,
    init: str | Path | None = None,
    device_curriculum: int | None = None,
    **options: Any,
) -> list[TrainResult]:
    """Train ``stages`` one after another; returns each stage's result.

    Args:
        stages: the stage configurations, in order.
        graphs: training graphs (all stages).
        cluster: the cluster.
        policy: the policy configuration of the first stage (later stages load the previous
            stage's policy).
        out_dir: the pipeline directory (stage i in ``<out_dir>/<i>_<stage>``); None: in memory.
        init: a checkpoint the first stage starts from.
        device_curriculum: run Stage I and half of Stage II on this many devices first
            (:func:`curriculum_plan`; DOPPLER policies only; None: off).
        options: other :class:`~doppler_lab.train.loop.Trainer` arguments (progress, ...).
    """
    if not stages:
        raise ConfigError("a pipeline needs at least one stage")
    kind = policy.kind if isinstance(policy, PolicyConfig) else "dual"
    if device_curriculum is not None:
        if kind not in DEVICE_FREE_KINDS:
            raise ConfigError(
                f"device_curriculum needs a policy that runs on any device count "
                f"({', '.join(DEVICE_FREE_KINDS)}), not {kind!r}"
            )
        if not (isinstance(device_curriculum, int) and device_curriculum >= 1):
            raise ConfigError(
                f"device_curriculum = {device_curriculum!r}, expected an integer >= 1"
            )
    plan = curriculum_plan(stages, cluster, device_curriculum)
    results: list[TrainResult] = []
    previous: Any = init
    for i, (cfg, where) in enumerate(plan):
        run_dir = stage_dir(out_dir, i, cfg) if out_dir is not None else None
        if run_dir is None and results:
            trainer = Trainer(cfg, graphs, where, results[-1].policy, None, **options)
        else:
            trainer = Trainer(cfg, graphs, where, policy, run_dir, init=previous, **options)
        res = trainer.run()
        results.append(res)
        previous = res.checkpoint
    return results
