"""Small models the importer tests are written against (not the zoo: these stay fixed)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class TinyMLP(nn.Module):
    """Three linear layers with GELU and ReLU between them."""

    def __init__(self, width: int = 16, hidden: int = 32, out: int = 8):
        super().__init__()
        self.fc1 = nn.Linear(width, hidden)
        self.fc2 = nn.Linear(hidden, hidden)
        self.fc3 = nn.Linear(hidden, out)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc3(torch.relu(self.fc2(F.gelu(self.fc1(x)))))


class Attention(nn.Module):
    """Causal multi-head self-attention with a rotary-like table and a bool mask buffer."""

    def __init__(self, dim: int, heads: int, seq: int):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.out = nn.Linear(dim, dim)
        self.register_buffer("mask", torch.tril(torch.ones(seq, seq, dtype=torch.bool)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, d = x.shape
        q, k, v = self.qkv(x).split(d, dim=-1)
        q, k, v = (t.view(b, s, self.heads, d // self.heads).transpose(1, 2) for t in (q, k, v))
        angle = torch.arange(s, dtype=torch.float32)[:, None] / 10.0  # folded at import
        q = q * torch.cos(angle) + torch.sin(angle)
        a = F.scaled_dot_product_attention(q, k, v, attn_mask=self.mask[:s, :s])
        return self.out(a.transpose(1, 2).reshape(b, s, d))


class TinyBlock(nn.Module):
    """Token embedding, a pre-norm attention block and an MLP, logits: int64 input ids."""

    def __init__(self, vocab: int = 32, dim: int = 16, heads: int = 2, seq: int = 8):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.norm1 = nn.LayerNorm(dim)
        self.attn = Attention(dim, heads, seq)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 2 * dim), nn.SiLU(), nn.Linear(2 * dim, dim))
        self.head = nn.Linear(dim, vocab)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        h = self.embed(ids)
        h = h + self.attn(self.norm1(h))
        h = h + self.mlp(self.norm2(h))
        return self.head(h)


def tiny_mlp() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    torch.manual_seed(0)
    return TinyMLP(), (torch.randn(4, 16),)


def tiny_block() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    torch.manual_seed(0)
    return TinyBlock(), (torch.randint(0, 32, (2, 8)),)
