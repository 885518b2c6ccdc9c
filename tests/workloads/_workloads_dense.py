"""Dense torch versions of the workloads, written independently of the block code.

Each function takes the dense inputs (by the names of ``graph.meta["inputs"]``) and the graph's
``meta`` and returns the dense outputs (by the names of ``graph.meta["outputs"]``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import torch
import torch.nn.functional as F

Tensors = Mapping[str, torch.Tensor]


def chainmm(t: Tensors, meta: Mapping[str, Any]) -> dict[str, torch.Tensor]:
    y = t["A0"]
    for k in range(1, meta["params"]["matrices"]):
        y = y @ t[f"A{k}"]
    return {"Y": y}


def ffnn(t: Tensors, meta: Mapping[str, Any]) -> dict[str, torch.Tensor]:
    act = {"gelu": F.gelu, "relu": F.relu, "silu": F.silu, "tanh": torch.tanh}[
        meta["params"]["activation"]
    ]
    layers = meta["params"]["layers"]
    h = t["x"]
    for k in range(layers):
        h = h @ t[f"W{k}"]
        if k < layers - 1:
            h = act(h)
    return {"y": h}


def rms_norm(x: torch.Tensor, g: torch.Tensor, eps: float) -> torch.Tensor:
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * g


def rope(x: torch.Tensor, theta: float) -> torch.Tensor:
    """Meta's Llama rotary embedding on ``x[b, s, heads, head_dim]`` (adjacent pairs)."""
    b, s, h, dh = x.shape
    freqs = 1.0 / theta ** (torch.arange(0, dh, 2, dtype=torch.float64) / dh)
    angles = torch.outer(torch.arange(s, dtype=torch.float64), freqs)
    cis = torch.polar(torch.ones_like(angles), angles)
    xc = torch.view_as_complex(x.double().reshape(b, s, h, dh // 2, 2).contiguous())
    return torch.view_as_real(xc * cis[None, :, None, :]).reshape(b, s, h, dh).to(x.dtype)


def attention(x: torch.Tensor, t: Tensors, prefix: str, dims: Mapping[str, Any]) -> torch.Tensor:
    b, s, d = x.shape
    heads, kv, dh = dims["heads"], dims["kv_heads"], dims["head_dim"]
    xn = rms_norm(x, t[f"{prefix}attn_norm"], dims["eps"])
    q = rope(
        (xn @ t[f"{prefix}wq"].reshape(d, heads * dh)).view(b, s, heads, dh), dims["rope_theta"]
    )
    k = rope((xn @ t[f"{prefix}wk"].reshape(d, kv * dh)).view(b, s, kv, dh), dims["rope_theta"])
    v = (xn @ t[f"{prefix}wv"].reshape(d, kv * dh)).view(b, s, kv, dh)
    k = k.repeat_interleave(heads // kv, dim=2)
    v = v.repeat_interleave(heads // kv, dim=2)
    scores = torch.einsum("bshe,bthe->bhst", q, k) / math.sqrt(dh)
    mask = torch.triu(torch.full((s, s), float("-inf"), dtype=x.dtype), diagonal=1)
    probs = torch.softmax(scores + mask, dim=-1)
    o = torch.einsum("bhst,bthe->bshe", probs, v).reshape(b, s, heads * dh)
    return x + o @ t[f"{prefix}wo"].reshape(heads * dh, d)


def swiglu(x: torch.Tensor, w1: torch.Tensor, w3: torch.Tensor, w2: torch.Tensor) -> torch.Tensor:
    return (F.silu(x @ w1) * (x @ w3)) @ w2


def llama_blocks(h: torch.Tensor, t: Tensors, dims: Mapping[str, Any], layers: int) -> torch.Tensor:
    for layer in range(layers):
        p = f"l{layer}."
        h = attention(h, t, p, dims)
        h = h + swiglu(
            rms_norm(h, t[f"{p}mlp_norm"], dims["eps"]), t[f"{p}w1"], t[f"{p}w3"], t[f"{p}w2"]
        )
    return h


def llama_block(t: Tensors, meta: Mapping[str, Any]) -> dict[str, torch.Tensor]:
    return {"y": llama_blocks(t["x"], t, meta["dims"], meta["params"]["layers"])}


def llama_layer(t: Tensors, meta: Mapping[str, Any]) -> dict[str, torch.Tensor]:
    dims = meta["dims"]
    h = F.embedding(t["tokens"], t["embed"])
    h = llama_blocks(h, t, dims, meta["params"]["layers"])
    logits = rms_norm(h, t["final_norm"], dims["eps"]) @ t["lm_head"]
    return {"logprobs": torch.log_softmax(logits, dim=-1)}


def moe_layer(t: Tensors, meta: Mapping[str, Any]) -> dict[str, torch.Tensor]:
    dims = meta["dims"]
    starts = [0]
    for n in meta["outputs"]["y"]["parts"][0]:
        starts.append(starts[-1] + n)
    h = t["x"]
    for layer in range(meta["params"]["layers"]):
        p = f"l{layer}."
        h = attention(h, t, p, dims)
        hn = rms_norm(h, t[f"{p}mlp_norm"], dims["eps"])
        out = torch.zeros_like(h)
        for blk, experts in enumerate(meta["routing"][f"l{layer}"]):
            rows = slice(starts[blk], starts[blk + 1])
            xb = hn[rows]
            router = torch.cat([t[f"{p}router.e{e}"] for e in experts], dim=1)
            gates = torch.softmax(xb @ router, dim=-1)
            for j, e in enumerate(experts):
                y = swiglu(xb, t[f"{p}e{e}.w1"], t[f"{p}e{e}.w3"], t[f"{p}e{e}.w2"])
                out[rows] += gates[..., j : j + 1] * y
        h = h + out
    return {"y": h}
