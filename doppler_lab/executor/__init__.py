"""The real work-conserving executor.

Runs a placed executable graph on real devices -- CPU worker threads (default) or CUDA GPUs --
and returns the measured :class:`~doppler_lab.trace.Trace` (``semantics="measured"``), the type
the simulator returns. See :mod:`doppler_lab.executor.torch_ops` for what each op computes,
:mod:`~doppler_lab.executor.cpu` and :mod:`~doppler_lab.executor.streams` for the backends, and
:class:`ExecutorCost` for a placement -> measured makespan cost function (Stage III training).

Example:
    >>> from doppler_lab.graph import GraphBuilder
    >>> from doppler_lab.placement import round_robin
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

from .backend import BACKENDS, Backend, BackendSession, RawRun, make_backend
from .cost import COST_STATS, ExecutorCost
from .plan import ExecutionPlan, make_plan
from .runner import ExecutionResult, Executor, execute

__all__ = [
    "BACKENDS",
    "COST_STATS",
    "Backend",
    "BackendSession",
    "ExecutionPlan",
    "ExecutionResult",
    "Executor",
    "ExecutorCost",
    "RawRun",
    "execute",
    "make_backend",
    "make_plan",
]
