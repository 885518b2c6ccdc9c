"""Stages in sequence (I -> II -> III): each stage warm-starts from the previous one's policy and
writes its own run directory, so a killed pipeline resumes stage by stage."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..errors import ConfigError
from ..graph import DataflowGraph
from ..hardware import Cluster
from ..policies.config import PolicyConfig
from .config import TrainConfig
from .loop import Trainer, TrainResult


def stage_dir(out_dir: str | Path, index: int, config: TrainConfig) -> Path:
    """The run directory of stage ``index`` of a pipeline."""
    return Path(out_dir) / f"{index + 1}_{config.stage}"


def run_pipeline(
    stages: Sequence[TrainConfig],
    graphs: Sequence[DataflowGraph],
    cluster: Cluster,
    policy: PolicyConfig | None = None,
    out_dir: str | Path | None = None,
    init: str | Path | None = None,
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
        options: other :class:`~doppler_lab.train.loop.Trainer` arguments (progress, ...).
    """
    if not stages:
        raise ConfigError("a pipeline needs at least one stage")
    results: list[TrainResult] = []
    previous: Any = init
    for i, cfg in enumerate(stages):
        run_dir = stage_dir(out_dir, i, cfg) if out_dir is not None else None
        if run_dir is None and results:
            trainer = Trainer(cfg, graphs, cluster, results[-1].policy, None, **options)
        else:
            trainer = Trainer(cfg, graphs, cluster, policy, run_dir, init=previous, **options)
        res = trainer.run()
        results.append(res)
        previous = res.checkpoint
    return results
