"""Where the many runs of a sweep go: this process (``local``) or a Ray cluster (``ray``).

A sweep (``bench policy``'s training runs, ``bench quality``'s placer evaluations, the runs
behind notebooks 07-09) is a list of :class:`Run`: a module-level function, its arguments (all
picklable) and a label naming the run's configuration. A :class:`Runner` calls them all and
returns their values in order, showing one bar over the runs (running / done / failed counts
and the last finished run).

The run function owns its run directory and its cache: a run whose result is on disk reads it
back, an unfinished one resumes from its last checkpoint (the trainer resumes from its run
directory). So a sweep stopped part-way (Ctrl-C, a failed run, a worker killed with its
machine) is restarted by running it again. Every run gets one torch thread, and seeds come from
the run's configuration, so both runners give the same results.

- :class:`LocalRunner` (default): one run after the other in this process, or ``jobs``
  processes of this machine.
- :class:`RayRunner`: one Ray task per run with ``num_cpus=1``; ``ray.init()`` starts a local
  cluster (all cores, or ``num_cpus``), ``address`` joins an existing one (``ray start --head``
  on one host, ``ray start --address HOST:6379`` on the others; the run directories must be on
  a filesystem all hosts share, the driver's working directory is the tasks' too).
- ``auto`` (:func:`make_runner`): Ray when it is importable and a cluster is up (this process is
  connected, or ``RAY_ADDRESS`` names one), else ``jobs`` local processes (default: every core).

Example:
    >>> runs = [Run(abs, (-i,), label=f"abs {-i}") for i in range(3)]
    >>> LocalRunner().run(runs, progress=False).values
    [0, 1, 2]
"""

from __future__ import annotations

import argparse
import contextlib
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .deps import require
from .errors import ConfigError, RunError
from .progress import progress as progress_bar
from .validate import exception_line

__all__ = [
    "RUNNERS",
    "LocalRunner",
    "RayRunner",
    "Run",
    "Runner",
    "Sweep",
    "add_runner_arguments",
    "make_runner",
    "ray_cluster_up",
    "runner_from_args",
    "torch_threads",
]

#: runner names of ``--runner``
RUNNERS: tuple[str, ...] = ("local", "ray")
#: runner names :func:`make_runner` takes: those of ``--runner`` and ``auto``
RUNNER_NAMES: tuple[str, ...] = (*RUNNERS, "auto")
#: tries to start a local Ray cluster
_START_ATTEMPTS = 3


@contextlib.contextmanager
def torch_threads(n: int = 1) -> Iterator[None]:
    """Run the block with ``n`` torch intra-op threads (restored after): the per-step tensors of
    an episode are tiny, and one thread is much faster than several on a small machine."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


@dataclass(frozen=True)
class Run:
    """One run of a sweep.

    Attributes:
        fn: a module-level function (pickled by reference for other processes).
        args: its positional arguments (picklable).
        kwargs: its keyword arguments (picklable).
        label: the run's configuration in words (named when the run fails).
        run_dir: its run directory, if it has one (for the record; ``fn`` owns it).
    """

    fn: Callable[..., Any]
    args: tuple[Any, ...] = ()
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    label: str = ""
    run_dir: str | None = None

    def __post_init__(self) -> None:
        if not callable(self.fn):
            raise ConfigError(f"run {self.label!r}: fn = {self.fn!r}, expected a function")


@dataclass(frozen=True)
class Failure:
    """A run that raised: its index in the sweep, its label and the one-line error."""

    index: int
    label: str
    message: str


@dataclass(frozen=True)
class Sweep:
    """What :meth:`Runner.run` returns.

    Attributes:
        values: each run's return value, in the order of the runs (``None`` where it failed).
        failures: the runs that failed (only with ``keep_going``).
    """

    values: list[Any]
    failures: list[Failure]

    def done(self) -> list[Any]:
        """The values of the runs that finished."""
        failed = {f.index for f in self.failures}
        return [v for i, v in enumerate(self.values) if i not in failed]

    def notes(self) -> list[str]:
        """One line per failed run, for a report's notes."""
        return [f"run {f.label} failed: {f.message}" for f in self.failures]


def call_run(run: Run, cwd: str | None = None) -> Any:
    """Call one run with one torch thread (in ``cwd`` when given and present)."""
    if cwd is not None and os.path.isdir(cwd):
        os.chdir(cwd)
    with torch_threads(1):
        return run.fn(*run.args, **dict(run.kwargs))


class Runner:
    """Calls the runs of a sweep; subclasses say where (:meth:`_results`)."""

    name = "runner"

    def run(
        self,
        runs: Sequence[Run],
        *,
        desc: str = "runs",
        progress: bool = True,
        keep_going: bool = False,
    ) -> Sweep:
        """Call every run; return their values in order.

        Args:
            runs: the sweep.
            desc: the bar's label.
            progress: show the bar on stderr.
            keep_going: a failed run is recorded in :attr:`Sweep.failures` and the others go on;
                without it the first failure stops the sweep.

        Raises:
            RunError: a run failed (without ``keep_going``): names its configuration.
        """
        runs = list(runs)
        values: list[Any] = [None] * len(runs)
        failures: list[Failure] = []
        done = 0
        self.start()  # before the bar: starting a cluster writes its own lines
        bar = progress_bar(total=len(runs), desc=desc, unit="run", enabled=progress, leave=True)
        with bar:
            results = self._results(runs)
            try:
                for index, ok, value, running in results:
                    label = runs[index].label or f"#{index}"
                    if ok:
                        values[index] = value
                        done += 1
                    else:
                        failures.append(Failure(index, label, value))
                        if not keep_going:
                            raise RunError(f"run {label} failed: {value}")
                    bar.set_postfix_str(
                        f"running {running}, done {done}, failed {len(failures)}, last {label}"
                        + ("" if ok else " (failed)")
                    )
                    bar.update(1)
            finally:
                results.close()
        return Sweep(values, failures)

    def start(self) -> None:
        """Get ready to take runs (nothing to do here)."""

    def _results(self, runs: list[Run]) -> Iterator[tuple[int, bool, Any, int]]:
        """Yield ``(index, ok, value or one-line error, runs still running)`` as runs finish;
        closing the generator stops what is still running or queued."""
        raise NotImplementedError


class LocalRunner(Runner):
    """Runs on this machine: one after the other in this process (``jobs=1``, the default) or
    in ``jobs`` processes."""

    name = "local"

    def __init__(self, jobs: int = 1, start_method: str | None = None) -> None:
        if not (isinstance(jobs, int) and jobs >= 1):
            raise ConfigError(f"local runner: jobs = {jobs!r}, expected an integer >= 1")
        if start_method not in (None, "fork", "spawn", "forkserver"):
            raise ConfigError(
                f"local runner: start_method = {start_method!r}, expected fork, spawn or forkserver"
            )
        self.jobs = jobs
        #: how the processes start (None: the platform's default); ``spawn`` for a caller that
        #: has trained in this process: a forked worker of a process whose torch has run
        #: updates can die at once (measured: every sweep after the first in a training loop)
        self.start_method = start_method

    def _results(self, runs: list[Run]) -> Iterator[tuple[int, bool, Any, int]]:
        if min(self.jobs, len(runs)) <= 1:
            for i, run in enumerate(runs):
                running = int(i + 1 < len(runs))  # the next one starts at once
                try:
                    value = call_run(run)
                except Exception as exc:  # a failed run is reported, not the loop's end
                    yield i, False, exception_line(exc, typed=True), running
                else:
                    yield i, True, value, running
            return
        import multiprocessing
        from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait

        ctx = multiprocessing.get_context(self.start_method) if self.start_method else None
        ex = ProcessPoolExecutor(min(self.jobs, len(runs)), mp_context=ctx)
        try:
            pending = {ex.submit(call_run, run): i for i, run in enumerate(runs)}
            while pending:
                finished, _ = wait(pending, return_when=FIRST_COMPLETED)
                for fut in finished:
                    i = pending.pop(fut)
                    running = min(len(pending), self.jobs)
                    exc = fut.exception()
                    if exc is None:
                        yield i, True, fut.result(), running
                    else:
                        yield i, False, exception_line(exc, typed=True), running
        finally:
            ex.shutdown(wait=True, cancel_futures=True)


class RayRunner(Runner):
    """One Ray task per run (``num_cpus=1``).

    Args:
        address: a running cluster's address (``HOST:6379`` or ``auto``); ``None`` starts a
            local cluster in this process (stopped at exit).
        num_cpus: CPUs of a local cluster (default: all cores).
        runtime_env: Ray's runtime environment for the tasks (only if the workers need one,
            e.g. ``{"env_vars": {...}}``; the package must be installed on every host).
        retries: times Ray reruns a run whose worker died (it resumes from its checkpoint).
    """

    name = "ray"

    def __init__(
        self,
        address: str | None = None,
        num_cpus: int | None = None,
        runtime_env: Mapping[str, Any] | None = None,
        retries: int = 0,
    ) -> None:
        if num_cpus is not None and not (isinstance(num_cpus, int) and num_cpus >= 1):
            raise ConfigError(f"ray runner: num_cpus = {num_cpus!r}, expected an integer >= 1")
        if not (isinstance(retries, int) and retries >= 0):
            raise ConfigError(f"ray runner: retries = {retries!r}, expected an integer >= 0")
        self.address = address
        self.num_cpus = num_cpus
        self.runtime_env = dict(runtime_env) if runtime_env else None
        self.retries = retries

    def connect(self) -> Any:
        """Start (or join) the cluster unless this process is already connected; the module."""
        ray = require("ray", "runner 'ray'")
        if ray.is_initialized():
            return ray
        opts: dict[str, Any] = {
            "include_dashboard": False,
            "ignore_reinit_error": True,
            "log_to_driver": False,
            "runtime_env": self.runtime_env,
        }
        if self.address:
            ray.init(address=self.address, **opts)
            return ray
        # a local cluster's raylet gives its agents a fixed 15 s to start, which a loaded
        # machine can miss (ray-project/ray#65983): try again before giving up
        for attempt in range(_START_ATTEMPTS):
            try:
                ray.init(num_cpus=self.num_cpus, **opts)
                return ray
            except Exception as exc:  # Ray raises a bare Exception for a node that did not start
                ray.shutdown()
                if attempt + 1 == _START_ATTEMPTS:
                    raise RunError(
                        f"runner 'ray': the local Ray cluster did not start in "
                        f"{_START_ATTEMPTS} tries ({exception_line(exc, typed=True)}); expected a machine with "
                        "a few idle seconds (see /tmp/ray/session_latest/logs/raylet.out)"
                    ) from None
        return ray

    def start(self) -> None:
        """Start or join the cluster (:meth:`connect`)."""
        self.connect()

    def _results(self, runs: list[Run]) -> Iterator[tuple[int, bool, Any, int]]:
        ray = self.connect()
        task = ray.remote(num_cpus=1, max_retries=self.retries)(call_run)
        cwd = os.getcwd()
        pending = {task.remote(run, cwd): i for i, run in enumerate(runs)}
        cpus = max(1, int(ray.cluster_resources().get("CPU", 1)))
        try:
            while pending:
                ready, _ = ray.wait(list(pending), num_returns=1)
                for ref in ready:
                    i = pending.pop(ref)
                    running = min(len(pending), cpus)
                    try:
                        value = ray.get(ref)
                    except ray.exceptions.RayTaskError as exc:  # the run raised
                        cause = getattr(exc, "cause", None)
                        yield (
                            i,
                            False,
                            exception_line(cause if cause is not None else exc, typed=True),
                            running,
                        )
                    except ray.exceptions.RayError as exc:  # its worker died, or was cancelled
                        yield i, False, exception_line(exc, typed=True), running
                    else:
                        yield i, True, value, running
        finally:
            for ref in pending:  # a stopped sweep: the unfinished runs resume on the next one
                ray.cancel(ref, force=True)


def ray_cluster_up() -> bool:
    """Whether Ray is importable and a cluster is up: this process is connected to one, or
    ``RAY_ADDRESS`` names one (nothing is started or joined here, and Ray is not imported
    when this process has not imported it: then it cannot be connected)."""
    import importlib.util
    import sys

    if importlib.util.find_spec("ray") is None:
        return False
    if os.environ.get("RAY_ADDRESS"):
        return True
    ray = sys.modules.get("ray")
    return ray is not None and bool(ray.is_initialized())


def make_runner(
    name: str | Runner = "local",
    *,
    jobs: int | None = 1,
    address: str | None = None,
    start_method: str | None = None,
    **options: Any,
) -> Runner:
    """A runner by name: ``local`` (``jobs`` processes), ``ray`` (``address`` or a local
    cluster; ``options`` go to :class:`RayRunner`) or ``auto`` (Ray when
    :func:`ray_cluster_up`, joining ``RAY_ADDRESS``; else ``jobs`` local processes).
    ``jobs`` None: one per core (``os.cpu_count()``). ``start_method``: how local processes
    start (``spawn`` where this process may have run torch before: a process forked from one
    whose OpenMP threads ran dies or hangs)."""
    if isinstance(name, Runner):
        return name
    if name not in RUNNER_NAMES:
        raise ConfigError(f"unknown runner {name!r}; expected one of {', '.join(RUNNER_NAMES)}")
    if jobs is None:
        jobs = os.cpu_count() or 1
    if name == "auto":
        if address or ray_cluster_up():
            return RayRunner(address or os.environ.get("RAY_ADDRESS"), **options)
        name = "local"
    if name == "local":
        if address:
            raise ConfigError("--ray-address needs --runner ray; expected no address with local")
        return LocalRunner(jobs, start_method=start_method)
    return RayRunner(address, **options)


def add_runner_arguments(parser: argparse.ArgumentParser) -> None:
    """``--runner``, ``--ray-address`` and ``--keep-going`` on a command's parser."""
    parser.add_argument(
        "--runner",
        choices=RUNNERS,
        default="local",
        help="where a sweep's runs go: this machine (default) or a Ray cluster",
    )
    parser.add_argument(
        "--ray-address",
        default=None,
        metavar="HOST:PORT",
        help="join this Ray cluster (default with --runner ray: start a local one)",
    )
    parser.add_argument(
        "--keep-going",
        action="store_true",
        help="a failed run is reported and the others go on (default: the first failure stops)",
    )


def runner_from_args(args: argparse.Namespace) -> str | Runner:
    """The runner of :func:`add_runner_arguments`' flags: ``"local"`` (the caller picks its
    processes, :func:`make_runner` builds it) or a :class:`RayRunner`."""
    name = getattr(args, "runner", "local")
    address = getattr(args, "ray_address", None)
    if name == "local" and not address:
        return "local"
    return make_runner(name, address=address)
