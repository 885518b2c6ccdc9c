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

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from ..errors import ConfigError
from ..graph import DataflowGraph
from ..hardware import Cluster
from ..placement import Placement
from ..progress import progress
from ..sim import SEMANTICS, Simulator
from .base import check_choice, check_positive


def neighbours(
    device: np.ndarray,
    movable: np.ndarray,
    num_devices: int,
    count: int,
    rng: np.random.Generator,
    swap_prob: float = 0.2,
) -> np.ndarray:
    """``count`` placements, each one move away from ``device``: ``(count, N)``.

    A move puts one ``movable`` node on another device or, with probability ``swap_prob``,
    swaps the devices of two movable nodes on different devices.
    """
    out = np.repeat(device[None, :], count, axis=0)
    rows = np.arange(count)
    v = movable[rng.integers(0, movable.size, count)]
    shift = rng.integers(1, num_devices, count)
    out[rows, v] = (device[v] + shift) % num_devices
    swaps = np.flatnonzero(rng.random(count) < swap_prob)
    if swaps.size:
        w = movable[rng.integers(0, movable.size, swaps.size)]
        differ = device[w] != device[v[swaps]]
        r, a, b = swaps[differ], v[swaps][differ], w[differ]
        out[r, a] = device[b]
        out[r, b] = device[a]
    return out


@dataclass(frozen=True)
class LocalSearchPlacer:
    """Hill climbing / simulated annealing over placements.

    Attributes:
        budget: simulator calls in all (the start's evaluation included).
        method: ``anneal`` (default) or ``hill``.
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
        check_choice(self.name, "method", self.method, ("anneal", "hill"))
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
        ndev = cluster.num_devices
        movable = graph.compute_nodes
        cur = init.device.copy()
        cur_cost = float(sim.makespans(cur[None, :])[0])
        calls = 1
        best, best_cost, start_cost = cur.copy(), cur_cost, cur_cost
        t0 = self.temperature * start_cost
        budget = int(self.budget)
        bar = progress(
            total=budget, desc=f"{self.name} {graph.name}", enabled=self.progress, unit="call"
        )
        bar.update(1)
        while calls < budget and ndev > 1 and movable.size:
            k = min(int(self.batch), budget - calls)
            cand = neighbours(cur, movable, ndev, k, rng, self.swap_prob)
            costs = sim.makespans(cand)
            calls += k
            bar.update(k)
            j = int(np.argmin(costs))
            if costs[j] <= cur_cost:
                accept = True
            elif self.method == "anneal":
                temp = t0 * (1.0 - calls / budget)
                accept = temp > 0 and rng.random() < np.exp((cur_cost - costs[j]) / temp)
            else:
                accept = False
            if accept:
                cur, cur_cost = cand[j].copy(), float(costs[j])
                if cur_cost < best_cost:
                    best, best_cost = cur.copy(), cur_cost
        bar.close()
        meta = {
            "sim_calls": calls,
            "budget": budget,
            "start": self.start,
            "start_makespan": start_cost,
            "best_makespan": best_cost,
            "semantics": self.semantics,
        }
        return Placement(best, None, self.name, meta).with_inputs_filled(graph)
