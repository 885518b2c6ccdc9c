"""Learned policies as placers (``doppler``, ``placeto``, ``gdp`` in the placer registry).

The experiment protocol (ARCHITECTURE.md): a learned method's placement is the best of its
greedy rollout and ``samples`` sampled rollouts from the final policy, judged by the simulator
(the same semantics and noise as the table it goes into). ``samples=0`` gives the greedy
rollout alone, without any simulator call.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch

from ..errors import ConfigError
from ..graph import DataflowGraph
from ..hardware import Cluster
from ..placement import Placement
from ..sim import SEMANTICS, Simulator
from ..validate import want_bool, want_int, want_number
from .base import PlacementPolicy
from .checkpoint import load_policy
from .context import GraphContext
from .rollout import GREEDY, SAMPLE, run_episodes
from .tensors import flush_denormal


@dataclass(frozen=True)
class RolloutResult:
    """The protocol's candidates and the winner.

    Attributes:
        placement: the best placement (greedy on ties).
        costs: ``(1 + samples,)`` simulated cost of the greedy rollout, then of each sample.
        best_index: index of the winner in ``costs`` (0: the greedy rollout).
    """

    placement: Placement
    costs: np.ndarray
    best_index: int

    @property
    def greedy_cost(self) -> float:
        return float(self.costs[0])

    @property
    def best_cost(self) -> float:
        return float(self.costs[self.best_index])


def best_of_rollouts(
    policy: PlacementPolicy,
    graph: DataflowGraph,
    cluster: Cluster,
    samples: int = 16,
    seed: int | np.random.Generator | None = 0,
    semantics: str = "paper",
    noise: float = 0.0,
    noise_seeds: int = 1,
    ctx: GraphContext | None = None,
) -> RolloutResult:
    """The greedy rollout and ``samples`` sampled rollouts of ``policy``; the best by simulated
    cost (mean over ``noise_seeds`` noise draws when ``noise > 0``).

    Args:
        policy: the policy.
        graph: the graph.
        cluster: the cluster.
        samples: sampled rollouts besides the greedy one (K of the protocol).
        seed: seed (or generator) of the sampled rollouts and the noise.
        semantics: simulator semantics that judges the candidates.
        noise: duration noise sigma of the judge.
        noise_seeds: noise draws per candidate.
        ctx: a prepared :class:`GraphContext` (built if None).
    """
    rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)
    ctx = ctx or GraphContext(graph, cluster, policy.config.layout, policy.config.timing)  # type: ignore[arg-type]
    with flush_denormal(), torch.no_grad():
        enc = policy.encode(ctx)
        cands = run_episodes(policy, ctx, enc, 1, rng, GREEDY, GREEDY).placements
        if samples > 0:
            cands += run_episodes(policy, ctx, enc, samples, rng, SAMPLE, SAMPLE).placements
    if samples == 0:
        return RolloutResult(cands[0], np.array([np.nan]), 0)
    sim = Simulator(graph, cluster, semantics, noise)  # type: ignore[arg-type]
    reps = noise_seeds if noise > 0 else 1
    # (the simulator restores torch's thread count after its parallel kernels itself)
    costs = np.mean(
        [sim.makespans(cands, rng=rng if noise > 0 else None) for _ in range(reps)], axis=0
    )
    best = int(np.argmin(costs))
    return RolloutResult(cands[best], costs, best)


class _LearnedPlacer:
    """A checkpoint as a placer (see the module docstring).

    Attributes:
        checkpoint: the policy checkpoint (a path, or a shipped checkpoint's name).
        samples: sampled rollouts besides the greedy one (protocol: 16).
        semantics: simulator semantics that judges the rollouts.
        noise: duration noise sigma of the judge.
        allow_device_change: run a checkpoint trained on another device count.
    """

    name: ClassVar[str] = ""
    kinds: ClassVar[tuple[str, ...]] = ()

    def __init__(
        self,
        checkpoint: str | Path | None = None,
        samples: int = 16,
        semantics: str = "paper",
        noise: float = 0.0,
        allow_device_change: bool = False,
    ):
        if checkpoint is None:
            raise ConfigError(
                f"placer {self.name!r} needs a checkpoint (--checkpoint CKPT, or a shipped name: "
                "see doppler_lab.policies.pretrained.list_checkpoints())"
            )
        what = f"placer {self.name!r}: option"
        samples = want_int(samples, f"{what} samples", ConfigError, minimum=0)
        noise = want_number(noise, f"{what} noise", ConfigError, minimum=0)
        allow_device_change = want_bool(
            allow_device_change, f"{what} allow_device_change", ConfigError
        )
        if semantics not in SEMANTICS:
            raise ConfigError(
                f"placer {self.name!r}: semantics {semantics!r}, expected one of {SEMANTICS}"
            )
        from .pretrained import resolve_checkpoint

        self.checkpoint = resolve_checkpoint(checkpoint, self.name)
        self.samples = samples
        self.semantics = semantics
        self.noise = float(noise)
        self.allow_device_change = allow_device_change
        self._cache: dict[int, PlacementPolicy] = {}

    def policy(self, num_devices: int) -> PlacementPolicy:
        if num_devices not in self._cache:
            pol, _ = load_policy(self.checkpoint, self.kinds, num_devices, self.allow_device_change)
            self._cache[num_devices] = pol
        return self._cache[num_devices]

    def run(
        self, graph: DataflowGraph, cluster: Cluster, rng: np.random.Generator
    ) -> RolloutResult:
        return best_of_rollouts(
            self.policy(cluster.num_devices),
            graph,
            cluster,
            self.samples,
            rng,
            self.semantics,
            self.noise,
        )

    def place(self, graph: DataflowGraph, cluster: Cluster, rng: np.random.Generator) -> Placement:
        res = self.run(graph, cluster, rng)
        meta: dict[str, Any] = {
            **res.placement.meta,
            "checkpoint": str(self.checkpoint),
            "greedy_cost": res.greedy_cost,
            "best_cost": res.best_cost,
            "samples": self.samples,
            "sim_calls": self.samples + 1,  # the greedy rollout and the samples, each judged once
        }
        p = res.placement
        return Placement(p.device, p.priority, self.name, meta)


class DopplerPlacer(_LearnedPlacer):
    """The DOPPLER dual policy (or its SEL-only / PLC-only ablation) from a checkpoint."""

    name = "doppler"
    kinds = ("dual", "sel-only", "plc-only")


class PlacetoPlacer(_LearnedPlacer):
    """Our Placeto from a checkpoint."""

    name = "placeto"
    kinds = ("placeto",)


class GdpPlacer(_LearnedPlacer):
    """Our GDP from a checkpoint."""

    name = "gdp"
    kinds = ("gdp",)
