"""A rollout run by each engine, for tests that compare the stepped and the compiled ones."""

from __future__ import annotations

import numpy as np
import torch

from doppler_lab.policies.rollout import Rollout


class Stepped(Rollout):
    compiled_plain_modes = False  # the per-episode loop


def run_rollout(pol, ctx, k, mode, compiled=True, seed=3):
    """``k`` episodes of ``pol`` on ``ctx`` in ``mode`` (both halves), compiled or stepped."""
    cls = Rollout if compiled else Stepped
    with torch.no_grad():
        r = cls(pol, ctx, pol.encode(ctx), k, np.random.default_rng(seed), mode, mode)
        r.run()
        return r
