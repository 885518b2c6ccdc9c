"""PyTorch Geometric message passing for the encoder's reference path (imported only when asked).

:class:`~doppler_lab.policies.encoder.EdgeConditionedConv` is plain torch so that inference does
not load ``torch_geometric``; these are the same sums written as PyG layers, which its
``reference=True`` path and the tests hold the plain form to.
"""

from __future__ import annotations

import torch
from torch import Tensor
from torch_geometric.nn import MessagePassing


class _EdgeSums(MessagePassing):
    """Sums of edge messages at the target. ``combined``: message ``x_j Theta(e) = sum_k
    coef[e, k] h_j[k]`` from ``h_j`` ``(K + 1, C)``; else ``coef[e, k] x_j`` per basis k."""

    def __init__(self, combined: bool) -> None:
        super().__init__(aggr="add", node_dim=0)
        self.combined = combined

    def forward(self, x: Tensor, edge_index: Tensor, coef: Tensor) -> Tensor:
        return self.propagate(edge_index, x=x, coef=coef)

    def message(self, x_j: Tensor, coef: Tensor) -> Tensor:
        if self.combined:
            return torch.einsum("ekc,ek->ec", x_j, coef)
        return x_j.unsqueeze(1) * coef.unsqueeze(2)


def propagate_basis(h: Tensor, edge_index: Tensor, coef: Tensor) -> Tensor:
    """``out_i = sum_{j -> i} sum_k coef[e, k] h_j[k]`` by PyG message passing.

    Args:
        h: ``(n, K + 1, C)``, each node's features times every basis.
        edge_index: ``(2, E)``, source and target rows.
        coef: ``(E, K + 1)`` edge coefficients.

    Returns:
        ``(n, C)``.
    """
    return _EdgeSums(combined=True)(h, edge_index, coef)


def weighted_sums(x: Tensor, edge_index: Tensor, coef: Tensor) -> Tensor:
    """``out[i, k] = sum_{j -> i} coef[e, k] x_j`` by PyG message passing, ``(n, K + 1, C)``:
    the sums the plain encoder forms with ``index_add`` (or compiled), before its basis matmul."""
    return _EdgeSums(combined=False)(x, edge_index, coef)
