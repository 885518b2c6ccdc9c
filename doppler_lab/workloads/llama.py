"""Llama transformer workloads: LLAMA-BLOCK and LLAMA-LAYER (the paper's third and fourth).

Layout of the block tensors (einsum letters): activations ``x[b, s, d]``; queries
``q[b, s, g, r, i, p]`` for ``g`` key/value heads, ``r = heads / kv_heads`` query heads per
key/value head and head dimension ``(i, p)`` = (head_dim / 2 rotary pairs, 2); keys
``k[b, s, g, i, p]``; values ``v[b, s, g, e]`` (``e`` = head_dim). Heads (``g``) and the MLP's
inner width are split into ``blocks`` (tensor parallelism), the batch into ``batch_blocks`` and
the sequence into ``seq_blocks``.

Rotary embeddings follow Meta's Llama (adjacent pairs rotated by ``theta**(-2i/head_dim) * pos``);
the tables are computed in the graph from ``torch.arange`` / ``torch.logspace`` constants, and
the ``1/sqrt(head_dim)`` score scale is folded into the query table. The causal mask is an
additive ``-1e9`` bias (``torch.full`` + ``torch.triu``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from ..house.errors import ConfigError
from ..ir.graph import DataflowGraph
from ._blocks import BlockBuilder, BlockTensor, split_sizes
from ._params import check_blocks, check_dtype, check_float, check_int, check_scale, scaled_dim

MASK_VALUE = -1e9
#: the ``scale="tiny"`` factor: sequence 8, head_dim 2 at the default sizes
TINY_SCALE = 1 / 256


@dataclass(frozen=True)
class LlamaDims:
    """Resolved sizes of a Llama model and of its partition (after ``scale``)."""

    batch: int
    seq: int
    d_model: int
    heads: int
    kv_heads: int
    head_dim: int
    ffn: int
    vocab: int  # 0 without an LM head
    batch_blocks: int
    seq_blocks: int
    blocks: int
    eps: float
    rope_theta: float
    dtype: str

    @property
    def group(self) -> int:
        """Query heads per key/value head."""
        return self.heads // self.kv_heads

    def to_meta(self) -> dict[str, Any]:
        return asdict(self)


def resolve_dims(
    gen: str, params: Mapping[str, Any], ffn_name: str = "ffn", ffn_blocks_name: str = "blocks"
) -> LlamaDims:
    """Check the Llama parameters of generator ``gen`` and apply ``scale``.

    ``scale`` multiplies ``seq``, ``head_dim`` (hence ``d_model``), the MLP width (parameter
    ``ffn_name``, split into ``ffn_blocks_name`` blocks) and the vocabulary; ``batch``, head
    counts and block counts are kept, so the graph keeps its shape.
    """
    p = dict(params)
    names = (
        "batch",
        "seq",
        "d_model",
        "heads",
        "kv_heads",
        ffn_name,
        "batch_blocks",
        "seq_blocks",
        "blocks",
    )
    for name in names + (("vocab",) if "vocab" in p else ()):
        check_int(gen, name, p[name])
    check_float(gen, "eps", p["eps"])
    check_float(gen, "rope_theta", p["rope_theta"])
    scale = check_scale(gen, p["scale"], tiny=TINY_SCALE)
    check_dtype(gen, p["dtype"])
    if p["d_model"] % p["heads"]:
        raise ConfigError(
            f"{gen}: parameter d_model={p['d_model']} is not a multiple of heads={p['heads']}"
        )
    head_dim = p["d_model"] // p["heads"]
    if head_dim % 2:
        raise ConfigError(
            f"{gen}: parameters d_model={p['d_model']}, heads={p['heads']} give an odd head_dim "
            f"{head_dim}; expected an even one (rotary pairs)"
        )
    if p["heads"] % p["kv_heads"]:
        raise ConfigError(
            f"{gen}: parameter kv_heads={p['kv_heads']} does not divide heads={p['heads']}"
        )
    check_blocks(gen, "blocks", p["blocks"], "kv_heads", p["kv_heads"])
    check_blocks(gen, "batch_blocks", p["batch_blocks"], "batch", p["batch"])
    head_dim = max(2, 2 * round(head_dim * scale / 2))
    return LlamaDims(
        batch=p["batch"],
        seq=scaled_dim(gen, "seq", p["seq"], scale, "seq_blocks", p["seq_blocks"]),
        d_model=p["heads"] * head_dim,
        heads=p["heads"],
        kv_heads=p["kv_heads"],
        head_dim=head_dim,
        ffn=scaled_dim(gen, ffn_name, p[ffn_name], scale, ffn_blocks_name, p[ffn_blocks_name]),
        vocab=scaled_dim(gen, "vocab", p["vocab"], scale, "blocks", p["blocks"])
        if "vocab" in p
        else 0,
        batch_blocks=p["batch_blocks"],
        seq_blocks=p["seq_blocks"],
        blocks=p["blocks"],
        eps=float(p["eps"]),
        rope_theta=float(p["rope_theta"]),
        dtype=p["dtype"],
    )


# -- pieces --------------------------------------------------------------------------------------
def rms_norm(
    bb: BlockBuilder, name: str, x: BlockTensor, gain: BlockTensor, eps: float
) -> BlockTensor:
    """``x * rsqrt(mean(x**2, -1) + eps) * gain`` (5 nodes per block of ``x``)."""
    ms = bb.reduce(f"{name}.ms", "mean", bb.elementwise(f"{name}.sq", "square", [x]), -1)
    r = bb.elementwise(
        f"{name}.rsqrt",
        "rsqrt",
        [bb.elementwise(f"{name}.eps", "add_scalar", [ms], {"value": eps})],
    )
    return bb.einsum(name, "bsd,bs,d->bsd", [x, r, gain])


def rope_tables(
    bb: BlockBuilder, dims: LlamaDims, seq_parts: tuple[int, ...]
) -> tuple[BlockTensor, BlockTensor]:
    """Rotation tables ``rot[s, i, p, q]`` for queries (scaled by ``1/sqrt(head_dim)``) and keys.

    ``out[.., i, q] = sum_p in[.., i, p] * rot[s, i, p, q]`` rotates pair ``i`` of position ``s``
    by ``s * rope_theta**(-2i/head_dim)``.
    """
    half = dims.head_dim // 2
    starts = np.cumsum((0,) + seq_parts[:-1])
    pos_ids = [
        bb.constant(
            f"rope.pos[{j}]", "torch.arange", (n,), {"start": float(s0), "end": float(s0 + n)}
        )
        for j, (s0, n) in enumerate(zip(starts, seq_parts))
    ]
    pos = BlockTensor(np.array(pos_ids), (seq_parts,), "float32")
    inv_freq = bb.constant(
        "rope.inv_freq",
        "torch.logspace",
        (half,),
        {
            "start": 0.0,
            "end": -(dims.head_dim - 2) / dims.head_dim,
            "steps": half,
            "base": dims.rope_theta,
        },
        flops=4.0 * half,
    )
    freq = BlockTensor(np.array([inv_freq]), ((half,),), "float32")
    eye = bb.constant("rope.eye", "torch.eye", (2, 2), {"n": 2})
    quarter = bb.constant(
        "rope.quarter_turn", "torch.tensor", (2, 2), {"data": [[0.0, 1.0], [-1.0, 0.0]]}
    )
    angle = bb.einsum("rope.angle", "s,i->si", [pos, freq])
    cos_part = bb.einsum(
        "rope.cos",
        "si,pq->sipq",
        [bb.map("rope.cos_angle", "torch.cos", angle, flops_per_element=4.0), _single(eye, (2, 2))],
    )
    sin_part = bb.einsum(
        "rope.sin",
        "si,pq->sipq",
        [
            bb.map("rope.sin_angle", "torch.sin", angle, flops_per_element=4.0),
            _single(quarter, (2, 2)),
        ],
    )
    rot = bb.elementwise("rope.rot", "add", [cos_part, sin_part])
    rot_q = bb.elementwise("rope.rot_q", "scale", [rot], {"factor": 1.0 / math.sqrt(dims.head_dim)})
    return bb.cast("rope.rot_q_cast", rot_q, dims.dtype), bb.cast(
        "rope.rot_k_cast", rot, dims.dtype
    )


def _single(node: int, shape: tuple[int, ...], dtype: str = "float32") -> BlockTensor:
    """A one-block tensor."""
    return BlockTensor(np.array(node).reshape((1,) * len(shape)), tuple((n,) for n in shape), dtype)


def causal_mask(bb: BlockBuilder, dims: LlamaDims, seq_parts: tuple[int, ...]) -> BlockTensor:
    """Additive causal mask ``[s, t]``: 0 where ``t <= s``, ``-1e9`` above the diagonal."""
    starts = np.cumsum((0,) + seq_parts[:-1])
    grid = len(seq_parts)
    ids = np.empty((grid, grid), dtype=np.int64)
    for i in range(grid):
        for j in range(grid):
            shape = (seq_parts[i], seq_parts[j])
            full = bb.constant(
                f"mask.full[{i},{j}]",
                "torch.full",
                shape,
                {"size": list(shape), "fill_value": MASK_VALUE},
            )
            ids[i, j] = bb.node(
                f"mask.triu[{i},{j}]",
                "torch",
                "torch.triu",
                [full],
                [shape],
                shape,
                "float32",
                {"diagonal": int(1 + starts[i] - starts[j])},
                0.0,
            )
    return bb.cast("mask", BlockTensor(ids, (seq_parts, seq_parts), "float32"), dims.dtype)


def attention_weights(bb: BlockBuilder, prefix: str, dims: LlamaDims) -> dict[str, BlockTensor]:
    """RMSNorm gain and the q, k, v, o projections of one attention layer."""
    d, g, r, half, e, p = (
        dims.d_model,
        dims.kv_heads,
        dims.group,
        dims.head_dim // 2,
        dims.head_dim,
        dims.blocks,
    )
    std_in, std_out = 1 / math.sqrt(d), 1 / math.sqrt(dims.heads * e)
    return {
        "attn_norm": bb.input(f"{prefix}attn_norm", (d,), (1,), dims.dtype, "ones"),
        "wq": bb.input(f"{prefix}wq", (d, g, r, half, 2), (1, p, 1, 1, 1), dims.dtype, std=std_in),
        "wk": bb.input(f"{prefix}wk", (d, g, half, 2), (1, p, 1, 1), dims.dtype, std=std_in),
        "wv": bb.input(f"{prefix}wv", (d, g, e), (1, p, 1), dims.dtype, std=std_in),
        "wo": bb.input(f"{prefix}wo", (g, r, e, d), (p, 1, 1, 1), dims.dtype, std=std_out),
    }


def mlp_weights(
    bb: BlockBuilder, prefix: str, d: int, ffn: int, blocks: int, dtype: str
) -> dict[str, BlockTensor]:
    """The SwiGLU projections ``w1`` (gate), ``w3`` (up) and ``w2`` (down), split along ``ffn``."""
    return {
        "w1": bb.input(f"{prefix}w1", (d, ffn), (1, blocks), dtype, std=1 / math.sqrt(d)),
        "w3": bb.input(f"{prefix}w3", (d, ffn), (1, blocks), dtype, std=1 / math.sqrt(d)),
        "w2": bb.input(f"{prefix}w2", (ffn, d), (blocks, 1), dtype, std=1 / math.sqrt(ffn)),
    }


def attention(
    bb: BlockBuilder,
    prefix: str,
    x: BlockTensor,
    w: Mapping[str, BlockTensor],
    rot_q: BlockTensor,
    rot_k: BlockTensor,
    mask: BlockTensor,
    eps: float,
) -> BlockTensor:
    """``x + attention(rms_norm(x))``: causal grouped-query attention with rotary embeddings."""
    xn = rms_norm(bb, f"{prefix}attn_norm", x, w["attn_norm"], eps)
    q = bb.einsum(f"{prefix}q", "bsd,dgrip->bsgrip", [xn, w["wq"]])
    k = bb.einsum(f"{prefix}k", "bsd,dgip->bsgip", [xn, w["wk"]])
    v = bb.einsum(f"{prefix}v", "bsd,dge->bsge", [xn, w["wv"]])
    q = bb.einsum(f"{prefix}q_rope", "bsgrip,sipq->bsgriq", [q, rot_q])
    k = bb.einsum(f"{prefix}k_rope", "bsgip,sipq->bsgiq", [k, rot_k])
    scores = bb.einsum(f"{prefix}scores", "bsgriq,btgiq->bgrst", [q, k])
    probs = bb.softmax(
        f"{prefix}probs", bb.elementwise(f"{prefix}masked", "add", [scores, mask]), -1
    )
    o = bb.einsum(f"{prefix}av", "bgrst,btge->bsgre", [probs, v])
    out = bb.einsum(f"{prefix}attn_out", "bsgre,gred->bsd", [o, w["wo"]])
    return bb.elementwise(f"{prefix}attn_res", "add", [x, out])


def swiglu(
    bb: BlockBuilder, prefix: str, x: BlockTensor, w: Mapping[str, BlockTensor]
) -> BlockTensor:
    """``(silu(x w1) * (x w3)) w2`` (no residual)."""
    gate = bb.elementwise(
        f"{prefix}silu", "silu", [bb.einsum(f"{prefix}gate", "bsd,df->bsf", [x, w["w1"]])]
    )
    up = bb.einsum(f"{prefix}up", "bsd,df->bsf", [x, w["w3"]])
    return bb.einsum(
        f"{prefix}down", "bsf,fd->bsd", [bb.elementwise(f"{prefix}glu", "mul", [gate, up]), w["w2"]]
    )


class LlamaStack:
    """Builds a stack of Llama blocks sharing rotary tables and mask; collects their inputs."""

    def __init__(self, bb: BlockBuilder, dims: LlamaDims):
        self.bb = bb
        self.dims = dims
        self.seq_parts = split_sizes(dims.seq, dims.seq_blocks)
        self.inputs: dict[str, BlockTensor] = {}
        self.rot_q, self.rot_k = rope_tables(bb, dims, self.seq_parts)
        self.mask = causal_mask(bb, dims, self.seq_parts)

    def input(self, name: str, *args: Any, **kwargs: Any) -> BlockTensor:
        t = self.bb.input(name, *args, **kwargs)
        self.inputs[name] = t
        return t

    def attention(self, prefix: str, x: BlockTensor) -> BlockTensor:
        """One attention sublayer with its own weights (residual included)."""
        w = attention_weights(self.bb, prefix, self.dims)
        self.inputs.update({f"{prefix}{k}": t for k, t in w.items()})
        return attention(self.bb, prefix, x, w, self.rot_q, self.rot_k, self.mask, self.dims.eps)

    def norm(self, name: str, x: BlockTensor) -> BlockTensor:
        gain = self.input(f"{name}", (self.dims.d_model,), (1,), self.dims.dtype, "ones")
        return rms_norm(self.bb, f"{name}.out", x, gain, self.dims.eps)

    def block(self, prefix: str, x: BlockTensor) -> BlockTensor:
        """One Llama block: attention and SwiGLU MLP sublayers with residuals."""
        d = self.dims
        h = self.attention(prefix, x)
        hn = self.norm(f"{prefix}mlp_norm", h)
        w = mlp_weights(self.bb, prefix, d.d_model, d.ffn, d.blocks, d.dtype)
        self.inputs.update({f"{prefix}{k}": t for k, t in w.items()})
        return self.bb.elementwise(f"{prefix}mlp_res", "add", [h, swiglu(self.bb, prefix, hn, w)])

    def embedded_input(self) -> BlockTensor:
        """The residual stream input ``x[b, s, d]`` (normal, std 1)."""
        d = self.dims
        return self.input(
            "x", (d.batch, d.seq, d.d_model), (d.batch_blocks, d.seq_blocks, 1), d.dtype, std=1.0
        )

    def meta(
        self, gen: str, params: Mapping[str, Any], outputs: Mapping[str, BlockTensor]
    ) -> dict[str, Any]:
        return {
            "generator": gen,
            "params": dict(params),
            "dims": self.dims.to_meta(),
            "inputs": {k: t.to_meta() for k, t in self.inputs.items()},
            "outputs": {k: t.to_meta() for k, t in outputs.items()},
        }


# -- generators ----------------------------------------------------------------------------------
def llama_block(
    layers: int = 1,
    batch: int = 2,
    seq: int = 2048,
    d_model: int = 4096,
    heads: int = 32,
    kv_heads: int = 32,
    ffn: int = 11008,
    batch_blocks: int = 2,
    seq_blocks: int = 1,
    blocks: int = 4,
    eps: float = 1e-5,
    rope_theta: float = 10000.0,
    dtype: str = "float32",
    scale: float | str = 1.0,
) -> DataflowGraph:
    """A Llama transformer block (RMSNorm, rotary causal attention, SwiGLU MLP, residuals).

    Its keyword parameters are the spec keys of the workload grammar (``llama_block:heads=8``;
    :mod:`doppler_lab.workloads.specs`), so they stay flat.

    ``layers`` blocks are stacked (rotary tables and mask shared). Defaults are Llama-2-7B
    sizes on 2 x 2048 tokens with heads and MLP split 4 ways: 169 compute nodes, 32 inputs
    (the paper's block: 182, 33).

    Args:
        layers: stacked blocks.
        batch: sequences.
        seq: sequence length at ``scale=1``.
        d_model: model width at ``scale=1`` (``heads * head_dim``).
        heads: query heads.
        kv_heads: key/value heads (grouped-query attention when fewer than ``heads``).
        ffn: MLP inner width at ``scale=1``.
        batch_blocks: blocks along the batch.
        seq_blocks: blocks along the sequence (attention then aggregates across key blocks).
        blocks: blocks along the key/value heads and the MLP width.
        eps: RMSNorm epsilon.
        rope_theta: rotary base.
        dtype: element type.
        scale: multiplies ``seq``, ``head_dim`` and ``ffn`` (same graph structure);
            ``"tiny"`` divides them by 256.
    """
    params = dict(locals())
    dims = resolve_dims("llama_block", params)
    bb = BlockBuilder("llama_block")
    stack = LlamaStack(bb, dims)
    h = stack.embedded_input()
    for layer in range(layers):
        h = stack.block(f"l{layer}.", h)
    return bb.build(stack.meta("llama_block", params, {"y": h}))


def llama_layer(
    layers: int = 1,
    batch: int = 2,
    seq: int = 2048,
    d_model: int = 4096,
    heads: int = 32,
    kv_heads: int = 32,
    ffn: int = 11008,
    vocab: int = 32000,
    batch_blocks: int = 2,
    seq_blocks: int = 1,
    blocks: int = 4,
    eps: float = 1e-5,
    rope_theta: float = 10000.0,
    dtype: str = "float32",
    scale: float | str = 1.0,
) -> DataflowGraph:
    """A full Llama layer: token embedding, Llama blocks, final RMSNorm, LM head, log-softmax.

    Its keyword parameters are the spec keys of the workload grammar (``llama_layer:layers=2``;
    :mod:`doppler_lab.workloads.specs`), so they stay flat.

    ``layers`` blocks are stacked between the embedding and the head; the vocabulary is split
    into ``blocks`` (the log-softmax uses a block logsumexp).

    Defaults: 211 compute nodes, 38 inputs (the paper's layer: 229, 32). Arguments as in
    :func:`llama_block`, plus ``vocab`` (vocabulary size at ``scale=1``).
    """
    params = dict(locals())
    dims = resolve_dims("llama_layer", params)
    bb = BlockBuilder("llama_layer")
    stack = LlamaStack(bb, dims)
    d = dims
    tokens = stack.input(
        "tokens",
        (d.batch, d.seq),
        (d.batch_blocks, d.seq_blocks),
        "int64",
        "uniform",
        low=0.0,
        high=float(d.vocab),
    )
    table = stack.input("embed", (d.vocab, d.d_model), (1, 1), d.dtype, std=1.0)
    h = bb.embedding("embed.out", tokens, table)
    for layer in range(layers):
        h = stack.block(f"l{layer}.", h)
    hn = stack.norm("final_norm", h)
    head = stack.input(
        "lm_head", (d.d_model, d.vocab), (1, d.blocks), d.dtype, std=1 / math.sqrt(d.d_model)
    )
    logits = bb.einsum("logits", "bsd,dv->bsv", [hn, head])
    logprobs = bb.log_softmax("logprobs", logits, -1)
    return bb.build(stack.meta("llama_layer", params, {"logprobs": logprobs}))
