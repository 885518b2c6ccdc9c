"""FFNN: a multi-layer perceptron with tensor-parallel block layers (the paper's second workload)."""

from __future__ import annotations

import math

from ..ir.graph import DataflowGraph
from ._blocks import BlockBuilder
from ._params import check_choice, check_dtype, check_int, check_scale, scaled_dim

ACTIVATIONS = ("gelu", "relu", "silu", "tanh")

#: the ``scale="tiny"`` factor: a few elements per block
TINY_SCALE = 1 / 1024


def ffnn(
    layers: int = 6,
    tokens: int = 8192,
    d_model: int = 4096,
    hidden: int = 16384,
    batch_blocks: int = 4,
    blocks: int = 4,
    activation: str = "gelu",
    dtype: str = "float32",
    scale: float | str = 1.0,
) -> DataflowGraph:
    """A multi-layer perceptron on block matrices, layers split Megatron-style.

    Its keyword parameters are the spec keys of the workload grammar (``ffnn:layers=4``;
    :mod:`doppler_lab.workloads.specs`), so they stay flat.

    Computes ``x -> act(x W0) -> act(. W1) -> ... -> . W{layers-1}``.
    Widths alternate ``d_model -> hidden -> d_model ...``. Tokens are cut into ``batch_blocks``
    blocks. Even layers split their weight by columns into ``blocks`` (no aggregation), odd
    layers by rows (their contracted index is split: an ``add`` tree per output block), as in
    Megatron-style tensor parallelism. Every layer but the last is followed by ``activation``.
    Defaults: 188 compute nodes, 28 inputs (the paper's: 180, 12).

    Args:
        layers: number of linear layers (>= 1).
        tokens: rows of the input (batch x sequence) at ``scale=1``.
        d_model: input (and, for an even layer count, output) width at ``scale=1``.
        hidden: inner width at ``scale=1``.
        batch_blocks: blocks along the tokens.
        blocks: blocks along the weight dimension each layer splits.
        activation: ``gelu``, ``relu``, ``silu`` or ``tanh``.
        dtype: element type.
        scale: multiplies ``tokens``, ``d_model`` and ``hidden`` (same graph structure);
            ``"tiny"`` divides them by 1024.
    """
    gen = "ffnn"
    params = {
        "layers": layers, "tokens": tokens, "d_model": d_model, "hidden": hidden,
        "batch_blocks": batch_blocks, "blocks": blocks, "activation": activation,
        "dtype": dtype, "scale": scale,
    }  # fmt: skip
    for name in ("layers", "tokens", "d_model", "hidden", "batch_blocks", "blocks"):
        check_int(gen, name, params[name])
    check_choice(gen, "activation", activation, ACTIVATIONS)
    check_dtype(gen, dtype)
    factor = check_scale(gen, scale, tiny=TINY_SCALE)
    dims = {
        "tokens": scaled_dim(gen, "tokens", tokens, factor, "batch_blocks", batch_blocks),
        "d_model": scaled_dim(gen, "d_model", d_model, factor, "blocks", blocks),
        "hidden": scaled_dim(gen, "hidden", hidden, factor, "blocks", blocks),
    }

    bb = BlockBuilder(gen)
    x = bb.input(
        "x", (dims["tokens"], dims["d_model"]), (batch_blocks, 1), dtype, "normal", std=1.0
    )
    inputs = {"x": x.to_meta()}
    h = x
    for layer in range(layers):
        last = layer == layers - 1
        fan_in, fan_out = (
            (dims["d_model"], dims["hidden"])
            if layer % 2 == 0
            else (dims["hidden"], dims["d_model"])
        )
        split = (1, blocks) if layer % 2 == 0 else (blocks, 1)
        gain = 1.0 if last or activation == "tanh" else math.sqrt(2.0)
        w = bb.input(
            f"W{layer}", (fan_in, fan_out), split, dtype, "normal", std=gain / math.sqrt(fan_in)
        )
        inputs[f"W{layer}"] = w.to_meta()
        h = bb.einsum(f"L{layer}.mm", "tk,kn->tn", [h, w])
        if not last:
            h = bb.elementwise(f"L{layer}.{activation}", activation, [h])
    return bb.build(
        {
            "generator": gen,
            "params": params,
            "dims": dims,
            "inputs": inputs,
            "outputs": {"y": h.to_meta()},
        }
    )
