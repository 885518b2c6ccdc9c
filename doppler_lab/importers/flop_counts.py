"""Flops of aten ops under fake tensors, with the formulas ``torch.utils.flop_counter`` lacks.

``FlopCounterMode`` has no formula for the CPU kernel of scaled-dot-product attention
(``aten._scaled_dot_product_flash_attention_for_cpu``) in torch 2.13, so attention would count
zero on a CPU. :data:`CUSTOM_FLOPS` maps it to the same count as the GPU kernels (two batched
matmuls); :func:`flop_counter` is a ``FlopCounterMode`` with it, for per-node counts and for the
whole-model reference alike.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch.utils.flop_counter import FlopCounterMode, flop_registry, sdpa_flop_count


def _sdpa_cpu_flops(query_shape: Any, key_shape: Any, value_shape: Any, *args: Any, **kwargs: Any):
    return sdpa_flop_count(query_shape, key_shape, value_shape)


def _custom_flops() -> dict[Any, Callable[..., int]]:
    table: dict[Any, Callable[..., int]] = {}
    cpu_sdpa = getattr(torch.ops.aten, "_scaled_dot_product_flash_attention_for_cpu", None)
    if cpu_sdpa is not None:
        table[cpu_sdpa] = _sdpa_cpu_flops
    return table


CUSTOM_FLOPS: dict[Any, Callable[..., int]] = _custom_flops()


def flop_counter() -> FlopCounterMode:
    """A silent ``FlopCounterMode`` that also counts CPU attention."""
    return FlopCounterMode(display=False, custom_mapping=CUSTOM_FLOPS)


def model_flops(model: torch.nn.Module, example_args: tuple[Any, ...]) -> int:
    """Flops of one eager forward pass of ``model`` (the reference the importer's per-node
    counts add up to)."""
    with torch.no_grad(), flop_counter() as counter:
        model(*example_args)
    return int(counter.get_total_flops())


def _may_count(target: Any) -> bool:
    """Whether ``FlopCounterMode`` can count anything for ``target``: it has a formula, or it
    is a composite op that dispatches to others (``linear`` -> ``addmm``). Any other op counts
    zero, so it need not run."""
    if not isinstance(target, torch._ops.OpOverload):
        return False
    if target.overloadpacket in flop_registry or target in CUSTOM_FLOPS:
        return True
    return torch._C._dispatch_has_kernel_for_dispatch_key(
        target.name(), "CompositeImplicitAutograd"
    )


def op_flops(target: Any, args: Any, kwargs: Any, fake_mode: Any) -> int:
    """Flops of one aten call on fake tensors (``args`` already hold the fake values)."""
    if not _may_count(target):
        return 0
    with fake_mode, flop_counter() as counter:
        target(*args, **kwargs)
    return int(counter.get_total_flops())
