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
batched pass. Only what a step changes is recomputed (:class:`_PlacetoState`): between two steps
the inputs of two nodes change (the node placed and the new current node), and ``k`` rounds of
message passing carry that to their ``k``-hop neighbourhoods, 5-17% of the rows on the paper's
graphs; the rest of the embedding is kept from the step before. The log-probability recompute
does the same for all steps at once (:class:`_Versions`): each node's embedding is computed once
per *version* (the steps between two changes of its neighbourhood), and each step's group sums
read the versions current at that step through one sparse product. Both agree with the dense
computation, every row at every step recomputed, to float32 rounding (the summation order of a
few sums differs); ``tests/policies/test_placeto_incremental.py`` checks logits and gradients
against it.
"""

from __future__ import annotations

from typing import NamedTuple

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
        self.n = n
        self.topo = np.asarray(f.topo, dtype=np.int64)
        # per direction (0: along the edges, 1: against them): in-edges by receiving node, in
        # edge order within a node (as the dense index_add adds them), and the out-neighbours
        self.in_ptr, self.in_src, self.out_ptr, self.out_dst = [], [], [], []
        for a, b in ((np.asarray(src), np.asarray(dst)), (np.asarray(dst), np.asarray(src))):
            order = np.argsort(b, kind="stable")
            self.in_ptr.append(np.concatenate([[0], np.cumsum(np.bincount(b, minlength=n))]))
            self.in_src.append(a[order].astype(np.int64))
            order = np.argsort(a, kind="stable")
            self.out_ptr.append(np.concatenate([[0], np.cumsum(np.bincount(a, minlength=n))]))
            self.out_dst.append(b[order].astype(np.int64))
        # caches by message-passing rounds (policies of different depths may share a context)
        self._closures: dict[tuple[int, int, bytes], list[tuple[np.ndarray, ...]]] = {}
        self._versions: dict[int, _Versions] = {}
        self._plans: dict[tuple[int, bytes], _Plan] = {}

    def closure(self, d: int, rows: np.ndarray, steps: int) -> list[tuple[np.ndarray, ...]]:
        """What a change of the inputs of ``rows`` (sorted local ids) recomputes in direction
        ``d``: per round r = 1..steps, the rows whose value changes (``rows`` and the
        out-neighbours of round r-1's), and their in-edges (sending node, index of the
        receiving row among them), in the dense computation's order. Cached per row set."""
        key = (d, steps, rows.tobytes())
        hit = self._closures.get(key)
        if hit is not None:
            return hit
        out, cur = [], rows
        ptr, dst = self.out_ptr[d], self.out_dst[d]
        for _ in range(steps):
            nxt = np.union1d(rows, _gather_ranges(dst, ptr, cur))
            eids, owner = _ranges(self.in_ptr[d], nxt)
            out.append((nxt, self.in_src[d][eids], owner))
            cur = nxt
        if len(self._closures) < 8 * self.n + 64:  # a rollout's step sets, several times over
            self._closures[key] = out
        return out

    def plan(self, ctx: GraphContext, rows: np.ndarray, steps: int) -> _Plan:
        """:meth:`closure` of both directions as index tensors, for a rollout step (cached)."""
        key = (steps, rows.tobytes())
        hit = self._plans.get(key)
        if hit is not None:
            return hit
        rounds, last = [], []
        for d in range(2):
            prev, out = rows, []
            for nodes, src, owner in self.closure(d, rows, steps):
                out.append(
                    (
                        as_tensor(prev),
                        as_tensor(nodes),
                        as_tensor(src),
                        as_tensor(owner),
                        nodes.size,
                    )
                )
                prev = nodes
            rounds.append(out)
            last.append(prev)
        plan = _Plan(
            as_tensor(rows),
            ctx.x[as_tensor(rows)].unsqueeze(0),
            rounds,
            as_tensor(np.union1d(last[0], last[1])),
        )
        if len(self._plans) < 8 * self.n + 64:
            self._plans[key] = plan
        return plan


class _Plan(NamedTuple):
    """The index tensors of one rollout step's update (:meth:`_PlacetoGraph.plan`)."""

    rows: Tensor  # nodes whose inputs changed
    x: Tensor  # (1, len(rows), node_dim) their static features
    rounds: list[list[tuple[Tensor, Tensor, Tensor, Tensor, int]]]  # [d][r]: see closure
    emb_rows: Tensor  # nodes whose embedding changes


def _ranges(ptr: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The indices ``ptr[r]:ptr[r+1]`` of each of ``rows``, concatenated, and the position in
    ``rows`` each came from."""
    counts = ptr[rows + 1] - ptr[rows]
    total = int(counts.sum())
    owner = np.repeat(np.arange(rows.size, dtype=np.int64), counts)
    starts = np.repeat(ptr[rows] - np.concatenate([[0], np.cumsum(counts)[:-1]]), counts)
    return starts + np.arange(total, dtype=np.int64), owner


def _gather_ranges(values: np.ndarray, ptr: np.ndarray, rows: np.ndarray) -> np.ndarray:
    return values[_ranges(ptr, rows)[0]]


class _PlacetoState:
    """A rollout's dynamic Placeto state: the per-episode node inputs (device one-hot, "is
    current", "is placed") and the embedding tables computed from the inputs last seen, updated
    where the inputs changed."""

    def __init__(self, dyn: np.ndarray):
        self.dyn = dyn  # (K, n, D + 2)
        self.seen: np.ndarray | None = None  # dyn when the tables were last computed
        self.h0: Tensor | None = None  # (K, n, c)
        self.y: list[list[Tensor]] = []  # [direction][round 1..steps] (K, n, c)
        self.msg: list[list[Tensor]] = []  # [direction][round 0..steps-1] messages of y
        self.emb: Tensor | None = None  # (K, n, 2c)
        self.group_msg: list[Tensor] = []  # [group] messages of emb, (K, n, 2c)


class _Versions:
    """The index structure of the all-steps recompute of one graph's episodes, when node ``t``
    of the topological order is placed at step ``t``.

    Each table holds one row per (step, node) at which that node's value may change: the
    inputs at step 0 for every node, then the two nodes whose inputs change; each round of each
    direction the rows its closure reaches; the embedding the union of both directions' last
    rounds. A row's value is computed from the rows current at its step, so every table is
    computed in one batched pass.
    """

    def __init__(self, pg: _PlacetoGraph, steps: int):
        n, topo = pg.n, pg.topo
        h0_t: list[np.ndarray] = []  # the step of each h0 row
        h0_u: list[np.ndarray] = []
        cur0 = np.zeros(n, dtype=np.int64)
        base_of = [[[] for _ in range(steps)] for _ in range(2)]  # h0 row of each
        edge_src = [[[] for _ in range(steps)] for _ in range(2)]  # sending row (round r-1)
        edge_dst = [[[] for _ in range(steps)] for _ in range(2)]  # receiving row (round r)
        cur = [[np.zeros(n, dtype=np.int64) for _ in range(steps)] for _ in range(2)]
        size = [[0] * steps for _ in range(2)]
        emb_rows: list[tuple[np.ndarray, np.ndarray]] = []  # forward and backward rows
        cur_e = np.zeros(n, dtype=np.int64)
        n_emb = 0
        n_h0 = 0
        w_rows: list[list[np.ndarray]] = [[], [], []]
        w_cols: list[list[np.ndarray]] = [[], [], []]
        own = np.empty(n, dtype=np.int64)
        all_nodes = np.arange(n, dtype=np.int64)
        for t in range(n):
            changed = all_nodes if t == 0 else np.unique(topo[max(t - 1, 0) : t + 1])
            h0_t.append(np.full(changed.size, t))
            h0_u.append(changed)
            cur0[changed] = n_h0 + np.arange(changed.size)
            n_h0 += changed.size
            last = []
            for d in range(2):
                for r, (nodes, src, owner) in enumerate(pg.closure(d, changed, steps)):
                    prev = cur0 if r == 0 else cur[d][r - 1]
                    edge_src[d][r].append(prev[src])
                    edge_dst[d][r].append(size[d][r] + owner)
                    base_of[d][r].append(cur0[nodes])
                    cur[d][r][nodes] = size[d][r] + np.arange(nodes.size)
                    size[d][r] += nodes.size
                last.append(nodes)
            e_nodes = np.union1d(last[0], last[1])
            emb_rows.append((cur[0][steps - 1][e_nodes], cur[1][steps - 1][e_nodes]))
            cur_e[e_nodes] = n_emb + np.arange(e_nodes.size)
            n_emb += e_nodes.size
            v = topo[t]
            own[t] = cur_e[v]
            for g in range(3):
                members = np.flatnonzero(pg.groups[g, v].numpy())
                w_rows[g].append(np.full(members.size, t))
                w_cols[g].append(cur_e[members])
        self.h0_t = np.concatenate(h0_t)
        self.h0_u = np.concatenate(h0_u)
        cat = np.concatenate
        self.base = [[as_tensor(cat(base_of[d][r])) for r in range(steps)] for d in range(2)]
        self.edge_src = [[as_tensor(cat(edge_src[d][r])) for r in range(steps)] for d in range(2)]
        self.edge_dst = [[as_tensor(cat(edge_dst[d][r])) for r in range(steps)] for d in range(2)]
        self.size = size
        self.emb_f = as_tensor(cat([a for a, _ in emb_rows]))
        self.emb_b = as_tensor(cat([b for _, b in emb_rows]))
        self.n_emb = n_emb
        self.own = as_tensor(own)
        self.w = []
        for g in range(3):
            idx = np.stack([cat(w_rows[g]), cat(w_cols[g])])
            vals = np.ones(idx.shape[1], dtype=np.float32)
            self.w.append(
                torch.sparse_coo_tensor(
                    as_tensor(idx), as_tensor(vals), (n, n_emb), check_invariants=True
                ).coalesce()
            )


class Placeto(PlacementPolicy):
    """Placeto: a placement-aware embedding recomputed at every step.

    Args:
        config: the policy configuration (``placeto_hidden``, ``placeto_steps``).
        num_devices: D (features and logits depend on it).
    """

    sel_mode = "topo"
    #: recompute only what each step changes (the same numbers, to float32 rounding); False:
    #: every row at every step, as Placeto's authors compute it (page 10 times both)
    incremental: bool = True

    @property
    def eval_chunk(self) -> int | None:  # type: ignore[override]
        """Episodes per log-probability recompute: all at once incrementally; 2 densely (each
        holds every step's graph)."""
        return None if self.incremental else 2

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
        """Device logits of ``nodes[b]`` in graph copy b, every row computed (the dense
        reference of the incremental paths; used where a step order is not the topological one).

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

    def plc_begin(self, ctx: GraphContext, enc: _PlacetoGraph, num_episodes: int) -> _PlacetoState:
        n, d = ctx.num_nodes, self.num_devices
        # device one-hot, cur, placed
        return _PlacetoState(np.zeros((num_episodes, n, d + 2), dtype=np.float32))

    def _refresh(self, ctx: GraphContext, pg: _PlacetoGraph, st: _PlacetoState) -> None:
        """Bring ``st``'s tables up to its inputs: every row on the first call, then the rows
        reached from the nodes whose inputs changed since the last one."""
        dyn = st.dyn
        if st.seen is None or st.h0 is None or st.seen.shape != dyn.shape:
            rows = np.arange(pg.n, dtype=np.int64)
            k, n = dyn.shape[0], pg.n
            c = self.config.placeto_hidden
            dt = self.head[0].weight.dtype
            st.h0 = torch.empty((k, n, c), dtype=dt)
            st.y = [[torch.empty((k, n, c), dtype=dt) for _ in range(self.steps)] for _ in range(2)]
            st.msg = [
                [torch.empty((k, n, c), dtype=dt) for _ in range(self.steps)] for _ in range(2)
            ]
            st.emb = torch.empty((k, n, 2 * c), dtype=dt)
            st.group_msg = [torch.empty((k, n, 2 * c), dtype=dt) for _ in range(3)]
        else:
            rows = np.flatnonzero((dyn != st.seen).any(axis=(0, 2)))
            if rows.size == 0:
                return
        st.seen = dyn.copy()
        k, c = dyn.shape[0], st.h0.shape[-1]
        plan = pg.plan(ctx, rows, self.steps)
        x = torch.cat([plan.x.expand(k, -1, -1), as_tensor(dyn[:, rows])], -1)
        st.h0[:, plan.rows] = self.node_transform(x)
        for d, agg in enumerate((self.fwd, self.bwd)):
            prev = st.h0
            for r, (prev_rows, nodes, src, owner, size) in enumerate(plan.rounds[d]):
                st.msg[d][r][:, prev_rows] = agg.messages(prev[:, prev_rows])
                z = st.h0.new_zeros((k, size, c)).index_add_(1, owner, st.msg[d][r][:, src])
                st.y[d][r][:, nodes] = st.h0[:, nodes] + agg.finish(z)
                prev = st.y[d][r]
        e_rows = plan.emb_rows
        st.emb[:, e_rows] = torch.cat([st.y[0][-1][:, e_rows], st.y[1][-1][:, e_rows]], -1)
        for g, agg in enumerate(self.group_aggs):
            st.group_msg[g][:, e_rows] = agg.messages(st.emb[:, e_rows])

    def plc_logits(
        self,
        ctx: GraphContext,
        enc: _PlacetoGraph,
        pstate: _PlacetoState,
        nodes: np.ndarray,
        feats: np.ndarray,
    ) -> np.ndarray:
        k = nodes.size
        pstate.dyn[np.arange(k), nodes, self.num_devices] = 1.0  # is current
        t_nodes = as_tensor(nodes)
        if not self.incremental:
            x = torch.cat([self._static(ctx, k), as_tensor(pstate.dyn)], dim=-1)
            pstate.dyn[np.arange(k), nodes, self.num_devices] = 0.0
            return self._logits(ctx, enc, x, t_nodes).numpy()
        self._refresh(ctx, enc, pstate)
        pstate.dyn[np.arange(k), nodes, self.num_devices] = 0.0
        assert pstate.emb is not None
        parts = []
        for g, agg in enumerate(self.group_aggs):
            mask = enc.groups[g][t_nodes]  # (K, n)
            total = torch.bmm(mask.unsqueeze(1), pstate.group_msg[g]).squeeze(1)
            parts.append(agg.finish(total))
        own = pstate.emb[torch.arange(k), t_nodes]
        return self.head(torch.cat(parts + [own], dim=-1)).numpy()

    def plc_observe(self, pstate: _PlacetoState, nodes: np.ndarray, devices: np.ndarray) -> None:
        k = np.arange(nodes.size)
        pstate.dyn[k, nodes, devices] = 1.0
        pstate.dyn[k, nodes, self.num_devices + 1] = 1.0

    def _versions(self, enc: _PlacetoGraph) -> _Versions:
        if self.steps not in enc._versions:
            enc._versions[self.steps] = _Versions(enc, self.steps)
        return enc._versions[self.steps]

    def _all_steps_logits(self, ctx: GraphContext, enc: _PlacetoGraph, devices: Tensor) -> Tensor:
        """The logits of every step of K episodes that place node ``topo[t]`` at step ``t``,
        with each node's embedding computed once per version (:class:`_Versions`).

        Shapes:
            - input: devices ``(K, n)``, the device each episode gives each node
            - output: ``(K, n, D)``, step t's logits of node ``topo[t]``
        """
        vs = self._versions(enc)
        k, d = devices.shape[0], self.num_devices
        h0_u, h0_t = as_tensor(vs.h0_u), as_tensor(vs.h0_t)
        pos = as_tensor(enc.pos)[h0_u]
        placed = (pos < h0_t).float()
        current = (pos == h0_t).float()
        onehot = F.one_hot(devices[:, h0_u], d).float() * placed.unsqueeze(-1)  # (K, V0, D)
        x = torch.cat(
            [
                ctx.x[h0_u].unsqueeze(0).expand(k, -1, -1),
                onehot,
                current.expand(k, -1).unsqueeze(-1),
                placed.expand(k, -1).unsqueeze(-1),
            ],
            -1,
        )
        h0 = self.node_transform(x)  # (K, V0, c)
        last = []
        for di, agg in enumerate((self.fwd, self.bwd)):
            y = h0
            for r in range(self.steps):
                msg = agg.messages(y)
                z = h0.new_zeros((k, vs.size[di][r], h0.shape[-1])).index_add(
                    1, vs.edge_dst[di][r], msg[:, vs.edge_src[di][r]]
                )
                y = h0[:, vs.base[di][r]] + agg.finish(z)
            last.append(y)
        emb = torch.cat([last[0][:, vs.emb_f], last[1][:, vs.emb_b]], -1)  # (K, V_E, 2c)
        c2 = emb.shape[-1]
        parts = []
        for g, agg in enumerate(self.group_aggs):
            msg = agg.messages(emb).permute(1, 0, 2).reshape(vs.n_emb, k * c2)
            total = torch.sparse.mm(vs.w[g].to(msg.dtype), msg).reshape(-1, k, c2).permute(1, 0, 2)
            parts.append(agg.finish(total))  # (K, n, 2c)
        own = emb[:, vs.own]
        return self.head(torch.cat(parts + [own], dim=-1))

    def log_probs(
        self,
        ctx: GraphContext,
        enc: _PlacetoGraph,
        episodes: Episodes,
        temperature: Temperature = (1.0, 1.0),
    ) -> StepTerms:
        k, t = episodes.num_episodes, episodes.num_steps
        n, d = ctx.num_nodes, self.num_devices
        dev = torch.zeros((k, n), dtype=torch.int64)
        rows = torch.arange(k).unsqueeze(1).expand(k, t)
        dev[rows, as_tensor(episodes.nodes).long()] = as_tensor(episodes.devices).long()
        in_order = t == n and bool((episodes.nodes == enc.topo[None, :]).all())
        if in_order and self.incremental:
            logits = self._all_steps_logits(ctx, enc, dev)
        else:  # every step's graph, densely (the only way for another order)
            steps = torch.arange(t)
            pos = as_tensor(enc.pos)
            placed = (pos.unsqueeze(0) < steps.unsqueeze(1)).float()  # (T, n): placed before t
            current = (pos.unsqueeze(0) == steps.unsqueeze(1)).float()
            out = []
            for e in range(k):
                onehot = F.one_hot(dev[e], d).float().unsqueeze(0) * placed.unsqueeze(-1)
                x = torch.cat(
                    [self._static(ctx, t), onehot, current.unsqueeze(-1), placed.unsqueeze(-1)], -1
                )
                out.append(self._logits(ctx, enc, x, as_tensor(episodes.nodes[e])))
            logits = torch.stack(out)
        taken, ent, ll = device_terms(
            logits, as_tensor(episodes.devices), episodes.plc_teacher, temperature[1]
        )
        return StepTerms(None, taken, None, ent, None, ll)
