"""The MPNN graph encoder: edge-conditioned convolution + GRU, run once per episode.

The released code uses an NNConv whose edge network (1 -> 128 -> 128x128) maps each edge's
feature to a full weight matrix and is re-evaluated at every one of the 6 message-passing steps.
That network's output is an affine map of ``relu(W1 e + b1)``, so its weight matrix is a
combination of 128 basis matrices. :class:`EdgeConditionedConv` keeps that form with a
configurable number of bases K and computes the edge coefficients once per forward pass
(shared by all steps); each step aggregates the K + 1 edge-weighted neighbour sums and applies
the bases in one ``(K + 1) C x C`` matmul per node: ``O((K + 1) C)`` per edge and
``O((K + 1) C^2)`` per node, instead of a ``C x C`` matrix built per edge per step. ``edge_mode="nnconv"``
builds the released form with PyG's :class:`~torch_geometric.nn.NNConv` for comparison.

The ``basis`` form is plain torch (``index_add``, or the compiled sums without autograd), so a
learned placer's inference never imports ``torch_geometric`` (several seconds of start-up);
PyG is imported only by the ``nnconv`` form and by the reference path (:mod:`.pyg_reference`),
which the tests hold the plain form to.
"""

from __future__ import annotations

import math

import torch
from numba import njit
from torch import Tensor, nn
from torch.nn import functional as F

EDGE_MODES: tuple[str, ...] = ("basis", "nnconv")


@njit(cache=True)
def _aggregate(x, src, dst, coef, out):  # pragma: no cover - compiled
    """``out = 0``, then ``out[dst[e], k] += x[src[e]] * coef[e, k]`` edge after edge
    (float32): the sums ``index_add`` forms, to the bit."""
    out[:] = 0.0
    for e in range(src.shape[0]):
        s, r = src[e], dst[e]
        for k in range(coef.shape[1]):
            ck = coef[e, k]
            for j in range(x.shape[1]):
                out[r, k, j] += x[s, j] * ck


class EdgeConditionedConv(nn.Module):
    """``x'_i = W_r x_i + b + sum_{j -> i} x_j Theta(e_ji)`` with
    ``Theta(e) = B_0 + sum_k phi_k(e) B_k`` and ``phi(e) = relu(W_e e + b_e)``.

    Args:
        channels: input and output width C.
        edge_dim: edge feature width.
        num_bases: K, the number of edge-weighted basis matrices.

    Shapes:
        - input: node features ``(n, C)``, edge index ``(2, E)``, edge coefficients
          ``(E, K + 1)`` from :meth:`edge_coefficients`
        - output: ``(n, C)``
    """

    def __init__(self, channels: int, edge_dim: int, num_bases: int):
        super().__init__()
        self.channels = channels
        self.num_bases = num_bases
        self.edge_lin = nn.Linear(edge_dim, num_bases)
        self.bases = nn.Parameter(torch.empty(channels, (num_bases + 1) * channels))
        self.root = nn.Linear(channels, channels)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        self.edge_lin.reset_parameters()
        self.root.reset_parameters()
        bound = 1.0 / math.sqrt(self.channels * (self.num_bases + 1))
        nn.init.uniform_(self.bases, -bound, bound)

    def edge_coefficients(self, edge_attr: Tensor) -> Tensor:
        """``[1, phi_1(e), ..., phi_K(e)]`` per edge, ``(E, K + 1)``; static per episode."""
        phi = F.relu(self.edge_lin(edge_attr))
        return torch.cat([phi.new_ones(phi.shape[0], 1), phi], dim=1)

    #: below this many message elements (E (K + 1) C) aggregate all bases in one pass
    FUSED_LIMIT = 2_000_000

    def forward(
        self, x: Tensor, edge_index: Tensor, coef: Tensor, reference: bool = False
    ) -> Tensor:
        """Aggregate first, then one dense ``(n, (K + 1) C) x ((K + 1) C, C)`` product:
        ``sum_k A_k x B_k`` with ``A_k`` the adjacency weighted by ``phi_k``. This avoids
        materialising a per-edge message per basis (and its backward) on large graphs; small
        graphs aggregate every basis in one ``index_add``. ``reference=True`` runs the same
        function as PyG message passing (message ``x_j Theta(e)``, sum aggregation)."""
        n, c, k1 = x.shape[0], self.channels, self.num_bases + 1
        if reference:
            from .pyg_reference import propagate_basis

            h = (x @ self.bases).view(-1, k1, c)
            return propagate_basis(h, edge_index, coef) + self.root(x)
        src, dst = edge_index
        if not torch.is_grad_enabled() and x.dtype == coef.dtype == torch.float32 and x.is_cpu:
            # inference: the same sums compiled (no per-edge messages materialised)
            agg = x.new_empty(n, k1, c)
            _aggregate(x.numpy(), src.numpy(), dst.numpy(), coef.numpy(), agg.numpy())
            return self._combine(x, agg.reshape(n, k1 * c))
        xs = x[src]
        if src.numel() * k1 * c <= self.FUSED_LIMIT:
            agg = x.new_zeros(n, k1, c).index_add(0, dst, xs.unsqueeze(1) * coef.unsqueeze(2))
            agg = agg.reshape(n, k1 * c)
        else:
            parts = [
                x.new_zeros(n, c).index_add(0, dst, xs * coef[:, k : k + 1]) for k in range(k1)
            ]
            agg = torch.stack(parts, 1).reshape(n, k1 * c)
        return self._combine(x, agg)

    def _combine(self, x: Tensor, agg: Tensor) -> Tensor:
        """``agg @ B + root(x)``, ``B`` the bases stacked ``((K + 1) C, C)``."""
        c, k1 = self.channels, self.num_bases + 1
        stacked = self.bases.view(c, k1, c).permute(1, 0, 2).reshape(k1 * c, c)
        return agg @ stacked + self.root(x)

    def __repr__(self) -> str:
        return f"{self.__class__.__name__}({self.channels}, bases={self.num_bases})"


class MPNNEncoder(nn.Module):
    """Node embeddings: project, then ``steps`` rounds of (shared) edge-conditioned message
    passing, each followed by a GRU update; LeakyReLU(0.1) on the output (as released).

    Args:
        in_dim: node feature width.
        edge_dim: edge feature width.
        hidden: embedding width C.
        steps: message-passing rounds.
        num_bases: K of :class:`EdgeConditionedConv` (``basis`` mode).
        edge_mode: ``basis`` (edge coefficients once per pass) or ``nnconv`` (PyG NNConv with an
            edge network 1 -> edge_hidden -> C x C, re-evaluated every step: the released form).
        edge_hidden: the NNConv edge network's hidden width.

    Shapes:
        - input: x ``(n, in_dim)``, edge_index ``(2, E)``, edge_attr ``(E, edge_dim)``
        - output: ``(n, hidden)``
    """

    def __init__(
        self,
        in_dim: int,
        edge_dim: int,
        hidden: int = 64,
        steps: int = 6,
        num_bases: int = 8,
        edge_mode: str = "basis",
        edge_hidden: int = 128,
    ):
        super().__init__()
        if edge_mode not in EDGE_MODES:
            raise ValueError(f"edge_mode {edge_mode!r}; expected one of {EDGE_MODES}")
        self.steps = steps
        self.edge_mode = edge_mode
        self.project = nn.Linear(in_dim, hidden)
        if edge_mode == "basis":
            self.conv: nn.Module = EdgeConditionedConv(hidden, edge_dim, num_bases)
        else:
            from torch_geometric.nn import NNConv

            edge_net = nn.Sequential(
                nn.Linear(edge_dim, edge_hidden), nn.ReLU(), nn.Linear(edge_hidden, hidden * hidden)
            )
            self.conv = NNConv(hidden, hidden, edge_net, aggr="add")
        self.gru = nn.GRUCell(hidden, hidden)

    def forward(self, x: Tensor, edge_index: Tensor, edge_attr: Tensor) -> Tensor:
        h = F.relu(self.project(x))
        if self.edge_mode == "basis":
            coef = self.conv.edge_coefficients(edge_attr)
            for _ in range(self.steps):
                h = self.gru(F.relu(self.conv(h, edge_index, coef)), h)
        else:
            for _ in range(self.steps):
                h = self.gru(F.relu(self.conv(h, edge_index, edge_attr)), h)
        return F.leaky_relu(h, 0.1)
