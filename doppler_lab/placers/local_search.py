"""Local search over placements with the batch simulator: hill climbing or simulated annealing.

The search starts from another placer's placement (default ``cp``) and spends a budget counted
in simulator calls (one call = one simulated placement, the start included). Each round draws
``batch`` neighbours of the current placement (move one node to another device, or swap the
devices of two nodes), simulates them together with :meth:`Simulator.makespans`, and moves to
the best of them when it is no worse (``hill``) or by the Metropolis rule with a temperature
that falls linearly to zero (``anneal``). The best placement seen is returned, so the result is
never worse than the start. Simulation is deterministic (noise 0) under ``semantics``. A
placement over a device's memory simulates as ``inf``
(:func:`~doppler_lab.timing.fit.capped`): moves that break a cap are never taken.

``method="ils"`` runs :func:`iterated_search` instead: the iterated local search that the
``doppler`` placer's budget search runs from the policy's proposals
(:mod:`doppler_lab.search.budget`), with its moves of several ops at once
(:class:`ClusterMoves`), here from the ``start`` placer's placement and without any policy.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar, NamedTuple, TypeVar

import numpy as np
from tqdm.auto import tqdm

from ..hardware.cluster import Cluster
from ..house.errors import ConfigError
from ..house.progress import progress
from ..ir.graph import DataflowGraph
from ..ir.placement import Placement
from ..ir.trace_path import critical_path
from ..timing.fit import capped, over_cap
from ..timing.sim import SEMANTICS, Simulator
from .placer_base import check_choice, check_positive
from .registry import start_placement

#: ``propose(device, count, rng) -> (count, N)``: candidate placements around ``device``
Proposal = Callable[[np.ndarray, int, np.random.Generator], np.ndarray]

_T = TypeVar("_T")

#: ``method`` values of the ``local-search`` placer (``ils``: :func:`iterated_search`)
SEARCH_METHODS = ("anneal", "hill", "ils")
#: ``ils``: random single-node moves of a kick
KICK_MOVES = 4
#: ``ils``: calls without progress before a kick, as a share of the number of moves N(D-1)
STALL_SHARE = 0.5
#: ``ils``: progress is a makespan this much (relative) below the last progress
MIN_GAIN = 1e-3


def neighbours(
    device: np.ndarray,
    movable: np.ndarray,
    num_devices: int,
    count: int,
    rng: np.random.Generator,
    swap_prob: float = 0.2,
    prefs: np.ndarray | None = None,
) -> np.ndarray:
    """``count`` placements, each one move away from ``device``: ``(count, N)``.

    A move puts one ``movable`` node on another device or, with probability ``swap_prob``,
    swaps the devices of two movable nodes on different devices.

    Args:
        prefs: ``(N, D)`` positive weights of each node's devices: the moved node's new device
            is drawn from its row (its current device left out) instead of uniformly.
    """
    out = np.repeat(device[None, :], count, axis=0)
    rows = np.arange(count)
    v = movable[rng.integers(0, movable.size, count)]
    if prefs is None:
        shift = rng.integers(1, num_devices, count)
        out[rows, v] = (device[v] + shift) % num_devices
    else:
        w = np.array(prefs[v], dtype=float)
        w[rows, device[v]] = 0.0
        c = np.cumsum(w, axis=1)
        u = rng.random(count) * c[:, -1]
        out[rows, v] = np.minimum((c <= u[:, None]).sum(axis=1), num_devices - 1)
    swaps = np.flatnonzero(rng.random(count) < swap_prob)
    if swaps.size:
        w = movable[rng.integers(0, movable.size, swaps.size)]
        differ = device[w] != device[v[swaps]]
        r, a, b = swaps[differ], v[swaps][differ], w[differ]
        out[r, a] = device[b]
        out[r, b] = device[a]
    return out


class SearchResult(NamedTuple):
    """What :func:`search_devices` found.

    Attributes:
        device: ``(N,)`` the best device vector seen.
        cost: its simulated makespan.
        calls: simulator calls counted so far (``calls_used`` included).
        start_cost: the start's makespan.
    """

    device: np.ndarray
    cost: float
    calls: int
    start_cost: float


@dataclass(frozen=True)
class DescentOptions:
    """How :func:`search_devices` moves.

    Attributes:
        method: ``anneal`` or ``hill``.
        batch: proposals simulated per round.
        temperature: initial temperature relative to the start's makespan (``anneal``).
        swap_prob: probability of a swap move (default proposal).
        propose: the proposal (default :func:`neighbours` over the graph's compute nodes).
    """

    method: str = "anneal"
    batch: int = 8
    temperature: float = 0.02
    swap_prob: float = 0.2
    propose: Proposal | None = None


def search_devices(
    sim: Simulator,
    start: np.ndarray,
    budget: int,
    rng: np.random.Generator,
    options: DescentOptions | None = None,
    *,
    start_cost: float | None = None,
    calls_used: int = 0,
    bar: tqdm | None = None,
) -> SearchResult:
    """Hill climbing or simulated annealing over device vectors from ``start``, until
    ``budget`` simulator calls have been counted (the loop of :class:`LocalSearchPlacer`).

    Each round simulates ``batch`` proposals around the current placement together and moves to
    the best of them when it is no worse (``hill``) or by the Metropolis rule (``anneal``: the
    temperature, ``temperature`` times the start's makespan, falls linearly to zero over the
    calls this search spends).

    Args:
        sim: the deterministic simulator that judges placements.
        start: ``(N,)`` the start's device vector.
        budget: the call count at which the search stops (``calls_used`` included).
        rng: the only source of randomness.
        options: the moves (default :class:`DescentOptions`: annealing).
        start_cost: the start's makespan if already known (otherwise it costs one call).
        calls_used: calls already spent by the caller.
        bar: a progress bar advanced by each call this search makes.
    """
    opts = options or DescentOptions()
    method, batch, temperature, propose = opts.method, opts.batch, opts.temperature, opts.propose
    swap_prob = opts.swap_prob
    ndev = sim.num_devices
    movable = sim.graph.compute_nodes
    if propose is None:

        def propose(dev: np.ndarray, k: int, r: np.random.Generator) -> np.ndarray:
            return neighbours(dev, movable, ndev, k, r, swap_prob)

    first = calls_used
    calls = calls_used
    cur = np.array(start, copy=True)
    if start_cost is None:
        start_cost = float(sim.makespans(cur[None, :])[0])
        calls += 1
        if bar is not None:
            bar.update(1)
    cur_cost = float(start_cost)
    best, best_cost = cur.copy(), cur_cost
    t0 = temperature * cur_cost
    span = budget - first
    while calls < budget and ndev > 1 and movable.size:
        k = min(int(batch), budget - calls)
        cand = propose(cur, k, rng)
        costs = sim.makespans(cand)
        calls += k
        if bar is not None:
            bar.update(k)
        j = int(np.argmin(costs))
        if costs[j] <= cur_cost:
            accept = True
        elif method == "anneal":
            temp = t0 * (1.0 - (calls - first) / span)
            accept = temp > 0 and rng.random() < np.exp((cur_cost - costs[j]) / temp)
        else:
            accept = False
        if accept:
            cur, cur_cost = cand[j].copy(), float(costs[j])
            if cur_cost < best_cost:
                best, best_cost = cur.copy(), cur_cost
    return SearchResult(best, best_cost, calls, float(start_cost))


@dataclass(frozen=True)
class LocalSearchPlacer:
    """Hill climbing / simulated annealing over placements.

    Attributes:
        budget: simulator calls in all (the start's evaluation included).
        method: ``anneal`` (default), ``hill``, or ``ils``: the iterated local search of the
            ``doppler`` placer's budget search (critical-path descent with moves of several ops
            at once, :func:`iterated_search`), from ``start`` without any policy
            (``temperature`` unused).
        start: the placer whose placement starts the search.
        batch: neighbours simulated per round.
        semantics: simulator semantics of the objective (``paper``, ``wc``, ``bsp``).
        temperature: initial temperature, relative to the start's makespan (``anneal``).
        swap_prob: probability that a move swaps two nodes instead of moving one.
        progress: show a bar over the simulator-call budget on stderr.
    """

    budget: int = 2000
    method: str = "anneal"
    start: str = "cp"
    batch: int = 8
    semantics: str = "paper"
    temperature: float = 0.02
    swap_prob: float = 0.2
    progress: bool = False
    name: ClassVar[str] = "local-search"

    def __post_init__(self) -> None:
        check_positive(self.name, "budget", self.budget, integer=True, optional=False)
        check_positive(self.name, "batch", self.batch, integer=True)
        check_positive(self.name, "temperature", self.temperature)
        check_choice(self.name, "method", self.method, SEARCH_METHODS)
        check_choice(self.name, "semantics", self.semantics, SEMANTICS)
        if not 0 <= self.swap_prob <= 1:
            raise ConfigError(
                f"placer {self.name!r}: swap_prob = {self.swap_prob!r}, expected 0..1"
            )
        if self.start in (self.name, "enumerative", "exact"):
            raise ConfigError(
                f"placer {self.name!r}: start = {self.start!r}; expected a constructive placer"
            )

    def place(self, graph: DataflowGraph, cluster: Cluster, rng: np.random.Generator) -> Placement:
        init = start_placement(graph, cluster, self.start, self.name, rng)
        sim = capped(Simulator(graph, cluster, self.semantics))  # over a memory cap: inf
        budget = int(self.budget)
        bar = progress(
            total=budget, desc=f"{self.name} {graph.name}", enabled=self.progress, unit="call"
        )
        if self.method == "ils":
            start_cost = float(sim.makespans(init.device[None, :])[0])
            bar.update(1)
            ils = IlsOptions(batch=self.batch, swap_prob=self.swap_prob)
            found = iterated_search(
                sim, init.device, start_cost, budget, rng, ils, calls_used=1, bar=bar
            )
        else:
            moves = DescentOptions(self.method, self.batch, self.temperature, self.swap_prob)
            found = search_devices(sim, init.device, budget, rng, moves, bar=bar)
        bar.close()
        best, best_cost, calls, start_cost = found
        meta = {
            "sim_calls": calls,
            "budget": budget,
            "start": self.start,
            "start_makespan": start_cost,
            "best_makespan": best_cost,
            "semantics": self.semantics,
            # what produced it: the moves from the start, or the start itself
            "produced_by": f"{'search from' if best_cost < start_cost else 'start'} {self.start}",
        }
        p = Placement(best, None, self.name, meta).with_inputs_filled(graph)
        return p  # fitted by the registry


class MoveScan:
    """A proposal of :func:`~doppler_lab.placers.local_search.search_devices` that walks every
    single-node move without replacement.

    The moves are the (node, device shift) pairs of the ``movable`` nodes: shuffled, taken in
    order ``count`` at a time and reshuffled when used up; a move applies to the current device
    vector, so the walk goes on as the search moves. With probability ``swap_prob`` a row swaps
    instead: its scanned node trades devices with a random movable node on another device.
    """

    def __init__(self, movable: np.ndarray, num_devices: int, swap_prob: float = 0.2) -> None:
        shift = np.arange(1, num_devices)
        self.moves = np.stack(
            [np.repeat(movable, shift.size), np.tile(shift, movable.size)], axis=1
        )
        self.movable = movable
        self.num_devices = num_devices
        self.swap_prob = swap_prob
        self.order = self.moves
        self.pos = len(self.moves)

    def __call__(self, device: np.ndarray, count: int, rng: np.random.Generator) -> np.ndarray:
        """``(count, N)`` placements, each one move away from ``device``."""
        out = np.repeat(device[None, :], count, axis=0)
        if not len(self.moves):
            return out
        picks, need = [], count
        while need:
            if self.pos == len(self.moves):
                self.order, self.pos = self.moves[rng.permutation(len(self.moves))], 0
            take = self.order[self.pos : self.pos + need]
            self.pos += len(take)
            need -= len(take)
            picks.append(take)
        v, shift = np.concatenate(picks).T
        out[np.arange(count), v] = (device[v] + shift) % self.num_devices
        # swaps: the scanned node trades devices with a random movable node on another device
        rows = np.flatnonzero(rng.random(count) < self.swap_prob)
        w = self.movable[rng.integers(0, self.movable.size, rows.size)]
        a = v[rows]
        keep = device[w] != device[a]
        rows, a, w = rows[keep], a[keep], w[keep]
        out[rows, a] = device[w]
        out[rows, w] = device[a]
        return out


class ClusterMoves:
    """Moves of several ops at once, around the ops of a critical path: what single-node moves
    cannot reach one at a time without first making the makespan worse.

    For each op ``v`` of the path, every move that changes the placement:

    - *pull*: ``v``'s predecessors on other devices to ``v``'s device;
    - *push*: ``v``'s successors on other devices to ``v``'s device;
    - *join*: for each successor ``s`` of ``v``, ``s`` and all of ``s``'s predecessors to ``v``'s
      device (a fan-in gathered where one of its inputs is made);
    - *chain*: ``v``'s chain (the longest run of ops through ``v`` in which each link is its
      op's only input and its producer's only consumer) to each other device, whole.

    Why: the general policy's placements of the paper's transformer graphs cut the heaviest edges
    (a fan-in of four 18.5-unit ops, each sending a 73.9-unit tensor). Moving one producer to the
    consumer saves nothing while the other three transfers still run; moving all four does
    (``pull``). A chain moves to a less loaded device without cutting itself. In ``bench
    general`` (2000 calls, 10 seeds) these moves took the search from 0.752 to 0.729 of CP in
    geometric mean over the held-out tasks, the paper's transformer block from 193.8 to 174.4
    (half the seeds within 0.1% of the best known, 166.74) and the 8-GPU block from 221.8 to 194.1;
    no task got more than 1% worse.

    Only movable ops (``graph.compute_nodes``) move.
    """

    def __init__(self, graph: DataflowGraph, num_devices: int) -> None:
        n = graph.num_nodes
        self.graph = graph
        self.num_devices = num_devices
        movable = np.zeros(n, dtype=bool)
        movable[graph.compute_nodes] = True
        self.movable = movable
        indeg = np.asarray(graph.in_degree)
        outdeg = np.asarray(graph.out_degree)
        # link u -> v of a chain: v's only input is u, and u's only consumer is v (both movable)
        nxt = np.full(n, -1, dtype=np.int64)
        for v in np.flatnonzero(movable & (indeg == 1)):
            u = int(graph.predecessors(v)[0])
            if movable[u] and outdeg[u] == 1:
                nxt[u] = v
        has_prev = np.zeros(n, dtype=bool)
        has_prev[nxt[nxt >= 0]] = True
        self.chain = np.full(n, -1, dtype=np.int64)
        self.chains: list[np.ndarray] = []
        for head in np.flatnonzero((nxt >= 0) & ~has_prev):
            run, v = [], int(head)
            while v >= 0:
                run.append(v)
                v = int(nxt[v])
            self.chain[run] = len(self.chains)
            self.chains.append(np.array(run, dtype=np.int64))

    def __call__(self, device: np.ndarray, ops: np.ndarray) -> np.ndarray:
        """``(K, N)`` the distinct placements one cluster move away from ``device``, around the
        ops ``ops`` (K may be 0)."""
        g, movable = self.graph, self.movable
        rows: list[np.ndarray] = []

        def gather(nodes: np.ndarray, d: int) -> None:
            nodes = nodes[movable[nodes] & (device[nodes] != d)]
            if nodes.size:
                r = device.copy()
                r[nodes] = d
                rows.append(r)

        done_chains: set[int] = set()
        for v in np.asarray(ops, dtype=np.int64):
            d = int(device[v])
            gather(g.predecessors(v), d)
            succ = g.successors(v)
            gather(succ, d)
            for s in succ:
                fan = np.append(g.predecessors(s), s)
                if np.count_nonzero(movable[fan] & (device[fan] != d)) > 1:
                    gather(fan, d)
            c = int(self.chain[v])
            if c >= 0 and c not in done_chains:
                done_chains.add(c)
                for k in range(self.num_devices):
                    gather(self.chains[c], k)
        if not rows:
            return np.empty((0, device.size), dtype=device.dtype)
        return np.unique(np.stack(rows), axis=0)


def critical_ops(sim: Simulator, device: np.ndarray) -> tuple[np.ndarray, float]:
    """The ops on the critical path of ``device``'s simulated trace (sorted node ids) and its
    makespan: one simulator call."""
    trace = sim.run(device)
    ops = {s.index for s in critical_path(trace, sim.graph) if s.record == "op"}
    span = np.inf if over_cap(sim, device) else trace.makespan
    return np.array(sorted(ops), dtype=np.int64), span


@dataclass(frozen=True)
class IlsOptions:
    """How :func:`iterated_search` moves.

    Attributes:
        batch: proposals simulated per round.
        kick: random moves of a kick.
        stall_share: calls without progress before a kick, per move.
        min_gain: the relative gain that counts as progress.
        swap_prob: probability that a scanned move is a swap (:class:`MoveScan`).
        cluster_moves: try the path's :class:`ClusterMoves` before its single-node moves
            (False: single-node moves alone, the search before them).
    """

    batch: int = 8
    kick: int = KICK_MOVES
    stall_share: float = STALL_SHARE
    min_gain: float = MIN_GAIN
    swap_prob: float = 0.2
    cluster_moves: bool = True


def iterated_search(
    sim: Simulator,
    start: np.ndarray,
    start_cost: float,
    budget: int,
    rng: np.random.Generator,
    options: IlsOptions | None = None,
    *,
    calls_used: int = 0,
    bar: tqdm | None = None,
) -> SearchResult:
    """Iterated local search over device vectors from ``start`` until ``budget`` calls have been
    counted (``calls_used`` included): the ``ils`` strategy of
    :mod:`doppler_lab.search.budget` (its docstring says why) and ``method="ils"`` here.

    Rounds of three phases: (1) descent by the moves of the critical path's ops
    (:func:`critical_ops`, one call; first the path's :class:`ClusterMoves` in a random order,
    then a :class:`MoveScan` over its single-node moves, ``batch`` at a time, moving to the best
    of a batch when it is strictly better and then taking the new path) until a pass over them
    improves nothing; (2) a :class:`MoveScan` of every move, no worse accepted, back
    to (1) on a strict improvement; (3) once ``stall_share`` N(D-1) calls have made no progress
    (the makespan ``min_gain`` below the one at the last progress: under ``paper`` semantics
    improvements by 0.01 go on for long), a kick: ``kick`` random single-node moves from the
    incumbent, the best end of (2) so far.

    Args:
        sim: the deterministic simulator that judges placements.
        start: ``(N,)`` the start's device vector.
        start_cost: its makespan.
        budget: the call count at which the search stops.
        rng: the only source of randomness.
        options: the moves (default :class:`IlsOptions`; ``batch``, ``kick``, ``stall_share``,
            ``min_gain``, ``swap_prob`` and ``cluster_moves`` above are its fields).
        calls_used: calls already spent by the caller.
        bar: a progress bar advanced by each call this search makes.
    """
    opts = options or IlsOptions()
    batch, kick, swap_prob = opts.batch, opts.kick, opts.swap_prob
    stall_share, min_gain = opts.stall_share, opts.min_gain
    movable, ndev = sim.graph.compute_nodes, sim.num_devices
    calls = calls_used
    cur, cur_cost = np.array(start, copy=True), float(start_cost)
    best, best_cost = cur.copy(), cur_cost
    inc, inc_cost = cur.copy(), cur_cost
    if ndev < 2 or not movable.size:
        return SearchResult(best, best_cost, calls, float(start_cost))
    every = MoveScan(movable, ndev, swap_prob)
    stall = max(int(stall_share * len(every.moves)), batch)
    clusters = ClusterMoves(sim.graph, ndev) if opts.cluster_moves else None

    def count(value: _T, k: int) -> _T:
        nonlocal calls
        calls += k
        if bar is not None:
            bar.update(k)
        return value

    def judge(cand: np.ndarray) -> tuple[int, float]:
        costs = count(sim.makespans(cand), len(cand))
        j = int(np.argmin(costs))
        return j, float(costs[j])

    path = None  # the critical path's ops when already known for ``cur``
    ref, mark = cur_cost, calls  # the makespan at the last progress, and the call count then

    def progress() -> None:
        nonlocal ref, mark
        if cur_cost < ref * (1.0 - min_gain):
            ref, mark = cur_cost, calls

    while calls < budget:
        improved = True
        while improved and calls < budget:  # (1) the critical path's moves
            improved = False
            if path is None:
                path = count(critical_ops(sim, cur)[0], 1)
            scan = MoveScan(path[np.isin(path, movable)], ndev, swap_prob)
            groups = np.empty((0, cur.size), dtype=cur.dtype)  # no cluster moves
            if clusters is not None:
                groups = clusters(cur, path)
                groups = groups[rng.permutation(len(groups))]
            gpos = 0
            path, left = None, len(scan.moves)
            while (left > 0 or gpos < len(groups)) and calls < budget:
                if gpos < len(groups):
                    cand = groups[gpos : gpos + min(batch, budget - calls)]
                    gpos += len(cand)
                else:
                    k = min(batch, budget - calls, left)
                    left -= k
                    cand = scan(cur, k, rng)
                j, c = judge(cand)
                if c < cur_cost:
                    cur, cur_cost, improved = cand[j].copy(), c, True
                    progress()
                    break
        better = False
        while calls - mark < stall and calls < budget and not better:  # (2) every move
            cand = every(cur, min(batch, budget - calls), rng)
            j, c = judge(cand)
            if c <= cur_cost:
                better = c < cur_cost
                cur, cur_cost = cand[j].copy(), c
                progress()
        if cur_cost < best_cost:
            best, best_cost = cur.copy(), cur_cost
        if calls >= budget or (better and calls - mark < stall):
            continue  # back to (1)
        if cur_cost <= inc_cost:  # (3) a kick from the incumbent
            inc, inc_cost = cur.copy(), cur_cost
        cur = inc.copy()
        v = movable[rng.choice(movable.size, min(kick, movable.size), replace=False)]
        cur[v] = (cur[v] + rng.integers(1, ndev, v.size)) % ndev
        path, cur_cost = count(critical_ops(sim, cur), 1)
        ref, mark = cur_cost, calls
        if cur_cost < best_cost:
            best, best_cost = cur.copy(), cur_cost
    return SearchResult(best, best_cost, calls, float(start_cost))
