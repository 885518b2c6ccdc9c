"""Stream backends: one host thread dispatching onto asynchronous per-device streams.

The CUDA backend gives every GPU one compute stream and two copy streams: an *egress* stream on
which the GPU's outgoing peer copies run (torch runs a cross-device ``copy_`` on the source's
current stream), and an *ingress* stream that torch's copy barrier uses on the receiving side,
so copies into one GPU are served one after another. Transfers therefore occupy the sender's
out-port and the receiver's in-port, like the ``wc`` simulator's switch routes, and they never
block compute streams. Events give dependencies and timing (``elapsed_time`` from a start event
recorded on every device after a full synchronisation).

Dispatch is work-conserving with a bounded look-ahead. The host keeps a ready queue per device
(FIFO by readiness, ties by node id, or by priority):

- an op whose inputs are all produced on its own device is ready as soon as those producers are
  *enqueued* (stream order makes it safe), so the host can run ahead of the GPU;
- an input from another device counts only once its copy has *completed* (polled event), so a
  compute stream never waits on a transfer and a later ready op is never stuck behind it;
- at most ``window`` ops are in flight per device (enqueued, completion not yet seen), which
  bounds how far the enqueue order can run ahead of the dynamic ready order;
- a copy is enqueued when the host sees its producer complete.

Memory: a tensor is dropped as soon as nothing on its device needs it; tensors read or written
on another stream are marked with ``record_stream`` so the caching allocator never reuses them
early.

Host cost: one thread launches every op, so its bookkeeping per op bounds how fast tiny ops
can go. What does not change between runs of a plan (events, the calls that record and poll
them, operand slots, releases, copies) is prepared once per plan (:class:`_Program`) and the
loop is one function over local variables; ``RawRun.info["host_loop_s"]`` is its wall time
(``doppler-lab gpu-check`` reports it per op). The CUDA calls per op are few:

- one event per op, recorded after it: its start is the later of the previous op's end on
  its stream and the host's clock when it launched it (measured from the time origin's host
  clock; the launch reaches the GPU microseconds later), so a trace's starts are as good as
  the host's launch latency;
- a stream is made current only when another one is current on that GPU (:meth:`CudaApi.use`):
  a copy leaves its egress (and ingress) streams current for the next copy, and the next op
  on that GPU switches back; on shared GPUs the devices of a GPU take turns in starting each
  pass of the launch loop, so a pass that launches one op per device switches once per GPU,
  not once per op;
- ops whose completion nothing waits for (no copies, the device's window not full) are polled
  together: one query of the newest tells that all before it have completed (a stream runs in
  order).

``tests/executor/test_stream_calls.py`` counts these calls through a stand-in of the CUDA API.

The ``inline`` backend runs the same dispatcher over synchronous CPU "streams" whose events
complete after a configurable number of polls: it tests the dispatcher on machines without a GPU
(it is not a performance backend).
"""

from __future__ import annotations

import abc
import contextlib
import functools
import heapq
import operator
import time
from collections import deque
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from ..hardware.cluster import GB, Cluster
from ..house.errors import ConfigError, ExecutorError
from ..ir.graph import DataflowGraph
from .backend import Backend, BackendSession, RawRun, executor_error, failure_verb, op_label
from .plan import ExecutionPlan

DEFAULT_WINDOW = 2


class StreamApi(abc.ABC):
    """The device primitives the stream dispatcher needs."""

    kind: str = ""

    def __init__(self, num_devices: int):
        self.num_devices = num_devices

    @abc.abstractmethod
    def device(self, d: int) -> torch.device:
        """The torch device of device ``d``."""

    @abc.abstractmethod
    def event(self, d: int) -> Any:
        """A new timing event for device ``d``."""

    def begin(self) -> None:  # noqa: B027 - optional hook
        """Make the compute streams current (before dispatching)."""

    def end(self) -> None:  # noqa: B027 - optional hook
        """Restore the streams that were current before :meth:`begin`."""

    shared: bool = False
    #: whether operands, results and copies are checked to live on their device (inline-strict)
    strict: bool = False
    #: whether ops must :meth:`activate` their device before launching (a copy may leave
    #: another stream current)
    switches: bool = False

    def activate(self, d: int) -> None:  # noqa: B027 - optional hook
        """Make device ``d``'s compute stream current (when devices share a GPU)."""

    def scope(self, d: int) -> contextlib.AbstractContextManager[Any]:
        """A context in which torch factories (``torch.arange``, ``torch.eye``, ...) make their
        tensors on device ``d``: an op without operands (a constant) runs inside it."""
        return contextlib.nullcontext()

    def place(self, x: torch.Tensor, d: int) -> torch.Tensor:
        """``x`` (a host tensor, an input) materialised on device ``d``."""
        return x.to(self.device(d), copy=True)

    def check_operands(self, d: int, args: list[Any], names: tuple[int, ...]) -> None:  # noqa: B027
        """(strict) Raise unless every operand lives on device ``d``."""

    def check_result(self, d: int, out: Any) -> None:  # noqa: B027
        """(strict) Raise unless the result lives on device ``d``."""

    @abc.abstractmethod
    def record(self, ev: Any, d: int) -> None:
        """Record ``ev`` on device ``d``'s compute stream."""

    def recorder(self, ev: Any, d: int) -> Callable[[], Any]:
        """A callable of no arguments that does :meth:`record` ``(ev, d)`` (the dispatcher
        binds one per op and event once per plan)."""
        return functools.partial(self.record, ev, d)

    def poller(self, ev: Any) -> Callable[[], bool]:
        """A callable of no arguments that does :meth:`query` ``(ev)``."""
        return functools.partial(self.query, ev)

    def record_origins(self, origins: list[Any]) -> None:
        """Record each device's time origin (all streams idle). Times on device ``k`` are
        measured from ``origins[k]``; on CUDA the origins are enqueued one device after the other
        by the host, so devices' clocks agree to within that host time (microseconds)."""
        for k, ev in enumerate(origins):
            self.record(ev, k)

    @abc.abstractmethod
    def copy(self, x: torch.Tensor, a: int, b: int, ev_start: Any, ev_end: Any) -> torch.Tensor:
        """Enqueue a copy of ``x`` from device ``a`` to ``b`` between two timing events."""

    @abc.abstractmethod
    def query(self, ev: Any) -> bool:
        """Whether the work before ``ev`` has completed (raises on a device error)."""

    @abc.abstractmethod
    def elapsed_s(self, t0: Any, ev: Any) -> float:
        """Seconds from ``t0`` to ``ev`` (both complete, same device)."""

    @abc.abstractmethod
    def wait_idle(self, timeout_s: float) -> int:
        """Wait until every stream is idle; the first still-busy device after ``timeout_s``,
        or -1 when all are idle."""


class CudaApi(StreamApi):
    """CUDA streams and events; logical device ``d`` runs on GPU ``gpus[d]``.

    Several logical devices may share one GPU (``cuda-shared``: each keeps its own streams), to
    exercise the multi-device path on fewer GPUs; that is a test configuration, not a
    performance one (the devices then contend for one GPU).
    """

    kind = "cuda"
    switches = True

    def __init__(self, num_devices: int, gpus: list[int] | None = None):
        super().__init__(num_devices)
        gpus = list(range(num_devices)) if gpus is None else list(gpus)
        if len(gpus) != num_devices:
            raise ConfigError(f"{len(gpus)} GPUs named for {num_devices} devices")
        self.gpus = gpus
        self.shared = len(set(gpus)) < len(gpus)
        self.devices = [torch.device("cuda", g) for g in gpus]
        self.compute = [torch.cuda.Stream(device=dev) for dev in self.devices]
        self.egress = [torch.cuda.Stream(device=dev) for dev in self.devices]
        self.ingress = [torch.cuda.Stream(device=dev) for dev in self.devices]
        self._saved: list[Any] = []
        self._saved_device = 0
        # per device, a call that makes its compute stream current (what torch.cuda.set_stream
        # does, without its two Python layers: cuda-shared switches streams at every launch
        # that changes device)
        self._make_current = [_stream_setter(s) for s in self.compute]
        # while dispatching: per GPU, the stream current on it (a device ``d`` for its compute
        # stream, ``("egress", d)`` / ``("ingress", d)`` for its copy streams)
        self._current: dict[int, Any] = {}

    def device(self, d: int) -> torch.device:
        return self.devices[d]

    def event(self, d: int) -> Any:
        with torch.cuda.device(self.devices[d]):
            return torch.cuda.Event(enable_timing=True)

    def begin(self) -> None:
        self._saved_device = torch.cuda.current_device()
        self._saved = [
            torch.cuda.current_stream(torch.device("cuda", g)) for g in sorted(set(self.gpus))
        ]
        for s in self.compute:
            torch.cuda.set_stream(s)
        self._current = {g: d for d, g in enumerate(self.gpus)}  # the last one set per GPU

    def end(self) -> None:
        self._current = {}
        for s in self._saved:
            torch.cuda.set_stream(s)
        torch.cuda.set_device(self._saved_device)

    def activate(self, d: int) -> None:
        # only when another stream is current on this GPU (begin, activate and use keep
        # track; the current *device* does not matter: an op runs on its tensors' device, on
        # that device's current stream, and a constant inside scope(d))
        g = self.gpus[d]
        if self._current.get(g) != d:
            self._make_current[d]()
            self._current[g] = d

    def use(self, d: int, lane: str) -> Any:
        """Make device ``d``'s ``egress`` or ``ingress`` stream current on its GPU (unless it
        is already); returns the stream."""
        stream = self.egress[d] if lane == "egress" else self.ingress[d]
        g, key = self.gpus[d], (lane, d)
        if self._current.get(g) != key:
            torch.cuda.set_stream(stream)
            self._current[g] = key
        return stream

    def scope(self, d: int) -> contextlib.AbstractContextManager[Any]:
        return self.devices[d]  # a torch.device is the default device inside ``with``

    def record(self, ev: Any, d: int) -> None:
        ev.record(self.compute[d])

    def recorder(self, ev: Any, d: int) -> Callable[[], Any]:
        return functools.partial(_event_method(ev, "record"), ev, self.compute[d])

    def poller(self, ev: Any) -> Callable[[], bool]:
        return functools.partial(_event_method(ev, "query"), ev)

    def copy(self, x: torch.Tensor, a: int, b: int, ev_start: Any, ev_end: Any) -> torch.Tensor:
        # the copy streams stay current after it (the next copy often needs them again; the
        # next op on a GPU makes its compute stream current, :meth:`activate`)
        out = self.use(a, "egress")  # the current stream of a's GPU (b's too when they share it)
        if self.gpus[a] != self.gpus[b]:
            # torch's cross-GPU copy barriers with the receiver's current stream
            self.use(b, "ingress")
        # allocated on the stream that writes it, not on b's compute stream: the caching
        # allocator hands a block freed on a stream to that stream's next allocation at
        # once, and kernels queued on b's compute stream may still read that block while
        # this copy (on another stream) would write it (wrong outputs on a GPU, seen on
        # 10k-op graphs on cuda-shared)
        y = torch.empty_like(x, device=self.devices[b])
        ev_start.record(out)
        y.copy_(x, non_blocking=True)  # runs on the sender's current stream
        ev_end.record(out)
        if x.is_cuda:  # (a host tensor needs no guard against early reuse)
            x.record_stream(out)
        y.record_stream(out)
        y.record_stream(self.compute[b])  # its consumers run there
        return y

    def query(self, ev: Any) -> bool:
        return bool(ev.query())

    def elapsed_s(self, t0: Any, ev: Any) -> float:
        return float(t0.elapsed_time(ev)) * 1e-3

    def wait_idle(self, timeout_s: float) -> int:
        marks = []
        for d in range(self.num_devices):
            for s in (self.compute[d], self.egress[d], self.ingress[d]):
                ev = torch.cuda.Event()
                ev.record(s)
                marks.append((d, ev))
        deadline = time.perf_counter() + timeout_s
        while True:
            busy = [d for d, ev in marks if not ev.query()]
            if not busy:
                return -1
            if time.perf_counter() > deadline:
                return busy[0]
            time.sleep(1e-4)


def _stream_setter(stream: Any) -> Callable[[], Any]:
    """A call making ``stream`` current on its device: ``torch.cuda.set_stream(stream)``'s own
    call of ``torch._C._cuda_setStream``, its arguments read once (that function when a torch
    build lacks it)."""
    set_stream = getattr(torch._C, "_cuda_setStream", None)
    if set_stream is None:
        return functools.partial(torch.cuda.set_stream, stream)
    return functools.partial(
        set_stream,
        stream_id=stream.stream_id,
        device_index=stream.device_index,
        device_type=stream.device_type,
    )


def _event_method(ev: Any, name: str) -> Callable[..., Any]:
    """The C method ``name`` of a CUDA event (``torch.cuda.Event.record(stream)`` and
    ``.query()`` only forward to it), else the event's own."""
    base = getattr(torch._C, "_CudaEventBase", None)
    if base is not None and isinstance(ev, base):
        return getattr(base, name)
    return getattr(type(ev), name)


class _InlineEvent:
    __slots__ = ("t", "polls")

    def __init__(self) -> None:
        self.t = float("nan")
        self.polls = 0


class InlineApi(StreamApi):
    """Synchronous CPU stand-in: ops run at launch, an event completes after ``lag`` polls.

    With ``strict`` (the ``inline-strict`` backend), tensors carry the logical device that made
    them and CUDA's residency rules are checked (:mod:`.residency`): a constant made outside its
    device's :meth:`scope`, an operand or a copy source on another device, or an op mixing two
    devices raises, as it would on a GPU.
    """

    kind = "inline"

    def __init__(self, num_devices: int, lag: int = 1, strict: bool = False):
        super().__init__(num_devices)
        self.lag = int(lag)
        self.strict = bool(strict)
        self._mode: Any = None
        if self.strict:
            from .residency import ResidencyCheck

            self.kind = "inline-strict"
            self._mode = ResidencyCheck()

    def device(self, d: int) -> torch.device:
        return torch.device("cpu")

    def event(self, d: int) -> Any:
        return _InlineEvent()

    def begin(self) -> None:
        if self._mode is not None:
            self._mode.__enter__()

    def end(self) -> None:
        if self._mode is not None:
            self._mode.__exit__(None, None, None)

    def scope(self, d: int) -> contextlib.AbstractContextManager[Any]:
        return self._mode.scope(d) if self._mode is not None else contextlib.nullcontext()

    def place(self, x: torch.Tensor, d: int) -> torch.Tensor:
        """``x`` (a host tensor) materialised on device ``d``."""
        y = x.clone()
        if self.strict:
            from .residency import tag

            tag(y, d)
        return y

    def check_operands(self, d: int, args: list[Any], names: tuple[int, ...]) -> None:
        from .residency import ResidencyError, tag_of, where

        for i, x in enumerate(args):
            if isinstance(x, torch.Tensor) and tag_of(x) != d:
                raise ResidencyError(
                    f"operand {i} (node {names[i]}) lives on {where(tag_of(x))}, not device {d}"
                )

    def check_result(self, d: int, out: Any) -> None:
        from torch.utils._pytree import tree_flatten

        from .residency import ResidencyError, tag_of, where

        for x in tree_flatten(out)[0]:
            if isinstance(x, torch.Tensor) and tag_of(x) != d:
                raise ResidencyError(f"its result lives on {where(tag_of(x))}, not device {d}")

    def record(self, ev: Any, d: int) -> None:
        ev.t = time.perf_counter()
        ev.polls = 0

    def record_origins(self, origins: list[Any]) -> None:
        # one host clock: every device shares one origin (recording them one by one would shift
        # the devices' timelines apart by however long the host was preempted in between)
        t = time.perf_counter()
        for ev in origins:
            ev.t = t
            ev.polls = 0

    def copy(self, x: torch.Tensor, a: int, b: int, ev_start: Any, ev_end: Any) -> torch.Tensor:
        if self.strict:
            from .residency import ResidencyError, tag, tag_of, where

            if tag_of(x) != a:
                raise ResidencyError(
                    f"the copy from device {a} reads a tensor that lives on {where(tag_of(x))}"
                )
        self.record(ev_start, a)
        y = x.clone()
        self.record(ev_end, a)
        if self.strict:
            tag(y, b)
        return y

    def query(self, ev: Any) -> bool:
        ev.polls += 1
        return ev.polls > self.lag

    def elapsed_s(self, t0: Any, ev: Any) -> float:
        return ev.t - t0.t

    def wait_idle(self, timeout_s: float) -> int:
        return -1


class StreamBackend(Backend):
    """A host-side work-conserving dispatcher over asynchronous device streams.

    Args:
        api: the device primitives (:class:`CudaApi` or :class:`InlineApi`).
        cluster: the description of the devices (for placers and the simulator).
        window: ops in flight per device (enqueued, completion not yet observed).
    """

    def __init__(self, api: StreamApi, cluster: Cluster, window: int = DEFAULT_WINDOW):
        if window < 1:
            raise ConfigError(f"window must be >= 1, got {window}")
        if cluster.num_devices != api.num_devices:
            raise ConfigError(
                f"cluster {cluster.name!r} has {cluster.num_devices} devices, the streams {api.num_devices}"
            )
        self.api = api
        self.cluster = cluster
        self.window = int(window)
        self.name = api.kind

    def open(self, graph: DataflowGraph, seed: int = 0) -> StreamSession:
        return StreamSession(self, graph, seed)

    def sharing(self, host_s: float | None = None, fill_s: float | None = None) -> Any:
        """The :class:`~doppler_lab.timing.contention.Sharing` of these devices: which GPU each one is
        on (``inline``: one stand-in "GPU" each), one host dispatcher whose time per launch is
        ``host_s`` (default: the devices' launch overhead)."""
        from ..timing.contention import DEFAULT_FILL_S, Sharing

        gpus = getattr(self.api, "gpus", range(self.num_devices))
        host = self.cluster.devices[0].launch_overhead_s if host_s is None else host_s
        return Sharing(tuple(gpus), host_s=host, fill_s=fill_s or DEFAULT_FILL_S)

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "window": self.window}


class _EventPool:
    """Timing events per device, reused by every run of a session (creating a CUDA event costs
    microseconds; a run needs one per op and two per transfer)."""

    def __init__(self, api: StreamApi):
        self.api = api
        self.events: list[list[Any]] = [[] for _ in range(api.num_devices)]
        self.used = [0] * api.num_devices

    def reset(self) -> None:
        """Start a run: every event may be recorded again (the previous run has completed)."""
        self.used = [0] * self.api.num_devices

    def take(self, d: int) -> Any:
        i = self.used[d]
        pool = self.events[d]
        if i == len(pool):
            pool.append(self.api.event(d))
        self.used[d] = i + 1
        return pool[i]


#: how an error seen when polling an event is reported
_ASYNC = "failed on the device (asynchronous error; it may come from an earlier op)"


class _Program:
    """What every run of one plan needs, built once per plan (the session keeps the last one):
    per op its device, the zero-argument callables that record its end event and poll it
    (:meth:`StreamApi.recorder`, :meth:`StreamApi.poller`), the reader counts its launch
    releases, its copies; per copy its events. A run copies only the counts.

    Events come from the session's pool in a fixed order (ops, then copies, then the time
    origins), so every run of the plan records the same events; runs never overlap (a run
    starts once every stream is idle). A copy's events are taken from its sender's pool (the
    sender's egress stream records them).
    """

    def __init__(self, api: StreamApi, plan: ExecutionPlan, events: _EventPool):
        n, nd = plan.num_nodes, plan.num_devices
        events.reset()
        take = events.take
        dev = [int(x) for x in plan.device.tolist()]
        self.plan = plan
        self.device = dev
        self.compute = [int(v) for v in plan.graph.compute_nodes.tolist()]
        self.ev_end: list[Any] = [None] * n
        self.rec_end: list[Any] = [None] * n
        self.done: list[Any] = [None] * n
        for v in self.compute:
            d = dev[v]
            ev_e = take(d)
            self.ev_end[v], self.rec_end[v] = ev_e, api.recorder(ev_e, d)
            self.done[v] = api.poller(ev_e)
        # per op, its copies ``(destination, consumers there, copy index)``, numbered in plan
        # order; per copy its (start, end) events and the poller of its end
        self.sends: list[tuple[tuple[int, tuple[int, ...], int], ...]] = [()] * n
        self.ev_copy: list[tuple[Any, Any]] = []
        self.copy_done: list[Any] = []
        for u, s in enumerate(plan.sends):
            if not s:
                continue
            a = dev[u]
            mine = []
            for b, ws in s:
                ev = (take(a), take(a))
                mine.append((b, ws, len(self.ev_copy)))
                self.ev_copy.append(ev)
                self.copy_done.append(api.poller(ev[1]))
            self.sends[u] = tuple(mine)
        self.t0 = [take(k) for k in range(nd)]
        # per device, the order of the launch loop's passes (shared GPUs: alternately
        # forwards and backwards, so the device launched last starts the next pass without a
        # stream switch)
        ahead = list(range(nd))
        self.passes = (ahead, ahead[::-1] if api.shared else ahead)
        # how an op gathers its operands from its device's buffers: ``one[v]``, the slot of its
        # only operand (-1 otherwise), or ``gather[v]``, a getter of the tuple of two or more
        # (None for a constant)
        self.one = [ops[0] if len(ops) == 1 else -1 for ops in plan.operands]
        self.gather = [operator.itemgetter(*ops) if len(ops) > 1 else None for ops in plan.operands]
        # per op, the buffers whose readers on its device it counts down: (node, index into
        # the flattened (N, D) reader counts)
        self.frees = [tuple((u, u * nd + dev[v]) for u in plan.preds[v]) for v in range(n)]
        self.need = plan.need.tolist()
        self.hold = plan.hold.ravel().tolist()
        self.prio = None if plan.priority is None else plan.priority.tolist()


class StreamSession(BackendSession):
    """A graph on stream devices: inputs are copied to each device that consumes them."""

    backend: StreamBackend

    def __init__(self, backend: StreamBackend, graph: DataflowGraph, seed: int):
        super().__init__(backend, graph, seed)
        self.events = _EventPool(backend.api)
        self._program: _Program | None = None

    def place_input(self, tensor: torch.Tensor, device: int, first: bool) -> torch.Tensor:
        return self.backend.api.place(tensor, device)

    def input_device(self, device: int) -> torch.device | None:
        # a GPU makes its generated weights itself (the inline stand-in tags host copies)
        api = self.backend.api
        return api.device(device) if api.kind == "cuda" else None

    def run(self, plan: ExecutionPlan, timeout_s: float, keep_outputs: bool = False) -> RawRun:
        api = self.backend.api
        busy = api.wait_idle(timeout_s)
        if busy >= 0:
            raise ExecutorError(
                f"{self.backend.device_label(busy)} is still busy with an earlier run after {timeout_s:g} s"
            )
        bufs = self.resident(plan)
        prog = self._program
        if prog is None or prog.plan is not plan:
            prog = self._program = _Program(api, plan, self.events)
        return _StreamRun(self.backend, prog, bufs).execute(timeout_s, keep_outputs)

    def close(self) -> None:
        self.backend.api.wait_idle(5.0)
        self._program = None
        super().close()


class _StreamRun:
    """One execution: the host loop, its queues and events."""

    def __init__(self, backend: StreamBackend, prog: _Program, bufs: list[list[Any]]):
        plan = prog.plan
        self.backend, self.api, self.plan, self.prog, self.bufs = (
            backend,
            backend.api,
            plan,
            prog,
            bufs,
        )
        d = plan.num_devices
        # per device, the ops enqueued whose completion is not seen yet (completing in order)
        self.pending: list[deque[int]] = [deque() for _ in range(d)]
        # copies in flight per egress lane (source device), completing in order
        self.copies: list[deque[tuple[int, int, int, tuple[int, ...]]]] = [
            deque() for _ in range(d)
        ]
        self.copy_records: list[tuple[int, int, int, int, int]] = []
        self.ready: list[int] = []  # ops in the order they became ready
        self.dispatched: list[int] = []  # ops in the order they were launched
        self.launch_s = [0.0] * plan.num_nodes  # the host clock when each op was launched
        self.loop_s = 0.0

    def _error(self, what: str, v: int, d: int, exc: BaseException) -> ExecutorError:
        return executor_error(what, op_label(self.plan.graph, v), self.backend.device_label(d), exc)

    def _loop(self, deadline: float) -> None:
        """Launch ready ops (up to ``window`` in flight per device), poll completions, issue
        copies, until every op has completed. The parts (:meth:`_loop_parts`) are built once
        per run with everything they touch in their own scope: they run once per op and their
        bookkeeping is the host's cost per op."""
        launch, complete, land = self._loop_parts()
        passes, turn = self.prog.passes, 0
        d_range = range(self.plan.num_devices)
        remaining = self.plan.num_ops
        clock = time.perf_counter
        while remaining:
            progress = False
            turn ^= 1
            for d in passes[turn]:
                progress |= launch(d)
            for d in d_range:
                n = complete(d)
                if n:
                    remaining -= n
                    progress = True
                progress |= land(d)
            if not progress and clock() > deadline:
                raise self._timeout()

    def _loop_parts(
        self,
    ) -> tuple[Callable[[int], bool], Callable[[int], int], Callable[[int], bool]]:
        """The host loop's three steps for one device ``d``: ``launch(d)`` its ready ops (up to
        the window; True if any), ``complete(d)`` the ops it has finished, issuing their
        copies (how many), ``land(d)`` the copies out of it that have arrived, making their
        consumers ready (True if any). They share the ready queues and the counts of inputs
        each op still needs (``need``) and of consumers each buffer still has (``hold``)."""
        need, hold = list(self.prog.need), list(self.prog.hold)
        queues, make_ready, pop = self._ready_queues()
        return (
            self._launch_step(queues, make_ready, pop, need, hold),
            self._complete_step(queues),
            self._land_step(queues, make_ready, need, hold),
        )

    def _launch_step(
        self,
        queues: list[Any],
        make_ready: Callable[[Any, int], None],
        pop: Callable[[Any], int],
        need: list[int],
        hold: list[int],
    ) -> Callable[[int], bool]:
        """``launch(d)``: launch device ``d``'s ready ops up to the window, make its local
        consumers ready and free the buffers no one needs any more (True if any launched)."""
        api, plan, prog, bufs = self.api, self.plan, self.prog, self.bufs
        window = self.backend.window
        fns, operands, local_succ = plan.fns, plan.operands, plan.local_succ
        one, gather, rec_end, frees = prog.one, prog.gather, prog.rec_end, prog.frees
        launch_s = self.launch_s
        activate = api.activate if api.switches else None
        strict = api.strict
        pending = self.pending
        launched = self.dispatched.append
        clock = time.perf_counter

        def launch(d: int) -> bool:
            q, pc = queues[d], pending[d]  # (ops in flight: len(pc))
            if not q or len(pc) >= window:
                return False
            buf = bufs[d]
            while q and len(pc) < window:
                v = pop(q)
                launched(v)
                try:
                    if activate is not None:
                        activate(d)
                    if strict:
                        api.check_operands(d, [buf[u] for u in operands[v]], operands[v])
                    launch_s[v] = clock()
                    u = one[v]
                    if u >= 0:
                        out = fns[v](buf[u])  # type: ignore[misc]
                    elif gather[v] is not None:
                        out = fns[v](*gather[v](buf))  # type: ignore[misc]
                    else:  # a constant: made on the op's device, not the host
                        with api.scope(d):
                            out = fns[v]()  # type: ignore[misc]
                    rec_end[v]()
                    if strict:
                        api.check_result(d, out)
                except Exception as exc:  # noqa: BLE001 - every failure is reported
                    raise self._error(failure_verb(exc), v, d, exc) from exc
                buf[v] = out
                out = None  # no reference outlives the releases below
                pc.append(v)
                for w in local_succ[v]:
                    c = need[w] - 1
                    need[w] = c
                    if not c:
                        make_ready(q, w)
                for u, i in frees[v]:
                    c = hold[i] - 1
                    hold[i] = c
                    if not c:
                        buf[u] = None
            return True

        return launch

    def _complete_step(self, queues: list[Any]) -> Callable[[int], int]:
        """``complete(d)``: take device ``d``'s finished ops off its in-flight list, in order,
        and issue their copies to the devices that consume them (how many finished)."""
        prog, bufs = self.prog, self.bufs
        window = self.backend.window
        done, sends, ev_copy = prog.done, prog.sends, prog.ev_copy
        copy = self.api.copy
        pending, copies, records = self.pending, self.copies, self.copy_records

        def complete(d: int) -> int:
            pc = pending[d]
            n = 0
            if (
                len(pc) > 1
                and (len(pc) < window or not queues[d])
                and not any(sends[v] for v in pc)
            ):
                # nothing waits for these ops one by one (no copies to issue, no launch
                # waiting for a slot): the newest completing tells that all have (one
                # stream, in order), one query for them all
                try:
                    if done[pc[-1]]():
                        n = len(pc)
                        pc.clear()
                except Exception as exc:  # noqa: BLE001 - asynchronous device errors surface here
                    raise self._error(_ASYNC, pc[0], d, exc) from exc
            while pc:
                v = pc[0]
                try:
                    if not done[v]():
                        break
                except Exception as exc:  # noqa: BLE001 - asynchronous device errors surface here
                    raise self._error(_ASYNC, v, d, exc) from exc
                pc.popleft()
                n += 1
                if sends[v]:  # its copies start once it has completed
                    x = bufs[d][v]
                    for b, ws, k in sends[v]:
                        ev_s, ev_e = ev_copy[k]
                        try:
                            y = copy(x, d, b, ev_s, ev_e)
                        except Exception as exc:  # noqa: BLE001
                            what = f"could not be copied to {self.backend.device_label(b)}"
                            raise self._error(what, v, d, exc) from exc
                        bufs[b][v] = y
                        records.append((v, ws[0], d, b, k))
                        copies[d].append((v, b, k, ws))
                    x = y = None
            return n

        return complete

    def _land_step(
        self,
        queues: list[Any],
        make_ready: Callable[[Any, int], None],
        need: list[int],
        hold: list[int],
    ) -> Callable[[int], bool]:
        """``land(d)``: take the copies out of device ``d`` that have arrived, in order, make
        their consumers ready and free the source buffers no one needs (True if any landed)."""
        nd, bufs = self.plan.num_devices, self.bufs
        copy_done, copies = self.prog.copy_done, self.copies

        def land(d: int) -> bool:
            cc = copies[d]
            landed = False
            while cc:
                u, b, k, ws = cc[0]
                try:
                    if not copy_done[k]():
                        break
                except Exception as exc:  # noqa: BLE001
                    raise self._error(_ASYNC, u, d, exc) from exc
                cc.popleft()
                landed = True
                qb = queues[b]
                for w in ws:
                    c = need[w] - 1
                    need[w] = c
                    if not c:
                        make_ready(qb, w)
                i = u * nd + d
                c = hold[i] - 1
                hold[i] = c
                if not c:
                    bufs[d][u] = None
            return landed

        return land

    def _ready_queues(self) -> tuple[list[Any], Callable[[Any, int], None], Callable[[Any], int]]:
        """The ready ops per device, holding each device's first ops; ``make_ready(q, v)``,
        which makes op ``v`` ready in queue ``q``, and ``pop(q)``, which takes the next: FIFO
        by readiness (ties: ops made ready by one event are pushed in node-id order), or a
        heap on (priority, node id) (plan.ReadyQueues' rules)."""
        plan, prio = self.plan, self.prog.prio
        now_ready = self.ready.append
        if plan.priority is None:

            def make_ready(q: Any, v: int) -> None:
                now_ready(v)
                q.append(v)

            pop: Callable[[Any], int] = deque.popleft
        else:
            heappush, heappop = heapq.heappush, heapq.heappop

            def make_ready(q: Any, v: int) -> None:
                now_ready(v)
                heappush(q, (prio[v], v))  # type: ignore[index]

            def pop(q: Any) -> int:
                return heappop(q)[1]

        queues: list[Any] = [
            deque() if plan.priority is None else [] for _ in range(plan.num_devices)
        ]
        for d in range(plan.num_devices):
            for v in plan.initial[d]:
                make_ready(queues[d], v)
        return queues, make_ready, pop

    def _timeout(self) -> ExecutorError:
        g = self.plan.graph
        running = [(pc[0], d) for d, pc in enumerate(self.pending) if pc]
        if running:
            what = "; ".join(
                f"op {op_label(g, v)} on {self.backend.device_label(d)} still running"
                for v, d in running
            )
        else:
            what = "a transfer never completed"
        return ExecutorError(f"run of graph {g.name!r} timed out: {what}")

    def execute(self, timeout_s: float, keep_outputs: bool) -> RawRun:
        api, plan, prog = self.api, self.plan, self.prog
        api.begin()
        try:
            with torch.inference_mode():
                # the origins' host clock, taken before they are recorded: inferred starts
                # then err late (never before the inputs they waited for), by the time the
                # origins take to reach the devices
                t = time.perf_counter()
                api.record_origins(prog.t0)
                t_loop = time.perf_counter()
                self._loop(t_loop + timeout_s)
                self.loop_s = time.perf_counter() - t_loop
        finally:
            api.end()
        busy = api.wait_idle(timeout_s)
        if busy >= 0:
            raise ExecutorError(
                f"run of graph {plan.graph.name!r}: {self.backend.device_label(busy)} still busy after {timeout_s:g} s"
            )
        n = plan.num_nodes
        elapsed, t0, dev = api.elapsed_s, prog.t0, prog.device
        comp = prog.compute
        start = np.full(n, np.nan)
        end = np.full(n, np.nan)
        end[comp] = [elapsed(t0[dev[v]], prog.ev_end[v]) for v in comp]
        # an op starts when its stream is done with the previous op and its launch is there
        free = [0.0] * plan.num_devices
        launch_s = self.launch_s
        for v in self.dispatched:
            d = dev[v]
            start[v] = min(max(free[d], launch_s[v] - t), end[v])
            free[d] = end[v]
        transfers = []
        link = self.backend.cluster.routes[:, :, 0].tolist()  # the first link of each route
        for u, w, a, b, k in self.copy_records:
            ev_s, ev_e = prog.ev_copy[k]
            transfers.append(
                (u, w, a, b, elapsed(t0[a], ev_s), elapsed(t0[a], ev_e), int(link[a][b]))
            )
        outputs = None
        if keep_outputs:
            outputs = {
                int(v): self.bufs[int(plan.device[v])][int(v)].to("cpu") for v in plan.outputs
            }
        return RawRun(
            start_s=start,
            end_s=end,
            transfers=transfers,
            ready_order=_order(self.ready, n),
            dispatch_order=_order(self.dispatched, n),
            outputs=outputs,
            info={"host_loop_s": self.loop_s},
        )


def _order(seq: list[int], n: int) -> np.ndarray:
    """``(n,)`` each node's position in ``seq`` (-1 when absent)."""
    out = np.full(n, -1, dtype=np.int64)
    out[np.asarray(seq, dtype=np.int64)] = np.arange(len(seq), dtype=np.int64)
    return out


def gpu_cluster(gpus: list[int]) -> Cluster:
    """A description of the GPUs ``gpus`` (logical device ``d`` on GPU ``gpus[d]``): each
    device's nominal rates from its name (:func:`~doppler_lab.hardware.gpu_specs.gpu_device`, published
    peaks times achievable shares); ``doppler-lab calibrate`` measures them instead.

    Links follow the copy streams: a transfer occupies the sender's out-port and the receiver's
    in-port. Between two GPUs: 50 GB/s, 10 us plus the host's two wake-ups; between two logical
    devices of one GPU: a device-to-device copy at half its memory bandwidth.
    """
    props = [torch.cuda.get_device_properties(g) for g in gpus]
    return describe_gpus(gpus, [p.name for p in props], [float(p.total_memory) for p in props])


def describe_gpus(gpus: list[int], names: list[str], memory_bytes: list[float]) -> Cluster:
    """:func:`gpu_cluster` from the GPUs' names and memory (no CUDA needed: tests use it)."""
    from ..hardware.cluster import switch_routes
    from ..hardware.gpu_specs import HOST_LAUNCH_S, gpu_device

    n = len(gpus)
    shared = n != len(set(gpus))
    devs = tuple(
        gpu_device(
            f"{names[d]}:{g}/{d}" if shared else f"{names[d]}:{d}", names[d], memory_bytes[d]
        )
        for d, g in enumerate(gpus)
    )
    bw = np.full((n, n), 50 * GB)
    lat = np.full((n, n), 10e-6 + 2 * HOST_LAUNCH_S)
    for a in range(n):
        for b in range(n):
            if a != b and gpus[a] == gpus[b]:
                bw[a, b] = devs[a].mem_bytes_per_s / 2
                lat[a, b] = 2 * HOST_LAUNCH_S
    routes, link_names = switch_routes(n, "gpu")
    return Cluster(f"cuda{n}-shared" if shared else f"cuda{n}", devs, bw, lat, routes, link_names)


def make_cuda_backend(
    num_devices: int | None = None,
    cluster: Cluster | None = None,
    window: int = DEFAULT_WINDOW,
    shared: bool = False,
) -> StreamBackend:
    """The CUDA backend on the first ``num_devices`` visible GPUs (default: all).

    With ``shared``, ``num_devices`` logical devices (default 2 per GPU, at least 2) take the
    visible GPUs in turn, each with its own streams.
    """
    if not torch.cuda.is_available():
        raise ConfigError("no CUDA device is visible; use the 'cpu' backend")
    visible = torch.cuda.device_count()
    if shared:
        n = num_devices or (cluster.num_devices if cluster is not None else max(2, 2 * visible))
        gpus = [d % visible for d in range(n)]
    else:
        n = num_devices or (cluster.num_devices if cluster is not None else visible)
        if n > visible:
            raise ConfigError(
                f"{n} CUDA devices asked for, {visible} visible (cuda-shared puts several on one GPU)"
            )
        gpus = list(range(n))
    api = CudaApi(n, gpus)
    return StreamBackend(api, cluster if cluster is not None else gpu_cluster(gpus), window)


def make_inline_backend(
    num_devices: int = 2, lag: int = 1, window: int = DEFAULT_WINDOW, strict: bool = False
) -> StreamBackend:
    """The stream dispatcher over synchronous CPU stand-ins (tests without a GPU); ``strict``
    checks device residency as CUDA would (:mod:`.residency`)."""
    from .backend import make_cpu_cluster

    return StreamBackend(InlineApi(num_devices, lag, strict), make_cpu_cluster(num_devices), window)
