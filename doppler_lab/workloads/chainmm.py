"""CHAINMM: a chain of block matrix products (the paper's first workload)."""

from __future__ import annotations

import math

from ..ir.graph import DataflowGraph
from ._blocks import BlockBuilder, BlockTensor
from ._params import check_choice, check_dtype, check_int, check_scale, scaled_dim

ORDERS = ("tree", "left")

#: the ``scale="tiny"`` factor: a few elements per block
TINY_SCALE = 1 / 1024


def chainmm(
    matrices: int = 7,
    n: int = 8192,
    blocks: int = 2,
    order: str = "tree",
    dtype: str = "float32",
    scale: float | str = 1.0,
) -> DataflowGraph:
    """A chain of square block-matrix products A0 @ A1 @ ... (tree or left-to-right order).

    Every matrix is cut into ``blocks x blocks`` blocks; each product makes ``blocks**3`` block
    matmuls and ``blocks**2 * (blocks - 1)`` ``add`` nodes. ``order="tree"`` multiplies in a
    balanced tree (depth ``2 * ceil(log2(matrices))``, like the paper's graph), ``"left"``
    left to right. Defaults: 72 compute nodes, 28 inputs, depth 6 (the paper's: 76, 36, 6).

    Args:
        matrices: number of matrices (>= 2).
        n: matrix size (n x n) at ``scale=1``.
        blocks: blocks along each matrix dimension.
        order: ``tree`` or ``left``.
        dtype: element type.
        scale: multiplies ``n`` (same graph structure); ``"tiny"`` divides it by 1024.
    """
    gen = "chainmm"
    params = {
        "matrices": matrices,
        "n": n,
        "blocks": blocks,
        "order": order,
        "dtype": dtype,
        "scale": scale,
    }
    check_int(gen, "matrices", matrices, 2)
    check_int(gen, "n", n)
    check_int(gen, "blocks", blocks)
    check_choice(gen, "order", order, ORDERS)
    check_dtype(gen, dtype)
    factor = check_scale(gen, scale, tiny=TINY_SCALE)
    size = scaled_dim(gen, "n", n, factor, "blocks", blocks)

    bb = BlockBuilder(gen)
    mats = [
        bb.input(
            f"A{k}",
            (size, size),
            (blocks, blocks),
            dtype,
            "normal",
            std=1.0 if k == 0 else 1 / math.sqrt(size),
        )
        for k in range(matrices)
    ]

    def product(lo: int, hi: int) -> BlockTensor:
        """The product of matrices lo..hi-1 in the chosen order."""
        if hi - lo == 1:
            return mats[lo]
        mid = (lo + hi + 1) // 2 if order == "tree" else hi - 1
        return bb.einsum(f"P{lo}_{hi - 1}", "ij,jk->ik", [product(lo, mid), product(mid, hi)])

    out = product(0, matrices)
    return bb.build(
        {
            "generator": gen,
            "params": params,
            "dims": {"n": size},
            "inputs": {f"A{k}": m.to_meta() for k, m in enumerate(mats)},
            "outputs": {"Y": out.to_meta()},
        }
    )
