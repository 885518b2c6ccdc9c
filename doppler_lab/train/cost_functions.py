"""Cost functions for training: any callable ``placement -> float`` (lower is better).

:class:`SimulatorCost` (Stages I and II) also evaluates many placements in one batched call;
Stage III uses :class:`doppler_lab.executor.ExecutorCost`. The REINFORCE loop only needs the
callable; ``batch`` and ``get_state``/``set_state`` (exact resume with noise) are optional.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np

from ..hardware.cluster import Cluster
from ..house.errors import ConfigError
from ..ir.graph import DataflowGraph
from ..ir.placement import Placement
from ..timing.cost_model import CostModel
from ..timing.memory import memory_caps
from ..timing.sim import Simulator


class CostFunction(Protocol):
    """``cost(placement) -> float``, e.g. a makespan."""

    def __call__(self, placement: Placement) -> float: ...


#: a placement over a memory cap costs this many times its makespan (and more with the excess,
#: :meth:`SimulatorCost.batch`): Stage II learns to keep to the caps without a cliff of inf
OVER_CAP_PENALTY = 2.0


class SimulatorCost:
    """Simulated makespan (reported units) of a placement.

    Args:
        graph: the graph.
        cluster: the cluster.
        semantics: ``paper``, ``wc`` or ``bsp``.
        noise: lognormal duration noise sigma (0: deterministic).
        seed: seed of the noise stream.
        cost_model: a prepared cost model (e.g. a calibrated one; default: built from the
            cluster).

    Attributes:
        calls: placements evaluated so far.
    """

    def __init__(
        self,
        graph: DataflowGraph,
        cluster: Cluster | str,
        semantics: str = "paper",
        noise: float = 0.0,
        seed: int | np.random.SeedSequence = 0,
        cost_model: CostModel | None = None,
    ):
        self.sim = Simulator(graph, cluster, semantics, noise, cost_model)  # type: ignore[arg-type]
        self.rng = np.random.default_rng(seed)
        self.calls = 0
        from ..timing.fit import cap_can_bind

        #: the memory caps where one can bind (else None: makespans as they are)
        self.caps = memory_caps(self.sim.cluster) if cap_can_bind(graph, self.sim.cluster) else None

    def __call__(self, placement: Placement) -> float:
        return float(self.batch([placement])[0])

    def batch(self, placements: Sequence[Placement]) -> np.ndarray:
        """Makespans of many placements, simulated in parallel."""
        self.calls += len(placements)
        spans = self.sim.makespans(list(placements), rng=self.rng if self.sim.noise else None)
        if self.caps is not None:
            spans = self._over_cap_penalty(placements, np.asarray(spans, dtype=np.float64))
        return spans

    def _over_cap_penalty(self, placements: Sequence[Placement], spans: np.ndarray) -> np.ndarray:
        """Makespans of placements over a memory cap (their static bound and their simulated
        peak under this semantics) times :data:`OVER_CAP_PENALTY` and one plus the excess
        over the caps' total: worse than any placement that fits, less so the nearer it is."""
        from ..timing.fit import static_bounds

        caps = self.caps
        assert caps is not None
        rows = np.stack([np.asarray(p.device, dtype=np.int64) for p in placements])
        bounds = static_bounds(self.sim.graph, rows, caps.size)
        out = spans.copy()
        total = float(np.sum(caps))
        for k in np.flatnonzero(np.any(bounds > caps, axis=1)):
            peak = self.sim.run(placements[k]).peak_memory_bytes
            if peak is None:
                continue
            excess = float(np.maximum(np.asarray(peak) - caps, 0.0).sum())
            if excess > 0:
                out[k] = spans[k] * OVER_CAP_PENALTY * (1.0 + excess / total)
        return out

    def lower_bound(self) -> float:
        return self.sim.lower_bound()

    def get_state(self) -> dict[str, Any]:
        return {"rng": self.rng.bit_generator.state, "calls": self.calls}

    def set_state(self, state: dict[str, Any]) -> None:
        self.rng.bit_generator.state = state["rng"]
        self.calls = int(state["calls"])


def evaluate_costs(cost: CostFunction, placements: Sequence[Placement]) -> np.ndarray:
    """Costs of ``placements`` (batched when the cost function can).

    Torch's thread count is restored afterwards: a user's cost function (the executor's CPU
    workers, a foreign simulator with OpenMP) may change it, and results of reductions depend on it.
    """
    from ..policies.tensors import keep_torch_threads

    batch = getattr(cost, "batch", None)
    with keep_torch_threads():
        if batch is not None:
            return np.asarray(batch(placements), dtype=np.float64)
        return np.array([float(cost(p)) for p in placements])


def make_executor_cost(graph: DataflowGraph, cluster: Cluster, repeats: int) -> CostFunction:
    """The measured makespan on the real executor (Stage III), imported lazily."""
    try:
        from ..executor import ExecutorCost
    except ImportError as exc:
        raise ConfigError(
            "--stage real needs doppler_lab.executor.ExecutorCost, which cannot be imported "
            f"here ({exc}); train with --stage sim, or install the executor"
        ) from None
    return ExecutorCost(graph, cluster, repeats=repeats)
