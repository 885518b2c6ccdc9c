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
  ``dispatch="priority"``.
- ``bsp``: level-synchronous with barriers (compute phase, then communication phase, per level).

Noise multiplies every compute and transfer duration by an independent lognormal(0, sigma)
factor drawn from an explicit generator; sigma = 0 is deterministic.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Literal

import numba
import numpy as np

from ..errors import PlacementError, SimulationError
from ..graph import DataflowGraph
from ..hardware import Cluster, CostModel, make_cluster
from ..placement import Placement
from ..trace import Trace, kind_names
from . import _kernels as K

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
        >>> from doppler_lab.placement import round_robin
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
        if not (np.isfinite(noise) and noise >= 0):
            raise SimulationError(f"noise sigma {noise!r} must be finite and >= 0")
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
        self._succ_ptr = np.ascontiguousarray(g.succ_ptr, dtype=index)
        self._succ_idx = np.ascontiguousarray(g.succ_idx, dtype=index)
        self._index = index
        self._explicit = graph.edge_cost is not None
        self._kinds = kind_names(g)
        self._slot_src = np.repeat(np.arange(g.num_nodes, dtype=np.int64), np.diff(g.succ_ptr))
        self._slot_fixed = np.ascontiguousarray(self.cost.edge_fixed[eids])
        self._slot_bytes = np.ascontiguousarray(self.cost.edge_bytes[eids])
        self._is_input = np.ascontiguousarray(g.is_input)
        # only compute predecessors count: inputs are resident everywhere
        self._indeg = np.bincount(
            g.edge_dst[~g.is_input[g.edge_src]], minlength=g.num_nodes
        ).astype(np.int32)
        comp = self.cost.compute
        # identical devices: one column (the kernels read column 0), less memory traffic
        self._comp = np.ascontiguousarray(comp[:, :1] if (comp == comp[:, :1]).all() else comp)
        self._lat = np.ascontiguousarray(self.cost.latency)
        self._inv_bw = np.ascontiguousarray(self.cost.inv_bandwidth)
        self._routes = np.ascontiguousarray(self.cluster.routes)
        self._n_links = self.cluster.num_links
        self._dedupe = True
        comp_nodes = g.compute_nodes
        order = comp_nodes[np.lexsort((comp_nodes, g.depth[comp_nodes]))]
        self._level_order = np.ascontiguousarray(order)
        levels = g.depth[order]
        nlev = int(levels.max()) + 1 if order.size else 0
        self._level_ptr = np.zeros(nlev + 1, dtype=np.int64)
        np.cumsum(np.bincount(levels, minlength=nlev), out=self._level_ptr[1:])
        # argument groups shared by the kernels
        self._head = (
            self._succ_ptr,
            self._succ_idx,
            self._slot_fixed,
            self._slot_bytes,
            self._indeg,
            self._is_input,
        )
        self._wc_head = (
            self._succ_ptr,
            self._succ_idx,
            self._slot_src,
            self._slot_fixed,
            self._slot_bytes,
            self._indeg,
            self._is_input,
        )
        self._bsp_head = (
            self._succ_ptr,
            self._succ_idx,
            self._slot_fixed,
            self._slot_bytes,
            self._level_order,
            self._level_ptr,
        )
        self._costs = (self._comp, self._lat, self._inv_bw)
        self._links = (self._routes, self._n_links)
        self._ones_n = np.ones((1, g.num_nodes))
        self._ones_e = np.ones((1, g.num_edges))

    # -- helpers ---------------------------------------------------------------------------
    def _devices(self, placement: Placement | np.ndarray | Sequence[int]) -> np.ndarray:
        p = placement if isinstance(placement, Placement) else Placement(np.asarray(placement))
        p.validate(self.graph, self.num_devices)
        dev = p.device.astype(self._index)
        dev[self.graph.is_input] = 0  # never read by the kernels; keeps indexing in range
        return dev

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

    def _noise(self, rng: np.random.Generator | None, rows: int) -> tuple[np.ndarray, np.ndarray]:
        if self.noise == 0.0:
            return self._ones_n, self._ones_e
        if rng is None:
            raise SimulationError("noise > 0 needs a seed or an rng (results must be reproducible)")
        g = self.graph
        comp = rng.lognormal(0.0, self.noise, size=(rows, g.num_nodes))
        slots = rng.lognormal(0.0, self.noise, size=(rows, g.num_edges))
        return comp, slots

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
        pl = placement if isinstance(placement, Placement) else Placement(np.asarray(placement))
        use_priority = self._check_dispatch(dispatch, pl.priority)
        dev = self._devices(pl)
        cn, sn = self._noise(self._rng(seed, rng), 1)
        n, e = g.num_nodes, g.num_edges
        start = np.empty(n)
        end = np.empty(n)
        tr_slot = np.empty(e, np.int64)
        tr_start = np.empty(e)
        tr_end = np.empty(e)
        tr_link = np.full(e, -1, np.int64)
        noisy = self.noise > 0
        records = (start, end, tr_slot, tr_start, tr_end)
        if self.semantics == "paper":
            _, ntr = K.paper_kernel(
                *self._head, dev, *self._costs, cn[0], sn[0], noisy, self._explicit, True, *records
            )
        elif self.semantics == "wc":
            pr = np.ascontiguousarray(
                pl.priority if use_priority else np.zeros(n), dtype=np.float64
            )
            _, ntr = K.wc_kernel(
                *self._wc_head,
                dev,
                *self._costs,
                *self._links,
                cn[0],
                sn[0],
                noisy,
                pr,
                use_priority,
                self._dedupe,
                *records,
                tr_link,
            )
        else:
            _, ntr = K.bsp_kernel(
                *self._bsp_head, dev, *self._costs, *self._links, cn[0], sn[0], *records, tr_link
            )
        scale = g.time_scale
        slots = tr_slot[:ntr]
        src = self._slot_src[slots]
        dst = self._succ_idx[slots]
        device = pl.device.copy()
        device[g.is_input] = -1
        return Trace(
            graph_name=g.name,
            names=g.names,
            kinds=self._kinds,
            device=device,
            start=start * scale,
            end=end * scale,
            transfer_src=src,
            transfer_dst=dst,
            transfer_src_device=device[src],
            transfer_dst_device=device[dst],
            transfer_start=tr_start[:ntr] * scale,
            transfer_end=tr_end[:ntr] * scale,
            transfer_link=tr_link[:ntr] if self.semantics != "paper" else np.full(ntr, -1),
            num_devices=self.num_devices,
            semantics=self.semantics,
            link_names=self.cluster.link_names,
            meta={
                "cluster": self.cluster.name,
                "noise": self.noise,
                "seed": seed,
                "dispatch": dispatch,
            },
        )

    def makespan(
        self,
        placement: Placement | np.ndarray | Sequence[int],
        seed: int | None = None,
        rng: np.random.Generator | None = None,
        dispatch: Dispatch = "fifo",
    ) -> float:
        """The makespan of one placement (reported units)."""
        return float(self.makespans([placement], seed=seed, rng=rng, dispatch=dispatch)[0])

    def makespans(
        self,
        placements: np.ndarray | Sequence[Placement] | Sequence[Sequence[int]],
        seed: int | None = None,
        rng: np.random.Generator | None = None,
        dispatch: Dispatch = "fifo",
    ) -> np.ndarray:
        """Makespans of many placements of this graph, simulated in parallel.

        ``placements`` is a ``(K, N)`` integer array or a sequence of placements. With noise,
        each placement gets its own independent draw from ``rng`` (or ``seed``).
        """
        g = self.graph
        if isinstance(placements, np.ndarray) and placements.ndim == 2:
            pls: list[Placement] = []  # plain device arrays: validated all at once
            devs = self._device_matrix(placements)
            use_priority = self._check_dispatch(dispatch, None)
        else:
            pls = [p if isinstance(p, Placement) else Placement(np.asarray(p)) for p in placements]
            if not pls:
                return np.zeros(0)
            use_priority = any(self._check_dispatch(dispatch, p.priority) for p in pls)
            devs = np.stack([self._devices(p) for p in pls])
        if devs.shape[0] == 0:
            return np.zeros(0)
        cn, sn = self._noise(self._rng(seed, rng), devs.shape[0])
        noisy = self.noise > 0
        if self.semantics == "paper":
            chunks = min(devs.shape[0], numba.get_num_threads())
            out = _keep_torch_threads(
                lambda: K.paper_batch(
                    *self._head, devs, *self._costs, cn, sn, noisy, self._explicit, chunks
                )
            )
        elif self.semantics == "wc":
            pr = np.stack([p.priority for p in pls]) if use_priority else np.zeros((1, g.num_nodes))
            wc_args = (
                *self._wc_head,
                devs,
                *self._costs,
                *self._links,
                cn,
                sn,
                noisy,
                pr,
                use_priority,
                self._dedupe,
            )
            out = _keep_torch_threads(lambda: K.wc_batch(*wc_args))
        else:
            out = np.array(
                [
                    self._bsp_one(devs[i], cn[i % len(cn)], sn[i % len(sn)])
                    for i in range(devs.shape[0])
                ]
            )
        return out * g.time_scale

    def _bsp_one(self, dev: np.ndarray, cn: np.ndarray, sn: np.ndarray) -> float:
        n, e = self.graph.num_nodes, self.graph.num_edges
        records = (
            np.empty(n),
            np.empty(n),
            np.empty(e, np.int64),
            np.empty(e),
            np.empty(e),
            np.empty(e, np.int64),
        )
        m, _ = K.bsp_kernel(*self._bsp_head, dev, *self._costs, *self._links, cn, sn, *records)
        return m

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
