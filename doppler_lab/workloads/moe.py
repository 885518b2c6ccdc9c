"""MoE layer: Llama attention followed by a mixture-of-experts SwiGLU MLP with static routing."""

from __future__ import annotations

import numpy as np

from ..house.errors import ConfigError
from ..ir.graph import DataflowGraph
from ._blocks import BlockBuilder, BlockTensor, concat
from ._params import check_int
from .llama import LlamaStack, mlp_weights, resolve_dims, swiglu


def moe_layer(
    layers: int = 1,
    batch: int = 4,
    seq: int = 2048,
    d_model: int = 4096,
    heads: int = 32,
    kv_heads: int = 8,
    expert_ffn: int = 14336,
    experts: int = 8,
    top_k: int = 2,
    batch_blocks: int = 4,
    seq_blocks: int = 1,
    blocks: int = 2,
    expert_blocks: int = 2,
    eps: float = 1e-5,
    rope_theta: float = 1e6,
    seed: int = 0,
    dtype: str = "float32",
    scale: float | str = 1.0,
) -> DataflowGraph:
    """A Mixtral-style layer: attention, a router and SwiGLU experts with static routing.

    Its keyword parameters are the spec keys of the workload grammar (``moe_layer:experts=8``;
    :mod:`doppler_lab.workloads.specs`), so they stay flat.

    Routing is static so the graph is: batch block ``t`` is served by ``top_k`` experts drawn
    (seeded by ``seed``) for it, recorded in ``meta["routing"]["l{layer}"][t]``. Its gate
    weights are the softmax of its router logits over those experts (a block softmax across the
    experts, one block each); the output is the gate-weighted sum of their SwiGLU outputs plus the
    residual. Each expert's inner width is split into ``expert_blocks``. Defaults (Mixtral-8x7B
    sizes, 4 x 2048 tokens): 273 compute nodes, 49 inputs.

    Args:
        layers: stacked layers.
        batch, seq, d_model, heads, kv_heads, batch_blocks, seq_blocks, blocks, eps,
            rope_theta, dtype, scale: as in :func:`~doppler_lab.workloads.llama.llama_block`
            (``blocks`` splits the attention heads).
        expert_ffn: inner width of each expert at ``scale=1``.
        experts: number of experts.
        top_k: experts per batch block.
        expert_blocks: blocks along each expert's inner width.
        seed: seed of the routing plan.
    """
    params = dict(locals())
    gen = "moe_layer"
    check_int(gen, "experts", experts)
    check_int(gen, "top_k", top_k)
    check_int(gen, "expert_blocks", expert_blocks)
    check_int(gen, "seed", seed, 0)
    if top_k > experts:
        raise ConfigError(
            f"{gen}: parameter top_k={top_k} exceeds experts={experts}; expected top_k <= experts"
        )
    dims = resolve_dims(gen, params, ffn_name="expert_ffn", ffn_blocks_name="expert_blocks")
    rng = np.random.default_rng(seed)
    bb = BlockBuilder(gen)
    stack = LlamaStack(bb, dims)
    h = stack.embedded_input()
    routing: dict[str, list[list[int]]] = {}
    for layer in range(layers):
        prefix = f"l{layer}."
        plan = [
            sorted(int(e) for e in rng.choice(experts, size=top_k, replace=False))
            for _ in range(dims.batch_blocks)
        ]
        routing[f"l{layer}"] = plan
        h = stack.attention(prefix, h)
        hn = stack.norm(f"{prefix}mlp_norm", h)
        h = bb.elementwise(
            f"{prefix}moe_res", "add", [h, _experts(stack, prefix, hn, plan, expert_blocks)]
        )
    meta = stack.meta(gen, params, {"y": h})
    meta["routing"] = routing
    return bb.build(meta)


def _experts(
    stack: LlamaStack, prefix: str, x: BlockTensor, plan: list[list[int]], expert_blocks: int
) -> BlockTensor:
    """The gated expert mixture for each batch block of ``x`` (weights made on first use)."""
    bb: BlockBuilder = stack.bb
    d = stack.dims
    router: dict[int, BlockTensor] = {}
    weights: dict[int, dict[str, BlockTensor]] = {}
    outs = []
    for t, chosen in enumerate(plan):
        xt = x.take(0, [t])
        for e in chosen:
            if e not in router:
                router[e] = stack.input(
                    f"{prefix}router.e{e}",
                    (d.d_model, 1),
                    (1, 1),
                    d.dtype,
                    std=1 / np.sqrt(d.d_model),
                )
                weights[e] = mlp_weights(
                    bb, f"{prefix}e{e}.", d.d_model, d.ffn, expert_blocks, d.dtype
                )
                stack.inputs.update({f"{prefix}e{e}.{k}": w for k, w in weights[e].items()})
        logits = bb.einsum(
            f"{prefix}b{t}.router", "bsd,de->bse", [xt, concat([router[e] for e in chosen], 1)]
        )
        gates = bb.softmax(f"{prefix}b{t}.gates", logits, -1)
        mixed = [
            bb.einsum(
                f"{prefix}b{t}.e{e}.gated",
                "bse,bsd->bsd",
                [gates.take(2, [j]), swiglu(bb, f"{prefix}b{t}.e{e}.", xt, weights[e])],
            )
            for j, e in enumerate(chosen)
        ]
        outs.append(bb.add_all(f"{prefix}b{t}.mix", mixed))
    return concat(outs, 0)
