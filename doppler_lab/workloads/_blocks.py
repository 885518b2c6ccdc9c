"""Block-partitioned tensors: the one helper every einsum workload is built with.

A :class:`BlockTensor` is a logical (dense) tensor cut into a grid of blocks; each block is one
node of the graph. ``parts[d]`` lists the block sizes along dimension ``d`` and ``ids`` holds the
node id of every block (shape = the grid). :class:`BlockBuilder` wraps a
:class:`~doppler_lab.ir.graph.GraphBuilder` and turns whole-tensor operations into per-block nodes:

- :meth:`BlockBuilder.einsum`: one einsum node per (output block, contracted block) pair, plus a
  tree of ``add`` nodes per output block when a contracted index is split;
- :meth:`BlockBuilder.elementwise`: numpy broadcasting, block by block;
- :meth:`BlockBuilder.reduce`, :meth:`BlockBuilder.logsumexp`, :meth:`BlockBuilder.softmax`,
  :meth:`BlockBuilder.log_softmax`: a local op per block, then a combining tree across the blocks
  of the reduced dimension when it is split;
- :meth:`BlockBuilder.take` / :func:`concat`: re-partitioning at block granularity (no nodes).

Every node carries an executable :class:`~doppler_lab.ir.ops.OpSpec`, so flops and bytes follow
from the block shapes. Aggregation is a balanced tree of binary ops (the op set has no n-ary sum).
"""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, TypeVar

import numpy as np

from ..house.errors import ConfigError, GraphError
from ..ir.graph import DataflowGraph, GraphBuilder
from ..ir.ops import OpSpec, broadcast_shape, parse_einsum

Partition = tuple[int, ...]
T = TypeVar("T")

#: torch method that casts a tensor to each dtype (constants are made in float32)
_CAST_METHOD: dict[str, str] = {
    "float64": "torch.Tensor.double",
    "float32": "torch.Tensor.float",
    "float16": "torch.Tensor.half",
    "bfloat16": "torch.Tensor.bfloat16",
}
#: estimated flops per element of the torch ops used here (their flops cannot be derived)
LOGSUMEXP_FLOPS = 7.0  # max, sub, exp (4), sum
SOFTMAX_FLOPS = 8.0  # max, sub, exp (4), sum, div


def split_sizes(n: int, parts: int) -> Partition:
    """``n`` cut into ``parts`` near-equal block sizes (the larger ones first).

    Example:
        >>> split_sizes(10, 4)
        (3, 3, 2, 2)
    """
    if not 1 <= parts <= n:
        raise ConfigError(
            f"cannot split a dimension of size {n} into {parts} blocks; expected 1..{n}"
        )
    q, r = divmod(n, parts)
    return tuple(q + 1 if i < r else q for i in range(parts))


def _index_label(idx: Sequence[int]) -> str:
    return ",".join(str(int(i)) for i in idx)


def tree(name: str, items: Sequence[T], combine: Callable[[str, T, T], T]) -> T:
    """Combine ``items`` pairwise in a balanced tree; the root is named ``name``.

    ``combine(node_name, a, b)`` makes one combining step; inner steps are named
    ``{name}/{level}.{k}``. A single item is returned as is.
    """
    level = list(items)
    if not level:
        raise GraphError(f"{name!r}: nothing to combine")
    depth = 0
    while len(level) > 1:
        last = len(level) == 2
        nxt = [
            combine(name if last else f"{name}/{depth}.{k // 2}", level[k], level[k + 1])
            for k in range(0, len(level) - 1, 2)
        ]
        if len(level) % 2:
            nxt.append(level[-1])
        level = nxt
        depth += 1
    return level[0]


@dataclass(frozen=True, eq=False)
class BlockTensor:
    """A logical tensor stored as a grid of blocks, one graph node per block.

    Attributes:
        ids: node id of each block, an int64 array whose shape is the grid.
        parts: block sizes along each dimension.
        dtype: element type (a key of :data:`doppler_lab.ir.ops.DTYPE_BYTES`).
    """

    ids: np.ndarray
    parts: tuple[Partition, ...]
    dtype: str

    def __post_init__(self) -> None:
        parts = tuple(tuple(int(s) for s in p) for p in self.parts)
        ids = np.asarray(self.ids, dtype=np.int64)
        object.__setattr__(self, "parts", parts)
        object.__setattr__(self, "ids", ids)
        if ids.shape != tuple(len(p) for p in parts):
            raise GraphError(
                f"block ids of shape {ids.shape} do not match the partition grid {self.grid}"
            )

    @property
    def ndim(self) -> int:
        return len(self.parts)

    @property
    def shape(self) -> tuple[int, ...]:
        """The dense shape."""
        return tuple(sum(p) for p in self.parts)

    @property
    def grid(self) -> tuple[int, ...]:
        """Number of blocks along each dimension."""
        return tuple(len(p) for p in self.parts)

    def block_shape(self, idx: Sequence[int]) -> tuple[int, ...]:
        return tuple(p[i] for p, i in zip(self.parts, idx))

    def offsets(self, dim: int) -> tuple[int, ...]:
        """Start of each block along ``dim`` in the dense tensor."""
        return tuple(int(x) for x in np.cumsum((0,) + self.parts[dim][:-1]))

    def take(self, dim: int, blocks: Sequence[int]) -> BlockTensor:
        """The sub-tensor made of the given blocks along ``dim`` (no new nodes)."""
        dim %= self.ndim
        blocks = [int(b) for b in blocks]
        if not blocks or any(not 0 <= b < self.grid[dim] for b in blocks):
            raise GraphError(
                f"take: blocks {blocks} along dim {dim}, expected indices in 0..{self.grid[dim] - 1}"
            )
        parts = list(self.parts)
        parts[dim] = tuple(self.parts[dim][b] for b in blocks)
        return BlockTensor(np.take(self.ids, blocks, axis=dim), tuple(parts), self.dtype)

    def to_meta(self) -> dict[str, Any]:
        """JSON-ready description: dense shape, partition, block node ids and dtype."""
        return {
            "shape": list(self.shape),
            "parts": [list(p) for p in self.parts],
            "ids": self.ids.tolist(),
            "dtype": self.dtype,
        }


def concat(tensors: Sequence[BlockTensor], dim: int) -> BlockTensor:
    """Block-level concatenation along ``dim`` (no new nodes; the inverse of ``take``)."""
    first = tensors[0]
    dim %= first.ndim
    for t in tensors[1:]:
        other = [p for d, p in enumerate(t.parts) if d != dim]
        if other != [p for d, p in enumerate(first.parts) if d != dim] or t.dtype != first.dtype:
            raise GraphError(
                f"concat along dim {dim}: partitions {t.parts} ({t.dtype}) and {first.parts} "
                f"({first.dtype}) differ outside that dimension"
            )
    parts = list(first.parts)
    parts[dim] = tuple(s for t in tensors for s in t.parts[dim])
    return BlockTensor(
        np.concatenate([t.ids for t in tensors], axis=dim), tuple(parts), first.dtype
    )


class BlockBuilder:
    """Builds a graph of block operations on :class:`BlockTensor` values.

    Every method takes a ``name`` (unique in the graph); block nodes are named
    ``name[i,j,...]`` after their grid index, partial results ``name[i,j]/k`` and inner
    aggregation steps ``name[i,j]/level.k``.
    """

    def __init__(self, name: str):
        self.graph = GraphBuilder(name)
        self._specs: dict[tuple[Any, ...], OpSpec] = {}

    def __len__(self) -> int:
        return len(self.graph)

    # -- single nodes -------------------------------------------------------------------------
    def _spec(self, *key: Any) -> OpSpec:
        """An OpSpec, shared between the many blocks of equal shape (validated once)."""
        spec = self._specs.get(key)
        if spec is None:
            kind, op, in_shapes, out_shape, dtype, params, flops = key
            spec = OpSpec(kind, op, in_shapes, out_shape, dtype, json.loads(params), None, flops)
            self._specs[key] = spec
        return spec

    def node(
        self,
        name: str,
        kind: str,
        op: str,
        operands: Sequence[int],
        in_shapes: Sequence[Sequence[int]],
        out_shape: Sequence[int],
        dtype: str,
        params: Mapping[str, Any] | None = None,
        flops: float | None = None,
    ) -> int:
        """Add one node computing ``op`` on ``operands`` (node ids; repeats allowed)."""
        spec = self._spec(
            kind,
            op,
            tuple(tuple(s) for s in in_shapes),
            tuple(out_shape),
            dtype,
            _params_key(params),
            flops,
        )
        preds = list(dict.fromkeys(int(u) for u in operands))
        if len(preds) != len(operands):
            spec = replace(spec, operand_map=tuple(preds.index(int(u)) for u in operands))
        return self.graph.add_node(name, spec.kind, spec.flops, spec.out_bytes, preds, spec)

    # -- leaves -------------------------------------------------------------------------------
    def input(
        self,
        name: str,
        shape: Sequence[int],
        blocks: Sequence[int],
        dtype: str,
        init: str = "normal",
        **init_params: float,
    ) -> BlockTensor:
        """An input tensor of dense ``shape`` cut into ``blocks[d]`` near-equal blocks along ``d``.

        Each block is an input node materialised by ``init`` with ``init_params`` (e.g. ``std``).
        """
        if len(blocks) != len(shape):
            raise GraphError(
                f"input {name!r}: {len(blocks)} block counts for a rank-{len(shape)} tensor"
            )
        parts = tuple(split_sizes(int(n), int(p)) for n, p in zip(shape, blocks))
        grid = tuple(len(p) for p in parts)
        ids = np.empty(grid, dtype=np.int64)
        for idx in np.ndindex(*grid):
            bshape = tuple(p[i] for p, i in zip(parts, idx))
            spec = self._spec("input", init, (), bshape, dtype, _params_key(init_params), None)
            ids[idx] = self.graph.add_node(
                f"{name}[{_index_label(idx)}]", "input", 0.0, spec.out_bytes, (), spec
            )
        return BlockTensor(ids, parts, dtype)

    def constant(
        self,
        name: str,
        op: str,
        shape: Sequence[int],
        params: Mapping[str, Any] | None = None,
        flops: float = 0.0,
    ) -> int:
        """A node made by the torch factory ``op(**params)`` (no operands; a float32 tensor of
        ``shape``, e.g. ``torch.arange``); returns its id. See :meth:`cast` for other dtypes."""
        return self.node(name, "torch", op, [], [], shape, "float32", params, flops)

    def cast(self, name: str, x: BlockTensor, dtype: str) -> BlockTensor:
        """``x`` converted to ``dtype`` block by block (``x`` itself when already ``dtype``)."""
        if x.dtype == dtype:
            return x
        if dtype not in _CAST_METHOD:
            raise GraphError(
                f"cast {name!r}: no cast to {dtype!r}; expected one of {sorted(_CAST_METHOD)}"
            )
        return self.map(name, _CAST_METHOD[dtype], x, flops_per_element=0.0, dtype=dtype)

    # -- einsum -------------------------------------------------------------------------------
    def einsum(self, name: str, equation: str, operands: Sequence[BlockTensor]) -> BlockTensor:
        """Block einsum; a split contracted index adds an ``add`` tree per output block.

        Every index must be partitioned the same way in every operand that has it.
        """
        try:
            terms, out = parse_einsum(equation)
        except ValueError as exc:
            raise GraphError(f"einsum {name!r}: {exc}") from None
        if len(terms) != len(operands):
            raise GraphError(
                f"einsum {name!r}: {equation!r} takes {len(terms)} operands, got {len(operands)}"
            )
        letter_parts: dict[str, Partition] = {}
        for term, x in zip(terms, operands):
            if len(term) != x.ndim:
                raise GraphError(
                    f"einsum {name!r}: operand {term!r} does not fit a rank-{x.ndim} tensor"
                )
            for letter, part in zip(term, x.parts):
                if letter_parts.setdefault(letter, part) != part:
                    raise GraphError(
                        f"einsum {name!r}: index {letter!r} is partitioned {letter_parts[letter]} "
                        f"in one operand and {part} in another; expected one partition"
                    )
        dtype = _common_dtype(name, operands)
        contracted = [c for c in letter_parts if c not in out]
        out_parts = tuple(letter_parts[c] for c in out)
        ids = np.empty(tuple(len(p) for p in out_parts), dtype=np.int64)
        c_grid = [range(len(letter_parts[c])) for c in contracted]
        eq = equation.replace(" ", "")
        for oidx in np.ndindex(*ids.shape):
            pos = dict(zip(out, oidx))
            out_shape = tuple(letter_parts[c][pos[c]] for c in out)
            label = f"{name}[{_index_label(oidx)}]"
            combos = list(itertools.product(*c_grid))
            partials = []
            for cidx in combos:
                pos.update(zip(contracted, cidx))
                partials.append(
                    self.node(
                        label if len(combos) == 1 else f"{label}/{_index_label(cidx)}",
                        "einsum",
                        eq,
                        [int(x.ids[tuple(pos[c] for c in t)]) for t, x in zip(terms, operands)],
                        [tuple(letter_parts[c][pos[c]] for c in t) for t in terms],
                        out_shape,
                        dtype,
                    )
                )
            ids[oidx] = self._combine_nodes(label, partials, "elementwise", "add", out_shape, dtype)
        return BlockTensor(ids, out_parts, dtype)

    def _combine_nodes(
        self,
        name: str,
        nodes: Sequence[int],
        kind: str,
        op: str,
        shape: tuple[int, ...],
        dtype: str,
        flops: float | None = None,
    ) -> int:
        """A tree of binary ``op`` nodes over equal-shaped ``nodes``."""
        return tree(
            name,
            nodes,
            lambda nm, a, b: self.node(
                nm, kind, op, [a, b], [shape, shape], shape, dtype, flops=flops
            ),
        )

    # -- elementwise --------------------------------------------------------------------------
    def elementwise(
        self,
        name: str,
        op: str,
        operands: Sequence[BlockTensor],
        params: Mapping[str, Any] | None = None,
    ) -> BlockTensor:
        """An elementwise op (a key of :data:`doppler_lab.ir.ops.ELEMENTWISE_OPS`) with numpy
        broadcasting; a broadcast dimension must be a single block of size 1."""
        out_parts = _broadcast_parts(name, operands)
        dtype = _common_dtype(name, operands)
        nd = len(out_parts)
        ids = np.empty(tuple(len(p) for p in out_parts), dtype=np.int64)
        for oidx in np.ndindex(*ids.shape):
            blocks = []
            for x in operands:
                off = nd - x.ndim
                blocks.append(tuple(oidx[off + d] if x.grid[d] > 1 else 0 for d in range(x.ndim)))
            in_shapes = [x.block_shape(b) for x, b in zip(operands, blocks)]
            ids[oidx] = self.node(
                f"{name}[{_index_label(oidx)}]",
                "elementwise",
                op,
                [int(x.ids[b]) for x, b in zip(operands, blocks)],
                in_shapes,
                broadcast_shape(in_shapes),
                dtype,
                params,
            )
        return BlockTensor(ids, out_parts, dtype)

    def map(
        self,
        name: str,
        op: str,
        x: BlockTensor,
        params: Mapping[str, Any] | None = None,
        flops_per_element: float = 1.0,
        dtype: str | None = None,
    ) -> BlockTensor:
        """A shape-preserving torch op (dotted name, e.g. ``torch.cos``) applied to every block;
        the result has ``dtype`` (default: ``x``'s)."""
        dtype = dtype or x.dtype
        ids = np.empty(x.grid, dtype=np.int64)
        for idx in np.ndindex(*x.grid):
            shape = x.block_shape(idx)
            ids[idx] = self.node(
                f"{name}[{_index_label(idx)}]",
                "torch",
                op,
                [int(x.ids[idx])],
                [shape],
                shape,
                dtype,
                params,
                flops_per_element * math.prod(shape),
            )
        return BlockTensor(ids, x.parts, dtype)

    def add_all(self, name: str, tensors: Sequence[BlockTensor]) -> BlockTensor:
        """The elementwise sum of ``tensors`` (a balanced tree of block ``add`` ops)."""
        return tree(name, tensors, lambda nm, a, b: self.elementwise(nm, "add", [a, b]))

    # -- reductions ---------------------------------------------------------------------------
    def _reduce_along(
        self,
        name: str,
        x: BlockTensor,
        dim: int,
        keepdim: bool,
        local: Callable[[str, int, tuple[int, ...]], int],
        combine: Callable[[str, Sequence[int], tuple[int, ...]], int],
    ) -> BlockTensor:
        """``local(name, block, shape)`` reduces one block along ``dim``; ``combine(name,
        partials, shape)`` merges the partial results of one output block."""
        dim %= x.ndim
        parts = list(x.parts)
        if keepdim:
            parts[dim] = (1,)
        else:
            del parts[dim]
        out = np.empty(tuple(len(p) for p in parts), dtype=np.int64)
        nblocks = x.grid[dim]
        for oidx in np.ndindex(*out.shape):
            label = f"{name}[{_index_label(oidx)}]"
            partials = []
            for j in range(nblocks):
                idx = list(oidx)
                if keepdim:
                    idx[dim] = j
                else:
                    idx.insert(dim, j)
                partials.append(
                    local(
                        label if nblocks == 1 else f"{label}/{j}",
                        int(x.ids[tuple(idx)]),
                        x.block_shape(idx),
                    )
                )
            out[oidx] = combine(label, partials, tuple(p[i] for p, i in zip(parts, oidx)))
        return BlockTensor(out, tuple(parts), x.dtype)

    def reduce(
        self, name: str, op: str, x: BlockTensor, dim: int, keepdim: bool = False
    ) -> BlockTensor:
        """``sum``, ``max`` or ``mean`` along ``dim``: a local reduction per block, then an
        ``add`` / ``maximum`` tree across split blocks (and a ``scale`` for a split mean)."""
        if op not in ("sum", "max", "mean"):
            raise GraphError(f"reduce {name!r}: unknown op {op!r}; expected sum, max or mean")
        dim %= x.ndim
        split = x.grid[dim] > 1
        local_op = "sum" if op == "mean" and split else op
        combine_op = "maximum" if op == "max" else "add"
        n = x.shape[dim]

        def local(nm: str, block: int, shape: tuple[int, ...]) -> int:
            out = tuple(1 if d == dim else s for d, s in enumerate(shape) if keepdim or d != dim)
            params = {"dims": [dim], "keepdim": keepdim}
            return self.node(nm, "reduce", local_op, [block], [shape], out, x.dtype, params)

        def combine(nm: str, partials: Sequence[int], shape: tuple[int, ...]) -> int:
            if op != "mean" or not split:
                return self._combine_nodes(nm, partials, "elementwise", combine_op, shape, x.dtype)
            total = self._combine_nodes(f"{nm}/sum", partials, "elementwise", "add", shape, x.dtype)
            return self.node(
                nm, "elementwise", "scale", [total], [shape], shape, x.dtype, {"factor": 1.0 / n}
            )

        return self._reduce_along(name, x, dim, keepdim, local, combine)

    def logsumexp(self, name: str, x: BlockTensor, dim: int) -> BlockTensor:
        """``log(sum(exp(x)))`` along ``dim`` (kept as size 1): ``torch.logsumexp`` per block
        (skipped for blocks of extent 1), ``torch.logaddexp`` across split blocks."""
        dim %= x.ndim

        def local(nm: str, block: int, shape: tuple[int, ...]) -> int:
            if shape[dim] == 1:
                return block
            out = tuple(1 if d == dim else s for d, s in enumerate(shape))
            params = {"dim": dim, "keepdim": True}
            return self.node(
                nm,
                "torch",
                "torch.logsumexp",
                [block],
                [shape],
                out,
                x.dtype,
                params,
                LOGSUMEXP_FLOPS * math.prod(shape),
            )

        def combine(nm: str, partials: Sequence[int], shape: tuple[int, ...]) -> int:
            return self._combine_nodes(
                nm,
                partials,
                "torch",
                "torch.logaddexp",
                shape,
                x.dtype,
                LOGSUMEXP_FLOPS * math.prod(shape),
            )

        return self._reduce_along(name, x, dim, True, local, combine)

    def softmax(self, name: str, x: BlockTensor, dim: int) -> BlockTensor:
        """Softmax along ``dim``: ``torch.softmax`` per block when ``dim`` is one block, else
        ``exp(x - logsumexp(x))`` with a block logsumexp."""
        dim %= x.ndim
        if x.grid[dim] == 1:
            return self.map(name, "torch.softmax", x, {"dim": dim}, SOFTMAX_FLOPS)
        shifted = self.elementwise(
            f"{name}.shift", "sub", [x, self.logsumexp(f"{name}.lse", x, dim)]
        )
        return self.elementwise(name, "exp", [shifted])

    def log_softmax(self, name: str, x: BlockTensor, dim: int) -> BlockTensor:
        """Log-softmax along ``dim``: ``torch.log_softmax`` per block when ``dim`` is one block,
        else ``x - logsumexp(x)``."""
        dim %= x.ndim
        if x.grid[dim] == 1:
            return self.map(name, "torch.log_softmax", x, {"dim": dim}, SOFTMAX_FLOPS)
        return self.elementwise(name, "sub", [x, self.logsumexp(f"{name}.lse", x, dim)])

    # -- lookups ------------------------------------------------------------------------------
    def embedding(self, name: str, ids: BlockTensor, table: BlockTensor) -> BlockTensor:
        """``table[ids]`` per block of ``ids`` (integer tensor) and of the table's columns; the
        table's rows (the vocabulary) must be one block."""
        if table.ndim != 2 or table.grid[0] != 1:
            raise GraphError(
                f"embedding {name!r}: table partition {table.parts}; expected a 2-d table whose rows are one block"
            )
        parts = ids.parts + (table.parts[1],)
        out = np.empty(tuple(len(p) for p in parts), dtype=np.int64)
        for idx in np.ndindex(*out.shape):
            tshape = table.block_shape((0, idx[-1]))
            ishape = ids.block_shape(idx[:-1])
            out[idx] = self.node(
                f"{name}[{_index_label(idx)}]",
                "torch",
                "torch.nn.functional.embedding",
                [int(ids.ids[idx[:-1]]), int(table.ids[0, idx[-1]])],
                [ishape, tshape],
                ishape + (tshape[1],),
                table.dtype,
                flops=0.0,
            )
        return BlockTensor(out, parts, table.dtype)

    # -- result -------------------------------------------------------------------------------
    def build(self, meta: Mapping[str, Any]) -> DataflowGraph:
        """The finished graph, with ``meta`` attached."""
        self.graph.meta = dict(meta)
        return self.graph.build()


def _params_key(params: Mapping[str, Any] | None) -> str:
    """A hashable key for op parameters (they are JSON values)."""
    return json.dumps(dict(params or {}), sort_keys=True)


def _common_dtype(name: str, operands: Sequence[BlockTensor]) -> str:
    dtypes = {x.dtype for x in operands}
    if len(dtypes) != 1:
        raise GraphError(f"{name!r}: operands mix dtypes {sorted(dtypes)}; expected one dtype")
    return dtypes.pop()


def _broadcast_parts(name: str, operands: Sequence[BlockTensor]) -> tuple[Partition, ...]:
    """The output partition of a broadcasting op; raises when partitions disagree."""
    nd = max(x.ndim for x in operands)
    out: list[Partition] = []
    for d in range(nd):
        chosen: Partition = (1,)
        for x in operands:
            k = d - (nd - x.ndim)
            if k < 0 or x.parts[k] == (1,):
                continue
            if chosen not in ((1,), x.parts[k]):
                raise GraphError(
                    f"{name!r}: dimension {d} is partitioned {chosen} in one operand and "
                    f"{x.parts[k]} in another; expected equal partitions or a broadcast size-1 dimension"
                )
            chosen = x.parts[k]
        out.append(chosen)
    return tuple(out)
