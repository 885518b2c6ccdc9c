"""What real runs cost: a cost function for training on the real system (placement ->
measured makespan), and what the cost model predicts a run will take before it starts."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import numpy as np

from ..errors import ConfigError
from ..graph import DataflowGraph
from ..hardware import Cluster, CostModel, make_cpu
from ..placement import Placement, single_device
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
) -> ExecutionPrediction:
    """The simulator's prediction of ``runs`` executions of ``placement`` on ``cluster`` (plus the
    reference run of an output check, which runs on one CPU device of the host).

    Args:
        graph: the graph to run.
        cluster: its devices (a calibration profile's cluster predicts best).
        placement: a device per node.
        runs: warm-up plus timed executions.
        reference: whether a single-device reference run follows (``--check``).
        dispatch: ``fifo`` or ``priority``.
        cost_model: measured op times (a profile's :meth:`cost_model`); default: the roofline.

    Example:
        >>> from doppler_lab.workloads import build
        >>> from doppler_lab.hardware import make_cpu
        >>> from doppler_lab.placement import round_robin
        >>> g = build("chainmm", scale=0.01)
        >>> p = predict_execution(g, make_cpu(2), round_robin(g, 2), runs=4, reference=True)
        >>> p.total_s > 4 * p.run_s > 0
        True
    """
    from ..sim import Simulator

    pl = placement if isinstance(placement, Placement) else Placement(np.asarray(placement))
    run_s = Simulator(graph, cluster, "wc", cost_model=cost_model).makespan(pl, dispatch=dispatch)
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


def scale_within(
    spec: str, predict_s: Callable[[DataflowGraph], float], budget_s: float = 60.0
) -> tuple[float, float] | None:
    """The largest round ``scale`` of workload ``spec`` whose predicted time fits ``budget_s``.

    Tries round values (``0.5``, ``0.25``, ``0.1``, ...) below the spec's own scale, starting
    from the cube-law guess (matmul flops grow with the cube of the scale) and stepping down or
    up by what :func:`predict_s` says of each built graph.

    Returns:
        ``(scale, predicted seconds)``, or ``None`` when ``spec`` is not a workload with a
        numeric ``scale`` or no round value below it fits.

    Example:
        >>> scale_within("chainmm", lambda g: g.flops.sum() / 1e12, budget_s=1.0)
        (0.5, 0.824...)
    """
    from ..errors import DopplerLabError
    from ..workloads import WORKLOADS, build, parse_spec

    if spec.partition(":")[0].strip() not in WORKLOADS:  # a file or an imported model
        return None
    name, params = parse_spec(spec)
    default = inspect.signature(WORKLOADS[name]).parameters.get("scale")
    scale0 = params.get("scale", None if default is None else default.default)
    if isinstance(scale0, bool) or not isinstance(scale0, int | float) or scale0 <= 0:
        return None
    ladder = [v for v in _round_values() if v < scale0]
    seen: dict[int, float | None] = {}

    def fits(i: int) -> bool:
        if i not in seen:
            try:
                seen[i] = float(predict_s(build(name, **{**params, "scale": ladder[i]})))
            except DopplerLabError:  # too small for its blocks
                seen[i] = None
        t = seen[i]
        return t is not None and t <= budget_s

    if not ladder:
        return None
    whole = float(predict_s(build(name, **{**params, "scale": scale0})))
    guess = scale0 * (budget_s / whole) ** (1 / 3) if whole > 0 else scale0
    i = next((k for k, v in enumerate(ladder) if v <= guess), len(ladder) - 1)
    while not fits(i):
        if i + 1 >= len(ladder) or seen[i] is None:
            return None
        i += 1
    while i > 0 and fits(i - 1):
        i -= 1
    return ladder[i], seen[i]  # type: ignore[return-value]


def _round_values() -> list[float]:
    """Round scales, largest first: 7.5, 5, 2.5, 2, 1, 0.75, 0.5, 0.25, 0.2, 0.1, ... 0.001."""
    out = [k * 10.0**e for e in range(0, -4, -1) for k in (7.5, 5.0, 2.5, 2.0, 1.0)]
    return [round(v, 6) for v in out]
