"""A cost function for training on the real system: placement -> measured makespan."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ..errors import ConfigError
from ..graph import DataflowGraph
from ..hardware import Cluster
from ..placement import Placement
from ..trace import Trace
from .backend import DEFAULT_TIMEOUT_S, Backend
from .runner import Executor

COST_STATS: tuple[str, ...] = ("median", "mean", "min")


class ExecutorCost:
    """``cost(placement) -> float``: the measured makespan (seconds), robust over repeats.

    Each call runs ``warmup`` untimed executions, then ``repeats`` timed ones, and returns their
    ``stat``. The policy engineer's REINFORCE trainer takes any such callable (Stage III).

    Args:
        graph: an executable graph.
        cluster_or_backend: ``cpu``, ``cuda``, a cluster/profile JSON, a :class:`Cluster`, a
            :class:`Backend` or an :class:`Executor` (of ``graph``).
        repeats: timed runs per call.
        warmup: untimed runs per call.
        stat: ``median`` (default), ``mean`` or ``min`` over the repeats.
        dispatch: ``fifo`` or ``priority`` (placements then need a priority).
        num_devices: devices for ``cpu``/``cuda``.
        seed: input seed.
        timeout_s: per-run timeout.

    Attributes:
        calls: how many placements were measured.
        last_trace: the trace of the last call (median repeat).

    Example:
        >>> cost = ExecutorCost(graph, "cpu", repeats=3, warmup=1)  # doctest: +SKIP
        >>> seconds = cost(placement)  # doctest: +SKIP
    """

    def __init__(
        self,
        graph: DataflowGraph,
        cluster_or_backend: str | Cluster | Backend | Executor = "cpu",
        repeats: int = 3,
        warmup: int = 1,
        stat: str = "median",
        *,
        dispatch: str = "fifo",
        num_devices: int | None = None,
        seed: int = 0,
        timeout_s: float = DEFAULT_TIMEOUT_S,
    ):
        if stat not in COST_STATS:
            raise ConfigError(f"unknown stat {stat!r}; expected one of {COST_STATS}")
        if repeats < 1 or warmup < 0:
            raise ConfigError(f"repeats must be >= 1 and warmup >= 0, got {repeats} and {warmup}")
        if isinstance(cluster_or_backend, Executor):
            if cluster_or_backend.graph is not graph:
                raise ConfigError(
                    f"the executor given runs graph {cluster_or_backend.graph.name!r}, not {graph.name!r}"
                )
            self.executor = cluster_or_backend
            self._owns = False
        else:
            self.executor = Executor(
                graph, cluster_or_backend, num_devices=num_devices, seed=seed, timeout_s=timeout_s
            )
            self._owns = True
        self.graph = graph
        self.repeats = int(repeats)
        self.warmup = int(warmup)
        self.stat = stat
        self.dispatch = dispatch
        self.calls = 0
        self.last_trace: Trace | None = None

    @property
    def num_devices(self) -> int:
        return self.executor.num_devices

    @property
    def cluster(self) -> Cluster:
        return self.executor.cluster

    def __call__(self, placement: Placement | np.ndarray | Sequence[int]) -> float:
        result = self.executor.run(
            placement, repeats=self.repeats, warmup=self.warmup, dispatch=self.dispatch
        )
        self.calls += 1
        self.last_trace = result.trace
        m = result.makespans_s
        if self.stat == "median":
            return float(np.median(m))
        if self.stat == "mean":
            return float(np.mean(m))
        return float(np.min(m))

    def close(self) -> None:
        if self._owns:
            self.executor.close()

    def __enter__(self) -> ExecutorCost:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
