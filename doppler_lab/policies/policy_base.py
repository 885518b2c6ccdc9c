"""What every learned placement policy shares: recorded episodes, per-step terms, the base class.

An episode is a DOPPLER episode (:class:`~doppler_lab.timing.episode.Episode`): T = n
steps (n compute nodes), each selecting a node (SEL) and a device for it (PLC). A policy says
how it selects (``learned`` scores over the candidates, the ``cp`` rule, or a fixed ``topo``
order) and how it places (``learned`` device scores or the ``cp`` rule). Rollouts run without
autograd (:func:`doppler_lab.policies.rollout.run_episodes`); the log-probabilities of the
actions taken are recomputed afterwards, batched over all steps and episodes, with autograd
(:meth:`PlacementPolicy.log_probs`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np
import torch
from torch import Tensor, nn

from ..ir.placement import Placement
from .context import GraphContext
from .policy_config import PolicyConfig
from .tensors import as_tensor

SEL_MODES: tuple[str, ...] = ("learned", "cp", "topo")

Temperature = tuple[float, float]
"""(SEL, PLC) sampling temperatures of recorded episodes (:meth:`PlacementPolicy.log_probs`)."""

PLC_MODES: tuple[str, ...] = ("learned", "cp")


@dataclass(eq=False)
class Episodes:
    """K episodes of one graph, recorded for the log-probability recompute.

    Attributes:
        nodes: ``(K, T)`` local id of the node selected at each step.
        devices: ``(K, T)`` device chosen at each step.
        dev_feats: ``(K, T, D, F)`` normalised device features of the selected node.
        cand_ptr: ``(K T + 1,)`` CSR pointer of each step's candidates (learned SEL only).
        cand_idx: ``(M,)`` local ids of the candidates, step by step.
        sel_teacher: ``(M,)`` candidates the Critical Path rule would pick (or None).
        plc_teacher: ``(K, T, D)`` devices the Critical Path rule would pick (or None).
        placements: the K placements (priority = selection order).
        partial: ``(K, T)`` makespan of the state's own schedule before step t (reported
            units): a state-dependent baseline for the steps from t on.
    """

    nodes: np.ndarray
    devices: np.ndarray
    dev_feats: np.ndarray
    cand_ptr: np.ndarray | None
    cand_idx: np.ndarray | None
    sel_teacher: np.ndarray | None
    plc_teacher: np.ndarray | None
    placements: list[Placement]
    partial: np.ndarray | None = None

    @property
    def num_episodes(self) -> int:
        return int(self.nodes.shape[0])

    @property
    def num_steps(self) -> int:
        return int(self.nodes.shape[1])

    def select(self, rows: np.ndarray | slice) -> Episodes:
        """The episodes ``rows`` (for chunked recomputes)."""
        idx = np.arange(self.num_episodes)[rows]
        t = self.num_steps
        cand_ptr = cand_idx = sel_teacher = None
        if self.cand_ptr is not None and self.cand_idx is not None:
            steps = (idx[:, None] * t + np.arange(t)).reshape(-1)
            lo, hi = self.cand_ptr[steps], self.cand_ptr[steps + 1]
            counts = hi - lo
            take = np.repeat(lo - np.cumsum(counts) + counts, counts) + np.arange(counts.sum())
            cand_idx = self.cand_idx[take]
            cand_ptr = np.concatenate([[0], np.cumsum(counts)])
            if self.sel_teacher is not None:
                sel_teacher = self.sel_teacher[take]
        return Episodes(
            self.nodes[idx],
            self.devices[idx],
            self.dev_feats[idx],
            cand_ptr,
            cand_idx,
            sel_teacher,
            None if self.plc_teacher is None else self.plc_teacher[idx],
            [self.placements[i] for i in idx],
            None if self.partial is None else self.partial[idx],
        )

    _ARRAYS = (
        "nodes",
        "devices",
        "dev_feats",
        "cand_ptr",
        "cand_idx",
        "sel_teacher",
        "plc_teacher",
        "partial",
    )

    def to_state(self) -> dict[str, Tensor | None]:
        """The arrays as tensors (for checkpoints; placements are not kept)."""
        return {
            k: None
            if getattr(self, k) is None
            else torch.from_numpy(np.ascontiguousarray(getattr(self, k)))
            for k in self._ARRAYS
        }

    @classmethod
    def from_state(cls, state: dict[str, Tensor | None]) -> Episodes:
        arrays = {k: None if state[k] is None else state[k].numpy() for k in cls._ARRAYS}  # type: ignore[union-attr]
        return cls(placements=[], **arrays)  # type: ignore[arg-type]

    @staticmethod
    def concat(parts: list[Episodes]) -> Episodes:
        """The episodes of ``parts`` (of one graph) in one batch."""

        def cat(name: str) -> np.ndarray | None:
            xs = [getattr(p, name) for p in parts]
            return None if any(x is None for x in xs) else np.concatenate(xs)

        cand_ptr = None
        if all(p.cand_ptr is not None for p in parts):
            ptrs = [np.diff(p.cand_ptr) for p in parts]  # type: ignore[arg-type]
            cand_ptr = np.concatenate([[0], np.cumsum(np.concatenate(ptrs))])
        return Episodes(
            np.concatenate([p.nodes for p in parts]),
            np.concatenate([p.devices for p in parts]),
            np.concatenate([p.dev_feats for p in parts]),
            cand_ptr,
            cat("cand_idx"),
            cat("sel_teacher"),
            cat("plc_teacher"),
            [pl for p in parts for pl in p.placements],
            cat("partial"),
        )


class StepTerms(NamedTuple):
    """Per-step quantities of recorded episodes under the current parameters, ``(K, T)`` each;
    None where that half of the policy is not learned.

    Attributes:
        sel_logp, plc_logp: log-probability of the action taken.
        sel_entropy, plc_entropy: entropy of the step's distribution.
        sel_teacher_ll, plc_teacher_ll: log-probability of the teacher's choices (any of its
            ties), for imitation.
    """

    sel_logp: Tensor | None
    plc_logp: Tensor | None
    sel_entropy: Tensor | None
    plc_entropy: Tensor | None
    sel_teacher_ll: Tensor | None
    plc_teacher_ll: Tensor | None


def segment_log_softmax(logits: Tensor, seg: Tensor, num_segments: int) -> tuple[Tensor, Tensor]:
    """Log-softmax of ``logits`` within segments, and each segment's entropy.

    Shapes:
        - input: logits ``(M,)``, seg ``(M,)`` segment id in ``0..S-1`` (every segment non-empty)
        - output: log-probabilities ``(M,)``, entropies ``(S,)``
    """
    mx = torch.full((num_segments,), -torch.inf, dtype=logits.dtype)
    mx = mx.scatter_reduce(0, seg, logits.detach(), "amax", include_self=True)
    z = logits - mx[seg]
    denom = torch.zeros(num_segments, dtype=logits.dtype).index_add(0, seg, z.exp())
    logp = z - denom.log()[seg]
    ent = -torch.zeros(num_segments, dtype=logits.dtype).index_add(0, seg, logp.exp() * logp)
    return logp, ent


def masked_log_sum(logp: Tensor, mask: Tensor, seg: Tensor, num_segments: int) -> Tensor:
    """``log sum_{i in segment, mask_i} exp(logp_i)`` per segment (the likelihood of a tie set).

    Shapes:
        - input: logp, mask, seg ``(M,)``
        - output: ``(S,)``
    """
    p = torch.where(mask, logp.exp(), torch.zeros_like(logp))
    total = torch.zeros(num_segments, dtype=logp.dtype).index_add(0, seg, p)
    return total.clamp_min(1e-30).log()


def tempered(scores: Tensor, temperature: float) -> Tensor:
    """``scores / temperature``: the scores of the distribution a rollout samples at that
    temperature (:class:`~doppler_lab.policies.rollout.ActionMode`); 0 (greedy) and 1 leave
    them as they are."""
    return scores if temperature in (0.0, 1.0) else scores / temperature


def device_terms(
    logits: Tensor, devices: Tensor, teacher: np.ndarray | None, temperature: float = 1.0
) -> tuple[Tensor, Tensor, Tensor | None]:
    """Log-probability of the devices taken, entropy, and the teacher-set log-likelihood, under
    the distribution sampled at ``temperature`` (see :func:`tempered`).

    Shapes:
        - input: logits ``(K, T, D)``, devices ``(K, T)``, teacher ``(K, T, D)`` bool or None
        - output: three ``(K, T)`` tensors (the last None without a teacher)
    """
    logp = torch.log_softmax(tempered(logits, temperature), dim=-1)
    taken = logp.gather(-1, devices.unsqueeze(-1)).squeeze(-1)
    ent = -(logp.exp() * logp).sum(-1)
    ll = None
    if teacher is not None:
        p = torch.where(as_tensor(teacher), logp.exp(), torch.zeros_like(logp)).sum(-1)
        ll = p.clamp_min(1e-30).log()
    return taken, ent, ll


class PlacementPolicy(nn.Module):
    """Base class of the learned policies (:class:`~doppler_lab.policies.doppler.DualPolicy`,
    :class:`~doppler_lab.policies.placeto.Placeto`, :class:`~doppler_lab.policies.gdp.GDP`).

    Args:
        config: the policy's configuration.
        num_devices: the device count it was built for.
    """

    sel_mode: str = "learned"
    plc_mode: str = "learned"
    #: episodes per chunk when recomputing log-probabilities (memory-heavy policies)
    eval_chunk: int | None = None
    #: an episode's PLC logits do not depend on the other episodes of its rollout, to the bit
    #: (a greedy episode can then share a rollout with sampled ones)
    batch_invariant: bool = False
    #: PLC's temperature in the sampled rollouts of the protocol (greedy + samples, the
    #: proposals of a budget search and of the adapter; SEL samples at 1): a checkpoint's
    #: ``meta["sample_temperature"]`` (:func:`~doppler_lab.policies.checkpoint.load_policy`),
    #: or the placer option ``temperature``; training's episodes have their own
    sample_temperature: float = 1.0
    #: the heuristics whose placements the ``doppler`` placer gives a policy that reads a hint
    #: (``doppler12``): one group of rollouts with each, then one without
    #: (:func:`~doppler_lab.search.proposals.policy_candidates`); a checkpoint's
    #: ``meta["hints"]`` (``train-general --hints``), else the clustering alone
    hints: tuple[str, ...] = ("clustering",)

    def __init__(self, config: PolicyConfig, num_devices: int):
        super().__init__()
        self.config = config
        self.num_devices = num_devices

    @property
    def kind(self) -> str:
        return self.config.kind

    def encode(self, ctx: GraphContext) -> Any:
        """The parameter-dependent static part of an episode (with autograd if enabled)."""
        raise NotImplementedError

    def sel_scores(self, enc: Any) -> np.ndarray:
        """``(n,)`` static SEL score per local node (``sel_mode == "learned"``)."""
        raise NotImplementedError

    def plc_begin(self, ctx: GraphContext, enc: Any, num_episodes: int) -> Any:
        """The per-rollout dynamic state of PLC (e.g. placed-set sums)."""
        return None

    def plc_logits(
        self, ctx: GraphContext, enc: Any, pstate: Any, nodes: np.ndarray, feats: np.ndarray
    ) -> np.ndarray:
        """``(K, D)`` device scores of ``nodes`` (local ids, ``(K,)``) given their normalised
        device features ``(K, D, F)``."""
        raise NotImplementedError

    def plc_observe(self, pstate: Any, nodes: np.ndarray, devices: np.ndarray) -> None:
        """Record that ``nodes[k]`` went to ``devices[k]`` in episode k."""

    def log_probs(
        self,
        ctx: GraphContext,
        enc: Any,
        episodes: Episodes,
        temperature: Temperature = (1.0, 1.0),
    ) -> StepTerms:
        """Per-step terms of ``episodes`` under the current parameters (autograd).

        Args:
            ctx: the prepared graph.
            enc: ``self.encode(ctx)``.
            episodes: the recorded episodes.
            temperature: (SEL, PLC) temperatures the actions were sampled at: the terms are
                those of the distributions that sampled them (:func:`tempered`), so that the
                policy gradient and self-imitation are on-policy (trained at 1 but sampled
                hotter, the policy drifts towards its own flatter samples every update).
        """
        raise NotImplementedError

    def param_groups(self) -> dict[str, list[nn.Parameter]]:
        """Parameters by optimiser group (``sel``, ``plc``); each gets its own optimiser."""
        return {"plc": list(self.parameters())}

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())
