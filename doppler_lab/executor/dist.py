"""Multi-process backend: one process per device, ``torch.distributed`` (gloo) for transfers.

Each device is a worker process (spawned once per backend, reused by every run) in one gloo
process group; the caller's process only coordinates through a pipe per worker. In a run, each
worker executes its own ops work-conservingly (a ready queue, one compute lane) and ships
outputs with ``isend`` (a header ``[node, post time]``, then the tensor); one receiver thread per
peer blocks in ``recv`` and marks the arrivals, so transfers overlap compute and an idle device
sleeps instead of polling. Times are ``time.perf_counter`` readings, a clock shared by the
processes of one machine.

Versus the thread backend (:mod:`doppler_lab.executor.cpu`): no GIL shared between devices and
truly separate thread pools, at the cost of serialising tensors through gloo (slower transfers)
and a few seconds to start. A failure or a timeout kills the worker processes (which a thread
cannot be) and the next run starts fresh ones, re-opening its graph.

Ready and launch orders in the trace are per device (the workers do not share a counter).
"""

from __future__ import annotations

import multiprocessing as mp
import os
import pickle
import shutil
import tempfile
import threading
import time
from typing import TYPE_CHECKING, Any

import numpy as np

from ..hardware.cluster import Cluster
from ..house.errors import ConfigError, ExecutorError
from ..ir.graph import DataflowGraph
from ..ir.placement import Placement
from .allocator import glibc_present, hold_freed_memory, wanted
from .backend import Backend, BackendSession, RawRun, executor_error, make_cpu_cluster, op_label
from .plan import ExecutionPlan

if TYPE_CHECKING:
    from .plan import ReadyQueues

_START_TIMEOUT_S = 120.0


class DistBackend(Backend):
    """CPU devices as worker processes joined by a gloo process group.

    Args:
        cluster: a cluster of CPU devices, or a device count.
        threads_per_device: intra-op threads of each worker (default 1).
        hold_memory: each worker keeps the memory it frees for its next op
            (:mod:`.allocator`). Default: yes, unless ``DOPPLER_LAB_CPU_ALLOCATOR=system``.
    """

    name = "dist"

    def __init__(
        self,
        cluster: Cluster | int = 2,
        threads_per_device: int | None = None,
        hold_memory: bool | None = None,
    ):
        self.cluster = make_cpu_cluster(cluster) if isinstance(cluster, int) else cluster
        if threads_per_device is not None and threads_per_device < 1:
            raise ConfigError(f"threads_per_device must be >= 1, got {threads_per_device}")
        self.threads_per_device = threads_per_device or 1
        self.hold_memory = wanted() if hold_memory is None else hold_memory
        self._group: _Group | None = None
        self.generation = 0

    def group(self) -> _Group:
        """The live worker group (started on first use, restarted after a failure)."""
        if self._group is None or not self._group.alive():
            if self._group is not None:
                self._group.kill()
            self._group = _Group(self.num_devices, self.threads_per_device, self.hold_memory)
            self.generation += 1
        return self._group

    def discard(self) -> None:
        """Kill the workers (after a failure or a timeout); the next run starts new ones."""
        if self._group is not None:
            self._group.kill()
            self._group = None

    def open(self, graph: DataflowGraph, seed: int = 0) -> DistSession:
        return DistSession(self, graph, seed)

    def describe(self) -> dict[str, Any]:
        return {
            **super().describe(),
            "threads_per_device": self.threads_per_device,
            "processes": True,
            "allocator": "held" if self.hold_memory and glibc_present() else "system",
        }

    def close(self) -> None:
        if self._group is not None:
            self._group.stop()
            self._group = None


class DistSession(BackendSession):
    """A graph opened in every worker (compiled there, inputs cached there)."""

    backend: DistBackend

    def __init__(self, backend: DistBackend, graph: DataflowGraph, seed: int):
        super().__init__(backend, graph, seed)
        self.key = f"{id(self):x}"
        self._opened = -1  # the backend generation the graph was opened in

    def run(self, plan: ExecutionPlan, timeout_s: float, keep_outputs: bool = False) -> RawRun:
        be = self.backend
        group = be.group()
        if self._opened != be.generation:
            blob = pickle.dumps(self.graph)
            labels = [be.device_label(d) for d in range(be.num_devices)]
            msg = ("open", self.key, blob, self.seed, labels)
            group.ask([msg] * group.size, _START_TIMEOUT_S, self._name_stuck)
            self._opened = be.generation
        try:
            # inputs are materialised before the clock starts, outside the run's timeout
            prep = ("prepare", self.key, plan.device, plan.priority)
            group.ask([prep] * group.size, _START_TIMEOUT_S, self._name_stuck)
            replies = group.ask(
                [("go", self.key, keep_outputs)] * group.size, timeout_s, self._name_stuck
            )
        except ExecutorError:
            be.discard()
            raise
        return self._merge(plan, replies)

    def _name_stuck(self, running: list[int]) -> str:
        busy = [(v, d) for d, v in enumerate(running) if v >= 0]
        if not busy:
            return "no op was running (a transfer never arrived)"
        return "; ".join(
            f"op {op_label(self.graph, v)} on {self.backend.device_label(d)} still running"
            for v, d in busy
        )

    def _merge(self, plan: ExecutionPlan, replies: list[dict[str, Any]]) -> RawRun:
        n = plan.num_nodes
        t0 = min(r["t0"] for r in replies)
        start, end = np.full(n, np.nan), np.full(n, np.nan)
        ready, launched = np.full(n, -1, np.int64), np.full(n, -1, np.int64)
        transfers = []
        outputs: dict[int, Any] = {}
        for r in replies:
            mine = np.asarray(r["ops"], dtype=np.int64)
            start[mine] = np.asarray(r["start"]) - t0
            end[mine] = np.asarray(r["end"]) - t0
            ready[mine] = np.asarray(r["ready"])
            launched[mine] = np.asarray(r["launched"])
            for u, w, a, b, s, e in r["transfers"]:
                transfers.append(
                    (u, w, a, b, s - t0, e - t0, int(self.backend.cluster.routes[a, b, 0]))
                )
            outputs.update(r.get("outputs") or {})
        return RawRun(
            start, end, transfers, ready, launched, outputs or None, {"processes": len(replies)}
        )

    def close(self) -> None:
        be = self.backend
        if be._group is not None and self._opened == be.generation:
            try:
                be._group.ask([("close", self.key)] * be._group.size, 10.0, self._name_stuck)
            except ExecutorError:
                be.discard()
        super().close()


class _Group:
    """The worker processes and their control pipes."""

    def __init__(self, size: int, threads: int, hold_memory: bool = True):
        ctx = mp.get_context("spawn")
        self.size = size
        self.tmp = tempfile.mkdtemp(prefix="doppler-dist-")
        init = f"file://{os.path.join(self.tmp, 'rendezvous')}"
        self.running = ctx.Array("q", [-1] * size, lock=False)
        self.conns = []
        self.procs = []
        for rank in range(size):
            parent, child = ctx.Pipe()
            p = ctx.Process(
                target=_worker_main,
                args=(rank, size, init, threads, child, self.running, hold_memory),
                name=f"doppler-dist{rank}",
                daemon=True,
            )
            p.start()
            child.close()
            self.conns.append(parent)
            self.procs.append(p)
        self.ask([("ping",)] * size, _START_TIMEOUT_S, lambda running: "the workers did not start")

    def alive(self) -> bool:
        return all(p.is_alive() for p in self.procs)

    def ask(self, msgs: list[Any], timeout_s: float, name_stuck: Any) -> list[Any]:
        """Send one message per worker and gather the replies; raises :class:`ExecutorError`
        (and kills the workers) on a worker's error, a dead worker or the deadline."""
        for conn, msg in zip(self.conns, msgs):
            conn.send(msg)
        replies: list[Any] = [None] * self.size
        waiting = set(range(self.size))
        deadline = time.perf_counter() + timeout_s
        while waiting:
            ready = mp.connection.wait(
                [self.conns[r] for r in waiting], timeout=max(0.0, deadline - time.perf_counter())
            )
            if not ready:
                what = name_stuck(list(self.running))
                self.kill()
                raise ExecutorError(f"run timed out after {timeout_s:g} s: {what}")
            for conn in ready:
                r = self.conns.index(conn)
                try:
                    kind, payload = conn.recv()
                except (EOFError, OSError):
                    self.kill()
                    raise ExecutorError(f"worker process of device {r} died") from None
                if kind == "error":
                    self.kill()
                    raise ExecutorError(payload)
                replies[r] = payload
                waiting.discard(r)
        return replies

    def stop(self) -> None:
        for conn in self.conns:
            try:
                conn.send(("exit",))
            except (OSError, BrokenPipeError):
                pass
        for p in self.procs:
            p.join(5.0)
        self.kill()

    def kill(self) -> None:
        for p in self.procs:
            if p.is_alive():
                p.kill()
        for p in self.procs:
            p.join(5.0)
        for conn in self.conns:
            conn.close()
        shutil.rmtree(self.tmp, ignore_errors=True)


# -- the worker process -----------------------------------------------------------------------
def _worker_main(
    rank: int, size: int, init: str, threads: int, conn: Any, running: Any, hold_memory: bool
) -> None:
    """A device: serve the coordinator's requests until told to exit."""
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    if hold_memory:
        hold_freed_memory()
    import torch
    import torch.distributed as dist

    torch.set_num_threads(threads)
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=size)
    sessions: dict[str, WorkerSession] = {}
    try:
        while True:
            msg = conn.recv()
            kind = msg[0]
            try:
                if kind == "exit":
                    return
                if kind == "ping":
                    conn.send(("ok", rank))
                elif kind == "open":
                    _, key, blob, seed, labels = msg
                    sessions[key] = WorkerSession(pickle.loads(blob), seed, rank, size, labels)
                    conn.send(("ok", None))
                elif kind == "close":
                    sessions.pop(msg[1], None)
                    conn.send(("ok", None))
                elif kind == "prepare":
                    _, key, device, priority = msg
                    sessions[key].prepare(device, priority)
                    conn.send(("ok", None))
                elif kind == "go":
                    _, key, keep = msg
                    conn.send(("ok", sessions[key].go(keep, running)))
            except ExecutorError as exc:
                conn.send(("error", str(exc)))
    finally:
        dist.destroy_process_group()


class WorkerSession:
    """One graph inside a worker process (this module's workers, or a ``torchrun`` rank).

    Args:
        graph, seed: the graph and its input seed.
        rank, size: this device and the number of devices (ranks of the default group).
        labels: how errors name each device.
        device: where this rank's tensors live (``cpu``, or ``cuda:k`` for NCCL).
        shared_clock: the ranks share ``time.perf_counter`` (one host); otherwise every time
            is reported from this rank's own clock start, right after the run's barrier.
    """

    def __init__(
        self,
        graph: DataflowGraph,
        seed: int,
        rank: int,
        size: int,
        labels: list[str],
        device: str = "cpu",
        shared_clock: bool = True,
    ):
        from .plan import compile_ops

        self.graph, self.seed, self.rank, self.size = graph, seed, rank, size
        self.label = labels[rank]
        self.device, self.shared_clock = device, shared_clock
        self.fns = compile_ops(graph)
        self.inputs: dict[int, Any] = {}
        self.pending: tuple[ExecutionPlan, dict[int, Any]] | None = None

    def prepare(self, device: np.ndarray, priority: np.ndarray | None) -> None:
        """Plan the next run and put its inputs in place (before the clock starts)."""
        from .plan import make_plan
        from .torch_ops import input_value

        g, r = self.graph, self.rank
        dispatch = "fifo" if priority is None else "priority"
        plan = make_plan(g, Placement(device, priority), self.size, dispatch, fns=self.fns)
        bufs: dict[int, Any] = {}
        for u, devs in plan.input_devices.items():
            if r in devs:
                if u not in self.inputs:
                    self.inputs[u] = input_value(g, u, self.seed, self.device)
                bufs[u] = self.inputs[u]
        self.pending = (plan, bufs)

    def go(self, keep: bool, running: Any) -> dict[str, Any]:
        """Run the prepared plan: this device's ops, sends and receives."""
        import torch
        import torch.distributed as dist

        from .backend import failure_verb
        from .plan import ReadyQueues
        from .torch_ops import torch_dtype

        g, r = self.graph, self.rank
        plan, bufs = self.pending
        mine = [int(v) for v in g.compute_nodes if plan.device[v] == r]
        incoming, consumers = _incoming(plan, r)
        lock = threading.Lock()
        cv = threading.Condition(lock)
        rq = ReadyQueues(plan)
        q = rq.queues[r]
        need = plan.need.tolist()
        hold = plan.hold[:, r].tolist()
        for u in mine:  # a sent tensor is kept alive by its pending isend, not by a count
            hold[u] -= len(plan.sends[u])
        transfers: list[tuple[int, int, int, int, float, float]] = []
        failures: list[str] = []
        cuda = self.device.startswith("cuda")
        base = 0.0  # subtracted from this rank's readings: its clock start without a shared clock

        def receive(a: int, count: int) -> None:
            try:
                for _ in range(count):
                    hdr = torch.empty(2, dtype=torch.float64, device=self.device)
                    dist.recv(hdr, src=a, tag=0)
                    u = int(hdr[0])
                    spec = g.specs[u]  # type: ignore[index]
                    buf = torch.empty(
                        spec.out_shape,  # type: ignore[union-attr]
                        dtype=torch_dtype(spec.dtype),  # type: ignore[union-attr]
                        device=self.device,
                    )
                    dist.recv(buf, src=a, tag=1)
                    if cuda:
                        torch.cuda.synchronize(self.device)
                    t = time.perf_counter()
                    with lock:
                        bufs[u] = buf
                        ws = consumers[u]
                        # the post time is on the sender's clock, the arrival on this one's
                        transfers.append((u, ws[0], a, r, float(hdr[1]), t))
                        for w in ws:
                            need[w] -= 1
                            if need[w] == 0:
                                rq.push(r, w)
                        cv.notify()
            except Exception as exc:  # noqa: BLE001
                with lock:
                    failures.append(f"receiving on device {r} from device {a} failed: {exc}")
                    cv.notify()

        receivers = [
            threading.Thread(target=receive, args=(a, k), daemon=True) for a, k in incoming.items()
        ]
        for t in receivers:
            t.start()
        dist.barrier()
        t0 = time.perf_counter()
        if not self.shared_clock:
            base = t0
        start, end, sent = {}, {}, []
        with torch.inference_mode():
            for _ in range(len(mine)):
                with lock:
                    while not q and not failures:
                        cv.wait()
                    if failures:
                        raise ExecutorError(failures[0])
                    v = rq.pop(r)
                running[r] = v
                args = [bufs[u] for u in plan.operands[v]]
                s = time.perf_counter()
                try:
                    out = plan.fns[v](*args)  # type: ignore[misc]
                    if cuda:
                        torch.cuda.synchronize(self.device)
                except Exception as exc:  # noqa: BLE001 - every failure is reported
                    raise executor_error(
                        failure_verb(exc), op_label(g, v), self.label, exc
                    ) from exc
                e = time.perf_counter()
                running[r] = -1
                del args
                start[v], end[v] = s, e
                with lock:
                    bufs[v] = out
                    for w in plan.local_succ[v]:
                        need[w] -= 1
                        if need[w] == 0:
                            rq.push(r, w)
                    for u in plan.preds[v]:
                        hold[u] -= 1
                        if hold[u] == 0:
                            bufs.pop(u, None)
                if plan.sends[v]:
                    sent += self._post_sends(plan, v, out, base)
        for _, work in sent:
            work.wait()
        for t in receivers:
            t.join()
        if failures:
            raise ExecutorError(failures[0])
        outputs = (
            {int(v): bufs[int(v)].cpu() for v in plan.outputs if plan.device[v] == r}
            if keep
            else None
        )
        return {
            "t0": t0 - base,
            "ops": mine,
            **_timeline(mine, start, end, rq, base),
            "transfers": [(u, w, a, b, s, e - base) for u, w, a, b, s, e in transfers],
            "outputs": outputs,
        }

    def _post_sends(
        self, plan: ExecutionPlan, v: int, out: Any, base: float
    ) -> list[tuple[Any, Any]]:
        """Post op ``v``'s output to each device that reads it: a header (the op, the post time
        on this rank's clock) and the tensor, each an ``isend`` kept alive with its buffer."""
        import torch
        import torch.distributed as dist

        payload = out.contiguous()
        sent: list[tuple[Any, Any]] = []
        for b, _ in plan.sends[v]:
            hdr = torch.tensor(
                [float(v), time.perf_counter() - base],
                dtype=torch.float64,
                device=self.device,
            )
            sent += [
                (hdr, dist.isend(hdr, b, tag=0)),
                (payload, dist.isend(payload, b, tag=1)),
            ]
        return sent


def _incoming(plan: ExecutionPlan, r: int) -> tuple[dict[int, int], dict[int, tuple[int, ...]]]:
    """What device ``r`` receives: per source device the number of tensors it sends here, and
    per received tensor its consumers on ``r``."""
    incoming: dict[int, int] = {}  # source -> tensors it will send here
    consumers: dict[int, tuple[int, ...]] = {}
    for u, sends in enumerate(plan.sends):
        for b, ws in sends:
            if b == r:
                a = int(plan.device[u])
                incoming[a] = incoming.get(a, 0) + 1
                consumers[u] = ws
    return incoming, consumers


def _timeline(
    mine: list[int], start: dict, end: dict, rq: ReadyQueues, base: float
) -> dict[str, list]:
    """This rank's ops' start and end times (less ``base``) and their ready/launch order."""
    return {
        "start": [start[v] - base for v in mine],
        "end": [end[v] - base for v in mine],
        "ready": [rq.ready_seq[v] for v in mine],
        "launched": [rq.dispatch_seq[v] for v in mine],
    }


def make_dist_backend(num_devices: int = 2, threads_per_device: int | None = None) -> DistBackend:
    """The multi-process backend with ``num_devices`` CPU worker processes."""
    return DistBackend(num_devices, threads_per_device)


__all__ = ["DistBackend", "DistSession", "WorkerSession", "make_dist_backend"]
