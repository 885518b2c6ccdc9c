"""Torch semantics of a ``program`` op spec (:mod:`doppler_lab.ir.program`): its steps become one
callable over the node's operands, calling each aten op in order on real tensors."""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any

import torch

from ..house.errors import GraphError
from ..ir.ops import OpSpec
from ..ir.program import Tagged

#: an argument resolver: (operands, step values, device) -> value
Resolver = Callable[[tuple[Any, ...], list[Any], torch.device], Any]


def resolve_aten(name: str) -> Callable[..., Any]:
    """``"aten.mm.default"`` -> ``torch.ops.aten.mm.default``; ``"getitem"`` -> indexing."""
    if name == "getitem":
        return operator.getitem
    ns, packet, overload = name.split(".")
    try:
        return getattr(getattr(getattr(torch.ops, ns), packet), overload)
    except (AttributeError, RuntimeError):
        raise GraphError(
            f"op {name!r} does not exist in this torch ({torch.__version__})"
        ) from None


def _constant(arg: Tagged) -> Any:
    if arg.tag == "dtype":
        return getattr(torch, arg.value)
    if arg.tag == "float":
        return float(arg.value)
    if arg.tag == "layout":
        return getattr(torch, arg.value)
    if arg.tag == "memory_format":
        return getattr(torch, arg.value)
    raise AssertionError(arg.tag)


def _resolver(arg: Any) -> tuple[bool, Any]:
    """``(True, value)`` for a constant argument, ``(False, resolver)`` for one that depends on
    the operands, the steps or the device."""
    if isinstance(arg, Tagged):
        if arg.tag == "in":
            j = arg.value
            return False, lambda xs, vals, dev: xs[j]
        if arg.tag == "step":
            k = arg.value
            return False, lambda xs, vals, dev: vals[k]
        if arg.tag == "device":
            return False, lambda xs, vals, dev: dev
        return True, _constant(arg)
    if isinstance(arg, tuple):
        parts = [_resolver(a) for a in arg]
        if all(static for static, _ in parts):
            const = [v for _, v in parts]
            return False, lambda xs, vals, dev: list(const)  # a fresh list each call
        fns = [(static, v) for static, v in parts]
        return False, lambda xs, vals, dev: [v if static else v(xs, vals, dev) for static, v in fns]
    return True, arg


def compile_program(spec: OpSpec) -> Callable[..., torch.Tensor]:
    """A callable computing the program of ``spec`` from its operands (in operand order)."""
    assert spec.program is not None
    steps = []
    for step in spec.program.steps:
        fn = resolve_aten(step.op)
        args = [_resolver(a) for a in step.args]
        kwargs = [(k, *_resolver(v)) for k, v in step.kwargs]
        steps.append((fn, args, kwargs))
    output = spec.program.output

    def run(*xs: Any) -> torch.Tensor:
        # no tensor operands (a constant): the default device, which the executor sets to the
        # op's device
        dev = next((x.device for x in xs if isinstance(x, torch.Tensor)), None)
        if dev is None:
            dev = torch.get_default_device()
        vals: list[Any] = []
        for fn, args, kwargs in steps:
            a = [v if static else v(xs, vals, dev) for static, v in args]
            kw = {k: v if static else v(xs, vals, dev) for k, static, v in kwargs}
            vals.append(fn(*a, **kw))
        out = vals[output]
        # a view would share its operand's storage; transfers (gloo send) need contiguous tensors
        return out.contiguous() if isinstance(out, torch.Tensor) else out

    return run
