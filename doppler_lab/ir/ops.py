"""Executable op specifications.

An :class:`OpSpec` says what a node computes, precisely enough for the executor to run it with
torch and for the cost model to derive flops and bytes from shapes. Four kinds:

- ``input``: a tensor that exists before the run (``op`` names how it is materialised:
  ``normal``, ``uniform``, ``ones``, ``zeros``);
- ``einsum``: ``op`` is an einsum equation over the node's operands;
- ``elementwise``: ``op`` names an entry of :data:`ELEMENTWISE_OPS` (numpy broadcasting);
- ``reduce``: ``op`` names an entry of :data:`REDUCE_OPS`, ``params`` holds ``dims`` and
  ``keepdim``;
- ``torch``: ``op`` is the dotted name of any torch callable (``torch.nn.functional.softmax``)
  called as ``op(*operands, **params)``; its ``flops`` must be given;
- ``program``: ``program`` holds a :class:`~doppler_lab.ir.program.Program`, a short list of aten
  calls over the operands (imported models); ``op`` is a label (the module path), ``flops``
  must be given, ``in_dtypes`` may give each operand its own dtype.

An ``input`` whose initialiser is ``stored`` takes its value from the tensors that travel with
the graph (:attr:`~doppler_lab.ir.graph.DataflowGraph.tensors`), e.g. a model's weights.

This module imports no torch: the executor resolves names lazily.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..house.errors import GraphError
from .program import Program

SPEC_KINDS: tuple[str, ...] = ("input", "einsum", "elementwise", "reduce", "torch", "program")

DTYPE_BYTES: dict[str, int] = {
    "float64": 8,
    "float32": 4,
    "bfloat16": 2,
    "float16": 2,
    "int64": 8,
    "int32": 4,
    "int16": 2,
    "int8": 1,
    "uint8": 1,
    "bool": 1,
}

#: name -> (arity, flops per output element)
ELEMENTWISE_OPS: dict[str, tuple[int, float]] = {
    "add": (2, 1.0),
    "sub": (2, 1.0),
    "mul": (2, 1.0),
    "div": (2, 1.0),
    "maximum": (2, 1.0),
    "neg": (1, 1.0),
    "exp": (1, 4.0),
    "silu": (1, 5.0),
    "gelu": (1, 8.0),
    "relu": (1, 1.0),
    "sigmoid": (1, 4.0),
    "tanh": (1, 4.0),
    "rsqrt": (1, 2.0),
    "square": (1, 1.0),
    "scale": (1, 1.0),  # params: factor
    "add_scalar": (1, 1.0),  # params: value
    "copy": (1, 0.0),
}

#: name -> flops per reduced input element
REDUCE_OPS: dict[str, float] = {"sum": 1.0, "max": 1.0, "mean": 1.0}

INPUT_INITS: tuple[str, ...] = ("normal", "uniform", "ones", "zeros", "stored")

_EINSUM_RE = re.compile(r"^([a-zA-Z]*)(,[a-zA-Z]*)*->[a-zA-Z]*$")
_DOTTED_RE = re.compile(r"^torch(\.[A-Za-z_][A-Za-z0-9_]*)+$")


def _freeze(value: Any) -> Any:
    if isinstance(value, list | tuple):
        return tuple(_freeze(v) for v in value)
    if isinstance(value, Mapping):
        return tuple(sorted((str(k), _freeze(v)) for k, v in value.items()))
    return value


def broadcast_shape(shapes: Sequence[Sequence[int]]) -> tuple[int, ...]:
    """Numpy broadcasting of ``shapes``; raises ``ValueError`` if they do not broadcast."""
    rank = max((len(s) for s in shapes), default=0)
    out = [1] * rank
    for s in shapes:
        for i, d in enumerate(s, start=rank - len(s)):
            if out[i] == 1:
                out[i] = int(d)
            elif d not in (1, out[i]):
                raise ValueError(f"shapes {list(map(tuple, shapes))} do not broadcast")
    return tuple(out)


def parse_einsum(equation: str) -> tuple[list[str], str]:
    """Split ``"ij,jk->ik"`` into ``(["ij", "jk"], "ik")``; raises ``ValueError`` when malformed."""
    eq = equation.replace(" ", "")
    if not _EINSUM_RE.match(eq):
        raise ValueError(f"einsum equation {equation!r} is not of the form 'ab,bc->ac'")
    lhs, out = eq.split("->")
    operands = lhs.split(",")
    for term in operands + [out]:
        if len(set(term)) != len(term):
            raise ValueError(f"einsum equation {equation!r}: repeated index in {term!r}")
    if not set(out) <= set("".join(operands)):
        raise ValueError(f"einsum equation {equation!r}: output index not in any operand")
    return operands, out


def _dtype_list(value: Any) -> tuple[str, ...] | None:
    """``in_dtypes`` of a spec document: ``None`` or a list of dtype names."""
    if value is None:
        return None
    if not isinstance(value, list | tuple) or not all(isinstance(t, str) for t in value):
        raise GraphError(f"in_dtypes must be a list of dtype names, got {value!r}")
    return tuple(value)


@dataclass(frozen=True)
class OpSpec:
    """What a node computes.

    Attributes:
        kind: one of :data:`SPEC_KINDS`.
        op: einsum equation, elementwise/reduce op name, input initialiser, or dotted torch name.
        in_shapes: shape of each operand, in operand order.
        out_shape: shape of the result.
        dtype: element type of operands and result (a key of :data:`DTYPE_BYTES`).
        params: extra keyword parameters (frozen as sorted key/value pairs).
        operand_map: for each operand, the index into the node's ordered predecessor list
            (default: operand i is predecessor i). Lets one tensor feed two operands.
        flops_override: flops of a ``torch`` or ``program`` op (required there, optional
            elsewhere).
        in_dtypes: element type of each operand when they differ from ``dtype`` (``None``:
            every operand is of ``dtype``).
        program: the steps of a ``program`` op (only there).
    """

    kind: str
    op: str
    in_shapes: tuple[tuple[int, ...], ...] = ()
    out_shape: tuple[int, ...] = ()
    dtype: str = "float32"
    params: tuple[tuple[str, Any], ...] = field(default=())
    operand_map: tuple[int, ...] | None = None
    flops_override: float | None = None
    in_dtypes: tuple[str, ...] | None = None
    program: Program | None = None

    def __post_init__(self) -> None:
        object.__setattr__(
            self, "in_shapes", tuple(tuple(int(d) for d in s) for s in self.in_shapes)
        )
        object.__setattr__(self, "out_shape", tuple(int(d) for d in self.out_shape))
        if isinstance(self.params, Mapping):
            object.__setattr__(self, "params", _freeze(self.params))
        else:
            object.__setattr__(self, "params", _freeze(dict(self.params)))
        if self.operand_map is not None:
            object.__setattr__(self, "operand_map", tuple(int(i) for i in self.operand_map))
        if self.in_dtypes is not None:
            object.__setattr__(self, "in_dtypes", tuple(str(t) for t in self.in_dtypes))
        self._validate()

    # -- validation -------------------------------------------------------------------------
    def _fail(self, what: str) -> GraphError:
        return GraphError(f"op spec {self.kind}:{self.op!r}: {what}")

    def _validate(self) -> None:
        if self.kind not in SPEC_KINDS:
            raise GraphError(f"unknown op kind {self.kind!r}; expected one of {SPEC_KINDS}")
        if self.dtype not in DTYPE_BYTES:
            raise self._fail(f"unknown dtype {self.dtype!r}; expected one of {tuple(DTYPE_BYTES)}")
        for s in (*self.in_shapes, self.out_shape):
            if any(d <= 0 for d in s):
                raise self._fail(f"shape {s} has a non-positive dimension")
        if self.operand_map is not None and len(self.operand_map) != len(self.in_shapes):
            raise self._fail(
                f"operand_map has {len(self.operand_map)} entries for {len(self.in_shapes)} operands"
            )
        if self.flops_override is not None and not (
            math.isfinite(self.flops_override) and self.flops_override >= 0
        ):
            raise self._fail(f"flops {self.flops_override} must be finite and >= 0")
        self._validate_extensions()
        check = getattr(self, f"_validate_{self.kind}")
        check()

    def _validate_input(self) -> None:
        if self.in_shapes:
            raise self._fail("an input has no operands")
        if self.op not in INPUT_INITS:
            raise self._fail(f"unknown initialiser; expected one of {INPUT_INITS}")

    def _validate_einsum(self) -> None:
        try:
            operands, out = parse_einsum(self.op)
        except ValueError as exc:
            raise self._fail(str(exc)) from None
        if len(operands) != len(self.in_shapes):
            raise self._fail(
                f"{len(operands)} operands in the equation, {len(self.in_shapes)} shapes"
            )
        sizes: dict[str, int] = {}
        for term, shape in zip(operands, self.in_shapes):
            if len(term) != len(shape):
                raise self._fail(f"operand {term!r} has rank {len(term)} but shape {shape}")
            for letter, d in zip(term, shape):
                if sizes.setdefault(letter, d) != d:
                    raise self._fail(f"index {letter!r} has sizes {sizes[letter]} and {d}")
        expected = tuple(sizes[c] for c in out)
        if expected != self.out_shape:
            raise self._fail(f"output shape {self.out_shape}, expected {expected}")

    def _validate_elementwise(self) -> None:
        if self.op not in ELEMENTWISE_OPS:
            raise self._fail(f"unknown elementwise op; expected one of {sorted(ELEMENTWISE_OPS)}")
        arity = ELEMENTWISE_OPS[self.op][0]
        if len(self.in_shapes) != arity:
            raise self._fail(f"takes {arity} operands, got {len(self.in_shapes)}")
        try:
            expected = broadcast_shape(self.in_shapes)
        except ValueError as exc:
            raise self._fail(str(exc)) from None
        if expected != self.out_shape:
            raise self._fail(f"output shape {self.out_shape}, expected {expected}")

    def _validate_reduce(self) -> None:
        if self.op not in REDUCE_OPS:
            raise self._fail(f"unknown reduction; expected one of {sorted(REDUCE_OPS)}")
        if len(self.in_shapes) != 1:
            raise self._fail(f"takes 1 operand, got {len(self.in_shapes)}")
        p = self.kwargs
        shape = self.in_shapes[0]
        dims = tuple(int(d) % len(shape) for d in p.get("dims", ()))
        if not dims:
            raise self._fail("params need non-empty 'dims'")
        keep = bool(p.get("keepdim", False))
        expected = tuple((1 if keep else None) if i in dims else d for i, d in enumerate(shape))
        expected = tuple(d for d in expected if d is not None)
        if expected != self.out_shape:
            raise self._fail(f"output shape {self.out_shape}, expected {expected}")

    def _validate_torch(self) -> None:
        if not _DOTTED_RE.match(self.op):
            raise self._fail(
                "a torch op is named by its dotted path, e.g. 'torch.nn.functional.softmax'"
            )
        if self.flops_override is None:
            raise self._fail("a torch op needs flops_override (its flops cannot be derived)")
        if not self.out_shape:
            raise self._fail("a torch op needs its out_shape")

    def _validate_extensions(self) -> None:
        if self.in_dtypes is not None:
            if len(self.in_dtypes) != len(self.in_shapes):
                raise self._fail(
                    f"in_dtypes has {len(self.in_dtypes)} entries for {len(self.in_shapes)} operands"
                )
            bad = [t for t in self.in_dtypes if t not in DTYPE_BYTES]
            if bad:
                raise self._fail(
                    f"unknown operand dtype {bad[0]!r}; expected one of {tuple(DTYPE_BYTES)}"
                )
        if self.program is not None and self.kind != "program":
            raise self._fail("only a program op carries program steps")

    def _validate_program(self) -> None:
        if self.program is None:
            raise self._fail("a program op needs its steps")
        if self.flops_override is None:
            raise self._fail("a program op needs flops_override (its flops cannot be derived)")
        try:
            self.program.validate(len(self.in_shapes))
        except GraphError as exc:
            raise self._fail(str(exc)) from None

    def operand_dtype(self, j: int) -> str:
        """Element type of operand ``j``."""
        return self.in_dtypes[j] if self.in_dtypes is not None else self.dtype

    # -- derived ----------------------------------------------------------------------------
    @property
    def kwargs(self) -> dict[str, Any]:
        """``params`` as a plain dict."""
        return {k: (list(v) if isinstance(v, tuple) else v) for k, v in self.params}

    @property
    def itemsize(self) -> int:
        return DTYPE_BYTES[self.dtype]

    @property
    def out_bytes(self) -> float:
        return float(math.prod(self.out_shape) * self.itemsize)

    @property
    def in_bytes(self) -> float:
        if self.in_dtypes is not None:
            return float(
                sum(math.prod(s) * DTYPE_BYTES[t] for s, t in zip(self.in_shapes, self.in_dtypes))
            )
        return float(sum(math.prod(s) for s in self.in_shapes) * self.itemsize)

    @property
    def flops(self) -> float:
        if self.flops_override is not None:
            return float(self.flops_override)
        if self.kind == "input":
            return 0.0
        if self.kind == "einsum":
            operands, out = parse_einsum(self.op)
            sizes: dict[str, int] = {}
            for term, shape in zip(operands, self.in_shapes):
                sizes.update(zip(term, shape))
            total = float(math.prod(sizes.values()))
            contracted = set(sizes) - set(out)
            n = len(operands)
            if n == 1:
                return total
            return (2.0 if contracted else 1.0) * (n - 1) * total
        if self.kind == "elementwise":
            return ELEMENTWISE_OPS[self.op][1] * float(math.prod(self.out_shape))
        if self.kind == "reduce":
            return REDUCE_OPS[self.op] * float(math.prod(self.in_shapes[0]))
        raise AssertionError(self.kind)  # torch always has flops_override

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "kind": self.kind,
            "op": self.op,
            "in_shapes": [list(s) for s in self.in_shapes],
            "out_shape": list(self.out_shape),
            "dtype": self.dtype,
        }
        if self.params:
            d["params"] = self.kwargs
        if self.operand_map is not None:
            d["operand_map"] = list(self.operand_map)
        if self.flops_override is not None:
            d["flops"] = self.flops_override
        if self.in_dtypes is not None:
            d["in_dtypes"] = list(self.in_dtypes)
        if self.program is not None:
            d["program"] = self.program.to_dict()
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> OpSpec:
        try:
            return cls(
                kind=d["kind"],
                op=d["op"],
                in_shapes=tuple(tuple(s) for s in d.get("in_shapes", ())),
                out_shape=tuple(d.get("out_shape", ())),
                dtype=d.get("dtype", "float32"),
                params=d.get("params", {}),
                operand_map=tuple(d["operand_map"]) if d.get("operand_map") is not None else None,
                flops_override=d.get("flops"),
                in_dtypes=_dtype_list(d.get("in_dtypes")),
                program=Program.from_dict(d["program"]) if d.get("program") is not None else None,
            )
        except KeyError as exc:
            raise GraphError(f"op spec {dict(d)!r} lacks the field {exc.args[0]!r}") from None
