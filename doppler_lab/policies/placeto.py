"""Placeto (Addanki et al. 2019, "Placeto: Learning Generalizable Device Placement Algorithms
for Distributed Machine Learning"), our own implementation as the DOPPLER paper describes the
baseline: nodes visited in a fixed topological order, one placed per step, and the graph
embedding recomputed at every step from features that include the current placement.

Embedding: node features (static features, one-hot current device or zeros, "is current",
"is placed") go through an MLP; ``k`` rounds of message passing along the edges and ``k``
against them (each round ``y = h0 + update(sum over neighbours of pre(y))``) give a
forward and a backward embedding. For the current node v, the embeddings of its parents, its
children and its parallel nodes (neither ancestors nor descendants) are each aggregated
(sum of an MLP, then an MLP), concatenated with v's own, and an MLP gives D device logits.

Episodes step together (same node at the same step), so a rollout step embeds K graphs in one
batched pass; the log-probability recompute embeds every step's graph (chunked by episode).
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor, nn
from torch.nn import functional as F

from .context import GraphContext
from .features import get_layout
from .policy_base import Episodes, PlacementPolicy, StepTerms, Temperature, device_terms
from .policy_config import PolicyConfig
from .tensors import as_tensor


def _mlp(i: int, h: int, o: int) -> nn.Sequential:
    return nn.Sequential(nn.Linear(i, h), nn.ReLU(), nn.Linear(h, o))


class _Aggregator(nn.Module):
    """``update(sum_{j in group} pre(y_j))`` with ReLU after each MLP (the released form)."""

    def __init__(self, dim: int):
        super().__init__()
        self.pre = _mlp(dim, dim, dim)
        self.update = _mlp(dim, dim, dim)

    def messages(self, y: Tensor) -> Tensor:
        return F.relu(self.pre(y))

    def finish(self, z: Tensor) -> Tensor:
        return F.relu(self.update(z))


class _PlacetoGraph:
    """Static index tensors of one graph for Placeto."""

    def __init__(self, ctx: GraphContext):
        f = ctx.features
        n = f.num_nodes
        src, dst = f.fwd_edges
        self.src = as_tensor(src)
        self.dst = as_tensor(dst)
        self.pos = np.empty(n, dtype=np.int64)
        self.pos[f.topo] = np.arange(n)
        parents = np.zeros((n, n), dtype=bool)
        parents[dst, src] = True
        desc = np.zeros((n, n), dtype=bool)  # desc[v, u]: u is a descendant of v
        succ_of: list[list[int]] = [[] for _ in range(n)]
        for u, v in zip(src, dst):
            succ_of[u].append(v)
        for v in f.topo[::-1]:
            for s in succ_of[v]:
                desc[v] |= desc[s]
                desc[v, s] = True
        related = desc | desc.T | np.eye(n, dtype=bool)
        self.groups = as_tensor(
            np.stack([parents, parents.T, ~related]).astype(np.float32)
        )  # (3, n, n): parents, children, parallel of each node


class Placeto(PlacementPolicy):
    """Placeto: a placement-aware embedding recomputed at every step.

    Args:
        config: the policy configuration (``placeto_hidden``, ``placeto_steps``).
        num_devices: D (features and logits depend on it).
    """

    sel_mode = "topo"
    eval_chunk = 2

    def __init__(self, config: PolicyConfig, num_devices: int):
        super().__init__(config, num_devices)
        layout = get_layout(config.layout)
        c = config.placeto_hidden
        self.steps = config.placeto_steps
        self.in_dim = layout.node_dim + num_devices + 2
        self.node_transform = _mlp(self.in_dim, c, c)
        self.fwd = _Aggregator(c)
        self.bwd = _Aggregator(c)
        self.group_aggs = nn.ModuleList([_Aggregator(2 * c) for _ in range(3)])
        self.head = _mlp(8 * c, 32, num_devices)

    def encode(self, ctx: GraphContext) -> _PlacetoGraph:
        if "placeto" not in ctx.cache:
            ctx.cache["placeto"] = _PlacetoGraph(ctx)
        return ctx.cache["placeto"]

    def _logits(self, ctx: GraphContext, pg: _PlacetoGraph, feats: Tensor, nodes: Tensor) -> Tensor:
        """Device logits of ``nodes[b]`` in graph copy b.

        Shapes:
            - input: feats ``(B, n, in_dim)`` dynamic node features, nodes ``(B,)``
            - output: ``(B, D)``
        """
        h0 = self.node_transform(feats)
        outs = []
        for agg, src, dst in ((self.fwd, pg.src, pg.dst), (self.bwd, pg.dst, pg.src)):
            y = h0
            for _ in range(self.steps):
                z = torch.zeros_like(h0).index_add(1, dst, agg.messages(y)[:, src])
                y = h0 + agg.finish(z)
            outs.append(y)
        emb = torch.cat(outs, dim=-1)  # (B, n, 2c)
        parts = []
        for g, agg in enumerate(self.group_aggs):
            mask = pg.groups[g][nodes]  # (B, n)
            parts.append(agg.finish(torch.bmm(mask.unsqueeze(1), agg.messages(emb)).squeeze(1)))
        own = emb[torch.arange(nodes.shape[0]), nodes]
        return self.head(torch.cat(parts + [own], dim=-1))

    def _static(self, ctx: GraphContext, batch: int) -> Tensor:
        return ctx.x.unsqueeze(0).expand(batch, -1, -1)

    def plc_begin(self, ctx: GraphContext, enc: _PlacetoGraph, num_episodes: int) -> np.ndarray:
        n, d = ctx.num_nodes, self.num_devices
        return np.zeros((num_episodes, n, d + 2), dtype=np.float32)  # device one-hot, cur, placed

    def plc_logits(
        self,
        ctx: GraphContext,
        enc: _PlacetoGraph,
        pstate: np.ndarray,
        nodes: np.ndarray,
        feats: np.ndarray,
    ) -> np.ndarray:
        k = nodes.size
        pstate[np.arange(k), nodes, self.num_devices] = 1.0  # is current
        dyn = as_tensor(pstate)
        x = torch.cat([self._static(ctx, k), dyn], dim=-1)
        out = self._logits(ctx, enc, x, as_tensor(nodes)).numpy()
        pstate[np.arange(k), nodes, self.num_devices] = 0.0
        return out

    def plc_observe(self, pstate: np.ndarray, nodes: np.ndarray, devices: np.ndarray) -> None:
        k = np.arange(nodes.size)
        pstate[k, nodes, devices] = 1.0
        pstate[k, nodes, self.num_devices + 1] = 1.0

    def log_probs(
        self,
        ctx: GraphContext,
        enc: _PlacetoGraph,
        episodes: Episodes,
        temperature: Temperature = (1.0, 1.0),
    ) -> StepTerms:
        k, t = episodes.num_episodes, episodes.num_steps
        n, d = ctx.num_nodes, self.num_devices
        steps = torch.arange(t)
        pos = as_tensor(enc.pos)
        placed = (pos.unsqueeze(0) < steps.unsqueeze(1)).float()  # (T, n): placed before step t
        current = (pos.unsqueeze(0) == steps.unsqueeze(1)).float()
        logits = []
        for e in range(k):
            dev = torch.zeros(n, dtype=torch.int64)
            dev[as_tensor(episodes.nodes[e])] = as_tensor(episodes.devices[e])
            onehot = F.one_hot(dev, d).float().unsqueeze(0) * placed.unsqueeze(-1)  # (T, n, D)
            x = torch.cat(
                [self._static(ctx, t), onehot, current.unsqueeze(-1), placed.unsqueeze(-1)], -1
            )
            logits.append(self._logits(ctx, enc, x, as_tensor(episodes.nodes[e])))
        taken, ent, ll = device_terms(
            torch.stack(logits), as_tensor(episodes.devices), episodes.plc_teacher, temperature[1]
        )
        return StepTerms(None, taken, None, ent, None, ll)
