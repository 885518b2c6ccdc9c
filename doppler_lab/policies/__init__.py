"""Learned placement policies (torch / PyG): features, the MPNN encoder, the DOPPLER dual
policy and its ablations, Placeto and GDP.

Importing this package is cheap (no torch): the names below load their module on first use.
``features`` is numpy-only and used by :mod:`doppler_lab.policies.env`.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "PolicyConfig": "policy_config",
    "POLICY_KINDS": "policy_config",
    "POLICY_PRESETS": "policy_config",
    "GraphContext": "context",
    "MPNNEncoder": "encoder",
    "EdgeConditionedConv": "encoder",
    "DualPolicy": "doppler",
    "SelPolicy": "doppler",
    "PlcPolicy": "doppler",
    "Placeto": "placeto",
    "GDP": "gdp",
    "PlacementPolicy": "policy_base",
    "Episodes": "policy_base",
    "make_policy": "checkpoint",
    "load_policy": "checkpoint",
    "save_checkpoint": "checkpoint",
    "list_checkpoints": "pretrained",
    "resolve_checkpoint": "pretrained",
    "run_episodes": "rollout",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(f".{_EXPORTS[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
