"""The DOPPLER placement episode: the one API every way of placing node by node goes through.

An episode assigns the compute nodes of a graph one at a time (SEL picks a *candidate*, an
unassigned node whose compute predecessors are all assigned; PLC picks its device) until every
compute node has a device; input nodes are never assigned (resident everywhere). Its state is
the incremental list schedule of :class:`~doppler_lab.timing.schedule.ListScheduleState` (start and
finish estimates under the ``est``, ``additive`` or ``wc`` estimate, the frontier, the device
features of DOPPLER.md); :class:`Episode` adds the episode's own view: the step count, why an
action is invalid, a checked :meth:`~Episode.step`, and the finished placement.

Who drives an episode:

- the Critical Path teacher (:meth:`doppler_lab.placers.CriticalPathTeacher.decide`: one CP
  decision on any episode; :class:`~doppler_lab.placers.CriticalPathPlacer` steps a whole one);
- learned policies (:class:`doppler_lab.policies.rollout.Rollout`: K episodes in lockstep, one
  batched PLC call per step);
- the Gymnasium environment (:class:`doppler_lab.policies.env.PlacementEnv`: one action per ``step``);
- the explorer's steppers (:mod:`doppler_lab.viz.episodes`: the teacher's or a policy's
  decisions, one at a time, with their scores).

Device features in a policy's layout are :func:`doppler_lab.policies.features.device_features`
of the episode.

Example:
    >>> import numpy as np
    >>> from doppler_lab.hardware import CostModel, make_cluster
    >>> from doppler_lab.workloads import build
    >>> g = build("chainmm", scale="tiny")
    >>> ep = Episode(g, CostModel(g, make_cluster("p100x4")))
    >>> while not ep.done:
    ...     v = int(ep.candidates()[0])
    ...     ep.step(v, int(np.argmin(ep.est(v))))
    >>> ep.t == ep.num_steps == g.compute_nodes.size
    True
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ..house.errors import PlacementError
from ..ir.graph import DataflowGraph
from .cost_model import CostModel
from .schedule import Estimate, ListScheduleState

if TYPE_CHECKING:
    from .fit import MemoryGuard


class Episode(ListScheduleState):
    """One placement episode of ``graph`` under ``cost_model`` (see the module docstring).

    Args:
        graph: the graph.
        cost_model: its costs on a cluster (raw units).
        estimate: ``"est"``, ``"additive"`` or ``"wc"`` (:mod:`doppler_lab.timing.schedule`).
        guard: the memory caps, kept in step with every step (None: no caps).

    Attributes:
        device: ``(N,)`` the partial placement (-1: not assigned yet; inputs stay -1).
        start, finish: ``(N,)`` the estimate's start and finish of each assigned node.
        order: the nodes in the order they were assigned.
    """

    def __init__(
        self,
        graph: DataflowGraph,
        cost_model: CostModel,
        estimate: Estimate = "est",
        guard: MemoryGuard | None = None,
    ):
        super().__init__(graph, cost_model, estimate, guard)
        self.num_steps = int(graph.compute_nodes.size)

    @property
    def t(self) -> int:
        """Decisions taken so far (the index of the next step)."""
        return len(self.order)

    def why_invalid(self, node: int, device: int) -> str | None:
        """Why ``(node, device)`` cannot be the next step, or None when it can."""
        n, d = self.graph.num_nodes, self.num_devices
        if not 0 <= device < d:
            return f"device {device} is not in 0..{d - 1}"
        if not 0 <= node < n:
            return f"node {node} is not in 0..{n - 1}"
        if self.done:
            return "the episode is over; call reset()"
        if not self.is_candidate(node):
            return f"node {node} ({self.graph.names[node]!r}) is not a candidate"
        return None

    def step(self, node: int, device: int, est: np.ndarray | None = None) -> None:
        """Put candidate ``node`` on ``device`` (``est``: its :meth:`est`, when already known);
        drivers whose choices are candidates by construction call :meth:`assign` directly.

        Raises:
            PlacementError: :meth:`why_invalid` says why the action is not allowed.
        """
        why = self.why_invalid(int(node), int(device))
        if why is not None:
            raise PlacementError(why)
        self.assign(node, device, est)
