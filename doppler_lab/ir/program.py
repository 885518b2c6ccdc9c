"""Programs: a node that runs a short, ordered list of aten calls.

Imported models (:mod:`doppler_lab.importers`) group many aten ops into one node; the node's
:class:`~doppler_lab.ir.ops.OpSpec` of kind ``program`` carries a :class:`Program`. Each
:class:`ProgramStep` calls one op (``"aten.mm.default"``, or ``"getitem"`` to take an element of
a tuple result) on arguments that are constants or references: ``{"in": j}`` is the node's
operand ``j``, ``{"step": k}`` the result of an earlier step ``k``. The program's result is the
step ``output``. In JSON::

    {"steps": [{"op": "aten.mm.default", "args": [{"in": 0}, {"in": 1}]},
               {"op": "aten.add.Tensor", "args": [{"step": 0}, 1.5], "kwargs": {"alpha": 2}}],
     "output": 1}

Constants are JSON numbers, strings, booleans, ``null`` and lists of them, or one-key objects
for values JSON lacks: ``{"dtype": "float32"}``, ``{"float": "inf" | "-inf" | "nan"}``,
``{"device": null}`` (the device the node runs on), ``{"layout": "strided"}``,
``{"memory_format": "contiguous_format"}``. This module imports no torch.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..house.errors import GraphError

#: one-key objects an argument may be, and what their value must be
ARG_TAGS: tuple[str, ...] = ("in", "step", "dtype", "float", "device", "layout", "memory_format")
TORCH_DTYPE_NAMES: tuple[str, ...] = (
    "float64",
    "float32",
    "bfloat16",
    "float16",
    "int64",
    "int32",
    "int16",
    "int8",
    "uint8",
    "bool",
    "complex64",
    "complex128",
)
LAYOUTS: tuple[str, ...] = ("strided",)
MEMORY_FORMATS: tuple[str, ...] = ("contiguous_format", "preserve_format", "channels_last")
SPECIAL_FLOATS: tuple[str, ...] = ("inf", "-inf", "nan")
_TARGET_RE = re.compile(
    r"^(getitem|[a-z_][a-z0-9_]*\.[A-Za-z_][A-Za-z0-9_]*\.[A-Za-z_][A-Za-z0-9_]*)$"
)


@dataclass(frozen=True)
class Tagged:
    """A one-key argument object: a reference (``in``, ``step``) or a non-JSON constant."""

    tag: str
    value: Any

    def to_json(self) -> dict[str, Any]:
        return {self.tag: self.value}


def _arg_from_json(value: Any, where: str) -> Any:
    """Frozen in-memory form of a JSON argument (lists -> tuples, one-key objects -> Tagged)."""
    if value is None or isinstance(value, bool | str):
        return value
    if isinstance(value, int | float):
        if isinstance(value, float) and not math.isfinite(value):
            raise GraphError(f"{where}: float {value!r} must be written as {{'float': ...}}")
        return value
    if isinstance(value, list | tuple):
        return tuple(_arg_from_json(v, where) for v in value)
    if isinstance(value, Tagged):
        return _arg_from_json(value.to_json(), where)
    if isinstance(value, Mapping):
        if len(value) != 1 or next(iter(value)) not in ARG_TAGS:
            raise GraphError(
                f"{where}: argument object {dict(value)!r} must have exactly one key of {ARG_TAGS}"
            )
        tag, v = next(iter(value.items()))
        ok = {
            "in": isinstance(v, int) and not isinstance(v, bool) and v >= 0,
            "step": isinstance(v, int) and not isinstance(v, bool) and v >= 0,
            "dtype": v in TORCH_DTYPE_NAMES,
            "float": v in SPECIAL_FLOATS,
            "device": v is None,
            "layout": v in LAYOUTS,
            "memory_format": v in MEMORY_FORMATS,
        }[tag]
        if not ok:
            raise GraphError(f"{where}: {{{tag!r}: {v!r}}} is not a valid {tag} argument")
        return Tagged(tag, v)
    raise GraphError(f"{where}: argument {value!r} of type {type(value).__name__} is not allowed")


def _arg_to_json(value: Any) -> Any:
    if isinstance(value, Tagged):
        return value.to_json()
    if isinstance(value, tuple):
        return [_arg_to_json(v) for v in value]
    return value


def iter_refs(value: Any):
    """The ``in`` / ``step`` references inside an argument, depth first."""
    if isinstance(value, Tagged):
        if value.tag in ("in", "step"):
            yield value
    elif isinstance(value, tuple):
        for v in value:
            yield from iter_refs(v)


@dataclass(frozen=True)
class ProgramStep:
    """One aten call: ``op`` (``"aten.NAME.OVERLOAD"`` or ``"getitem"``), arguments, keywords."""

    op: str
    args: tuple[Any, ...] = ()
    kwargs: tuple[tuple[str, Any], ...] = ()

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"op": self.op, "args": [_arg_to_json(a) for a in self.args]}
        if self.kwargs:
            d["kwargs"] = {k: _arg_to_json(v) for k, v in self.kwargs}
        return d


@dataclass(frozen=True)
class Program:
    """An ordered list of steps and the index of the step whose value is the result."""

    steps: tuple[ProgramStep, ...]
    output: int

    def validate(self, num_operands: int) -> None:
        """Raise :class:`GraphError` naming the first bad step: an unknown op name, a reference
        to an operand that does not exist or to a step that is not earlier, a bad output."""
        if not self.steps:
            raise GraphError("a program needs at least one step")
        for i, step in enumerate(self.steps):
            if not isinstance(step.op, str) or not _TARGET_RE.match(step.op):
                raise GraphError(
                    f"step {i}: op {step.op!r} is not 'getitem' or 'namespace.name.overload'"
                )
            for ref in iter_refs((*step.args, *(v for _, v in step.kwargs))):
                if ref.tag == "in" and ref.value >= num_operands:
                    raise GraphError(
                        f"step {i} ({step.op}) reads operand {ref.value}; the node has "
                        f"{num_operands} operands"
                    )
                if ref.tag == "step" and ref.value >= i:
                    raise GraphError(
                        f"step {i} ({step.op}) reads step {ref.value}; expected an earlier step"
                    )
            if step.op == "getitem" and (
                len(step.args) != 2
                or not isinstance(step.args[0], Tagged)
                or not isinstance(step.args[1], int)
            ):
                raise GraphError(f"step {i}: getitem takes [reference, index]")
        if not (
            isinstance(self.output, int)
            and not isinstance(self.output, bool)
            and 0 <= self.output < len(self.steps)
        ):
            raise GraphError(f"program output {self.output!r} is not a step index")

    def to_dict(self) -> dict[str, Any]:
        return {"steps": [s.to_dict() for s in self.steps], "output": self.output}

    @classmethod
    def from_dict(cls, d: Any) -> Program:
        """Parse the JSON form (structure only; :meth:`validate` checks the references)."""
        if not isinstance(d, Mapping) or not isinstance(d.get("steps"), list):
            raise GraphError("a program is an object with a 'steps' list")
        steps = []
        for i, s in enumerate(d["steps"]):
            where = f"step {i}"
            if not isinstance(s, Mapping) or not isinstance(s.get("op"), str):
                raise GraphError(f"{where} must be an object with an 'op' name")
            args = s.get("args", [])
            kwargs = s.get("kwargs", {})
            if not isinstance(args, list) or not isinstance(kwargs, Mapping):
                raise GraphError(f"{where}: 'args' must be a list and 'kwargs' an object")
            steps.append(
                ProgramStep(
                    s["op"],
                    tuple(_arg_from_json(a, where) for a in args),
                    tuple((str(k), _arg_from_json(v, where)) for k, v in kwargs.items()),
                )
            )
        output = d.get("output", len(steps) - 1)
        return cls(tuple(steps), output)

    @classmethod
    def make(cls, steps: Sequence[tuple[str, Sequence[Any], Mapping[str, Any]]], output: int):
        """Build from ``(op, args, kwargs)`` triples in JSON form (references as dicts)."""
        return cls.from_dict(
            {
                "steps": [
                    {"op": op, "args": list(args), "kwargs": dict(kwargs)}
                    for op, args, kwargs in steps
                ],
                "output": output,
            }
        )
