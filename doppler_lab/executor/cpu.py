"""CPU worker devices: one compute thread per device, one thread per copy lane.

Each device is a worker thread with its own ready queue; a finished op itself marks its
successors (no central scheduler round trip): same-device successors go straight onto the
worker's own queue, outputs needed elsewhere go onto a copy lane, which copies the tensor
(``clone``: a real memory copy) and then wakes the consuming device. One lock guards the
counters; torch releases the GIL inside ops, so devices compute in parallel.

Memory: the run counts the bytes of live tensors per device and reports each device's peak
(``RawRun.peak_bytes``): the resident inputs, each op's output from the op's launch (its
announced ``out_bytes``, corrected to the tensor's real size when it returns) and each copy from
the copy's start, each until the device's last reader of it is done and the value table drops
it. These are the simulator's memory rules (:mod:`doppler_lab.timing.sim.footprint`), applied
to what really ran; the bookkeeping happens under the lock the run already takes.

Replay (dispatch ``simulated``, :mod:`.replay`): the queues are a device's turns in a simulated
run's memory events; workers and copy lanes take an op or a copy only when it is ready and its
turn, and the operands of a finished op (the sender's buffer of a finished copy) are dropped
when that event's turn comes (``_play``), so each device's peak is the simulated one.

Copy lanes are the cluster's link resources (``routes[a, b, 0]``; the ``cpu`` preset has one,
"host memory"), so copies that share a resource are served one after another, as in the ``wc``
simulator.

Limits, on purpose documented:
- Intra-op threads: each worker calls ``torch.set_num_threads(threads_per_device)`` in its own
  thread (with the OpenMP backend the setting is per calling thread, so the main thread keeps
  its own). The default is 1: OpenMP teams spin-wait at barriers, and as soon as threads
  outnumber free cores (other devices, copy lanes, other processes) a team waits for preempted
  members and ops slow down 10-100x (measured on a 2-core machine). Raise it only with
  ``devices x threads_per_device`` well below the free cores. More devices than cores
  oversubscribe and make durations depend on what the other devices run at the same time (the
  simulator does not model that).
- Workers are persistent threads of the backend (one per device and per copy lane): a new
  thread per run would get a new OpenMP team each time, whose threads linger and spin.
- Copy threads and Python bookkeeping share the cores with compute; tiny ops are dominated by
  the GIL and wake-up latency (see ``doppler-lab bench executor``).
- A stuck op cannot be interrupted inside a thread: on a timeout the run is abandoned (the
  worker exits when its op returns) and later runs use fresh threads.
"""

from __future__ import annotations

import os
import threading
import time
from collections import deque
from collections.abc import Callable
from functools import partial
from typing import Any

import numpy as np
import torch

from ..hardware.cluster import Cluster
from ..house.errors import ConfigError, ExecutorError
from ..ir.graph import DataflowGraph
from .allocator import allocator_state, hold_freed_memory, wanted
from .backend import (
    Backend,
    BackendSession,
    RawRun,
    executor_error,
    failure_verb,
    make_cpu_cluster,
    op_label,
    tensor_nbytes,
)
from .plan import ExecutionPlan, ReadyQueues
from .replay import COPY_IN, END, START, Turns

_JOIN_S = 0.5  # how long a finished or failed run waits for its workers
_CLOSE_S = 5.0  # how long closing a backend waits for its idle workers to leave


class _Worker(threading.Thread):
    """A persistent thread that runs one job at a time (a device's or a copy lane's part of a
    run). Persistent on purpose: each new thread that enters an OpenMP region gets a new OpenMP
    team whose threads linger and spin, which on a small machine slows later runs by 10-100x."""

    def __init__(self, name: str, threads: int):
        super().__init__(name=name, daemon=True)
        self.threads = threads
        self.cv = threading.Condition()
        self.job: Any = None
        self.busy = False
        self.retired = False

    def run(self) -> None:
        torch.set_num_threads(self.threads)
        while True:
            with self.cv:
                while self.job is None and not self.retired:
                    self.cv.wait()
                if self.job is None:
                    return
                job = self.job
            try:
                job()
            finally:
                with self.cv:
                    self.job = None
                    self.busy = False
                    self.cv.notify_all()
                    retired = self.retired
            if retired:
                return

    def submit(self, job: Any) -> None:
        with self.cv:
            self.job = job
            self.busy = True
            self.cv.notify_all()

    def wait_idle(self, deadline: float) -> bool:
        with self.cv:
            while self.busy:
                left = deadline - time.perf_counter()
                if left <= 0:
                    return False
                self.cv.wait(left)
        return True

    def retire(self) -> None:
        with self.cv:
            self.retired = True
            self.cv.notify_all()


class CpuBackend(Backend):
    """CPU worker devices in this process.

    Args:
        cluster: a cluster of CPU devices (``make_cpu(n)``), or a device count.
        threads_per_device: intra-op threads per worker (default 1; see the module notes).
        hold_memory: keep freed memory in the process for the next op, as a GPU's caching
            allocator does (:mod:`.allocator`; process-wide, glibc only). Default: yes, unless
            ``DOPPLER_LAB_CPU_ALLOCATOR=system``.
    """

    name = "cpu"

    def __init__(
        self,
        cluster: Cluster | int = 2,
        threads_per_device: int | None = None,
        hold_memory: bool | None = None,
    ):
        hold = wanted() if hold_memory is None else hold_memory
        self.allocator = hold_freed_memory() if hold else allocator_state()
        self.cluster = make_cpu_cluster(cluster) if isinstance(cluster, int) else cluster
        d = self.cluster.num_devices
        if threads_per_device is not None and threads_per_device < 1:
            raise ConfigError(f"threads_per_device must be >= 1, got {threads_per_device}")
        self.threads_per_device = threads_per_device or 1
        routes = self.cluster.routes
        lanes = np.where(routes[:, :, 0] >= 0, routes[:, :, 0], -1)
        extra = int(lanes.max()) + 1 if lanes.size else 0
        for a in range(d):  # pairs without a modelled resource get a lane of their own
            for b in range(d):
                if a != b and lanes[a, b] < 0:
                    lanes[a, b] = extra
                    extra += 1
        self.lane_of: tuple[tuple[int, ...], ...] = tuple(
            tuple(int(x) for x in row) for row in lanes
        )
        self.num_lanes = max(extra, 1)
        self._workers: dict[str, _Worker] = {}
        self._lock = threading.Lock()

    def workers(self, names: list[str]) -> list[_Worker]:
        """The persistent workers called ``names`` (started on first use, replaced when a run
        abandoned them)."""
        with self._lock:
            out = []
            for name in names:
                w = self._workers.get(name)
                if w is None or w.retired or not w.is_alive():
                    threads = 1 if "-copy" in name else self.threads_per_device
                    w = _Worker(name, threads)
                    w.start()
                    self._workers[name] = w
                out.append(w)
            return out

    def abandon(self, worker: _Worker) -> None:
        """Forget a worker stuck in an op; it exits when the op returns."""
        with self._lock:
            worker.retire()
            if self._workers.get(worker.name) is worker:
                del self._workers[worker.name]

    def close(self) -> None:
        """Stop the workers (waiting briefly for each)."""
        with self._lock:
            workers = list(self._workers.values())
            self._workers.clear()
        for w in workers:
            w.retire()
        deadline = time.perf_counter() + _CLOSE_S
        for w in workers:
            w.join(max(0.0, deadline - time.perf_counter()))

    def open(self, graph: DataflowGraph, seed: int = 0) -> CpuSession:
        return CpuSession(self, graph, seed)

    def describe(self) -> dict[str, Any]:
        return {
            **super().describe(),
            "threads_per_device": self.threads_per_device,
            "copy_lanes": self.num_lanes,
            "cores": os.cpu_count(),
            "allocator": self.allocator["allocator"],
        }


class CpuSession(BackendSession):
    """A graph on CPU workers: every device holds its own copy of the inputs it consumes."""

    backend: CpuBackend

    def place_input(self, tensor: torch.Tensor, device: int, first: bool) -> torch.Tensor:
        return tensor if first else tensor.clone()

    def run(self, plan: ExecutionPlan, timeout_s: float, keep_outputs: bool = False) -> RawRun:
        if plan.num_devices != self.backend.num_devices:
            raise ConfigError(
                f"plan for {plan.num_devices} devices on a {self.backend.num_devices}-device backend"
            )
        return _CpuRun(self.backend, plan, self.resident(plan)).execute(timeout_s, keep_outputs)


class _CpuRun:
    """The state of one execution, served by the backend's persistent workers."""

    def __init__(self, backend: CpuBackend, plan: ExecutionPlan, bufs: list[list[Any]]):
        self.backend = backend
        self.plan = plan
        n, d = plan.num_nodes, plan.num_devices
        self.bufs = bufs
        self.lock = threading.Lock()
        self.cvs = [threading.Condition(self.lock) for _ in range(d)]
        self.lane_cvs = [threading.Condition(self.lock) for _ in range(backend.num_lanes)]
        # a replay (dispatch "simulated") plays each device's turns; else ready ops run at once
        self.turns = None if plan.schedule is None else Turns(plan, plan.schedule)
        self.rq = self.turns or ReadyQueues(plan)
        self.lane_q: list[Any] = [
            deque() if self.turns is None else self.turns.copy_queue()
            for _ in range(backend.num_lanes)
        ]
        self.need = plan.need.tolist()
        self.hold = plan.hold.tolist()
        self.start = [float("nan")] * n
        self.end = [float("nan")] * n
        self.transfers: list[tuple[int, int, int, int, float, float, int]] = []
        self.remaining = plan.num_ops
        self.running = [-1] * d
        self.stopped = False
        self.error: ExecutorError | None = None
        self.finished = threading.Event()
        self.go = threading.Event()
        self.ready = threading.Barrier(1)
        # bytes of live tensors per device (resident inputs + the table's values), and the most
        self.size = [0] * n
        self.hint = [int(x) for x in plan.graph.out_bytes]  # an op's size before it returns
        self.live = [0] * d
        for u, devs in plan.input_devices.items():
            for k in devs:
                self.size[u] = tensor_nbytes(bufs[k][u])
                self.live[k] += self.size[u]
        self.peak = list(self.live)
        if self.remaining == 0:  # nothing to run: the workers return at once
            self.stopped = True
            self.finished.set()

    # -- shared helpers (called with the lock held) ---------------------------------------------
    def _wait(self, q: Any, cv: threading.Condition) -> bool:
        """Wait (lock held) until ``q`` has work; False when the run stopped instead."""
        while not q and not self.stopped:
            cv.wait()
        return not self.stopped

    def _stop(self) -> None:
        self.stopped = True
        for cv in self.cvs:
            cv.notify_all()
        for cv in self.lane_cvs:
            cv.notify_all()
        self.finished.set()

    def _fail(self, error: ExecutorError) -> None:
        with self.lock:
            if self.error is None:
                self.error = error
            self._stop()

    def _release(self, v: int, d: int) -> None:
        """Op ``v`` on device ``d`` has ended: drop the operands it was the last reader of."""
        hold, buf, size, live = self.hold, self.bufs[d], self.size, self.live
        for u in self.plan.preds[v]:
            h = hold[u]
            h[d] -= 1
            if h[d] == 0:
                buf[u] = None
                live[d] -= size[u]

    def _release_sent(self, u: int, a: int) -> None:
        """A copy of ``u`` out of device ``a`` has ended: drop ``u`` there if it was the last
        reader."""
        h = self.hold[u]
        h[a] -= 1
        if h[a] == 0:
            self.bufs[a][u] = None
            self.live[a] -= self.size[u]

    def _play(self, d: int) -> None:
        """A replay: play device ``d``'s due dropping events, then wake whoever takes its turn
        (its worker for an op's start, a copy lane for a copy in)."""
        turns = self.turns
        for kind, v, _ in turns.due(d):  # type: ignore[union-attr]
            if kind == END:
                self._release(v, d)
            else:
                self._release_sent(v, d)
        h = turns.head(d)  # type: ignore[union-attr]
        if h is not None:
            if h[0] == START:
                self.cvs[d].notify()
            elif h[0] == COPY_IN:
                self.lane_cvs[self.backend.lane_of[h[2]][d]].notify()

    # -- threads ----------------------------------------------------------------------------
    def _serve(
        self, q: Any, cv: threading.Condition, take: Callable[[], Any], step: Callable[[Any], bool]
    ) -> None:
        """A worker's loop: wait for work on ``q``, ``take`` it (lock held), ``step`` it
        (lock released) until the run stops or ``step`` returns False."""
        lock = self.lock
        self.ready.wait()
        self.go.wait()
        with torch.inference_mode():
            while True:
                with lock:
                    if not self._wait(q, cv):
                        return
                    item = take()
                if not step(item):
                    return

    def _compute(self, d: int) -> None:
        plan, rq, turns = self.plan, self.rq, self.turns
        fns, operands = plan.fns, plan.operands
        local_succ, sends = plan.local_succ, plan.sends
        need, buf = self.need, self.bufs[d]
        size, live, peak, hint = self.size, self.live, self.peak, self.hint
        lane_of, lane_q, lane_cvs = self.backend.lane_of[d], self.lane_q, self.lane_cvs
        lock, push, pop = self.lock, rq.push, rq.pop
        start, end, running = self.start, self.end, self.running
        clock = time.perf_counter

        def take() -> int:
            v = pop(d)
            running[d] = v
            live[d] += hint[v]  # the output is being made: it counts from the op's start
            if live[d] > peak[d]:
                peak[d] = live[d]
            if turns is not None:
                self._play(d)
            return v

        def step(v: int) -> bool:
            args = [buf[u] for u in operands[v]]
            t0 = clock()
            try:
                out = fns[v](*args)  # type: ignore[misc]
            except BaseException as exc:  # noqa: BLE001 - every failure is reported
                self._fail(self._op_error(v, d, exc))
                return False
            t1 = clock()
            del args
            start[v] = t0
            end[v] = t1
            nbytes = tensor_nbytes(out)
            buf[v] = out
            del out
            with lock:
                if self.stopped:
                    return False
                running[d] = -1
                size[v] = nbytes
                live[d] += nbytes - hint[v]  # the size the op made, not the one announced
                if live[d] > peak[d]:
                    peak[d] = live[d]
                for w in local_succ[v]:
                    need[w] -= 1
                    if need[w] == 0:
                        push(d, w)
                for b, ws in sends[v]:
                    lane = lane_of[b]
                    lane_q[lane].append((v, d, b, ws))
                    lane_cvs[lane].notify()
                if turns is None:
                    self._release(v, d)
                else:  # its operands go when its END is the device's turn
                    turns.finished[v] = 1
                    self._play(d)
                self.remaining -= 1
                if self.remaining == 0:
                    self._stop()
                    return False
            return True

        self._serve(rq.queues[d], self.cvs[d], take, step)

    def _copy(self, lane: int) -> None:
        bufs, need, cvs, turns = self.bufs, self.need, self.cvs, self.turns
        cq, lock, push = self.lane_q[lane], self.lock, self.rq.push
        transfers = self.transfers
        size, live, peak = self.size, self.live, self.peak
        clock = time.perf_counter

        def take() -> tuple[int, int, int, tuple[int, ...]]:
            item = cq.popleft()
            b = item[2]
            live[b] += size[item[0]]  # the copy counts on the receiver from its start
            if live[b] > peak[b]:
                peak[b] = live[b]
            if turns is not None:
                self._play(b)
            return item

        def step(item: tuple[int, int, int, tuple[int, ...]]) -> bool:
            u, a, b, ws = item
            x = bufs[a][u]
            t0 = clock()
            try:
                y = x.clone()
            except BaseException as exc:  # noqa: BLE001
                what = f"could not be copied to {self.backend.device_label(b)}"
                self._fail(
                    executor_error(
                        what, op_label(self.plan.graph, u), self.backend.device_label(a), exc
                    )
                )
                return False
            t1 = clock()
            bufs[b][u] = y
            del x, y
            with lock:
                if self.stopped:
                    return False
                transfers.append((u, ws[0], a, b, t0, t1, lane))
                woke = False
                for w in ws:
                    need[w] -= 1
                    if need[w] == 0:
                        push(b, w)
                        woke = True
                if woke:
                    cvs[b].notify()
                if turns is None:
                    self._release_sent(u, a)
                else:  # the sender's buffer goes when this copy's end is its turn
                    turns.copied.add((u, b))
                    self._play(a)
            return True

        self._serve(cq, self.lane_cvs[lane], take, step)

    def _guard(self, job: Any, *args: Any) -> None:
        """Run a worker's part; an unexpected error ends the run instead of hanging it."""
        try:
            job(*args)
        except BaseException as exc:  # noqa: BLE001
            self._fail(ExecutorError(f"executor worker failed: {type(exc).__name__}: {exc}"))
            self.ready.abort()
            self.go.set()

    def _op_error(self, v: int, d: int, exc: BaseException) -> ExecutorError:
        err = executor_error(
            failure_verb(exc), op_label(self.plan.graph, v), self.backend.device_label(d), exc
        )
        err.__cause__ = exc
        return err

    # -- driver -----------------------------------------------------------------------------
    def execute(self, timeout_s: float, keep_outputs: bool) -> RawRun:
        plan, backend = self.plan, self.backend
        lanes = sorted(self._lanes_used())
        tag = f"doppler-{id(backend):x}"
        workers = backend.workers(
            [f"{tag}-cpu{d}" for d in range(plan.num_devices)] + [f"{tag}-copy{k}" for k in lanes]
        )
        self.ready = threading.Barrier(len(workers) + 1)
        jobs = [partial(self._guard, self._compute, d) for d in range(plan.num_devices)]
        jobs += [partial(self._guard, self._copy, k) for k in lanes]
        for w, job in zip(workers, jobs):
            w.submit(job)
        t0 = float("nan")
        try:
            try:
                self.ready.wait(timeout=max(10.0, timeout_s))
            except threading.BrokenBarrierError:
                self._fail(ExecutorError("the executor's workers did not start"))
            else:
                t0 = time.perf_counter()
                self.go.set()
                if not self.finished.wait(timeout_s):
                    self._fail(self._timeout_error(timeout_s))
        except BaseException:
            with self.lock:
                self._stop()
            self.go.set()
            raise
        finally:
            deadline = time.perf_counter() + _JOIN_S
            stuck = [w for w in workers if not w.wait_idle(deadline)]
            for w in stuck:
                backend.abandon(w)
        if self.error is not None:
            raise self.error
        outputs = None
        if keep_outputs:
            outputs = {int(v): self.bufs[int(plan.device[v])][int(v)] for v in plan.outputs}
        tr = [(u, w, a, b, s - t0, e - t0, k) for u, w, a, b, s, e, k in self.transfers]
        return RawRun(
            start_s=np.asarray(self.start) - t0,
            end_s=np.asarray(self.end) - t0,
            transfers=tr,
            ready_order=np.asarray(self.rq.ready_seq, dtype=np.int64),
            dispatch_order=np.asarray(self.rq.dispatch_seq, dtype=np.int64),
            outputs=outputs,
            info={"abandoned_workers": [w.name for w in stuck]},
            peak_bytes=np.asarray(self.peak, dtype=np.float64),
        )

    def _lanes_used(self) -> set[int]:
        lane_of = self.backend.lane_of
        return {
            lane_of[int(self.plan.device[u])][b]
            for u, s in enumerate(self.plan.sends)
            for b, _ in s
        }

    def _timeout_error(self, timeout_s: float) -> ExecutorError:
        g = self.plan.graph
        with self.lock:
            running = [(v, d) for d, v in enumerate(self.running) if v >= 0]
            waiting = [
                v for v in g.compute_nodes if np.isnan(self.end[v]) and self.rq.dispatch_seq[v] < 0
            ]
        if running:
            what = "; ".join(
                f"op {op_label(g, v)} on {self.backend.device_label(d)} still running"
                for v, d in running
            )
        elif self.turns is not None:
            with self.lock:
                what = self.turns.waiting(g)
        elif waiting:
            v = int(waiting[0])
            what = f"op {op_label(g, v)} on {self.backend.device_label(int(self.plan.device[v]))} never became ready"
        else:
            what = "no op was running"
        return ExecutorError(f"run of graph {g.name!r} timed out after {timeout_s:g} s: {what}")
