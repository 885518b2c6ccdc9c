"""Local search over placements with the batch simulator: hill climbing or simulated annealing.

The search starts from another placer's placement (default ``cp``) and spends a budget counted
in simulator calls (one call = one simulated placement, the start included). Each round draws
``batch`` neighbours of the current placement (move one node to another device, or swap the
devices of two nodes), simulates them together with :meth:`Simulator.makespans`, and moves to
the best of them when it is no worse (``hill``) or by the Metropolis rule with a temperature
that falls linearly to zero (``anneal``). The best placement seen is returned, so the result is
never worse than the start. Simulation is deterministic (noise 0) under ``semantics``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar, NamedTuple

import numpy as np
from tqdm.auto import tqdm

from ..errors import ConfigError
from ..graph import DataflowGraph
from ..hardware import Cluster
from ..placement import Placement
from ..progress import progress
from ..sim import SEMANTICS, Simulator
from .base import check_choice, check_positive

#: ``propose(device, count, rng) -> (count, N)``: candidate placements around ``device``
Proposal = Callable[[np.ndarray, int, np.random.Generator], np.ndarray]

#: ``method`` values of the ``local-search`` placer (``ils``: :func:`doppler_lab.policies.search.iterated_search`)
SEARCH_METHODS = ("anneal", "hill", "ils")


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


def search_devices(
    sim: Simulator,
    start: np.ndarray,
    budget: int,
    rng: np.random.Generator,
    method: str = "anneal",
    batch: int = 8,
    temperature: float = 0.02,
    swap_prob: float = 0.2,
    start_cost: float | None = None,
    calls_used: int = 0,
    propose: Proposal | None = None,
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
        method: ``anneal`` or ``hill``.
        batch: proposals simulated per round.
        temperature: initial temperature relative to the start's makespan.
        swap_prob: probability of a swap move (default proposal).
        start_cost: the start's makespan if already known (otherwise it costs one call).
        calls_used: calls already spent by the caller.
        propose: the proposal (default :func:`neighbours` over the graph's compute nodes).
        bar: a progress bar advanced by each call this search makes.
    """
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
            at once, :func:`~doppler_lab.policies.search.iterated_search`), from ``start``
            without any policy (``temperature`` unused).
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
        from .registry import place

        init = place(self.start, graph, cluster, seed=rng)
        sim = Simulator(graph, cluster, self.semantics)
        budget = int(self.budget)
        bar = progress(
            total=budget, desc=f"{self.name} {graph.name}", enabled=self.progress, unit="call"
        )
        if self.method == "ils":
            from ..policies.search import iterated_search

            start_cost = float(sim.makespans(init.device[None, :])[0])
            bar.update(1)
            found = iterated_search(
                sim, init.device, start_cost, budget, rng, 1, self.batch,
                swap_prob=self.swap_prob, bar=bar,
            )  # fmt: skip
        else:
            found = search_devices(
                sim,
                init.device,
                budget,
                rng,
                self.method,
                self.batch,
                self.temperature,
                self.swap_prob,
                bar=bar,
            )
        bar.close()
        best, best_cost, calls, start_cost = found
        meta = {
            "sim_calls": calls,
            "budget": budget,
            "start": self.start,
            "start_makespan": start_cost,
            "best_makespan": best_cost,
            "semantics": self.semantics,
        }
        return Placement(best, None, self.name, meta).with_inputs_filled(graph)
