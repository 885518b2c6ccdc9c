"""Stage III's verdict: did training on the real system improve on the policy it started from?

The greedy placement of the policy at the start of the stage and the one at its end are run in
turn on the stage's real devices (A B A B ..., :meth:`~doppler_lab.executor.Executor.compare`),
and the 95% interval of the paired differences decides (:mod:`doppler_lab.house.stats`):
``better``, ``worse`` or ``cannot tell``. The best cost seen during training is no verdict: it
is the minimum of many noisy measurements and favours luck.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from ..house.progress import format_time
from ..policies.context import GraphContext
from ..policies.policy_base import PlacementPolicy
from ..policies.rollout import GREEDY, run_episodes

#: interleaved pairs of the final-against-start measurement (``Trainer(verdict_pairs=...)``)
VERDICT_PAIRS = 10


def greedy_placements(
    policy: PlacementPolicy, contexts: Sequence[GraphContext]
) -> list[np.ndarray]:
    """The policy's greedy placement (device per node) on each graph. Greedy rollouts draw
    nothing; they get a generator of their own so that the training's stream stays as it is."""
    rng = np.random.default_rng(0)
    out = []
    with torch.no_grad():
        for ctx in contexts:
            ep = run_episodes(policy, ctx, policy.encode(ctx), 1, rng, GREEDY, GREEDY)
            out.append(np.asarray(ep.placements[0].device, dtype=np.int64).copy())
    return out


def judge_stage(
    cost_fns: Sequence[Any],
    graph_names: Sequence[str],
    start: Sequence[np.ndarray],
    final: Sequence[np.ndarray],
    pairs: int = VERDICT_PAIRS,
    seed: int = 0,
) -> list[dict[str, Any]]:
    """The final placements against the start ones, per graph, on the real devices of each
    graph's cost function (an :class:`~doppler_lab.executor.ExecutorCost`; graphs with another
    cost function are left out). One row per graph: the medians, ``final - start`` with its
    interval (seconds) and the verdict for the final policy."""
    rows = []
    for cost, name, a, b in zip(cost_fns, graph_names, final, start):
        ex = getattr(cost, "executor", None)
        if ex is None:
            continue
        dispatch = "fifo" if getattr(cost, "dispatch", "fifo") == "simulated" else cost.dispatch
        runs = ex.compare(a, b, pairs=pairs, warmup=1, dispatch=dispatch, seed=seed)
        rows.append(
            {
                "graph": name,
                "start_s": float(np.median(runs.makespans_b_s)),
                "final_s": float(np.median(runs.makespans_a_s)),
                "same_placement": bool(np.array_equal(a, b)),
                **runs.stats.to_dict(),
            }
        )
    return rows


def verdict_line(row: dict[str, Any]) -> str:
    """One line for people: ``stage III on chainmm: final 1.2 ms against start 1.4 ms,
    final - start -0.2 ms (95% interval -0.3 ms to -0.1 ms, 10 pairs): better``."""
    return (
        f"stage III on {row['graph']}: final {format_time(row['final_s'])} against start "
        f"{format_time(row['start_s'])}, final - start {format_time(row['mean'])} "
        f"({row['confidence']:.0%} interval {format_time(row['low'])} to "
        f"{format_time(row['high'])}, {row['n']} interleaved pairs): {row['verdict']}"
        + (" (the same placement)" if row["same_placement"] else "")
    )
