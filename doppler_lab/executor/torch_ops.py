"""Torch semantics of :class:`~doppler_lab.ir.ops.OpSpec`: how each node is computed for real.

Used by the executor (one op at a time on its device) and by :func:`evaluate`, the sequential
single-device reference run every placement's outputs are compared against.
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import torch

from ..house.errors import GraphError
from ..io.stored import generate, is_generated
from ..ir.graph import DataflowGraph
from ..ir.ops import OpSpec

DTYPES: dict[str, torch.dtype] = {
    "float64": torch.float64,
    "float32": torch.float32,
    "bfloat16": torch.bfloat16,
    "float16": torch.float16,
    "int64": torch.int64,
    "int32": torch.int32,
    "int16": torch.int16,
    "int8": torch.int8,
    "uint8": torch.uint8,
    "bool": torch.bool,
}

_ELEMENTWISE: dict[str, Callable[..., torch.Tensor]] = {
    "add": torch.add,
    "sub": torch.sub,
    "mul": torch.mul,
    "div": torch.div,
    "maximum": torch.maximum,
    "neg": torch.neg,
    "exp": torch.exp,
    "silu": torch.nn.functional.silu,
    "gelu": torch.nn.functional.gelu,
    "relu": torch.relu,
    "sigmoid": torch.sigmoid,
    "tanh": torch.tanh,
    "rsqrt": torch.rsqrt,
    "square": torch.square,
    "copy": torch.clone,
}


def torch_dtype(name: str) -> torch.dtype:
    try:
        return DTYPES[name]
    except KeyError:
        raise GraphError(f"unknown dtype {name!r}; expected one of {tuple(DTYPES)}") from None


def resolve_torch_callable(dotted: str) -> Callable[..., Any]:
    """``"torch.nn.functional.softmax"`` -> the function; a clear error if it does not exist."""
    parts = dotted.split(".")
    if parts[0] != "torch":
        raise GraphError(f"torch op {dotted!r} must be a path under 'torch'")
    obj: Any = torch
    for i, part in enumerate(parts[1:], start=1):
        if hasattr(obj, part):
            obj = getattr(obj, part)
            continue
        try:  # a submodule not imported yet
            obj = importlib.import_module(".".join(parts[: i + 1]))
        except ImportError:
            raise GraphError(
                f"torch op {dotted!r}: {'.'.join(parts[: i + 1])!r} does not exist"
            ) from None
    if not callable(obj):
        raise GraphError(f"torch op {dotted!r} is not callable")
    return obj


def compile_op(spec: OpSpec) -> Callable[..., torch.Tensor]:
    """A callable computing ``spec`` from its operands (tensors, in operand order)."""
    kw = spec.kwargs
    if spec.kind == "einsum":
        eq = spec.op.replace(" ", "")
        return lambda *xs: torch.einsum(eq, *xs)
    if spec.kind == "elementwise":
        if spec.op == "scale":
            factor = float(kw.get("factor", 1.0))
            return lambda x: x * factor
        if spec.op == "add_scalar":
            value = float(kw.get("value", 0.0))
            return lambda x: x + value
        return _ELEMENTWISE[spec.op]  # called as is (a wrapper would cost a frame per op)
    if spec.kind == "reduce":
        dims = [int(d) for d in kw["dims"]]
        keep = bool(kw.get("keepdim", False))
        if spec.op == "sum":
            return lambda x: torch.sum(x, dim=dims, keepdim=keep)
        if spec.op == "mean":
            return lambda x: torch.mean(x, dim=dims, keepdim=keep)
        return lambda x: torch.amax(x, dim=dims, keepdim=keep)
    if spec.kind == "torch":
        fn = resolve_torch_callable(spec.op)
        return functools.partial(fn, **kw) if kw else fn
    if spec.kind == "program":
        from .programs import compile_program

        return compile_program(spec)
    raise GraphError(f"op kind {spec.kind!r} is not computed (inputs are materialised)")


def input_seed(seed: int, node: int) -> int:
    """The generator seed of input ``node`` in a run seeded ``seed`` (independent of placement)."""
    return (int(seed) * 1_000_003 + int(node)) % (2**63 - 1)


def make_input(spec: OpSpec, seed: int, device: str | torch.device = "cpu") -> torch.Tensor:
    """Materialise an input tensor deterministically: a run-seeded ``normal`` or ``uniform``
    input is drawn on the CPU from ``seed``, then moved; ``ones``, ``zeros`` and generated
    weights (:func:`doppler_lab.io.stored.generate`: a ``seed`` in the spec's params, the same
    values on every device) are made on ``device`` itself."""
    if spec.op == "stored":
        raise GraphError(
            "a stored input's value travels with its graph (input_value reads it), it is not generated"
        )
    shape = spec.out_shape
    kw = spec.kwargs
    dtype = torch_dtype(spec.dtype)
    if is_generated(spec.kind, spec.op, kw):  # a generated weight: its own seed, made on device
        return generate(spec.op, shape, dtype, kw, device)
    if spec.op in ("ones", "zeros"):  # the same on every device: made where it is used
        return (torch.ones if spec.op == "ones" else torch.zeros)(shape, dtype=dtype, device=device)
    gen = torch.Generator(device="cpu").manual_seed(seed)
    if spec.op == "normal":
        x = torch.randn(shape, generator=gen, dtype=torch.float32) * float(kw.get("std", 1.0))
        x = x + float(kw.get("mean", 0.0))
    elif spec.op == "uniform":
        lo, hi = float(kw.get("low", 0.0)), float(kw.get("high", 1.0))
        x = torch.rand(shape, generator=gen, dtype=torch.float32) * (hi - lo) + lo
    else:
        raise GraphError(f"unknown input initialiser {spec.op!r}")
    return x.to(device=device, dtype=dtype)


def made_on_device(spec: OpSpec) -> bool:
    """Whether input ``spec`` is the same wherever it is made (``ones``, ``zeros``, generated
    weights), so a device can make it itself instead of receiving a host copy."""
    return spec.kind == "input" and (
        spec.op in ("ones", "zeros") or is_generated(spec.kind, spec.op, spec.kwargs)
    )


def input_value(
    graph: DataflowGraph, u: int, seed: int, device: str | torch.device = "cpu"
) -> torch.Tensor:
    """The value of input node ``u``: its stored tensor (imported models) or one generated
    from ``seed`` (:func:`make_input`)."""
    spec = graph.specs[u]  # type: ignore[index]
    if spec.op != "stored":
        return make_input(spec, input_seed(seed, u), device)
    values = graph.tensors.inputs if graph.tensors is not None else {}
    t = values.get(graph.names[u])
    if t is None:
        raise GraphError(f"graph {graph.name!r}: stored input {graph.names[u]!r} has no value")
    if tuple(t.shape) != spec.out_shape or t.dtype != torch_dtype(spec.dtype):
        raise GraphError(
            f"graph {graph.name!r}: stored input {graph.names[u]!r} is {tuple(t.shape)} "
            f"{t.dtype}, expected {spec.out_shape} {spec.dtype}"
        )
    return t.to(device)


def reference_outputs(graph: DataflowGraph, seed: int = 0) -> dict[int, torch.Tensor]:
    """What a run's outputs are checked against: the outputs recorded when the graph was
    imported (the eager model's), else a sequential run on the CPU (:func:`evaluate`)."""
    expected = graph.expected_outputs
    outs = output_nodes(graph).tolist()
    if expected and all(v in expected for v in outs):
        return {v: expected[v] for v in outs}
    return evaluate(graph, seed=seed)


def operands_of(
    graph: DataflowGraph, v: int, values: Mapping[int, torch.Tensor]
) -> list[torch.Tensor]:
    """The operands of node ``v`` in operand order (honouring ``operand_map``)."""
    preds = graph.predecessors(v)
    spec = graph.specs[v]  # type: ignore[index]
    omap = spec.operand_map if spec.operand_map is not None else range(len(preds))
    return [values[int(preds[i])] for i in omap]


def output_nodes(graph: DataflowGraph) -> np.ndarray:
    """Compute nodes with no successors: the graph's results."""
    return np.flatnonzero((graph.out_degree == 0) & ~graph.is_input)


def evaluate(
    graph: DataflowGraph, seed: int = 0, device: str | torch.device = "cpu", keep: str = "outputs"
) -> dict[int, torch.Tensor]:
    """Run ``graph`` sequentially on one device: the reference for every placement.

    Args:
        graph: an executable graph (every node has an op spec).
        seed: input seed.
        device: where to run.
        keep: ``"outputs"`` (sink nodes) or ``"all"``.
    """
    if not graph.is_executable:
        missing = next(
            graph.names[v]
            for v, s in enumerate(graph.specs or [None] * graph.num_nodes)
            if s is None
        )
        raise GraphError(f"graph {graph.name!r} is not executable: node {missing!r} has no op spec")
    values: dict[int, torch.Tensor] = {}
    remaining = graph.out_degree.copy()
    outs = set(output_nodes(graph).tolist())
    with torch.no_grad():
        for v in graph.topo_order:
            v = int(v)
            spec = graph.specs[v]  # type: ignore[index]
            if spec.kind == "input":
                values[v] = input_value(graph, v, seed, device)
                continue
            args = operands_of(graph, v, values)
            if args:
                values[v] = compile_op(spec)(*args)
            else:  # a constant: made on ``device``, not the host
                with torch.device(device):
                    values[v] = compile_op(spec)()
            if keep != "all":  # free what no one needs any more
                for u in set(graph.predecessors(v).tolist()):
                    remaining[u] -= 1
                    if remaining[u] == 0 and u not in outs:
                        values.pop(u, None)
    if keep == "all":
        return values
    return {v: values[v] for v in sorted(outs)}
