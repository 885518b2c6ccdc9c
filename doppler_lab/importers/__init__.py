"""Real models into the IR: any ``torch.nn.Module`` through ``torch.export``.

:func:`from_module` exports a module on example inputs (in eval mode, shapes static),
:func:`from_exported` takes a saved or in-memory ``torch.export.ExportedProgram``. Both
decompose to aten ops (keeping ``linear``, ``scaled_dot_product_attention`` and ``layer_norm``
whole), drop ``_assert*`` nodes, fold everything that does not depend on a user input into
stored inputs (weights, buffers, rotary tables, masks), group the remaining ops into nodes
(``granularity``), and count each node's flops under fake tensors. Every node is an executable
``program`` op (:mod:`doppler_lab.ir.program`) with one output tensor; parameters, buffers, folded
constants and the example inputs are ``input`` nodes whose values travel with the graph
(:class:`doppler_lab.io.stored.StoredTensors`), together with the eager model's outputs, the
reference of ``doppler-lab execute --check``.

Granularity:

- ``op``: one aten op a node (a tuple-returning op and the ``getitem`` that takes its element
  stay in one node);
- ``scope`` (default): maximal contiguous runs, in export order, of ops with the same innermost
  module path (``depth`` cuts the path to that many module levels below the root); a run whose
  values leave it more than once is split so that every node has one output; with ``merge``, a
  node with no flops (views, norms, activations) whose output feeds exactly one node is folded
  into it. ``merge`` is ignored with ``op``.

Weights (``weights``):

- ``stored`` (default): parameters are stored inputs, their values in the graph's sidecar;
- ``none``: each parameter is a *generated* input, a seeded recipe in the graph JSON (``zeros``
  for a bias, ``ones`` for a norm's weight, else ``normal`` with std 0.02; a seed per tensor
  from ``seed`` and its name) that the executor makes on the device that reads it
  (:func:`doppler_lab.io.stored.generate`). The export runs on fake tensors and nothing is
  computed: a model built with its parameters on the ``meta`` device
  (:func:`doppler_lab.importers.weights.params_on_meta`) imports at any size, with the shapes,
  bytes and flops of the materialised one. Such a model is always imported this way. There are
  no expected outputs: ``execute --check`` compares with a run of the graph on the same weights.

Bad input (dynamic shapes, training mode, random ops, in-place ops that survive, outputs that
are not computed tensors) raises :class:`~doppler_lab.house.errors.ImportModelError`, one line naming
the op and its module path. This package imports torch only when a function is called.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from ..ir.graph import DataflowGraph

from .options import GRANULARITIES, WEIGHTS


def from_module(
    model: Any,
    example_args: Any,
    *,
    granularity: str = "scope",
    depth: int | None = None,
    merge: bool = True,
    name: str | None = None,
    weights: str = "stored",
    seed: int = 0,
) -> DataflowGraph:
    """Import ``model`` run on ``example_args``: a tuple of positional arguments, one tensor, or
    a dict of keyword arguments.

    Args:
        model: a ``torch.nn.Module`` (put in eval mode for the export, restored after).
        example_args: its example inputs; their values become the graph's stored inputs.
        granularity: ``scope`` or ``op`` (see the module docstring).
        depth: module levels below the root that name a scope (``None``: the innermost).
        merge: fold flop-free nodes into their only consumer (``scope`` only).
        name: the graph's name (default: the model's class name).
        weights: ``stored`` or ``none`` (generated weights; see the module docstring). A model
            with parameters on the ``meta`` device is imported with ``none``.
        seed: seeds the generated weights (with each parameter's name).

    Raises:
        ImportModelError: a model the importer cannot take.
    """
    from .export import import_module

    return import_module(model, example_args, granularity, depth, merge, name, weights, seed)


def from_exported(
    ep: Any,
    *,
    granularity: str = "scope",
    depth: int | None = None,
    merge: bool = True,
    name: str | None = None,
    trust: bool | None = None,
    weights: str = "stored",
    seed: int = 0,
) -> DataflowGraph:
    """Import a ``torch.export.ExportedProgram``, or the path of one saved by
    ``torch.export.save``; its example inputs become the stored inputs and its outputs on them
    the expected outputs (its parameters become generated weights with ``weights="none"``).
    Options as in :func:`from_module`. A path is loaded only when trusted
    (``trust``, else ``--trust-pt2`` / ``$DOPPLER_LAB_TRUST_PT2``; see
    :mod:`doppler_lab.house.trust`): loading a ``.pt2`` can run code stored in it."""
    from .export import import_exported

    if isinstance(ep, str | Path):
        from .export import load_exported

        ep = load_exported(ep, trust)
    return import_exported(ep, granularity, depth, merge, name, weights, seed)


__all__ = ["GRANULARITIES", "WEIGHTS", "from_exported", "from_module"]
