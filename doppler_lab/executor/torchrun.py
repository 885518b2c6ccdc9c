"""The ``dist`` backend inside a process group launched by ``torchrun`` (one or several hosts).

Under ``torchrun`` every rank runs the same command. :func:`join_torchrun` joins the group from
the environment torchrun sets (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``LOCAL_WORLD_SIZE``,
``MASTER_ADDR``/``MASTER_PORT``): gloo on CPU devices, NCCL on GPUs (``cuda:LOCAL_RANK``), plus a
gloo group for control messages. Rank ``r`` is device ``r`` of the cluster (torchrun numbers the
ranks host by host, as :func:`doppler_lab.hardware.make_multihost` numbers devices).

Rank 0 is the coordinator and device 0: the command goes on there (placement, runs, the
gathered :class:`~doppler_lab.ir.trace.Trace`, printing). Every other rank calls
:meth:`TorchrunBackend.serve`, which executes its ops when rank 0 says so and prints nothing on
stdout. Each request is a broadcast from rank 0 and a gather of the replies. A run that fails, a
rank that dies or a collective that times out ends the job: every surviving rank raises one
:class:`~doppler_lab.house.errors.ExecutorError` line (the CLI prints it and exits 2).

A run's own ``timeout_s`` is not enforced here: a rank that hangs holds the others until the
collective timeout (``collective_timeout_s``, default 600 s or ``$DOPPLER_LAB_TORCHRUN_TIMEOUT_S``, also how long the ranks wait while
rank 0 places the graph); a rank that dies is noticed at once (its sockets close).

Not tested yet: the NCCL path with transfers (receiver threads post ``recv`` while the compute
thread posts ``isend``); the tests run gloo on CPU, and the ``gpu`` test needs two GPUs.

Clocks are per rank: each reports its times from its own start, right after the run's barrier,
so a transfer's start is on its sender's clock and its end on its receiver's.
"""

from __future__ import annotations

import datetime
import os
import pickle
import sys
import threading
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from ..hardware.cluster import Cluster, make_multihost
from ..house.errors import ConfigError, DopplerLabError, ExecutorError
from ..house.validate import exception_line, one_line
from ..ir.graph import DataflowGraph
from .backend import Backend, BackendSession, RawRun
from .dist import DistSession, WorkerSession
from .plan import ExecutionPlan

T = TypeVar("T")

#: environment torchrun sets for every rank
TORCHRUN_ENV = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")
#: ``R``: rank ``R`` exits in the middle of its first run; ``R:hang``: it hangs there (tests)
DIE_ENV = "DOPPLER_LAB_TORCHRUN_DIE_RANK"
#: how long a rank waits for a collective (a peer that hangs) before it gives up
DEFAULT_COLLECTIVE_TIMEOUT_S = 600.0
#: overrides :data:`DEFAULT_COLLECTIVE_TIMEOUT_S` (seconds) for :func:`join_torchrun`
TIMEOUT_ENV = "DOPPLER_LAB_TORCHRUN_TIMEOUT_S"


def under_torchrun(env: Mapping[str, str] | None = None) -> bool:
    """Whether this process is a rank launched by ``torchrun`` (its environment is set)."""
    env = os.environ if env is None else env
    return all(k in env for k in TORCHRUN_ENV)


def torchrun_cluster(env: Mapping[str, str] | None = None, kind: str | None = None) -> Cluster:
    """The default cluster of a torchrun job: ``WORLD_SIZE / LOCAL_WORLD_SIZE`` hosts of
    ``LOCAL_WORLD_SIZE`` devices (GPUs when CUDA is available, else CPU workers)."""
    env = os.environ if env is None else env
    world = int(env["WORLD_SIZE"])
    local = int(env.get("LOCAL_WORLD_SIZE", world))
    if local < 1 or world % local:
        raise ConfigError(
            f"torchrun: WORLD_SIZE {world} is not a multiple of LOCAL_WORLD_SIZE {local}"
        )
    if kind is None:
        import torch

        kind = "gpu" if torch.cuda.is_available() else "cpu"
    return make_multihost(world // local, local, kind=kind)


class TorchrunBackend(Backend):
    """This rank's view of a torchrun job whose ranks are the cluster's devices.

    Args:
        cluster: the devices; its size must be ``WORLD_SIZE``.
        threads_per_device: intra-op threads of this rank (default 1).
        collective_timeout_s: how long a rank waits for the others in a collective.
        env: the environment (default ``os.environ``).
    """

    name = "dist"

    def __init__(
        self,
        cluster: Cluster,
        threads_per_device: int | None = None,
        collective_timeout_s: float = DEFAULT_COLLECTIVE_TIMEOUT_S,
        env: Mapping[str, str] | None = None,
    ):
        env = os.environ if env is None else env
        if not under_torchrun(env):
            missing = [k for k in TORCHRUN_ENV if k not in env]
            raise ConfigError(f"not launched by torchrun: {', '.join(missing)} not set")
        self.rank, self.world_size = int(env["RANK"]), int(env["WORLD_SIZE"])
        self.local_rank = int(env["LOCAL_RANK"])
        if cluster.num_devices != self.world_size:
            raise ConfigError(
                f"torchrun WORLD_SIZE is {self.world_size} but cluster {cluster.name!r} has "
                f"{cluster.num_devices} devices; expected one rank per device"
            )
        kinds = {d.kind for d in cluster.devices}
        if len(kinds) != 1:
            raise ConfigError(f"cluster {cluster.name!r} mixes device kinds {sorted(kinds)}")
        if threads_per_device is not None and threads_per_device < 1:
            raise ConfigError(f"threads_per_device must be >= 1, got {threads_per_device}")
        self.cluster = cluster
        self.threads_per_device = threads_per_device or 1
        self.gpu = kinds == {"gpu"}
        self.device = f"cuda:{self.local_rank}" if self.gpu else "cpu"
        self._sessions: dict[str, WorkerSession] = {}
        self._closed = False
        #: the job failed: the process group cannot be used (nor torn down) any more
        self.broken = False
        self._join(collective_timeout_s)

    def _join(self, timeout_s: float) -> None:
        import torch
        import torch.distributed as dist

        torch.set_num_threads(self.threads_per_device)
        if self.gpu:
            if torch.cuda.device_count() <= self.local_rank:
                raise ConfigError(
                    f"rank {self.rank}: LOCAL_RANK {self.local_rank} but this host has "
                    f"{torch.cuda.device_count()} CUDA devices"
                )
            torch.cuda.set_device(self.local_rank)
        timeout = datetime.timedelta(seconds=timeout_s)
        try:
            dist.init_process_group("nccl" if self.gpu else "gloo", timeout=timeout)
            # control messages (pickled objects) travel on CPU tensors
            self.ctrl = dist.new_group(backend="gloo", timeout=timeout) if self.gpu else None
        except (RuntimeError, ValueError) as exc:
            raise ExecutorError(
                f"rank {self.rank}: joining the torchrun group failed: {exc}"
            ) from None

    # -- one request: a broadcast from rank 0 and a gather of the replies ------------------------
    def _exchange(self, msg: Any) -> tuple[Any, list[Any] | None]:
        """Rank 0 sends ``msg`` (others pass ``None``); every rank handles it and rank 0 gets
        the replies. Raises :class:`ExecutorError` when a rank is lost."""
        import torch.distributed as dist

        try:
            box = [msg]
            dist.broadcast_object_list(box, src=0, group=self.ctrl)
            msg = box[0]
            reply = self._handle(msg)
            gathered: list[Any] | None = [None] * self.world_size if self.rank == 0 else None
            dist.gather_object(reply, gathered, dst=0, group=self.ctrl)
        except ExecutorError:
            raise
        except Exception as exc:  # noqa: BLE001 - a dead or hung peer, in any form
            raise self._lost(exc) from None
        return msg, gathered

    def _lost(self, exc: BaseException) -> ExecutorError:
        """The error of a collective that failed: the group is gone for good."""
        self.broken = self._closed = True
        return ExecutorError(
            f"rank {self.rank}: lost the torchrun group (a rank died or timed out): "
            f"{exception_line(exc)}"
        )

    def _handle(self, msg: Any) -> tuple[str, Any]:
        kind = msg[0]
        try:
            if kind == "open":
                _, key, blob, seed, labels = msg
                self._sessions[key] = WorkerSession(
                    pickle.loads(blob),
                    seed,
                    self.rank,
                    self.world_size,
                    labels,
                    device=self.device,
                    shared_clock=False,
                )
            elif kind == "close":
                self._sessions.pop(msg[1], None)
            elif kind == "prepare":
                _, key, device, priority = msg
                self._sessions[key].prepare(device, priority)
            elif kind == "go":
                _, key, keep = msg
                hook = os.environ.get(DIE_ENV, "")
                if hook.partition(":")[0] == str(self.rank):  # a test hook for failures
                    if hook.endswith(":hang"):
                        threading.Event().wait()  # this rank hangs in the middle of the run
                    os._exit(3)  # this rank dies in the middle of the run
                return ("ok", self._sessions[key].go(keep, [-1] * self.world_size))
            return ("ok", None)
        except ExecutorError as exc:
            return ("error", str(exc))
        except Exception as exc:  # noqa: BLE001 - a peer lost during a run surfaces here
            return ("error", f"rank {self.rank} failed: {exception_line(exc, typed=True)}")

    def ask(self, msg: Any) -> list[Any]:
        """On rank 0: run ``msg`` on every rank; the replies by rank. A failure on any rank
        ends the job (the other ranks are told, then raise it too)."""
        if self.rank != 0:
            raise ExecutorError(f"rank {self.rank}: only rank 0 coordinates a torchrun job")
        _, replies = self._exchange(msg)
        assert replies is not None
        errors = [p for kind, p in replies if kind == "error"]
        if errors:
            self._abort(errors[0])
        return [p for _, p in replies]

    def _abort(self, message: str) -> None:
        import torch.distributed as dist

        try:
            dist.broadcast_object_list([("abort", message)], src=0, group=self.ctrl)
        except Exception:  # noqa: BLE001, S110 - the others are gone already
            pass
        self.broken = self._closed = True
        raise ExecutorError(message)

    def serve(self) -> int:
        """On ranks other than 0: handle rank 0's requests until it says the job is over."""
        import torch.distributed as dist

        while True:
            box: list[Any] = [None]
            try:
                dist.broadcast_object_list(box, src=0, group=self.ctrl)
            except Exception as exc:  # noqa: BLE001
                raise self._lost(exc) from None
            msg = box[0]
            if msg[0] == "exit":
                self._finish()
                return 0
            if msg[0] == "abort":
                self.broken = self._closed = True
                raise ExecutorError(f"rank {self.rank}: the run failed: {msg[1]}")
            reply = self._handle(msg)
            try:
                dist.gather_object(reply, None, dst=0, group=self.ctrl)
            except Exception as exc:  # noqa: BLE001
                raise self._lost(exc) from None

    def open(self, graph: DataflowGraph, seed: int = 0) -> BackendSession:
        return TorchrunSession(self, graph, seed)

    def describe(self) -> dict[str, Any]:
        return {
            **super().describe(),
            "threads_per_device": self.threads_per_device,
            "processes": True,
            "torchrun": True,
            "world_size": self.world_size,
            "transport": "nccl" if self.gpu else "gloo",
        }

    def _finish(self) -> None:
        import torch.distributed as dist

        self._closed = True
        if dist.is_initialized():
            dist.destroy_process_group()

    def close(self) -> None:
        """On rank 0: tell the other ranks the job is over."""
        if self._closed or self.rank != 0:
            return
        import torch.distributed as dist

        try:
            dist.broadcast_object_list([("exit",)], src=0, group=self.ctrl)
        except Exception:  # noqa: BLE001, S110 - nobody left to tell
            pass
        self._finish()


class TorchrunSession(DistSession):
    """A graph opened on every rank of a torchrun job (asked from rank 0)."""

    backend: TorchrunBackend  # type: ignore[assignment]

    def __init__(self, backend: TorchrunBackend, graph: DataflowGraph, seed: int):
        BackendSession.__init__(self, backend, graph, seed)
        self.key = f"{id(self):x}"
        be = backend
        labels = [be.device_label(d) for d in range(be.num_devices)]
        be.ask(("open", self.key, pickle.dumps(graph), self.seed, labels))

    def run(self, plan: ExecutionPlan, timeout_s: float, keep_outputs: bool = False) -> RawRun:
        be = self.backend
        be.ask(("prepare", self.key, plan.device, plan.priority))
        replies = be.ask(("go", self.key, keep_outputs))
        return self._merge(plan, replies)

    def close(self) -> None:
        if not self.backend._closed:
            self.backend.ask(("close", self.key))
        BackendSession.close(self)


def coordinate_or_serve(backend: TorchrunBackend, command: str, body: Callable[[], T]) -> T | None:
    """A CLI command as a torchrun job: rank 0 returns ``body()`` (which runs on ``backend``),
    the other ranks serve it and return ``None``; the job is closed at the end.

    When the group is lost (a rank died, a run failed), this rank prints the one error line as
    the CLI words it and exits with status 2 at once: a lost gloo group cannot be torn down (its
    threads abort the interpreter's exit).
    """
    try:
        if backend.rank != 0:
            backend.serve()
            return None
        return body()
    except DopplerLabError as exc:
        if not backend.broken:
            raise
        print(f"doppler-lab {command}: error: {one_line(exc, 2000)}", file=sys.stderr, flush=True)
        os._exit(2)
    finally:
        backend.close()


def join_torchrun(
    cluster: Cluster | None = None,
    threads_per_device: int | None = None,
    collective_timeout_s: float | None = None,
) -> TorchrunBackend:
    """Join the torchrun job this process belongs to (``cluster`` defaults to
    :func:`torchrun_cluster`; ``collective_timeout_s`` to ``$DOPPLER_LAB_TORCHRUN_TIMEOUT_S``,
    else :data:`DEFAULT_COLLECTIVE_TIMEOUT_S`)."""
    if collective_timeout_s is None:
        text = os.environ.get(TIMEOUT_ENV, str(DEFAULT_COLLECTIVE_TIMEOUT_S))
        try:
            collective_timeout_s = float(text)
        except ValueError:
            collective_timeout_s = -1.0
        if not collective_timeout_s > 0:
            raise ConfigError(f"{TIMEOUT_ENV}={text!r}: expected a number of seconds > 0")
    return TorchrunBackend(
        cluster if cluster is not None else torchrun_cluster(),
        threads_per_device,
        collective_timeout_s,
    )


__all__ = [
    "DIE_ENV",
    "coordinate_or_serve",
    "TorchrunBackend",
    "TorchrunSession",
    "join_torchrun",
    "torchrun_cluster",
    "under_torchrun",
]
