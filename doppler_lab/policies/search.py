"""Inference-time search with a policy as the proposal: a budget of simulator calls.

:func:`policy_search` spends ``budget`` simulator calls (one call = one simulated placement,
a trace included) on one graph: it judges the policy's greedy rollout and ``samples`` sampled
rollouts, then searches device vectors from the best of them with the rest of the budget. The
strategies (:data:`SEARCH_STRATEGIES`):

- ``ils`` (default): iterated local search (:func:`iterated_search`). A descent by the moves of
  the ops on the critical path of the current placement's trace (first the moves of several
  ops at once around them, :class:`ClusterMoves`: a fan-in gathered on one device, a chain moved
  whole; then each (op, new device) move once, :class:`MoveScan`; the path taken again after
  every improvement), then a scan of every
  single-node move that also accepts moves that leave the makespan unchanged (back to the
  descent on an improvement), and when N(D-1)/2 calls have made no progress (no makespan 0.1 %
  below the one at the last progress), a kick: 4 random single-node moves from the best such
  end so far, and again;
- ``scan``: the anneal of ``anneal``, but the single-node moves are drawn without replacement
  (:class:`MoveScan`: a shuffled list of every (node, new device) move, walked in order and
  reshuffled when used up), so that no move is left untried for long;
- ``anneal``: the loop of the ``local-search`` placer
  (:func:`~doppler_lab.placers.local_search.search_devices`: uniform moves, Metropolis rule);
- ``guided``: the moved node's new device drawn from the policy's preferences, the device
  frequencies of each node over the sampled rollouts mixed with a uniform draw;
- ``restarts``: ``guided`` from each of the best few distinct rollouts, the rest of the
  budget split evenly between them;
- ``ils-cp``: ``ils`` from the best of the rollouts and the ``cp-rollout`` placement (the rollout
  over deterministic CP, :mod:`doppler_lab.placers.cp_rollout`), which joins them when its
  N x D (+ 2) calls fit in :data:`CP_ROLLOUT_SHARE` of what the rollouts left of the budget.

The ``doppler`` placer also takes ``search="adapt"``: no local moves, the calls train a
per-instance table on PLC's logits with the network frozen, from the best proposal
(:func:`doppler_lab.policies.adapt.adapt_search`; DOPPLER policies only, a learned PLC).

The moves of several ops at once (:class:`ClusterMoves`) came after that probe (its ``ils``
rows are single-node moves alone, ``cluster_moves=False`` here); see the class for why and what
they changed.

Why ``ils`` (reports/bench/doppler_search_probe.md): the policy's best rollout sits in a deep
optimum for single-node moves. Under ``paper`` semantics a quarter or more of its N(D-1) moves
leave the makespan unchanged (off the critical path) and only a few improve it, sometimes one
alone by much (paper full_transformer_layer: 205.5 to 150.1 by one move). ``anneal`` can miss
such a move for the whole budget; ``scan`` tries each within N(D-1) calls, but it takes the
first no-worse move of a batch, drifts over the plateau and may pass the big one by; the
descent tries the few moves that can shorten the path first (a few dozen ops, not N) and takes
the best of each batch, and the kicks leave an optimum that the scan cannot improve.

The simulator is deterministic (noise 0) under ``semantics``; the result is never worse than the
best rollout, and ``calls <= budget`` always.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypeVar

import numpy as np
import torch
from tqdm.auto import tqdm

from ..errors import ConfigError
from ..graph import DataflowGraph
from ..hardware import Cluster, CostModel
from ..placement import Placement
from ..placers.local_search import SearchResult, neighbours, search_devices
from ..sim import Simulator
from ..trace_path import critical_path
from .base import PlacementPolicy
from .context import GraphContext
from .rollout import greedy_and_samples
from .tensors import flush_denormal

_T = TypeVar("_T")

SEARCH_STRATEGIES = ("ils", "scan", "anneal", "guided", "restarts", "ils-cp")
#: ``ils-cp``: the largest share of the budget left after the rollouts that ``cp-rollout`` may take
CP_ROLLOUT_SHARE = 0.5
#: rollouts judged before the local moves: this share of the budget, at most ``MAX_SAMPLES``
SAMPLE_SHARE = 0.25
MAX_SAMPLES = 64
#: weight of the uniform draw in the guided proposal's device preferences
UNIFORM_MIX = 0.5
#: starts of the ``restarts`` strategy
RESTARTS = 4
#: ``ils``: random single-node moves of a kick
KICK_MOVES = 4
#: ``ils``: calls without progress before a kick, as a share of the number of moves N(D-1)
STALL_SHARE = 0.5
#: ``ils``: progress is a makespan this much (relative) below the last progress
MIN_GAIN = 1e-3


def check_fewer_devices(spec: object) -> None:
    """Raise :class:`ConfigError` unless ``spec`` is a ``fewer_devices`` value: ``True``,
    ``False``, ``None`` or a list of device counts >= 1."""
    if spec is None or isinstance(spec, bool):
        return
    if isinstance(spec, (list, tuple)) and all(
        isinstance(k, (int, np.integer)) and not isinstance(k, bool) and k >= 1 for k in spec
    ):
        return
    raise ConfigError(
        f"fewer_devices = {spec!r}: expected true (half the devices and 2), false, or a list "
        "of device counts >= 1"
    )


def fewer_device_counts(num_devices: int, spec: object) -> tuple[int, ...]:
    """The device counts below ``num_devices`` that the policy also places on (greedily, on the
    first devices of the cluster): ``spec`` ``True`` for half the devices and 2, ``False`` /
    ``None`` for none, or a list of counts (each ``1 <= k < num_devices``; larger ones are left
    out, so one list serves clusters of any size; :func:`check_fewer_devices`)."""
    check_fewer_devices(spec)
    if spec is None or spec is False:
        return ()
    if spec is True:
        return tuple(k for k in sorted({num_devices // 2, 2}, reverse=True) if 2 <= k < num_devices)
    return tuple(int(k) for k in dict.fromkeys(spec) if k < num_devices)  # type: ignore[union-attr]


def candidate_source(index: int, rollouts: int, placement: Placement) -> str:
    """What candidate ``index`` of the proposals is (``rollouts`` of them the policy's, the rest
    partitions): ``greedy``, ``sample``, ``greedy on K devices`` (:func:`policy_candidates`'s
    rollouts on fewer devices) or ``partition``."""
    if index >= rollouts:
        return "partition"
    used = placement.meta.get("devices_used")
    if used is not None:
        return f"greedy on {used} device{'s' if used != 1 else ''}"
    return "greedy" if index == 0 else "sample"


def policy_candidates(
    policy: PlacementPolicy,
    graph: DataflowGraph,
    cluster: Cluster,
    samples: int,
    rng: np.random.Generator,
    ctx: GraphContext | None = None,
    semantics: str | None = None,
    fewer_devices: Sequence[int] = (),
) -> list[Placement]:
    """The policy's greedy rollout, then ``samples`` sampled rollouts (no simulator call);
    ``semantics``: the task's, which picks the timing model of a ``task``-timed policy.

    ``fewer_devices`` (device counts below the cluster's; :func:`fewer_device_counts`): the
    last of the samples give way to greedy rollouts on the first k devices of the cluster,
    one per count (as many as there are samples), their placements marked
    ``meta["devices_used"] = k``. Where transfers dominate, fewer devices win (a random DAG
    with 5x transfers on ``p100x4``: 0.47 of CP on 2 devices, 0.93 on 4), and a DOPPLER policy,
    whose weights score each device alike, places on any count.
    """
    ctx = ctx or GraphContext.for_policy(graph, cluster, policy.config, semantics)
    counts = [k for k in fewer_devices if k < cluster.num_devices][:samples]
    with flush_denormal(), torch.no_grad():
        cands = greedy_and_samples(policy, ctx, policy.encode(ctx), samples - len(counts), rng)
        for k in counts:
            small = GraphContext.for_policy(graph, cluster.first(k), policy.config, semantics)
            p = greedy_and_samples(policy, small, policy.encode(small), 0, rng)[0]
            cands.append(Placement(p.device, p.priority, p.placer, {**p.meta, "devices_used": k}))
    return cands


def partition_candidates(
    graph: DataflowGraph, cost: CostModel, num_devices: int, count: int
) -> list[Placement]:
    """``count`` partition proposals of ``graph`` on ``num_devices`` devices as placements
    (equal ones once; :func:`~doppler_lab.placers.partition.partition_proposals`)."""
    from ..placers.partition import partition_proposals

    props = partition_proposals(graph, cost, num_devices, count)
    return [Placement(dev, None, "partition").with_inputs_filled(graph) for dev in props]


def device_preferences(devices: np.ndarray, num_devices: int, mix: float) -> np.ndarray:
    """``(N, D)`` each node's device frequencies over the rows of ``devices`` (``(K, N)``),
    mixed with the uniform distribution (weight ``mix``)."""
    k, n = devices.shape
    freq = np.zeros((n, num_devices))
    np.add.at(freq, (np.tile(np.arange(n), k), devices.reshape(-1)), 1.0)
    return (1.0 - mix) * freq / max(k, 1) + mix / num_devices


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
    return np.array(sorted(ops), dtype=np.int64), trace.makespan


def iterated_search(
    sim: Simulator,
    start: np.ndarray,
    start_cost: float,
    budget: int,
    rng: np.random.Generator,
    calls_used: int = 0,
    batch: int = 8,
    kick: int = KICK_MOVES,
    stall_share: float = STALL_SHARE,
    min_gain: float = MIN_GAIN,
    swap_prob: float = 0.2,
    bar: tqdm | None = None,
    cluster_moves: bool = True,
) -> SearchResult:
    """Iterated local search over device vectors from ``start`` until ``budget`` calls have been
    counted (``calls_used`` included): the ``ils`` strategy (module docstring).

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
        calls_used: calls already spent by the caller.
        batch: proposals simulated per round.
        kick: random moves of a kick.
        stall_share: calls without progress before a kick, per move.
        min_gain: the relative gain that counts as progress.
        swap_prob: probability that a scanned move is a swap (:class:`MoveScan`).
        bar: a progress bar advanced by each call this search makes.
        cluster_moves: try the path's :class:`ClusterMoves` before its single-node moves
            (False: single-node moves alone, the search before them).
    """
    movable, ndev = sim.graph.compute_nodes, sim.num_devices
    calls = calls_used
    cur, cur_cost = np.array(start, copy=True), float(start_cost)
    best, best_cost = cur.copy(), cur_cost
    inc, inc_cost = cur.copy(), cur_cost
    if ndev < 2 or not movable.size:
        return SearchResult(best, best_cost, calls, float(start_cost))
    every = MoveScan(movable, ndev, swap_prob)
    stall = max(int(stall_share * len(every.moves)), batch)
    clusters = ClusterMoves(sim.graph, ndev) if cluster_moves else None

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
            groups = None
            if clusters is not None:
                groups = clusters(cur, path)
                groups = groups[rng.permutation(len(groups))]
            gpos = 0
            path, left = None, len(scan.moves)
            while (left > 0 or (groups is not None and gpos < len(groups))) and calls < budget:
                if groups is not None and gpos < len(groups):
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


def default_samples(budget: int) -> int:
    """Sampled rollouts of a budget search: :data:`SAMPLE_SHARE` of it, at most
    :data:`MAX_SAMPLES`, leaving the greedy rollout one call."""
    return max(0, min(int(budget * SAMPLE_SHARE), MAX_SAMPLES, budget - 1))


@dataclass(frozen=True)
class SearchOutcome:
    """What :func:`policy_search` found.

    Attributes:
        placement: the best placement (the priority of the rollout it started from).
        cost: its simulated makespan.
        calls: simulator calls spent (``<= budget``).
        greedy_cost: the greedy rollout's makespan.
        rollout_cost: the best rollout's makespan (before the local moves; the policy's
            rollouts only, without ``ils-cp``'s ``cp-rollout`` start).
        rollouts: the policy's rollouts judged (the greedy one included).
        partition_cost: the best partition proposal's makespan (nan without any).
    """

    placement: Placement
    cost: float
    calls: int
    greedy_cost: float
    rollout_cost: float
    rollouts: int
    partition_cost: float = float("nan")


def cp_rollout_calls(graph: DataflowGraph, num_devices: int) -> int:
    """Simulator calls of the ``cp-rollout`` start of ``ils-cp``: N x D completions, the
    placer's check of its final placement and the search's judgement of it."""
    return int(graph.compute_nodes.size) * num_devices + 2


def _with_cp_rollout(sim, graph, cluster, semantics, budget, cands, devices, costs, calls, bar):
    """The candidates with the ``cp-rollout`` placement added when its calls fit in
    :data:`CP_ROLLOUT_SHARE` of the budget left (unchanged otherwise)."""
    from ..placers.cp_rollout import CPRolloutPlacer

    need = cp_rollout_calls(graph, cluster.num_devices)
    if need > CP_ROLLOUT_SHARE * (budget - calls):
        return cands, devices, costs, calls
    p = CPRolloutPlacer(semantics=semantics).place(graph, cluster, np.random.default_rng(0))
    cost = sim.makespan(p)
    if bar is not None:
        bar.update(need)
    start = Placement(p.device, p.priority, p.placer, dict(p.meta))
    return (
        [*cands, start],
        np.concatenate([devices, p.device[None, :]]),
        np.append(costs, cost),
        calls + need,
    )


def policy_search(
    policy: PlacementPolicy,
    graph: DataflowGraph,
    cluster: Cluster,
    budget: int,
    rng: np.random.Generator,
    semantics: str = "paper",
    strategy: str = SEARCH_STRATEGIES[0],
    samples: int | None = None,
    ctx: GraphContext | None = None,
    bar: tqdm | None = None,
    batch: int = 8,
    temperature: float = 0.02,
    mix: float = UNIFORM_MIX,
    restarts: int = RESTARTS,
    partitions: int = 0,
    fewer_devices: Sequence[int] = (),
    cluster_moves: bool = True,
) -> SearchOutcome:
    """Search placements of ``graph`` with ``policy`` as the proposal (module docstring).

    Args:
        policy: the policy.
        graph: the graph.
        cluster: the cluster.
        budget: simulator calls in all (>= 1).
        rng: the only source of randomness.
        semantics: simulator semantics of the objective.
        strategy: one of :data:`SEARCH_STRATEGIES`.
        samples: sampled rollouts (default :func:`default_samples`; at most ``budget - 1``).
        ctx: a prepared :class:`GraphContext` (built if None).
        bar: a progress bar advanced by every simulator call.
        batch: proposals simulated per round of local moves.
        temperature: annealing temperature relative to the start's makespan.
        mix: weight of the uniform draw in the guided proposal.
        restarts: starts of the ``restarts`` strategy.
        partitions: METIS partitions judged after the rollouts (as many as the budget leaves
            room for; equal ones once), starts of the search like them.
        fewer_devices: device counts whose greedy rollouts replace the last samples
            (:func:`policy_candidates`).
        cluster_moves: ``ils`` and ``ils-cp`` try :class:`ClusterMoves` in their descent
            (False: single-node moves alone).
    """
    if strategy not in SEARCH_STRATEGIES:
        raise ConfigError(f"search strategy {strategy!r}, expected one of {SEARCH_STRATEGIES}")
    if budget < 1:
        raise ConfigError(f"search budget {budget!r}, expected an integer >= 1")
    samples = default_samples(budget) if samples is None else min(samples, budget - 1)
    cands = policy_candidates(
        policy, graph, cluster, samples, rng, ctx, semantics, fewer_devices=fewer_devices
    )
    sim = Simulator(graph, cluster, semantics)  # type: ignore[arg-type]
    devices = np.stack([p.device for p in cands])
    costs = sim.makespans(devices)
    calls = len(cands)
    if bar is not None:
        bar.update(calls)
    rollout_cost, rollouts = float(costs.min()), len(cands)
    partition_cost = float("nan")
    room = min(partitions, budget - calls)
    if room > 0:
        extra = partition_candidates(graph, sim.cost, cluster.num_devices, room)
        rows = np.stack([p.device for p in extra])
        more = sim.makespans(rows)
        partition_cost = float(more.min())
        cands = [*cands, *extra]
        devices = np.concatenate([devices, rows])
        costs = np.concatenate([costs, more])
        calls += len(extra)
        if bar is not None:
            bar.update(len(extra))
    if strategy == "ils-cp":
        cands, devices, costs, calls = _with_cp_rollout(
            sim, graph, cluster, semantics, budget, cands, devices, costs, calls, bar
        )
    order = np.argsort(costs, kind="stable")
    ndev = cluster.num_devices
    propose = None
    if strategy == "scan":
        propose = MoveScan(graph.compute_nodes, ndev)
    elif strategy != "anneal":
        prefs = device_preferences(devices, ndev, mix)
        movable = graph.compute_nodes

        def propose(dev: np.ndarray, k: int, r: np.random.Generator) -> np.ndarray:
            return neighbours(dev, movable, ndev, k, r, prefs=prefs)

    # restarts: the best few distinct rollouts, the rest of the budget split evenly between them
    _, first = np.unique(devices[order], axis=0, return_index=True)
    starts = [int(order[i]) for i in sorted(first)[: restarts if strategy == "restarts" else 1]]
    best_i, best_dev, best_cost = starts[0], devices[starts[0]], float(costs[starts[0]])
    for n, i in enumerate(starts):
        stop = calls + (budget - calls) // (len(starts) - n)
        if strategy in ("ils", "ils-cp"):
            found = iterated_search(
                sim, devices[i], float(costs[i]), stop, rng, calls, batch, bar=bar,
                cluster_moves=cluster_moves,
            )  # fmt: skip
        else:
            found = search_devices(
                sim,
                devices[i],
                stop,
                rng,
                "anneal",
                batch,
                temperature,
                start_cost=float(costs[i]),
                calls_used=calls,
                propose=propose,
                bar=bar,
            )
        calls = found.calls
        if found.cost < best_cost:
            best_i, best_dev, best_cost = i, found.device, found.cost
    start = cands[best_i]
    placement = Placement(best_dev, start.priority, start.placer, dict(start.meta))
    return SearchOutcome(
        placement, best_cost, calls, float(costs[0]), rollout_cost, rollouts, partition_cost
    )
