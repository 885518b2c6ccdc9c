"""What real runs cost: a cost function for training on the real system (placement ->
measured makespan), and what the cost model predicts a run will take before it starts."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np

from ..hardware.cluster import Cluster, make_cpu
from ..house.errors import ConfigError
from ..ir.graph import DataflowGraph
from ..ir.placement import Placement, single_device
from ..ir.trace import Trace
from ..timing.cost_model import CostModel
from .backend import DEFAULT_TIMEOUT_S, Backend
from .runner import Executor

COST_STATS: tuple[str, ...] = ("median", "mean", "min")


class ExecutorCost:
    """``cost(placement) -> float``: the measured makespan (seconds), robust over repeats.

    Each call runs ``warmup`` untimed executions, then ``repeats`` timed ones, and returns their
    ``stat``. The policy engineer's REINFORCE trainer takes any such callable (Stage III).
    Its keyword-only options are :func:`~doppler_lab.executor.runner.execute`'s, flat as there.

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


class ExecutionPrediction(NamedTuple):
    """What the cost model predicts for running one placement (seconds).

    Attributes:
        run_s: one execution of the placement (the simulator's ``wc`` makespan).
        runs: executions (warm-up and timed).
        reference_s: the single-device reference run of an output check (0 without one).
        flops: floating-point operations of one execution.
        num_devices: devices the placement runs on.
    """

    run_s: float
    runs: int
    reference_s: float
    flops: float
    num_devices: int

    @property
    def total_s(self) -> float:
        """Every run plus the reference."""
        return self.runs * self.run_s + self.reference_s


def predict_execution(
    graph: DataflowGraph,
    cluster: Cluster,
    placement: Placement | np.ndarray | Sequence[int],
    *,
    runs: int = 1,
    reference: bool = False,
    dispatch: str = "fifo",
    cost_model: CostModel | None = None,
    sharing: Any = None,
) -> ExecutionPrediction:
    """The simulator's prediction of ``runs`` executions of ``placement`` on ``cluster`` (plus the
    reference run of an output check, which runs on one CPU device of the host).

    Args:
        graph: the graph to run.
        cluster: its devices (a calibration profile's cluster predicts best).
        placement: a device per node.
        runs: warm-up plus timed executions.
        reference: whether a single-device reference run follows (``--check``).
        dispatch: ``fifo``, ``priority`` or ``simulated`` (the replay of the FIFO simulation,
            predicted as that simulation).
        cost_model: measured op times (a profile's :meth:`cost_model`); default: the roofline.
        sharing: which devices share a GPU and the host's time per launch
            (:class:`~doppler_lab.timing.contention.Sharing`; the stream backends' ``sharing``): the
            run is then predicted with contention (FIFO dispatch).

    Example:
        >>> from doppler_lab.workloads import build
        >>> from doppler_lab.hardware import make_cpu
        >>> from doppler_lab.ir.placement import round_robin
        >>> g = build("chainmm", scale=0.01)
        >>> p = predict_execution(g, make_cpu(2), round_robin(g, 2), runs=4, reference=True)
        >>> p.total_s > 4 * p.run_s > 0
        True
    """
    from ..timing.sim import Simulator

    pl = placement if isinstance(placement, Placement) else Placement(np.asarray(placement))
    if dispatch == "simulated":
        dispatch = "fifo"
    if sharing is not None and dispatch == "fifo":
        from ..timing.contention import contended_makespan

        model = cost_model if cost_model is not None else CostModel(graph, cluster)
        run_s = contended_makespan(graph, cluster, model, pl, sharing) / graph.time_scale
    else:
        run_s = Simulator(graph, cluster, "wc", cost_model=cost_model).makespan(
            pl, dispatch=dispatch
        )
    reference_s = 0.0
    if reference:
        on_cpu = all(dev.kind == "cpu" for dev in cluster.devices)
        host, model = (cluster, cost_model) if on_cpu else (make_cpu(1), None)
        single = single_device(graph, host.num_devices)
        reference_s = Simulator(graph, host, "wc", cost_model=model).makespan(single)
    flops = float(graph.flops[graph.compute_nodes].sum())
    return ExecutionPrediction(
        float(run_s), int(runs), float(reference_s), flops, cluster.num_devices
    )
