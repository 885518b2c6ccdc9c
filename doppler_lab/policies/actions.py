"""How one half of a policy acts in a rollout, and how an episode follows an anchor placement.

:class:`ActionMode` says how SEL or PLC chooses (the argmax, a tempered sample, a uniform or a
teacher's choice now and then); :func:`choose_action` makes one such choice from the scores;
:class:`AnchorMatch` names each episode's device that plays an anchor device's part. Every rollout
engine (:mod:`doppler_lab.policies.engines`) acts by them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..house.errors import ConfigError


@dataclass(frozen=True)
class ActionMode:
    """How one half of the policy (SEL or PLC) acts during a rollout.

    Attributes:
        greedy: take the argmax of the policy instead of a sample.
        epsilon: probability of a uniform random action.
        teacher: probability of the Critical Path rule's action (DAgger-style mixing).
        temperature: sampling temperature (scores are divided by it; 0 acts greedily).
        perturb: with ``greedy``, ``epsilon`` is the probability of a sample from the policy
            (instead of a uniform action): episodes that follow the argmax except at a few
            steps, neighbours of the greedy rollout.
    """

    greedy: bool = False
    epsilon: float = 0.0
    teacher: float = 0.0
    temperature: float = 1.0
    perturb: bool = False

    def __post_init__(self) -> None:
        for name in ("epsilon", "teacher"):
            v = getattr(self, name)
            if not (0.0 <= v <= 1.0):
                raise ConfigError(f"action mode {name} = {v!r}, expected a probability in [0, 1]")
        if not self.temperature >= 0:
            raise ConfigError(f"action mode temperature = {self.temperature!r}, expected >= 0")

    @property
    def plain(self) -> bool:
        """Every decision is the policy's own (no teacher, no uniform or perturbing draws)."""
        return self.epsilon == 0.0 and self.teacher == 0.0

    @property
    def samples(self) -> bool:
        """A plain decision is a draw from the softmax (not the argmax)."""
        return not self.greedy and self.temperature != 0.0


GREEDY = ActionMode(greedy=True)
SAMPLE = ActionMode()


def choose_action(logits: np.ndarray, rng: np.random.Generator, mode: ActionMode) -> int:
    """An index into ``logits`` by ``mode`` (teacher mixing is handled by the caller; ``-inf``
    marks an action that a uniform draw skips)."""
    explore = mode.epsilon > 0.0 and rng.random() < mode.epsilon
    if explore and not mode.perturb:
        ok = np.isfinite(logits)  # -inf: a device without memory for the node
        if not ok.all():
            allowed = np.flatnonzero(ok)
            return int(allowed[rng.integers(allowed.size)])
        return int(rng.integers(logits.shape[0]))
    if (mode.greedy and not explore) or mode.temperature == 0.0:
        return int(np.argmax(logits))
    z = logits if mode.temperature == 1.0 else logits / mode.temperature
    p = np.exp(z - z.max())
    c = p.cumsum()  # the array's own methods: np.cumsum's and np.searchsorted's answers
    return int(min(c.searchsorted(rng.random() * c[-1], side="right"), c.size - 1))


class AnchorMatch:
    """Which device of each episode plays the part of each device of an anchor placement.

    Per episode, a count of the nodes the anchor put on device ``a`` that the episode put on
    device ``d``; the match is the device permutation that agrees with the most of them (the
    identity while the episode follows the anchor, and among equal matches). Labels follow it,
    so an episode that swapped two devices' roles early is not told to undo that node by node.

    Args:
        num_episodes: K.
        num_devices: D.
    """

    def __init__(self, num_episodes: int, num_devices: int):
        self.counts = np.zeros((num_episodes, num_devices, num_devices))
        self.perm = np.tile(np.arange(num_devices, dtype=np.int64), (num_episodes, 1))
        # prefer the identity among equal matches
        self._bias = 1e-6 * np.eye(num_devices)

    def label(self, k: int, anchor_device: int) -> np.ndarray:
        """Episode ``k``'s device for a node the anchor put on ``anchor_device``, ``(1,)``."""
        return self.perm[k, anchor_device : anchor_device + 1]

    def observe(self, k: int, anchor_device: int, device: int) -> None:
        """Episode ``k`` put a node of ``anchor_device`` on ``device``; rematch if it left the
        match."""
        self.counts[k, anchor_device, device] += 1.0
        if self.perm[k, anchor_device] != device:
            # scipy.optimize costs ~0.5 s to import; only anchored rollouts reach here
            from scipy.optimize import linear_sum_assignment

            rows, cols = linear_sum_assignment(self.counts[k] + self._bias, maximize=True)
            self.perm[k, rows] = cols
