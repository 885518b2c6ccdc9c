"""GDP (Zhou et al. 2019, "GDP: Generalized Device Placement for Dataflow Graphs"), our own
implementation as the DOPPLER paper describes the baseline: a GraphSAGE encoder (max-pool
aggregator over predecessors and successors) and a Transformer-XL-style attention placer over
the nodes in topological order (segments with a stop-gradient memory of the previous segment),
placing every node in one shot: one forward pass gives all n x D logits.

In an episode the nodes are visited in topological order and each one's device is drawn from
its row of the logits; the episode state is only used for the teacher's labels (Stage I).
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor, nn
from torch.nn import functional as F
from torch_geometric.nn import SAGEConv

from .context import GraphContext
from .features import get_layout
from .policy_base import Episodes, PlacementPolicy, StepTerms, Temperature, device_terms
from .policy_config import PolicyConfig
from .tensors import as_tensor


class GDP(PlacementPolicy):
    """GraphSAGE + segment-recurrent attention, one-shot placement.

    Args:
        config: the policy configuration (``gdp_hidden``, ``gdp_heads``, ``gdp_segment``).
        num_devices: D (the output layer has D logits).

    Shapes:
        - :meth:`encode`: ``(n, D)`` logits, rows in local node order
    """

    sel_mode = "topo"

    def __init__(self, config: PolicyConfig, num_devices: int):
        super().__init__(config, num_devices)
        layout = get_layout(config.layout)
        h = config.gdp_hidden
        self.segment = config.gdp_segment
        self.inp = nn.Linear(layout.node_dim, h)
        self.sage = SAGEConv(h, h, aggr="max", project=True)
        self.attn = nn.MultiheadAttention(h, config.gdp_heads, batch_first=True)
        self.norm1 = nn.LayerNorm(h)
        self.ffn = nn.Sequential(nn.Linear(h, 4 * h), nn.ReLU(), nn.Linear(4 * h, h))
        self.norm2 = nn.LayerNorm(h)
        self.out = nn.Linear(h, num_devices)

    def encode(self, ctx: GraphContext) -> Tensor:
        x = F.relu(self.inp(ctx.x))
        # undirected neighbourhood: the message edges run in both directions
        x = torch.sigmoid(self.sage(x, ctx.edge_index))
        topo = as_tensor(ctx.features.topo)
        seq = x[topo]
        n, h = seq.shape
        seg = self.segment
        pad = (-n) % seg
        seq_p = torch.cat([seq, seq.new_zeros(pad, h)]).view(-1, seg, h)  # (S, L, h)
        memory = torch.cat([seq_p.new_zeros(1, seg, h), seq_p[:-1].detach()])
        kv = torch.cat([memory, seq_p], dim=1)  # (S, 2L, h)
        mask = torch.zeros(kv.shape[0], kv.shape[1], dtype=torch.bool)
        mask[0, :seg] = True  # the first segment has no memory
        if pad:
            mask[-1, 2 * seg - pad :] = True
        att, _ = self.attn(seq_p, kv, kv, key_padding_mask=mask, need_weights=False)
        y = self.norm1(seq_p + att)
        y = self.norm2(y + self.ffn(y)).reshape(-1, h)[:n]
        logits = torch.empty(n, self.num_devices, dtype=y.dtype)
        return logits.index_copy(0, topo, self.out(y))

    def plc_begin(self, ctx: GraphContext, enc: Tensor, num_episodes: int) -> np.ndarray:
        return enc.detach().numpy()

    def plc_logits(
        self,
        ctx: GraphContext,
        enc: Tensor,
        pstate: np.ndarray,
        nodes: np.ndarray,
        feats: np.ndarray,
    ) -> np.ndarray:
        return pstate[nodes]

    def log_probs(
        self,
        ctx: GraphContext,
        enc: Tensor,
        episodes: Episodes,
        temperature: Temperature = (1.0, 1.0),
    ) -> StepTerms:
        logits = enc[as_tensor(episodes.nodes)]  # (K, T, D)
        taken, ent, ll = device_terms(
            logits, as_tensor(episodes.devices), episodes.plc_teacher, temperature[1]
        )
        return StepTerms(None, taken, None, ent, None, ll)
