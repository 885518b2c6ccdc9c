"""The DOPPLER dual policy: :class:`SelPolicy` (which node next), :class:`PlcPolicy` (which
device), and :class:`DualPolicy` with the SEL-only and PLC-only ablations.

Costs are arranged so an episode does one encoder pass and O(1) small tensor operations per
step: SEL scores depend only on static quantities (node features, embeddings, path embeddings),
so all n scores are computed once and a step is a softmax over the candidates' scores (numpy).
PLC's first layer splits into a static node part (computed once per episode for every node), a
device-feature part and a placed-set part; a step evaluates only the last two for D devices.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import torch
from numba import njit
from torch import Tensor, nn
from torch.nn import functional as F

from ..house.errors import ConfigError
from . import numpy_blas
from .context import GraphContext
from .encoder import MPNNEncoder
from .features import get_layout
from .numpy_blas import stack_matmul, stack_matvec
from .policy_base import (
    Episodes,
    PlacementPolicy,
    StepTerms,
    Temperature,
    device_terms,
    masked_log_sum,
    segment_log_softmax,
    tempered,
)
from .policy_config import PolicyConfig
from .tensors import as_tensor


def zscore_t(x: Tensor, dim: int, eps: float = 1e-6) -> Tensor:
    """``(x - mean) / (std + eps)`` along ``dim`` (population std)."""
    mean = x.mean(dim=dim, keepdim=True)
    std = x.std(dim=dim, keepdim=True, unbiased=False)
    return (x - mean) / (std + eps)


def smooth_centre(x: Tensor, dim: int) -> Tensor:
    """``(x - mean) / sqrt(var + 1)`` along ``dim``: z-score-like for spreads well above 1,
    the plain centred values (gradient bounded) when the values nearly agree."""
    diff = x - x.mean(dim=dim, keepdim=True)
    return diff / torch.sqrt(diff.pow(2).mean(dim=dim, keepdim=True) + 1.0)


def path_sum(emb: Tensor, jumps: list[Tensor]) -> Tensor:
    """Sum of ``emb`` along each node's path, by pointer doubling (see
    :func:`~doppler_lab.policies.features.pointer_doubling`).

    Shapes:
        - input: emb ``(n, C)``
        - output: ``(n, C)``
    """
    s = torch.cat([emb, emb.new_zeros(1, emb.shape[1])])
    for j in jumps:
        s = s + s[j]
    return s[:-1]


def _leaky(x: Tensor) -> Tensor:
    return F.leaky_relu(x, 0.1)


def _encoder(cfg: PolicyConfig) -> MPNNEncoder:
    layout = get_layout(cfg.layout)
    return MPNNEncoder(
        layout.node_dim,
        layout.edge_dim,
        cfg.hidden,
        cfg.mp_steps,
        cfg.num_bases,
        cfg.edge_mode,
        cfg.edge_hidden,
    )


class SelPolicy(nn.Module):
    """Candidate scores: ``MLP([Linear(node feats), emb, b-path emb, t-path emb])``.

    The b-path (t-path) embedding of v sums the embeddings along v's longest path to a sink
    (from a source), z-scored over the graph. Scores are static within an episode.

    Args:
        config: the policy configuration.
        encoder: an encoder to share, or None for its own.

    Shapes:
        - output of :meth:`forward`: ``(n,)`` one score per compute node
    """

    def __init__(self, config: PolicyConfig, encoder: MPNNEncoder | None = None):
        super().__init__()
        layout = get_layout(config.layout)
        h = config.hidden
        self.encoder = encoder if encoder is not None else _encoder(config)
        self.node_lin = nn.Linear(layout.node_dim, h)
        self.hidden_layer = nn.Linear(4 * h, config.head_hidden)
        self.out = nn.Linear(config.head_hidden, 1)

    def forward(self, ctx: GraphContext, emb: Tensor | None = None) -> Tensor:
        e = self.encoder(ctx.x, ctx.edge_index, ctx.edge_attr) if emb is None else emb
        b_path = zscore_t(path_sum(e, ctx.b_jumps), 0)
        t_path = zscore_t(path_sum(e, ctx.t_jumps), 0)
        z = torch.cat([_leaky(self.node_lin(ctx.x)), e, b_path, t_path], dim=1)
        return self.out(_leaky(self.hidden_layer(z))).squeeze(-1)


class PlcStatic(NamedTuple):
    """PLC's static part of an episode.

    Attributes:
        emb: ``(n, C)`` node embeddings (summed into placed-set embeddings).
        node_term: ``(n, H)`` the node's contribution to the first head layer.
    """

    emb: Tensor
    node_term: Tensor


class PlcPolicy(nn.Module):
    """Device scores: ``MLP([Linear(device feats), Linear(node feats), emb(v), placed(d)])``
    where ``placed(d)`` is the sum of the embeddings of the nodes already on d, normalised over
    the devices (``config.placed_norm``).

    Args:
        config: the policy configuration.
        encoder: an encoder to share, or None for its own.

    Shapes:
        - :meth:`scores`: nodes ``(B,)``, feats ``(B, D, F)``, placed ``(B, D, C)`` ->
          ``(B, D)``
    """

    def __init__(self, config: PolicyConfig, encoder: MPNNEncoder | None = None):
        super().__init__()
        layout = get_layout(config.layout)
        h = config.hidden
        self.hidden = h
        self.placed_norm = config.placed_norm
        self.encoder = encoder if encoder is not None else _encoder(config)
        self.dev_lin = nn.Linear(layout.device_dim, h)
        self.node_lin = nn.Linear(layout.node_dim, h)
        self.hidden_layer = nn.Linear(4 * h, config.head_hidden)
        self.out = nn.Linear(config.head_hidden, 1)

    def static(self, ctx: GraphContext, emb: Tensor | None = None) -> PlcStatic:
        e = self.encoder(ctx.x, ctx.edge_index, ctx.edge_attr) if emb is None else emb
        h = self.hidden
        w = self.hidden_layer.weight
        node_term = (
            _leaky(self.node_lin(ctx.x)) @ w[:, h : 2 * h].T
            + e @ w[:, 2 * h : 3 * h].T
            + self.hidden_layer.bias
        )
        return PlcStatic(e, node_term)

    def scores(self, static: PlcStatic, nodes: Tensor, feats: Tensor, placed: Tensor) -> Tensor:
        h = self.hidden
        w = self.hidden_layer.weight
        norm = smooth_centre(placed, -2) if self.placed_norm == "smooth" else zscore_t(placed, -2)
        pre = (
            _leaky(self.dev_lin(feats)) @ w[:, :h].T
            + norm @ w[:, 3 * h :].T
            + static.node_term[nodes].unsqueeze(-2)
        )
        return self.out(_leaky(pre)).squeeze(-1)


@njit(cache=True, error_model="numpy")  # numpy's division: no zero check, vectorised
def _first_layer(a, bias, placed, var_add, std_add, centred):  # pragma: no cover - compiled
    """The numpy head's elementwise work before its hidden layer, in float32 as numpy does it:
    ``a = leaky(a + bias)`` in place, and the placed sums ``(B, D, C)`` centred over the D
    devices (summed device after device, as ``np.add.reduce`` over that axis adds) and divided
    by ``sqrt(var + var_add) + std_add`` into ``centred``."""
    lo = np.float32(0.1)
    for b in range(a.shape[0]):
        for d in range(a.shape[1]):
            for j in range(a.shape[2]):
                x = a[b, d, j] + bias[j]
                y = lo * x
                a[b, d, j] = x if x > y else y
    ndev, width = placed.shape[1], placed.shape[2]
    inv_d = np.float32(1.0 / ndev)
    total = np.empty(width, placed.dtype)
    sq = np.empty(width, placed.dtype)
    for b in range(placed.shape[0]):
        for c in range(width):
            total[c] = placed[b, 0, c]
            sq[c] = 0.0  # + squares (>= 0): the sum numpy starts from the first one
        for d in range(1, ndev):
            for c in range(width):
                total[c] += placed[b, d, c]
        for c in range(width):
            total[c] *= inv_d  # the mean
        for d in range(ndev):
            for c in range(width):
                x = placed[b, d, c] - total[c]
                centred[b, d, c] = x
                sq[c] += x * x
        for c in range(width):
            sq[c] = np.sqrt(sq[c] * inv_d + var_add) + std_add
        for d in range(ndev):
            for c in range(width):
                centred[b, d, c] /= sq[c]


@njit(cache=True)
def _hidden(pre, placed_term, node_term, rows):  # pragma: no cover - compiled
    """``pre = leaky((pre + placed_term) + node_term[rows[b]])`` in place, float32."""
    lo = np.float32(0.1)
    for b in range(pre.shape[0]):
        r = rows[b]
        for d in range(pre.shape[1]):
            for j in range(pre.shape[2]):
                x = (pre[b, d, j] + placed_term[b, d, j]) + node_term[r, j]
                y = lo * x
                pre[b, d, j] = x if x > y else y


@njit(cache=True)
def add_placed(sums, emb, nodes, devices):  # pragma: no cover - compiled
    """``sums[k, devices[k]] += emb[nodes[k]]`` for every episode k."""
    for k in range(nodes.shape[0]):
        sums[k, devices[k]] += emb[nodes[k]]


class HeadWeights(NamedTuple):
    """:class:`PlcHeadNumpy`'s weights as :func:`head_logits` reads them (float32; passed as a
    plain tuple in this field order, :meth:`PlcHeadNumpy.kernel_weights`)."""

    dev_w_t: np.ndarray  # (H, F) the device features' layer (products take its transpose)
    dev_b: np.ndarray  # (H,) its bias
    w_dev: np.ndarray  # (H, H2) the hidden layer's device part
    w_placed: np.ndarray  # (C, H2) the hidden layer's placed-set part
    out_w: np.ndarray  # (H2,) the output layer
    out_b: np.float32  # its bias
    var_add: np.float32  # the placed-set norm: divide by sqrt(var + var_add) + std_add
    std_add: np.float32


class HeadScratch(NamedTuple):
    """:func:`head_logits`' work arrays (float32)."""

    hidden: np.ndarray  # (B, D, H) the device features' layer
    centred: np.ndarray  # (B, D, C) the normalised placed-set sums
    pre: np.ndarray  # (B, D, H2) the hidden layer
    placed_term: np.ndarray  # (B, D, H2) its placed-set part


@njit(cache=True)
def head_logits(weights, node_term, rows, feats, placed, scratch, out):  # pragma: no cover
    """:meth:`PlcHeadNumpy.logits` compiled, to the bit: the same BLAS calls
    (:mod:`~doppler_lab.policies.numpy_blas`; only where it is available) and elementwise kernels.

    Args:
        weights: :class:`HeadWeights` (:meth:`PlcHeadNumpy.kernel_weights`).
        node_term, rows, feats, placed: as :meth:`PlcHeadNumpy.logits` (float32, C-contiguous).
        scratch: :class:`HeadScratch`.
        out: ``(B, D)`` float32, written: the logits.
    """
    w, work = HeadWeights(*weights), HeadScratch(*scratch)
    a, centred, pre = work.hidden, work.centred, work.pre
    stack_matmul(feats, w.dev_w_t, a, True)
    _first_layer(a, w.dev_b, placed, w.var_add, w.std_add, centred)
    stack_matmul(a, w.w_dev, pre)
    stack_matmul(centred, w.w_placed, work.placed_term)
    _hidden(pre, work.placed_term, node_term, rows)
    stack_matvec(pre, w.out_w, out)
    for b in range(out.shape[0]):
        for d in range(out.shape[1]):
            out[b, d] += w.out_b


class PlcHeadNumpy:
    """:meth:`PlcPolicy.scores` in numpy for rollouts (float32 views of the live weights).

    The four matrix products are numpy's (a batch of ``(D, .) @ (., H)`` products: each row's
    logits do not depend on the other rows of the batch, to the bit); the elementwise work
    between them is compiled, in float32 and in the order numpy computes it.

    Shapes:
        - call: node_term ``(B, H)``, feats ``(B, D, F)``, placed ``(B, D, C)`` -> ``(B, D)``
    """

    def __init__(self, plc: PlcPolicy):
        h = plc.hidden
        # smooth: divide by sqrt(var + 1); zscore: by std + 1e-6
        var_add, std_add = (1.0, 0.0) if plc.placed_norm == "smooth" else (0.0, 1e-6)
        self.var_add, self.std_add = np.float32(var_add), np.float32(std_add)
        w = plc.hidden_layer.weight.detach().numpy()
        self.dev_w = plc.dev_lin.weight.detach().numpy().T
        self.dev_b = plc.dev_lin.bias.detach().numpy()
        self.w_dev = np.ascontiguousarray(w[:, :h].T)
        self.w_placed = np.ascontiguousarray(w[:, 3 * h :].T)
        self.out_w = plc.out.weight.detach().numpy()[0]
        self.out_b = np.float32(plc.out.bias.detach().numpy()[0])

    def kernel_weights(self) -> tuple | None:
        """The weights as :func:`head_logits` takes them (a plain tuple in :class:`HeadWeights`'
        field order), or None where it cannot reproduce
        :meth:`logits` (numpy's BLAS not callable from compiled code, or a layout or width
        for which numpy's products take another BLAS routine)."""
        dev_w_t = self.dev_w.T
        arrays = (dev_w_t, self.w_dev, self.w_placed, self.out_w)
        if not numpy_blas.AVAILABLE or min(min(w.shape) for w in arrays) < 2:
            return None
        if not all(w.dtype == np.float32 and w.flags.c_contiguous for w in arrays):
            return None
        return tuple(HeadWeights(dev_w_t, self.dev_b, self.w_dev, self.w_placed, self.out_w,
                                 self.out_b, self.var_add, self.std_add))  # fmt: skip

    def __call__(self, node_term: np.ndarray, feats: np.ndarray, placed: np.ndarray) -> np.ndarray:
        return self.logits(node_term, np.arange(node_term.shape[0]), feats, placed)

    def logits(
        self, node_term: np.ndarray, rows: np.ndarray, feats: np.ndarray, placed: np.ndarray
    ) -> np.ndarray:
        """The scores of :meth:`__call__` with node terms ``node_term[rows]`` ``(B,)``."""
        a = feats @ self.dev_w
        centred = np.empty_like(placed)
        _first_layer(a, self.dev_b, placed, self.var_add, self.std_add, centred)
        pre = a @ self.w_dev
        _hidden(pre, centred @ self.w_placed, node_term, rows)
        out = pre @ self.out_w
        out += self.out_b
        return out


class DualEncoding(NamedTuple):
    """A :class:`DualPolicy`'s static part of an episode."""

    sel_scores: Tensor | None
    plc: PlcStatic | None


class PlacedSums:
    """Per-rollout PLC state: placed-set sums ``(K, D, C)`` and the numpy head.

    Attributes:
        emb: ``(n, C)`` node embeddings (float32).
        node_term: ``(n, H)`` the nodes' first-layer terms (float32).
        head: the numpy head.
        sums: ``(K, D, C)`` each episode's placed-set sums (float32), updated by
            :meth:`DualPolicy.plc_observe`.
        kernel_weights: the head's weights for :func:`head_logits` (None: the compiled head is
            not available, see :meth:`PlcHeadNumpy.kernel_weights`).
    """

    def __init__(self, plc: PlcPolicy, static: PlcStatic, num_episodes: int, num_devices: int):
        self.emb = static.emb.detach().numpy()
        self.node_term = static.node_term.detach().numpy()
        self.head = PlcHeadNumpy(plc)
        self.sums = np.zeros((num_episodes, num_devices, self.emb.shape[1]), dtype=np.float32)
        self.kernel_weights = self.head.kernel_weights()


class DualPolicy(PlacementPolicy):
    """DOPPLER: learned SEL and PLC (``dual``), or one of them replaced by the Critical Path
    rule (``sel-only``: PLC by the rule; ``plc-only``: SEL by the rule).

    Args:
        config: the policy configuration (``kind`` in ``dual``, ``sel-only``, ``plc-only``).
        num_devices: the device count (the networks themselves work for any count).
    """

    batch_invariant = True  # the numpy head scores each episode's devices on their own

    def __init__(self, config: PolicyConfig, num_devices: int):
        super().__init__(config, num_devices)
        shared = _encoder(config) if config.shared_encoder else None
        learns_sel = config.kind in ("dual", "sel-only")
        learns_plc = config.kind in ("dual", "plc-only")
        self.shared = shared
        self.sel = SelPolicy(config, shared) if learns_sel else None
        self.plc = PlcPolicy(config, shared) if learns_plc else None
        self.sel_mode = "learned" if learns_sel else "cp"
        self.plc_mode = "learned" if learns_plc else "cp"
        self.node_bias: Tensor | None = None
        self._node_bias_np: np.ndarray | None = None

    def set_node_bias(self, bias: Tensor | None) -> None:
        """Add ``bias[v]`` ``(n, D)`` to PLC's logits of local node ``v`` on its graph: the
        per-instance adapter of :func:`doppler_lab.search.adapter.adapt` (None removes it).

        The bias is not a parameter of the network (its state dict is unchanged); the rollouts
        read it through a numpy view, so in-place optimiser steps on it show at once.

        Raises:
            ConfigError: PLC is not learned, or ``bias`` is not a 2-d float32 tensor (its
                shape is checked against the graph when a rollout begins).
        """
        if bias is None:
            self.node_bias = self._node_bias_np = None
            return
        if self.plc is None:
            raise ConfigError(f"node bias: the {self.config.kind} policy has no learned PLC")
        if bias.dim() != 2 or bias.dtype != torch.float32:
            raise ConfigError(
                f"node bias: shape {tuple(bias.shape)} {bias.dtype}, expected a 2-d "
                "(nodes, devices) float32 tensor"
            )
        self.node_bias = bias
        self._node_bias_np = bias.detach().numpy()

    def encode(self, ctx: GraphContext) -> DualEncoding:
        emb = None
        if self.shared is not None:
            emb = self.shared(ctx.x, ctx.edge_index, ctx.edge_attr)
        sel = self.sel(ctx, emb) if self.sel is not None else None
        plc = self.plc.static(ctx, emb) if self.plc is not None else None
        return DualEncoding(sel, plc)

    def sel_scores(self, enc: DualEncoding) -> np.ndarray:
        assert enc.sel_scores is not None
        return enc.sel_scores.detach().numpy()

    def plc_begin(self, ctx: GraphContext, enc: DualEncoding, num_episodes: int) -> PlacedSums:
        assert enc.plc is not None and self.plc is not None
        out = PlacedSums(self.plc, enc.plc, num_episodes, ctx.num_devices)
        if self._node_bias_np is not None:
            if self._node_bias_np.shape != (ctx.num_nodes, ctx.num_devices):
                raise ConfigError(
                    f"node bias: shape {self._node_bias_np.shape}, expected ({ctx.num_nodes}, "
                    f"{ctx.num_devices}) for the graph {ctx.graph.name!r}: a bias belongs to "
                    "the graph it was trained on"
                )
            out.kernel_weights = None  # the compiled rollout knows no bias: step by step
        return out

    def plc_logits(
        self,
        ctx: GraphContext,
        enc: DualEncoding,
        pstate: PlacedSums,
        nodes: np.ndarray,
        feats: np.ndarray,
    ) -> np.ndarray:
        out = pstate.head.logits(pstate.node_term, nodes, feats, pstate.sums)
        if self._node_bias_np is not None:
            out += self._node_bias_np[nodes]
        return out

    def plc_observe(self, pstate: PlacedSums, nodes: np.ndarray, devices: np.ndarray) -> None:
        add_placed(pstate.sums, pstate.emb, nodes, devices)

    def log_probs(
        self,
        ctx: GraphContext,
        enc: DualEncoding,
        episodes: Episodes,
        temperature: Temperature = (1.0, 1.0),
    ) -> StepTerms:
        k, t = episodes.num_episodes, episodes.num_steps
        sel_logp = sel_ent = sel_tl = plc_logp = plc_ent = plc_tl = None
        if enc.sel_scores is not None:
            assert episodes.cand_ptr is not None and episodes.cand_idx is not None
            counts = np.diff(episodes.cand_ptr)
            seg = as_tensor(np.repeat(np.arange(k * t), counts))
            cand = as_tensor(episodes.cand_idx)
            scores = tempered(enc.sel_scores[cand], temperature[0])
            logp_all, ent = segment_log_softmax(scores, seg, k * t)
            # position of the chosen node within its step's candidates
            chosen = as_tensor(episodes.nodes.reshape(-1))
            hit = cand == chosen[seg]
            sel_logp = torch.zeros(k * t).index_add(0, seg[hit], logp_all[hit]).view(k, t)
            sel_ent = ent.view(k, t)
            if episodes.sel_teacher is not None:
                mask = as_tensor(episodes.sel_teacher)
                sel_tl = masked_log_sum(logp_all, mask, seg, k * t).view(k, t)
        if enc.plc is not None:
            assert self.plc is not None
            nodes = as_tensor(episodes.nodes)
            devs = as_tensor(episodes.devices)
            emb = enc.plc.emb[nodes]  # (K, T, C)
            onehot = F.one_hot(devs, ctx.num_devices)
            contrib = onehot.unsqueeze(-1).to(emb.dtype) * emb.unsqueeze(-2)  # (K, T, D, C)
            placed = torch.cumsum(contrib, dim=1) - contrib  # sums before each step
            logits = self.plc.scores(enc.plc, nodes, as_tensor(episodes.dev_feats), placed)
            if self.node_bias is not None:
                logits = logits + self.node_bias[nodes]
            plc_logp, plc_ent, plc_tl = device_terms(
                logits, devs, episodes.plc_teacher, temperature[1]
            )
        return StepTerms(sel_logp, plc_logp, sel_ent, plc_ent, sel_tl, plc_tl)

    def param_groups(self) -> dict[str, list[nn.Parameter]]:
        groups: dict[str, list[nn.Parameter]] = {}
        if self.shared is not None:
            return {"plc" if self.plc is not None else "sel": list(self.parameters())}
        if self.sel is not None:
            groups["sel"] = list(self.sel.parameters())
        if self.plc is not None:
            groups["plc"] = list(self.plc.parameters())
        return groups
