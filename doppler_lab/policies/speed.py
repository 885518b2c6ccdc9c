"""How fast a policy places: milliseconds per inference episode and per training episode
(``doppler-lab bench policy`` and the scaling experiment time the same way)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from ..hardware.cluster import Cluster
from ..ir.graph import DataflowGraph

if TYPE_CHECKING:
    from .policy_base import PlacementPolicy


def median_ms(fn: Callable[[], object], repeats: int, warmup: bool = True) -> float:
    """Median wall milliseconds of ``repeats`` calls of ``fn`` (after an untimed call)."""
    if warmup:
        fn()  # warm up (numba, PyG templates)
    ts = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t)
    return float(np.median(ts) * 1e3)


def episode_times(
    policy: PlacementPolicy,
    graph: DataflowGraph,
    cluster: Cluster,
    repeats: int = 5,
    batch: int = 16,
    warmup: bool = True,
    semantics: str | None = None,
) -> dict[str, float]:
    """Milliseconds per inference episode, per training episode (one per update) and per
    training episode in a batch of ``batch`` (one encoder pass shared; ``batch=0``: not
    measured, NaN). ``warmup=False`` skips the untimed first call of each measurement;
    ``semantics`` picks a ``task``-timed policy's estimate."""
    import torch

    from .context import GraphContext
    from .rollout import GREEDY, SAMPLE, Rollout, run_episodes
    from .tensors import flush_denormal

    ctx = GraphContext.for_policy(graph, cluster, policy.config, semantics)
    rng = np.random.default_rng(0)

    def infer() -> None:
        with torch.no_grad():
            Rollout(policy, ctx, policy.encode(ctx), 1, rng, GREEDY, GREEDY).run_placements()

    def train(k: int) -> None:
        enc = policy.encode(ctx)
        ep = run_episodes(policy, ctx, enc, k, rng, SAMPLE, SAMPLE)
        chunk = policy.eval_chunk or k
        for lo in range(0, k, chunk):
            part = ep if chunk >= k else ep.select(slice(lo, lo + chunk))
            t = policy.log_probs(ctx, enc, part)
            loss = -sum(x.sum() for x in (t.sel_logp, t.plc_logp) if x is not None)
            loss.backward(retain_graph=lo + chunk < k)
        policy.zero_grad()

    with flush_denormal():
        return {
            "inference_ms": median_ms(infer, repeats, warmup),
            "train_ms": median_ms(lambda: train(1), repeats, warmup),
            "train_batched_ms": (
                median_ms(lambda: train(batch), max(1, repeats // 2), warmup) / batch
                if batch > 0
                else float("nan")
            ),
        }
