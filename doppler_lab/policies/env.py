"""The DOPPLER placement episode as a Gymnasium environment (no torch).

One episode assigns every compute node once (T = number of compute nodes steps). A step's
action is a pair ``(node, device)``: SEL's choice among the candidates (unassigned nodes whose
compute predecessors are all assigned) and PLC's device for it. The observation shows the
candidates and, for each of them, the device features of DOPPLER.md of the
:class:`~doppler_lab.timing.episode.Episode` it steps (the episode the Critical Path teacher, the
rollouts and the explorer step too), so a dual policy reads the row of the node it selected. The reward is 0 until the last
step; then ``baseline - cost`` where cost is the pluggable cost function's value of the
finished placement (simulated makespan by default; a real executor's measured makespan in
Stage III) and the baseline is the running mean of all costs so far, this one included (the
released code's reward), or ``-cost`` with ``reward="negative_cost"``.

Training code does not step this environment one action at a time (it rolls out many episodes
in lockstep, :class:`doppler_lab.policies.rollout.Rollout`), but both step the same
:class:`~doppler_lab.timing.episode.Episode` and read the same features.

Example:
    >>> from doppler_lab.workloads import build
    >>> from doppler_lab.policies.env import PlacementEnv
    >>> env = PlacementEnv(build("chainmm"), "p100x4", semantics="wc")
    >>> obs, info = env.reset(seed=0)
    >>> done = False
    >>> while not done:
    ...     obs, reward, done, truncated, info = env.step(env.teacher_action())
    >>> info["cost"] > 0
    True
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from ..hardware.cluster import Cluster, make_cluster
from ..house.errors import ConfigError, PlacementError
from ..ir.graph import DataflowGraph
from ..ir.placement import Placement
from ..placers.critical_path import CriticalPathTeacher
from ..timing.cost_model import CostModel
from ..timing.episode import Episode
from ..timing.schedule import ESTIMATES, Estimate, estimate_for, estimate_name
from ..timing.sim import SEMANTICS, Simulator
from .features import device_features, feature_args, get_layout

REWARDS: tuple[str, ...] = ("baseline", "negative_cost")


class PlacementEnv(gym.Env):
    """Place a graph's compute nodes one at a time (SEL, then PLC) and get the makespan.

    Its keyword arguments are the environment's options, flat as a gymnasium environment's are.

    Args:
        graph: the graph.
        cluster: a :class:`Cluster` or a preset name.
        cost: ``placement -> float`` (lower is better); default: the simulator with
            ``semantics`` and ``noise`` (its noise drawn from the environment's seeded
            ``np_random``).
        semantics: simulator semantics of the default cost.
        noise: duration noise sigma of the default cost.
        estimate: the state's estimate (``est``, the released ``additive`` model or ``wc``);
            None (default): the model of ``semantics`` (:func:`doppler_lab.timing.schedule.estimate_for`).
        layout: device feature layout (``doppler5``: the five DOPPLER features).
        reward: ``baseline`` (running-mean baseline minus cost) or ``negative_cost``.
        invalid_action: ``noop`` (a node that is not a candidate or a device out of range
            leaves the state unchanged, reward 0, ``info["invalid_action"]`` says why) or
            ``raise`` (:class:`PlacementError`).

    Observation (a dict):
        ``candidates``: ``(N,)`` int8, 1 for the candidates (the action mask of ``node``).
        ``device_features``: ``(N, D, F)`` float32, raw features of each candidate on each device
        (zeros for other nodes).
        ``assignment``: ``(N,)`` int64, the device of each assigned node, -1 otherwise.

    Action: ``(node, device)`` in ``MultiDiscrete([N, D])``.
    """

    metadata = {"render_modes": []}

    def __init__(
        self,
        graph: DataflowGraph,
        cluster: Cluster | str = "uniform",
        cost: Callable[[Placement], float] | None = None,
        semantics: str = "paper",
        noise: float = 0.0,
        estimate: Estimate | None = None,
        layout: str = "doppler5",
        reward: str = "baseline",
        invalid_action: str = "noop",
    ):
        if semantics not in SEMANTICS:
            raise ConfigError(f"semantics {semantics!r}; expected one of {SEMANTICS}")
        estimate = estimate_for(semantics) if estimate is None else estimate_name(estimate)
        if estimate not in ESTIMATES:
            raise ConfigError(f"estimate {estimate!r}; expected one of {ESTIMATES}")
        if reward not in REWARDS:
            raise ConfigError(f"reward {reward!r}; expected one of {REWARDS}")
        if invalid_action not in ("noop", "raise"):
            raise ConfigError(f"invalid_action {invalid_action!r}; expected 'noop' or 'raise'")
        self.graph = graph
        self.cluster = make_cluster(cluster) if isinstance(cluster, str) else cluster
        self.cost_model = CostModel(graph, self.cluster)
        self.layout = get_layout(layout)
        self._extra = feature_args(graph, self.cost_model, self.layout)
        self.estimate: Estimate = estimate
        self.reward_mode = reward
        self.invalid_action = invalid_action
        self._sim = None if cost is not None else Simulator(graph, self.cluster, semantics, noise)  # type: ignore[arg-type]
        self._cost = cost
        self.teacher = CriticalPathTeacher(graph, self.cost_model)
        n, d, f = graph.num_nodes, self.cluster.num_devices, self.layout.device_dim
        self.observation_space = spaces.Dict(
            {
                "candidates": spaces.MultiBinary(n),
                "device_features": spaces.Box(0.0, np.finfo(np.float32).max, (n, d, f), np.float32),
                "assignment": spaces.Box(-1, d - 1, (n,), np.int64),
            }
        )
        self.action_space = spaces.MultiDiscrete([n, d])
        self.max_steps = 10 * max(1, len(graph.compute_nodes))
        self.costs: list[float] = []
        self.episode = Episode(graph, self.cost_model, estimate)
        self._steps = 0

    # -- gymnasium API -------------------------------------------------------------------
    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        super().reset(seed=seed)
        self.episode.reset()
        self._steps = 0
        return self._observation(), {"step": 0, "candidates": self.episode.candidates()}

    def step(self, action: Any) -> tuple[dict[str, np.ndarray], float, bool, bool, dict[str, Any]]:
        node, device = (int(x) for x in np.asarray(action).reshape(-1)[:2])
        self._steps += 1
        ep = self.episode
        why = ep.why_invalid(node, device)
        if why is not None:
            if self.invalid_action == "raise":
                raise PlacementError(why)
            obs = self._observation()
            trunc = self._steps >= self.max_steps
            return obs, 0.0, False, trunc, {"step": self._steps, "invalid_action": why}
        ep.assign(node, device)
        info: dict[str, Any] = {"step": self._steps, "candidates": ep.candidates()}
        reward = 0.0
        if ep.done:
            placement = ep.placement("env")
            cost = self._evaluate(placement)
            self.costs.append(cost)
            baseline = float(np.mean(self.costs))
            reward = baseline - cost if self.reward_mode == "baseline" else -cost
            info.update(cost=cost, baseline=baseline, placement=placement)
        return self._observation(), float(reward), ep.done, False, info

    # -- helpers ---------------------------------------------------------------------------
    def _evaluate(self, placement: Placement) -> float:
        if self._cost is not None:
            return float(self._cost(placement))
        assert self._sim is not None
        return self._sim.makespan(placement, rng=self.np_random if self._sim.noise else None)

    def _observation(self) -> dict[str, np.ndarray]:
        n, d, f = self.graph.num_nodes, self.cluster.num_devices, self.layout.device_dim
        cand = self.episode.candidates()
        mask = np.zeros(n, dtype=np.int8)
        mask[cand] = 1
        feats = np.zeros((n, d, f), dtype=np.float32)
        for v in cand:
            feats[v] = device_features(self.episode, int(v), self.layout, None, self._extra)
        return {
            "candidates": mask,
            "device_features": feats,
            "assignment": self.episode.device.copy(),
        }

    def teacher_action(self) -> np.ndarray:
        """The Critical Path teacher's ``(node, device)`` for the current state (ties: the
        environment's ``np_random``)."""
        dec = self.teacher.decide(self.episode, self.np_random)
        return np.array([dec.node, dec.device])

    def action_masks(self) -> np.ndarray:
        """Valid nodes (the candidates) as a boolean mask (for masked-action libraries)."""
        mask = np.zeros(self.graph.num_nodes, dtype=bool)
        mask[self.episode.candidates()] = True
        return mask
