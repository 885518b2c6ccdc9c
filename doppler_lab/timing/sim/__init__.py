"""The work-conserving simulator.

Three semantics:

- ``paper``: exactly the simulator released with the DOPPLER paper (a SimPy program): each device
  runs one op at a time, granting ops in the order they became ready (SimPy's event order decides
  ties); compute time is the op's cost on its device; an edge between two devices costs its
  transfer time, transfers start when the producer ends and run in unlimited parallel (no
  contention, no dedupe: one transfer per edge). Our compiled kernel reproduces SimPy's event
  order, so makespans match the released code to the last bit at noise 0.
- ``wc``: work-conserving with link contention, latency, launch overhead (from the cost model)
  and lognormal duration noise. A tensor goes once to each consuming device; transfers that
  share a link resource are served one after another in issue order. An idle device starts the
  ready op with the smallest (ready time, node id), or the smallest (priority, node id) with
  ``dispatch="priority"``. Where the cluster has a host with costs
  (:class:`~doppler_lab.hardware.host.Host`: a calibrated profile or a cluster file), one host
  thread launches every op and issues every copy, one at a time, and devices beyond its
  parallel capacity slow each other; without one (every preset) nothing changes.
- ``bsp``: level-synchronous with barriers (compute phase, then communication phase, per level).

:meth:`Simulator.run` also records each device's peak resident bytes on the trace
(``peak_memory_bytes``, the model of :mod:`.footprint`); makespan-only calls do not compute it.

Noise multiplies every compute and transfer duration by an independent lognormal(0, sigma)
factor drawn from an explicit generator; sigma = 0 is deterministic.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable, Sequence
from functools import partial
from typing import Literal

import numba
import numpy as np

from ...hardware.cluster import Cluster, make_cluster
from ...house.errors import PlacementError, SimulationError
from ...house.limits import MAX_NOISE
from ...ir.graph import DataflowGraph
from ...ir.placement import Placement
from ...ir.trace import Trace, kind_names
from ..cost_model import CostModel
from . import _kernels as K
from .footprint import MemoryModel

SEMANTICS: tuple[str, ...] = ("paper", "wc", "bsp")
Semantics = Literal["paper", "wc", "bsp"]
Dispatch = Literal["fifo", "priority"]


def _keep_torch_threads(run):
    """Call ``run()`` and restore torch's intra-op thread count if it changed.

    numba's ``omp`` threading layer shares the OpenMP runtime with torch, and the first parallel
    kernel of a process sets the OpenMP thread count; a training loop that asked torch for one
    thread would silently get all of them. torch is only consulted if already imported.
    """
    torch = sys.modules.get("torch")
    if torch is None:
        return run()
    before = torch.get_num_threads()
    try:
        return run()
    finally:
        if torch.get_num_threads() != before:
            torch.set_num_threads(before)


def _with_host(host: tuple, graph: tuple, costs: tuple, dev, opts: tuple, out: tuple):
    """:func:`~._kernels.wc_host_kernel` with its host first (the kernels' call order)."""
    return K.wc_host_kernel(graph, costs, dev, opts, out, host)


class Simulator:
    """A graph on a cluster, prepared for many fast simulations.

    Args:
        graph: the dataflow graph.
        cluster: a :class:`Cluster` or a preset name.
        semantics: ``paper``, ``wc`` or ``bsp``.
        noise: sigma of the lognormal duration noise (0: deterministic).
        cost_model: a prepared :class:`CostModel` (default: built from graph and cluster).

    Example:
        >>> from doppler_lab.workloads import build
        >>> g = build("chainmm")
        >>> sim = Simulator(g, "p100x4", semantics="wc")
        >>> from doppler_lab.ir.placement import round_robin
        >>> trace = sim.run(round_robin(g, 4))
        >>> trace.makespan > 0
        True
    """

    def __init__(
        self,
        graph: DataflowGraph,
        cluster: Cluster | str,
        semantics: Semantics = "paper",
        noise: float = 0.0,
        cost_model: CostModel | None = None,
    ):
        if semantics not in SEMANTICS:
            raise SimulationError(f"unknown semantics {semantics!r}; expected one of {SEMANTICS}")
        if not (np.isfinite(noise) and 0 <= noise <= MAX_NOISE):
            raise SimulationError(
                f"noise sigma {noise!r} must be finite, >= 0 and <= {MAX_NOISE:g} "
                "(doppler_lab.house.limits.MAX_NOISE)"
            )
        self.graph = graph
        self.cluster = make_cluster(cluster) if isinstance(cluster, str) else cluster
        self.semantics = semantics
        self.noise = float(noise)
        self.cost = cost_model if cost_model is not None else CostModel(graph, self.cluster)
        g = graph
        self.num_devices = self.cluster.num_devices
        eids = g.succ_eid
        small = g.num_nodes < 2**31 and g.num_edges < 2**31
        index = np.int32 if small else np.int64  # halves the memory traffic of the kernels
        self._index = index
        self._kinds = kind_names(g)
        comp = self.cost.compute
        comp_nodes = g.compute_nodes
        order = comp_nodes[np.lexsort((comp_nodes, g.depth[comp_nodes]))]
        levels = g.depth[order]
        nlev = int(levels.max()) + 1 if order.size else 0
        level_ptr = np.zeros(nlev + 1, dtype=np.int64)
        np.cumsum(np.bincount(levels, minlength=nlev), out=level_ptr[1:])
        # the kernels' records, built and checked once; calls only prepare the placement
        self._graph_arrays = K.GraphArrays(
            succ_ptr=np.ascontiguousarray(g.succ_ptr, dtype=index),
            succ_idx=np.ascontiguousarray(g.succ_idx, dtype=index),
            slot_src=np.repeat(np.arange(g.num_nodes, dtype=np.int64), np.diff(g.succ_ptr)),
            # only compute predecessors count: inputs are resident everywhere
            indeg=np.bincount(g.edge_dst[~g.is_input[g.edge_src]], minlength=g.num_nodes).astype(
                np.int32
            ),
            is_input=np.ascontiguousarray(g.is_input),
            level_order=np.ascontiguousarray(order),
            level_ptr=level_ptr,
        )
        # the host resource (wc only): None on every preset; its launch comes off the op's time
        host = self.cost.host_costs() if semantics == "wc" else None
        if host is not None:
            launch = float(host[0])
            comp = np.maximum(comp - launch, 0.0)
        self._cost_arrays = K.CostArrays(
            # identical devices: one column (the kernels read column 0), less memory traffic
            comp=np.ascontiguousarray(comp[:, :1] if (comp == comp[:, :1]).all() else comp),
            slot_fixed=np.ascontiguousarray(self.cost.edge_fixed[eids]),
            slot_bytes=np.ascontiguousarray(self.cost.edge_bytes[eids]),
            lat=np.ascontiguousarray(self.cost.latency),
            inv_bw=np.ascontiguousarray(self.cost.inv_bandwidth),
            routes=np.ascontiguousarray(self.cluster.routes),
            n_links=self.cluster.num_links,
        )
        self._host = None if host is None else tuple(K.HostCosts(*(float(x) for x in host)))
        self._ones_n = np.ones((1, g.num_nodes))
        self._ones_e = np.ones((1, g.num_edges))
        self._no_priority = np.zeros((1, g.num_nodes))
        # what the kernels are called with: each record as a plain tuple (see _kernels)
        self._records = (tuple(self._graph_arrays), tuple(self._cost_arrays))
        self._plain = tuple(
            K.RunOptions(self._ones_n[0], self._ones_e[0], False, self._no_priority[0], False, True)
        )
        self._kernel = {"paper": K.paper_kernel, "wc": K.wc_kernel, "bsp": K.bsp_kernel}[semantics]
        if self._host is not None:  # the host binds: its kernel, with the host's costs bound
            self._kernel = partial(_with_host, self._host)
        # makespan-only runs: paper records nothing; wc and bsp reuse one set of buffers (a
        # kernel holds the GIL from filling them to its last read: no two calls share them)
        self._scratch = tuple(
            K.new_buffers(0, 0) if semantics == "paper" else K.new_buffers(g.num_nodes, g.num_edges)
        )
        self._memory: MemoryModel | None = None  # built on the first run() that records

    # -- helpers ---------------------------------------------------------------------------
    def _prepare(
        self, placement: Placement | np.ndarray | Sequence[int], dispatch: str
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        """Check one placement in a single pass; returns (device ids as given, the kernels'
        device array, the priority when ``dispatch="priority"`` else None)."""
        if isinstance(placement, Placement):
            device, priority = placement.device, placement.priority
        elif (
            isinstance(placement, np.ndarray)
            and placement.ndim == 1
            and placement.dtype.kind in "iu"
        ):
            device, priority = placement, None
        else:  # lists, floats, ...: the Placement constructor's checks and messages
            pl = Placement(np.asarray(placement))
            device, priority = pl.device, pl.priority
        use_priority = self._check_dispatch(dispatch, priority)
        g = self.graph
        if device.shape[0] != g.num_nodes:
            Placement(device).validate(g, self.num_devices)  # raises the size message
        dev = np.empty(g.num_nodes, self._index)
        if K.check_devices(device, self._graph_arrays.is_input, self.num_devices, dev) >= 0:
            Placement(device).validate(g, self.num_devices)  # raises the range message
        return device, dev, (np.array(priority, dtype=np.float64) if use_priority else None)

    def _device_matrix(self, placements: np.ndarray) -> np.ndarray:
        """Validate a ``(K, N)`` array of device ids in one pass."""
        g = self.graph
        if placements.shape[1] != g.num_nodes:
            raise PlacementError(
                f"placements have {placements.shape[1]} entries each but graph {g.name!r} has {g.num_nodes} nodes"
            )
        if not np.issubdtype(placements.dtype, np.integer):
            raise PlacementError(
                f"placements must be integer device ids, got dtype {placements.dtype}"
            )
        comp = g.compute_nodes
        sub = placements[:, comp]
        bad = (sub < 0) | (sub >= self.num_devices)
        if bad.any():
            k, j = np.argwhere(bad)[0]
            v = int(comp[j])
            raise PlacementError(
                f"placement {k}: node {v} ({g.names[v]!r}) is on device {int(sub[k, j])}, "
                f"expected 0..{self.num_devices - 1}"
            )
        devs = placements.astype(self._index)
        devs[:, g.is_input] = 0
        return np.ascontiguousarray(devs)

    def _options(
        self, rng: np.random.Generator | None, rows: int | None, priority: np.ndarray | None
    ) -> tuple:
        """The :class:`RunOptions` of a batch as the kernels take them (a plain tuple): noise
        (``rows`` independent draws, one row each) and dispatch; with ``rows=None``, of a single
        run."""
        if self.noise == 0.0:
            if rows is None and priority is None:
                return self._plain
            cn, sn = self._ones_n, self._ones_e
        elif rng is None:
            raise SimulationError("noise > 0 needs a seed or an rng (results must be reproducible)")
        else:
            g = self.graph
            cn = rng.lognormal(0.0, self.noise, size=(rows or 1, g.num_nodes))
            sn = rng.lognormal(0.0, self.noise, size=(rows or 1, g.num_edges))
        pr = self._no_priority if priority is None else priority.reshape(-1, self.graph.num_nodes)
        if rows is None:
            cn, sn, pr = cn[0], sn[0], pr[0]
        return tuple(K.RunOptions(cn, sn, self.noise > 0, pr, priority is not None, True))

    @staticmethod
    def _rng(seed: int | None, rng: np.random.Generator | None) -> np.random.Generator | None:
        if rng is not None:
            return rng
        return None if seed is None else np.random.default_rng(seed)

    def _check_dispatch(self, dispatch: str, priority: np.ndarray | None) -> bool:
        if dispatch not in ("fifo", "priority"):
            raise SimulationError(f"unknown dispatch {dispatch!r}; expected 'fifo' or 'priority'")
        if dispatch == "priority":
            if self.semantics != "wc":
                raise SimulationError(
                    f"dispatch='priority' needs semantics 'wc'; {self.semantics!r} fixes its own order"
                )
            if priority is None:
                raise PlacementError("dispatch='priority' needs a placement with a priority array")
            return True
        return False

    # -- public ----------------------------------------------------------------------------
    def run(
        self,
        placement: Placement | np.ndarray | Sequence[int],
        seed: int | None = None,
        rng: np.random.Generator | None = None,
        dispatch: Dispatch = "fifo",
    ) -> Trace:
        """Simulate one placement and return its :class:`Trace`."""
        g = self.graph
        given, dev, priority = self._prepare(placement, dispatch)
        opts = self._options(self._rng(seed, rng), None, priority)
        out = K.new_buffers(g.num_nodes, g.num_edges)
        out.tr_link.fill(-1)
        m, ntr = self._kernel(*self._records, dev, opts, tuple(out))
        if not math.isfinite(m * g.time_scale):
            self._check_result(np.array([m * g.time_scale]))
        scale = g.time_scale
        slots = out.tr_slot[:ntr]
        src = self._graph_arrays.slot_src[slots]
        dst = self._graph_arrays.succ_idx[slots]
        device = np.array(given, dtype=np.int64)
        device[g.is_input] = -1
        start, end = out.start * scale, out.end * scale
        tr_start, tr_end = out.tr_start[:ntr] * scale, out.tr_end[:ntr] * scale
        if self._memory is None:
            self._memory = MemoryModel(g)
        peak = self._memory.sweep(
            device, start, end, src, device[dst], tr_start, tr_end, self.num_devices
        )[0]
        return Trace(
            graph_name=g.name,
            names=g.names,
            kinds=self._kinds,
            device=device,
            start=start,
            end=end,
            transfer_src=src,
            transfer_dst=dst,
            transfer_src_device=device[src],
            transfer_dst_device=device[dst],
            transfer_start=tr_start,
            transfer_end=tr_end,
            transfer_link=out.tr_link[:ntr] if self.semantics != "paper" else np.full(ntr, -1),
            num_devices=self.num_devices,
            semantics=self.semantics,
            link_names=self.cluster.link_names,
            meta={
                "cluster": self.cluster.name,
                "noise": self.noise,
                "seed": seed,
                "dispatch": dispatch,
            },
            peak_memory_bytes=peak,
        )

    def makespan(
        self,
        placement: Placement | np.ndarray | Sequence[int],
        seed: int | None = None,
        rng: np.random.Generator | None = None,
        dispatch: Dispatch = "fifo",
    ) -> float:
        """The makespan of one placement (reported units).

        One compiled call on this thread (no thread pool), after a one-pass check of the
        placement; the same noise draws as :meth:`run` and ``makespans([placement])``.
        """
        _, dev, priority = self._prepare(placement, dispatch)
        opts = self._options(self._rng(seed, rng), None, priority)
        m, _ = self._kernel(*self._records, dev, opts, self._scratch)
        m = m * self.graph.time_scale
        if not math.isfinite(m):  # a float test: this path runs in tight search loops
            self._check_result(np.array([m]))
        return m

    def kernel_call(self, placement: Placement | np.ndarray | Sequence[int]) -> Callable[[], float]:
        """For benchmarks: a function that runs the compiled kernel alone on this placement's
        prepared arrays (noise 0, FIFO dispatch) and returns its makespan in raw units."""
        _, dev, _ = self._prepare(placement, "fifo")
        args = (*self._records, dev, self._plain)
        kernel, scratch = self._kernel, self._scratch
        return lambda: kernel(*args, scratch)[0]

    def makespans(
        self,
        placements: np.ndarray | Sequence[Placement] | Sequence[Sequence[int]],
        seed: int | None = None,
        rng: np.random.Generator | None = None,
        dispatch: Dispatch = "fifo",
    ) -> np.ndarray:
        """Makespans of many placements of this graph, simulated in parallel.

        ``placements`` is a ``(K, N)`` integer array or a sequence of placements. With noise,
        each placement gets its own independent draw from ``rng`` (or ``seed``). One placement
        takes the single-call path of :meth:`makespan` (no thread pool).
        """
        matrix = isinstance(placements, np.ndarray) and placements.ndim == 2
        if not matrix:
            placements = list(placements)
        if len(placements) == 1 and (not matrix or placements.dtype.kind in "iu"):
            one = placements[0]
            return np.array([self.makespan(one, seed=seed, rng=rng, dispatch=dispatch)])
        priorities = None
        if matrix:
            devs = self._device_matrix(placements)
            self._check_dispatch(dispatch, None)  # plain arrays have no priority
        else:
            pls = [p if isinstance(p, Placement) else Placement(np.asarray(p)) for p in placements]
            if not pls:
                return np.zeros(0)
            use_priority = any(self._check_dispatch(dispatch, p.priority) for p in pls)
            prepared = [self._prepare(p, "fifo")[1] for p in pls]
            devs = np.stack(prepared)
            priorities = np.stack([p.priority for p in pls]) if use_priority else None
        if devs.shape[0] == 0:
            return np.zeros(0)
        opts = self._options(self._rng(seed, rng), devs.shape[0], priorities)
        ga, ca = self._records
        if self.semantics == "paper":
            # numba.get_num_threads() starts the threading layer too (torch's threads change)
            out = _keep_torch_threads(
                lambda: K.paper_batch(ga, ca, devs, opts, min(len(devs), numba.get_num_threads()))
            )
        elif self.semantics == "wc" and self._host is not None:
            out = _keep_torch_threads(lambda: K.wc_host_batch(ga, ca, devs, opts, self._host))
        elif self.semantics == "wc":
            out = _keep_torch_threads(lambda: K.wc_batch(ga, ca, devs, opts))
        else:
            out = K.bsp_batch(ga, ca, devs, opts)
        return self._check_result(out * self.graph.time_scale)

    def _check_result(self, makespans: np.ndarray) -> np.ndarray:
        """``makespans`` if all are finite (the cost model bounds them at noise 0; a large
        noise draw can still overflow), else a :class:`SimulationError` naming the noise."""
        if not np.isfinite(makespans).all():
            raise SimulationError(
                f"graph {self.graph.name!r} on cluster {self.cluster.name!r}: a makespan "
                f"overflows with noise sigma {self.noise:g}; expected a smaller --noise"
            )
        return makespans

    def lower_bound(self) -> float:
        """The makespan lower bound (reported units)."""
        return self.cost.lower_bound() * self.graph.time_scale


def simulate(
    graph: DataflowGraph,
    cluster: Cluster | str,
    placement: Placement | np.ndarray | Sequence[int],
    semantics: Semantics = "paper",
    noise: float = 0.0,
    seed: int | None = None,
    rng: np.random.Generator | None = None,
    dispatch: Dispatch = "fifo",
) -> Trace:
    """Simulate ``placement`` of ``graph`` on ``cluster``; returns a :class:`Trace`."""
    return Simulator(graph, cluster, semantics, noise).run(
        placement, seed=seed, rng=rng, dispatch=dispatch
    )


def simulate_batch(
    graph: DataflowGraph,
    cluster: Cluster | str,
    placements: np.ndarray | Sequence[Placement] | Sequence[Sequence[int]],
    semantics: Semantics = "paper",
    noise: float = 0.0,
    seed: int | None = None,
    rng: np.random.Generator | None = None,
) -> np.ndarray:
    """Makespans of many placements of one graph (see :meth:`Simulator.makespans`)."""
    return Simulator(graph, cluster, semantics, noise).makespans(placements, seed=seed, rng=rng)


__all__ = ["SEMANTICS", "Simulator", "simulate", "simulate_batch"]
