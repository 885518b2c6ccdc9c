"""The real work-conserving executor.

Runs a placed executable graph on real devices and returns the measured
:class:`~doppler_lab.ir.trace.Trace` (``semantics="measured"``, seconds), the type the simulator
returns. Backends (:func:`make_backend`):

- ``cpu`` (default): a worker thread per device, a thread per copy lane
  (:mod:`~doppler_lab.executor.cpu`);
- ``dist``: a worker process per device in a ``torch.distributed`` gloo group, send/recv for
  transfers (:mod:`~doppler_lab.executor.dist`);
- ``cuda``: one host dispatcher over a compute stream and copy streams per GPU, events for
  dependencies and timing; ``cuda-shared`` puts several logical devices on one GPU
  (:mod:`~doppler_lab.executor.streams`);
- ``inline``: the stream dispatcher over synchronous CPU stand-ins (tests).

Every backend dispatches work-conservingly: an op starts once its inputs are on its device
and its device is free, ready ops in the order they became ready (ties by node id) or by the
placement's priority. The one exception is chosen: CPU workers can replay a simulated run's
order instead (dispatch ``simulated``, :mod:`~doppler_lab.executor.replay`), so that the
measured peak memory is the simulated one. See :mod:`~doppler_lab.executor.torch_ops` for what each op computes,
:class:`ExecutorCost` for a placement -> measured makespan cost function (Stage III training),
and :mod:`~doppler_lab.executor.profiling` for calibration.

Example:
    >>> from doppler_lab.ir.graph import GraphBuilder
    >>> from doppler_lab.ir.placement import round_robin
    >>> b = GraphBuilder("tiny")
    >>> x = b.add_input("x", (8, 8))
    >>> w = b.add_input("w", (8, 8))
    >>> y = b.add_einsum("y", "ij,jk->ik", [x, w])
    >>> z = b.add_elementwise("z", "tanh", [y])
    >>> g = b.build()
    >>> with Executor(g, "cpu", num_devices=2) as ex:
    ...     result = ex.run(round_robin(g, 2), repeats=3, warmup=1)
    >>> result.trace.semantics, result.trace.check(g)
    ('measured', [])
"""

from .backend import Backend, BackendSession, RawRun
from .cost import COST_STATS, ExecutorCost
from .factory import BACKENDS, make_backend
from .plan import ExecutionPlan, make_plan
from .runner import ExecutionResult, Executor, PairedRuns, execute

__all__ = [
    "BACKENDS",
    "COST_STATS",
    "Backend",
    "BackendSession",
    "ExecutionPlan",
    "ExecutionResult",
    "Executor",
    "ExecutorCost",
    "PairedRuns",
    "RawRun",
    "execute",
    "make_backend",
    "make_plan",
]
