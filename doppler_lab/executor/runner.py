"""The caller's side of the executor: :class:`Executor`, :func:`execute` and the result types.

An :class:`Executor` holds one graph prepared on one backend (inputs materialised lazily on the
devices that consume them, ops compiled once) and runs placements of it: warm-up runs, then
``repeats`` timed runs, each a fresh work-conserving execution. The result's trace is the repeat
whose makespan is the median, in seconds, ``semantics="measured"`` -- the same :class:`Trace`
type the simulator returns. Its ``peak_memory_bytes`` is what that repeat measured: the live
tensors' bytes per device on CPU workers, ``torch.cuda.max_memory_allocated`` per GPU on CUDA
(each run's per-GPU figure is also in ``meta["cuda_max_memory_allocated_bytes"]``); ``None``
for backends that measure neither (``dist``, ``inline``, ``cuda-shared``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from ..hardware.cluster import Cluster
from ..house.errors import ConfigError
from ..house.progress import live
from ..house.progress import progress as show
from ..house.stats import PairedStats
from ..house.stats import compare as compare_paired
from ..ir.graph import DataflowGraph
from ..ir.placement import Placement
from ..ir.trace import Trace, kind_names
from .backend import DEFAULT_TIMEOUT_S, Backend, BackendSession, RawRun
from .factory import make_backend
from .plan import ExecutionPlan, check_executable, compile_ops, make_plan
from .replay import ReplaySchedule, simulated_schedule

#: (rtol, atol) for comparing outputs, per dtype: partitioned sums add in another order
TOLERANCES: dict[str, tuple[float, float]] = {
    "float64": (1e-7, 1e-9),
    "float32": (1e-3, 1e-4),
    "bfloat16": (5e-2, 5e-2),
    "float16": (1e-2, 1e-2),
}


class OutputCheck(NamedTuple):
    """Outcome of :func:`compare_outputs`."""

    ok: bool
    max_abs_error: float
    worst: str | None


def compare_outputs(
    graph: DataflowGraph, outputs: Mapping[int, Any], reference: Mapping[int, Any]
) -> OutputCheck:
    """Whether ``outputs`` equal ``reference`` (allclose per dtype, see :data:`TOLERANCES`).

    Returns the verdict, the largest absolute difference and the name of the worst output (or
    of the first missing one)."""
    import torch

    worst, worst_err, ok = None, 0.0, True
    for v, ref in reference.items():
        out = outputs.get(v)
        if out is None or tuple(out.shape) != tuple(ref.shape):
            return OutputCheck(False, float("inf"), graph.names[v])
        rtol, atol = TOLERANCES.get(graph.specs[v].dtype, (1e-3, 1e-4))  # type: ignore[index, union-attr]
        a, b = out.to(torch.float64), ref.to(torch.float64)
        # NaN where the reference has NaN, and the same infinity, are equal values
        same = (a == b) | (torch.isnan(a) & torch.isnan(b))
        diff = torch.where(same, 0.0, (a - b).abs()).nan_to_num(nan=math.inf)
        err = float(diff.max()) if a.numel() else 0.0
        finite = b[torch.isfinite(b)]
        scale = max(1.0, float(finite.abs().max())) if finite.numel() else 1.0
        if not torch.allclose(a, b, rtol=rtol, atol=atol * scale, equal_nan=True):
            ok = False
        if worst is None or err > worst_err:
            worst, worst_err = graph.names[v], err
    return OutputCheck(ok, worst_err, worst)


@dataclass(frozen=True, eq=False)
class ExecutionResult:
    """Repeated measurements of one placement.

    Attributes:
        trace: the repeat whose makespan is closest to the median (seconds).
        makespans_s: the makespan of every timed repeat, in order.
        outputs: the graph's results (node id -> CPU tensor) of the last repeat, when asked for.
    """

    trace: Trace
    makespans_s: np.ndarray
    outputs: dict[int, Any] | None = None

    @property
    def makespan(self) -> float:
        """Median makespan over the repeats (seconds)."""
        return float(np.median(self.makespans_s))


@dataclass(frozen=True, eq=False)
class PairedRuns:
    """Two placements measured in turn (:meth:`Executor.compare`).

    Attributes:
        makespans_a_s, makespans_b_s: the makespans of A's and B's timed runs, pair by pair.
        stats: the statistics of ``A - B`` and the verdict for A (``better``, ``worse`` or
            ``cannot tell``; lower makespans are better).
    """

    makespans_a_s: np.ndarray
    makespans_b_s: np.ndarray
    stats: PairedStats


class Executor:
    """One executable graph prepared on real devices.

    Args:
        graph: a graph whose every node has an op spec (a generated workload, or JSON).
        backend: ``cpu`` (default), ``dist``, ``cuda``, ``cuda-shared``, ``inline``, a
            cluster/profile JSON path, a :class:`Cluster` or a :class:`Backend`.
        num_devices: devices for the named backends.
        seed: input seed (inputs are the same for every placement).
        timeout_s: a run that has not ended after this long raises :class:`ExecutorError`.
        threads_per_device: intra-op threads of each CPU worker.

    Example:
        >>> from doppler_lab.workloads import build
        >>> from doppler_lab.ir.placement import round_robin
        >>> g = build("chainmm", scale=0.01)
        >>> with Executor(g, "cpu", num_devices=2) as ex:
        ...     result = ex.run(round_robin(g, 2), repeats=3, warmup=1)
        >>> result.trace.semantics, result.makespan > 0
        ('measured', True)
    """

    def __init__(
        self,
        graph: DataflowGraph,
        backend: str | Cluster | Backend = "cpu",
        *,
        num_devices: int | None = None,
        seed: int = 0,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        threads_per_device: int | None = None,
    ):
        check_executable(graph)
        if not (np.isfinite(timeout_s) and timeout_s > 0):
            raise ConfigError(f"timeout_s must be a finite number > 0, got {timeout_s}")
        self.graph = graph
        self.seed = int(seed)
        self.timeout_s = float(timeout_s)
        self._owns_backend = not isinstance(backend, Backend)
        self.backend = make_backend(backend, num_devices, threads_per_device)
        self._fns = compile_ops(graph)
        self._session: BackendSession | None = None

    @property
    def cluster(self) -> Cluster:
        """The devices, as a cluster description (for placers and the simulator)."""
        return self.backend.cluster

    @property
    def num_devices(self) -> int:
        return self.backend.num_devices

    def plan(
        self,
        placement: Placement | np.ndarray | Sequence[int],
        dispatch: str = "fifo",
        schedule: ReplaySchedule | None = None,
    ) -> ExecutionPlan:
        """The execution plan of ``placement`` (validated against the graph and devices). For
        ``dispatch="simulated"`` without a ``schedule``: the replay of ``placement`` simulated on
        :attr:`cluster` (``wc`` semantics, its roofline)."""
        pl = placement if isinstance(placement, Placement) else Placement(np.asarray(placement))
        if dispatch == "simulated":
            if self.backend.name != "cpu":
                raise ConfigError(
                    f"dispatch 'simulated' replays on the cpu backend only; the "
                    f"{self.backend.name!r} backend takes 'fifo' or 'priority'"
                )
            if schedule is None:
                pl.validate(self.graph, self.num_devices)
                schedule = simulated_schedule(self.graph, self.cluster, pl)
        return make_plan(
            self.graph, pl, self.num_devices, dispatch, fns=self._fns, schedule=schedule
        )

    def _session_(self) -> BackendSession:
        if self._session is None:
            self._session = self.backend.open(self.graph, self.seed)
        return self._session

    def run(
        self,
        placement: Placement | np.ndarray | Sequence[int],
        *,
        repeats: int = 1,
        warmup: int = 0,
        dispatch: str = "fifo",
        keep_outputs: bool = False,
        progress: bool = False,
        schedule: ReplaySchedule | None = None,
    ) -> ExecutionResult:
        """Run ``placement`` ``warmup`` times untimed, then ``repeats`` times timed.

        Args:
            placement: a device per node (and a priority for ``dispatch="priority"``).
            repeats: timed runs (>= 1); the trace is the median one.
            warmup: untimed runs first (allocator, caches, lazy initialisation).
            dispatch: ``fifo`` (ready order, ties by node id), ``priority`` or ``simulated``
                (each device allocates and releases in the order of a simulated run, so its
                peak memory is the simulated one; CPU workers only, see
                :mod:`~doppler_lab.executor.replay`).
            keep_outputs: return the graph's results of the last run (on the CPU).
            progress: a bar over the runs on stderr.
            schedule: the simulated run that ``simulated`` replays
                (:meth:`ReplaySchedule.from_trace`; default: :meth:`plan` simulates one).
        """
        if repeats < 1 or warmup < 0:
            raise ConfigError(f"repeats must be >= 1 and warmup >= 0, got {repeats} and {warmup}")
        plan = self.plan(placement, dispatch, schedule)
        session = self._session_()
        desc = f"{self.graph.name} on {self.backend.name}"
        gpus = self._cuda_gpus()
        raws: list[RawRun] = []
        bar = show(total=warmup + repeats, desc=desc, enabled=progress, unit="run")
        with bar, live(bar):
            for i in range(-warmup, repeats):
                bar.set_postfix_str("warm-up" if i < 0 else f"timed {i + 1}/{repeats}")
                if gpus:
                    _reset_cuda_peaks(gpus)
                raw = session.run(
                    plan, self.timeout_s, keep_outputs=keep_outputs and i == repeats - 1
                )
                if gpus:
                    _record_cuda_peaks(raw, gpus, self.backend.api)  # type: ignore[attr-defined]
                if i >= 0:
                    raws.append(raw)
                bar.update(1)
        makespans = np.array([r.makespan_s for r in raws])
        pick = int(np.argmin(np.abs(makespans - np.median(makespans))))
        trace = self._trace(plan, raws[pick], dispatch, makespans, pick, warmup)
        outputs = raws[-1].outputs
        if outputs is not None:
            outputs = {v: t.detach().to("cpu") for v, t in outputs.items()}
        return ExecutionResult(trace, makespans, outputs)

    def compare(
        self,
        a: Placement | np.ndarray | Sequence[int],
        b: Placement | np.ndarray | Sequence[int],
        *,
        pairs: int = 10,
        warmup: int = 1,
        dispatch: str = "fifo",
        progress: bool = False,
        seed: int = 0,
    ) -> PairedRuns:
        """Placement ``a`` against ``b`` by paired, interleaved runs (A B A B ...): slow drift
        of the machine (load, clocks, caches) falls on both alike, and the verdict comes from
        the 95% interval of the paired differences (:func:`~doppler_lab.house.stats.compare`).

        Args:
            a, b: the two placements.
            pairs: timed runs of each (the number of pairs).
            warmup: untimed runs of each first (A B A B ...).
            dispatch: as :meth:`run` (``fifo`` or ``priority``).
            progress: a bar over the runs on stderr.
            seed: the bootstrap's seed.
        """
        if pairs < 1 or warmup < 0:
            raise ConfigError(f"pairs must be >= 1 and warmup >= 0, got {pairs} and {warmup}")
        plans = (self.plan(a, dispatch), self.plan(b, dispatch))
        session = self._session_()
        spans: tuple[list[float], list[float]] = ([], [])
        total = 2 * (warmup + pairs)
        bar = show(total=total, desc=f"{self.graph.name}: A vs B", enabled=progress, unit="run")
        with bar, live(bar):
            for i in range(-warmup, pairs):
                for k, plan in enumerate(plans):
                    raw = session.run(plan, self.timeout_s)
                    if i >= 0:
                        spans[k].append(raw.makespan_s)
                    bar.update(1)
        ma, mb = np.array(spans[0]), np.array(spans[1])
        return PairedRuns(ma, mb, compare_paired(ma, mb, seed=seed))

    def _cuda_gpus(self) -> list[int]:
        """The GPUs of a CUDA stream backend (empty for every other backend)."""
        api = getattr(self.backend, "api", None)
        if getattr(api, "kind", None) != "cuda":
            return []
        return sorted(set(api.gpus))  # type: ignore[union-attr]

    def makespan(self, placement: Placement | np.ndarray | Sequence[int], **kwargs: Any) -> float:
        """Median measured makespan of ``placement`` (keywords as :meth:`run`)."""
        return self.run(placement, **kwargs).makespan

    def _trace(
        self,
        plan: ExecutionPlan,
        raw: RawRun,
        dispatch: str,
        makespans: np.ndarray,
        pick: int,
        warmup: int,
    ) -> Trace:
        g = self.graph
        tr = raw.transfers
        src = np.array([t[0] for t in tr], dtype=np.int64)
        return Trace(
            graph_name=g.name,
            names=g.names,
            kinds=kind_names(g),
            device=plan.device,
            start=raw.start_s,
            end=raw.end_s,
            transfer_src=src,
            transfer_dst=np.array([t[1] for t in tr], dtype=np.int64),
            transfer_src_device=np.array([t[2] for t in tr], dtype=np.int64),
            transfer_dst_device=np.array([t[3] for t in tr], dtype=np.int64),
            transfer_start=np.array([t[4] for t in tr], dtype=np.float64),
            transfer_end=np.array([t[5] for t in tr], dtype=np.float64),
            transfer_link=np.array([t[6] for t in tr], dtype=np.int64),
            num_devices=self.num_devices,
            semantics="measured",
            link_names=self.cluster.link_names,
            peak_memory_bytes=raw.peak_bytes,
            meta={
                **self.backend.describe(),
                "seed": self.seed,
                "dispatch": dispatch,
                "warmup": warmup,
                "repeats": int(makespans.size),
                "makespans_s": makespans.tolist(),
                "median_makespan_s": float(np.median(makespans)),
                "repeat_shown": pick,
                "ready_order": raw.ready_order.tolist(),
                "dispatch_order": raw.dispatch_order.tolist(),
                **raw.info,
            },
        )

    def close(self) -> None:
        """Release cached inputs (and the backend, when this executor made it)."""
        if self._session is not None:
            self._session.close()
            self._session = None
        if self._owns_backend:
            self.backend.close()

    def __enter__(self) -> Executor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _reset_cuda_peaks(gpus: list[int]) -> None:
    import torch

    for g in gpus:
        torch.cuda.reset_peak_memory_stats(g)


def _record_cuda_peaks(raw: RawRun, gpus: list[int], api: Any) -> None:
    """``torch.cuda.max_memory_allocated`` of each GPU during the run into ``raw.info``; and,
    when each logical device has a GPU of its own and the backend tracked nothing, as the run's
    peak per device (every tensor the run allocated there, its resident inputs included)."""
    import torch

    peaks = {g: float(torch.cuda.max_memory_allocated(g)) for g in gpus}
    raw.info["cuda_max_memory_allocated_bytes"] = {str(g): peaks[g] for g in gpus}
    if raw.peak_bytes is None and not getattr(api, "shared", False):
        raw.peak_bytes = np.array([peaks[g] for g in api.gpus], dtype=np.float64)


def execute(
    graph: DataflowGraph,
    placement: Placement | np.ndarray | Sequence[int],
    backend: str | Cluster | Backend = "cpu",
    *,
    num_devices: int | None = None,
    repeats: int = 1,
    warmup: int = 0,
    dispatch: str = "fifo",
    seed: int = 0,
    timeout_s: float = DEFAULT_TIMEOUT_S,
) -> Trace:
    """Run ``placement`` of ``graph`` for real; the measured :class:`Trace` (median repeat).

    Its run options are keyword-only with defaults already (``doppler-lab execute``'s flags): a
    config object would not read better.
    """
    with Executor(graph, backend, num_devices=num_devices, seed=seed, timeout_s=timeout_s) as ex:
        return ex.run(placement, repeats=repeats, warmup=warmup, dispatch=dispatch).trace
