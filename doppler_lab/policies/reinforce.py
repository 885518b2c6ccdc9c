"""One policy-gradient update for every learner of the package: advantages, the loss, the
optimisers and their step, and the resume state they need.

Stage I/II/III (:class:`~doppler_lab.train.loop.Trainer`, so also ``train-general``) and the
per-instance adapter (:func:`~doppler_lab.search.adapter.adapt`) learn from the same pieces:

- :func:`advantages`: how much better each sampled episode was than a baseline (the batch's
  leave-one-out mean, a moving average or the running mean), optionally per step and
  normalised;
- :func:`surrogate`: the objective per action whose gradient is the update: REINFORCE's
  ``A log pi`` or PPO's clipped ratio ``min(r A, clip(r, 1 - e, 1 + e) A)``,
  ``r = pi / pi_old``;
- :func:`policy_loss`: the training stages' whole loss (policy gradient, entropy bonus,
  imitation);
- :class:`Optimisers`: one Adam per parameter group with its learning-rate schedule, gradient
  averaging and clipping, and the state a resumed run restores.

Two estimators (:data:`ESTIMATORS`): ``reinforce``, the paper's (one gradient step per batch of
episodes; the default of every paper-reproduction stage), and ``ppo``: the batch's advantages
normalised (zero mean, unit spread), then :data:`PPO_EPOCHS` passes over the same episodes, each
a step on the clipped surrogate (Schulman et al., 2017), so one batch of simulator calls moves
the policy further without leaving the region where the samples speak for it.

This module sits in ``policies/`` because both wings that learn import it: ``search/`` (the
adapter) lies below ``train/``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import torch

from ..house.settings import bad_setting
from .policy_base import StepTerms

#: the policy-gradient estimators: the paper's REINFORCE and PPO-style clipped updates
ESTIMATORS: tuple[str, ...] = ("reinforce", "ppo")
#: PPO's clip range (the ratio pi / pi_old is held within 1 -+ this)
PPO_CLIP = 0.2
#: PPO's passes (each one optimiser step) over every batch of sampled episodes
PPO_EPOCHS = 4


def check_estimator(value: Any, owner: str = "train config") -> str:
    """``value`` if it names an estimator of :data:`ESTIMATORS`.

    Raises:
        ConfigError: one line naming the value and the choices.
    """
    if value not in ESTIMATORS:
        raise bad_setting(owner, "estimator", value, f"one of {', '.join(ESTIMATORS)}")
    return value


@dataclass
class Baseline:
    """Per-graph cost statistics for the baseline (part of a run's resume state)."""

    total: float = 0.0
    count: int = 0
    ema: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"total": self.total, "count": self.count, "ema": self.ema}


def advantages(
    costs: np.ndarray,
    state: Baseline,
    kind: str,
    decay: float,
    norm: str,
    partial: np.ndarray | None = None,
    elite_quantile: float = 0.25,
) -> tuple[np.ndarray, float]:
    """Advantages (higher = better than the baseline) and the mean baseline.

    ``batch``: each episode's baseline is the mean of the others' costs (needs K >= 2; falls back
    to ``ema``); ``ema``: a moving average of past batch means (the first batch's mean to
    start); ``mean``: the running mean of every cost so far, this batch included (released).
    With ``partial`` ``(K, T)`` (and the batch baseline) step t is judged by the cost added
    from t on, ``cost - partial[:, t]``, against the other episodes at the same step; the
    result is then ``(K, T)``, else ``(K,)``. ``state`` is updated.

    ``norm="elite"`` (risk-seeking, any baseline kind, no ``partial``): ``max(q - cost, 0)``
    over the batch's standard deviation, ``q`` the ``elite_quantile`` quantile of the batch's
    costs (reported as the baseline).
    """
    k = costs.size
    mean = float(costs.mean())
    if norm == "elite":
        q = float(np.quantile(costs, elite_quantile))
        state.ema = mean if state.ema is None else decay * state.ema + (1 - decay) * mean
        spread = float(costs.std())
        return np.maximum(q - costs, 0.0) / (spread + 1e-8 * abs(mean) + 1e-30), q
    if kind == "batch" and k >= 2:
        r = costs[:, None] - partial if partial is not None else costs[:, None]
        if norm == "rank":  # centred ranks: robust to outliers, scale-free
            r = np.argsort(np.argsort(r, axis=0, kind="stable"), axis=0).astype(np.float64)
        base = (r.sum(axis=0) - r) / (k - 1)
        adv = base - r
        base_mean = mean
        spread = float(r.std(axis=0).mean())
        ref = mean
    else:
        if kind == "mean":
            state.total += float(costs.sum())
            state.count += k
            ref = state.total / state.count
        else:
            ref = mean if state.ema is None else state.ema
        adv = (ref - costs)[:, None]
        base_mean = ref
        spread = float(costs.std())
    state.ema = mean if state.ema is None else decay * state.ema + (1 - decay) * mean
    if norm == "relative" or (norm in ("std", "rank") and k < 2):
        adv = adv / max(ref, 1e-30)
    elif norm in ("std", "rank"):
        adv = adv / (spread + 1e-8 * abs(mean) + 1e-30)
    return (adv[:, 0] if adv.shape[1] == 1 else adv), base_mean


def batch_mean_advantages(costs: np.ndarray) -> np.ndarray | None:
    """The adapter's advantages: the batch mean minus each cost, over the batch's standard
    deviation; None when they carry no signal (one episode, or all costs equal)."""
    if costs.size < 2 or float(costs.std()) <= 0:
        return None
    return (costs.mean() - costs) / costs.std()


def normalise(adv: np.ndarray) -> np.ndarray:
    """``adv`` shifted and scaled to zero mean and unit standard deviation over all its entries
    (PPO's advantage normalisation); all zeros when they are all equal."""
    adv = np.asarray(adv, dtype=np.float64)
    spread = float(adv.std())
    if not spread > 0:
        return np.zeros_like(adv)
    return (adv - adv.mean()) / spread


def surrogate(
    logp: torch.Tensor,
    adv: torch.Tensor,
    old_logp: torch.Tensor | None = None,
    clip: float = PPO_CLIP,
) -> torch.Tensor:
    """The objective per action (to be maximised; reduce it as the caller's loss does).

    Without ``old_logp``: REINFORCE's ``adv * logp``. With it: PPO's clipped surrogate
    ``min(r adv, clip(r, 1 - clip, 1 + clip) adv)``, ``r = exp(logp - old_logp)``: at the
    sampling parameters (r = 1) its gradient is REINFORCE's; once the ratio leaves the clip
    range in the direction the advantage favours, that action's gradient is zero.

    Shapes:
        - input: logp and old_logp alike; adv broadcast to them
    """
    if old_logp is None:
        return adv * logp
    ratio = torch.exp(logp - old_logp)
    return torch.minimum(ratio * adv, ratio.clamp(1.0 - clip, 1.0 + clip) * adv)


class LossWeights(Protocol):
    """The loss settings :func:`policy_loss` reads (a training stage's config has them)."""

    pg_coef: float
    gamma: float
    entropy_coef: float
    imitation_coef: float
    sil_coef: float
    ppo_clip: float


def step_logp(terms: StepTerms) -> torch.Tensor:
    """The log-probability of each step's actions, both halves of the policy together."""
    return sum(x for x in (terms.sel_logp, terms.plc_logp) if x is not None)  # type: ignore[return-value]


def policy_loss(
    terms: StepTerms,
    adv: torch.Tensor,
    config: LossWeights,
    anchored: bool = False,
    old_logp: torch.Tensor | None = None,
) -> torch.Tensor:
    """The update's loss for one chunk of episodes (a sum over them; divide by K T outside).

    ``anchored``: PLC's labels are an anchor placement's devices (weight ``sil_coef``).
    ``old_logp``: the steps' log-probabilities when the episodes were sampled (PPO's clipped
    surrogate; None: REINFORCE).

    Shapes:
        - input: each term ``(K, T)``, adv ``(K,)`` or ``(K, T)``, old_logp ``(K, T)``
    """
    logp = [x for x in (terms.sel_logp, terms.plc_logp) if x is not None]
    t = logp[0].shape[1]
    disc = config.gamma ** torch.arange(t - 1, -1, -1, dtype=logp[0].dtype)
    loss = logp[0].new_zeros(())
    if config.pg_coef:
        a = adv if adv.dim() == 2 else adv[:, None]
        gain = surrogate(sum(logp), a * disc, old_logp, config.ppo_clip)  # type: ignore[arg-type]
        loss = loss - config.pg_coef * gain.sum()
    ents = [x for x in (terms.sel_entropy, terms.plc_entropy) if x is not None]
    if config.entropy_coef:
        loss = loss - config.entropy_coef * sum(e.sum() for e in ents)
    if anchored:
        if terms.plc_teacher_ll is not None:
            loss = loss - config.sil_coef * terms.plc_teacher_ll.sum()
        return loss
    tl = [x for x in (terms.sel_teacher_ll, terms.plc_teacher_ll) if x is not None]
    if config.imitation_coef and tl:
        loss = loss - config.imitation_coef * sum(x.sum() for x in tl)
    return loss


def extra_epochs(estimator: str, epochs: int) -> int:
    """Passes over a batch after its first one: ``epochs - 1`` for PPO, none for REINFORCE."""
    return max(epochs - 1, 0) if estimator == "ppo" else 0


class Optimisers:
    """One Adam optimiser per parameter group, each with its learning-rate schedule.

    Args:
        groups: the parameters of each group (e.g. ``{"sel": ..., "plc": ...}``).
        lrs: each group's initial learning rate.
        factor: the schedule, the rate's multiplier at step ``i`` (None: constant).
    """

    def __init__(
        self,
        groups: Mapping[str, Iterable[torch.Tensor]],
        lrs: Mapping[str, float],
        factor: Callable[[int], float] | None = None,
    ):
        self.optimizers = {k: torch.optim.Adam(ps, lr=lrs[k]) for k, ps in groups.items()}
        self.schedulers = (
            {}
            if factor is None
            else {
                k: torch.optim.lr_scheduler.LambdaLR(opt, factor)
                for k, opt in self.optimizers.items()
            }
        )

    def rates(self) -> dict[str, float]:
        """Each group's current learning rate."""
        return {k: o.param_groups[0]["lr"] for k, o in self.optimizers.items()}

    def zero_grad(self) -> None:
        for opt in self.optimizers.values():
            opt.zero_grad()

    def average(self, count: int) -> None:
        """Divide the gradients summed over ``count`` updates by ``count`` (their mean)."""
        if count <= 1:
            return
        for opt in self.optimizers.values():
            for g in opt.param_groups:
                for p in g["params"]:
                    if p.grad is not None:
                        p.grad.div_(count)

    def step(self, grad_clip: float = 0.0, schedule: bool = True) -> dict[str, float]:
        """One step of each optimiser (gradients clipped to norm ``grad_clip`` first when > 0;
        the schedule advanced when ``schedule``); returns each one's gradient norm before
        clipping. The gradients are cleared."""
        norms = {}
        for name, opt in self.optimizers.items():
            params = [p for g in opt.param_groups for p in g["params"] if p.grad is not None]
            if grad_clip > 0 and params:
                norms[name] = float(torch.nn.utils.clip_grad_norm_(params, grad_clip))
            elif params:
                norms[name] = float(torch.norm(torch.stack([p.grad.norm() for p in params])))
            opt.step()
            opt.zero_grad(set_to_none=True)
            if schedule and name in self.schedulers:
                self.schedulers[name].step()
        return norms

    def state_dict(self) -> dict[str, Any]:
        """What a resumed run restores: ``{"optimizers": ..., "schedulers": ...}`` by group."""
        return {
            "optimizers": {k: o.state_dict() for k, o in self.optimizers.items()},
            "schedulers": {k: s.state_dict() for k, s in self.schedulers.items()},
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict`'s record."""
        for k, o in self.optimizers.items():
            o.load_state_dict(state["optimizers"][k])
        for k, s in self.schedulers.items():
            s.load_state_dict(state["schedulers"][k])
