"""The backend interface of the executor (how one is chosen: :mod:`.factory`).

A :class:`Backend` owns real devices. :meth:`Backend.open` prepares one graph on it (inputs
cache, compiled ops) and returns a :class:`BackendSession`, whose :meth:`~BackendSession.run`
executes one :class:`~doppler_lab.executor.plan.ExecutionPlan` once and returns a
:class:`RawRun` (times in seconds from the run's clock start). Callers never see more than this,
so a new backend (for instance one process per device on ``torch.distributed``, with send/recv
for transfers) plugs in without touching them: it implements ``open`` and ``run``.

Backends here:

- ``cpu`` (:class:`~doppler_lab.executor.cpu.CpuBackend`): worker threads as devices.
- ``dist`` (:class:`~doppler_lab.executor.dist.DistBackend`): a worker process per device in a
  ``torch.distributed`` (gloo) group, send/recv for transfers.
- ``cuda`` (:class:`~doppler_lab.executor.streams.StreamBackend` over CUDA streams);
  ``cuda-shared`` puts several logical devices on one GPU (tests the multi-device path).
- ``inline`` (the same stream dispatcher over synchronous CPU "streams"; for tests of the
  dispatcher without a GPU).
"""

from __future__ import annotations

import abc
import os
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..hardware.cluster import Cluster, make_cpu
from ..house.errors import ExecutorError
from ..house.validate import exception_line
from ..ir.graph import DataflowGraph
from .plan import ExecutionPlan

DEFAULT_TIMEOUT_S = 120.0


@dataclass
class RawRun:
    """What one execution measured, in seconds from the clock start.

    Attributes:
        start_s, end_s: ``(N,)`` op start and end (NaN for inputs).
        transfers: ``(src node, first consumer, src device, dst device, start, end, lane)``.
        ready_order: ``(N,)`` the order in which ops became ready (-1 for inputs).
        dispatch_order: ``(N,)`` the order in which ops were launched (-1 for inputs).
        outputs: the graph's results on the host, when asked for.
        info: backend details (threads, lanes, leaked workers).
        peak_bytes: ``(D,)`` the most bytes of live tensors each device held at once (its
            resident inputs and the values in the run's table), or ``None`` when the backend
            does not track them.
    """

    start_s: np.ndarray
    end_s: np.ndarray
    transfers: list[tuple[int, int, int, int, float, float, int]]
    ready_order: np.ndarray
    dispatch_order: np.ndarray
    outputs: dict[int, Any] | None = None
    info: dict[str, Any] = field(default_factory=dict)
    peak_bytes: np.ndarray | None = None

    @property
    def makespan_s(self) -> float:
        ran = ~np.isnan(self.end_s)
        return float(self.end_s[ran].max()) if ran.any() else 0.0


class BackendSession(abc.ABC):
    """One graph prepared on a backend: each input is materialised once per device that
    consumes it (generated on the CPU from its seed, then :meth:`place_input` puts it there; or
    made on the device itself, see :meth:`input_device`) and kept for every later run."""

    def __init__(self, backend: Backend, graph: DataflowGraph, seed: int):
        self.backend = backend
        self.graph = graph
        self.seed = int(seed)
        self._inputs: dict[tuple[int, int], Any] = {}

    def place_input(self, tensor: Any, device: int, first: bool) -> Any:
        """``tensor`` (generated on the CPU) on ``device``; ``first`` when no device has it yet."""
        return tensor

    def input_device(self, device: int) -> Any:
        """The torch device on which device ``device`` makes the inputs that are the same
        wherever they are made (generated weights, ``ones``, ``zeros``), or ``None``: they are
        made on the CPU and placed like the others (the default)."""
        return None

    def resident(self, plan: ExecutionPlan) -> list[list[Any]]:
        """Per device, a slot per node holding the inputs that device consumes. A generated
        weight is made by each device that consumes it (:meth:`input_device`), so a model too
        large for host memory runs where device memory allows."""
        from .torch_ops import input_value, made_on_device

        n, d = plan.num_nodes, plan.num_devices
        bufs: list[list[Any]] = [[None] * n for _ in range(d)]
        for u, devs in plan.input_devices.items():
            host = None
            local = made_on_device(self.graph.specs[u])  # type: ignore[index]
            for k in devs:
                t = self._inputs.get((u, k))
                if t is None:
                    first = host is None and not any((u, j) in self._inputs for j in range(d))
                    target = self.input_device(k) if local else None
                    try:
                        if target is not None:
                            t = input_value(self.graph, u, self.seed, target)
                        else:
                            if host is None:
                                host = input_value(self.graph, u, self.seed)
                            t = self.place_input(host, k, first)
                    except Exception as exc:  # noqa: BLE001 - out of memory, most likely
                        what = f"{failure_verb(exc)} while its input was materialised"
                        raise executor_error(
                            what, op_label(self.graph, u), self.backend.device_label(k), exc
                        ) from exc
                    self._inputs[(u, k)] = t
                bufs[k][u] = t
        return bufs

    @abc.abstractmethod
    def run(self, plan: ExecutionPlan, timeout_s: float, keep_outputs: bool = False) -> RawRun:
        """Execute ``plan`` once. Raises :class:`ExecutorError` naming the op and device on a
        failure, and on a timeout; the session stays usable afterwards."""

    def close(self) -> None:
        """Release cached tensors."""
        self._inputs.clear()


class Backend(abc.ABC):
    """Real devices that run plans.

    Attributes:
        name: ``cpu``, ``cuda``, ...
        cluster: a description of the devices and links for placers and the simulator.
    """

    name: str = ""
    cluster: Cluster

    @property
    def num_devices(self) -> int:
        return self.cluster.num_devices

    def device_label(self, d: int) -> str:
        """How errors name device ``d``."""
        return f"device {d} ({self.cluster.devices[d].name})"

    @abc.abstractmethod
    def open(self, graph: DataflowGraph, seed: int = 0) -> BackendSession:
        """Prepare ``graph`` (inputs from ``seed``) on these devices."""

    def describe(self) -> dict[str, Any]:
        return {"backend": self.name, "cluster": self.cluster.name, "devices": self.num_devices}

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release the devices."""


def tensor_nbytes(x: Any) -> int:
    """Bytes of the tensors in ``x`` (a tensor, or a tuple or list of them), counted by their
    shape and dtype: a view counts as much as the tensor it shows (the graph's ``out_bytes``)."""
    if isinstance(x, tuple | list):
        return sum(tensor_nbytes(y) for y in x)
    numel = getattr(x, "numel", None)
    return int(numel() * x.element_size()) if numel is not None else 0


def default_cpu_devices() -> int:
    """CPU worker devices when none are asked for: 2 on small machines, at most 4."""
    return max(2, min(4, (os.cpu_count() or 2) // 2))


def make_cpu_cluster(num_devices: int) -> Cluster:
    """``hardware.make_cpu``: CPU worker devices sharing the host's memory system."""
    return make_cpu(num_devices)


def failure_verb(exc: BaseException) -> str:
    """``ran out of memory`` for allocation failures, else ``raised``."""
    text = str(exc).lower()
    oom = isinstance(exc, MemoryError) or "out of memory" in text or "can't allocate memory" in text
    return "ran out of memory" if oom else "raised"


def op_label(graph: DataflowGraph, v: int) -> str:
    """How errors name node ``v``: ``'name' (kind 'op')``."""
    spec = graph.specs[v] if graph.specs is not None else None
    name = repr(graph.names[v])
    return name if spec is None else f"{name} ({spec.kind} {spec.op!r})"


def executor_error(
    what: str, op: str, device: str, exc: BaseException | None = None
) -> ExecutorError:
    """The error of op ``op`` (an :func:`op_label`) on ``device``: ``what`` happened."""
    cause = "" if exc is None else f": {exception_line(exc, typed=True)}"
    return ExecutorError(f"op {op} on {device} {what}{cause}")
