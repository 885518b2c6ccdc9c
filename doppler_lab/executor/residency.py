"""Device residency checked on the CPU: the ``inline-strict`` backend's emulation of CUDA's rule
that an op's tensors must all live on one device.

On a GPU, a tensor lives where it was made: a factory (``torch.arange``, ``torch.eye``, ...)
called without a device makes it on the host unless a default device is in force, and an op
mixing tensors of two devices raises. CPU worker devices cannot tell their tensors apart, so
device bugs used to surface only on a real GPU. Here every tensor carries a tag (the logical
device that made it, or :data:`HOST`), and a :class:`~torch.overrides.TorchFunctionMode` applies
CUDA's rules while an op runs:

- a call whose tensor arguments carry two different tags raises, as CUDA does (0-dim tensors
  are exempt, as CUDA allows CPU scalars);
- a result takes its arguments' tag; a factory's result takes the device whose
  :meth:`ResidencyCheck.scope` is active, else :data:`HOST`; ``.cpu()`` and ``.to(device)``
  give :data:`HOST` (on CUDA they leave the GPU);
- the executor checks each operand before an op (it must live on the op's device), each result
  after it, and the source of each copy.

It is a test configuration (the checks cost microseconds per torch call), run by the CPU test
tier so that a CPU-only CI catches what a GPU would.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_flatten, tree_map

#: the tag of a tensor made outside every logical device (on the host, on a GPU)
HOST = -1
_TAG = "_doppler_device"
#: calls whose result leaves the device (on CUDA: a host tensor); ``to`` when it names a device
_TO_HOST = ("cpu", "numpy")


def tag_of(t: torch.Tensor) -> int:
    """The logical device of ``t`` (:data:`HOST` when untagged)."""
    return getattr(t, _TAG, HOST)


def tag(t: Any, device: int) -> Any:
    """Mark every tensor in ``t`` as living on ``device``; returns ``t``."""

    def mark(x: Any) -> Any:
        if isinstance(x, torch.Tensor):
            setattr(x, _TAG, device)
        return x

    tree_map(mark, t)
    return t


def where(device: int) -> str:
    return "the host" if device == HOST else f"device {device}"


class ResidencyError(RuntimeError):
    """An op mixed tensors of two devices, or a tensor is not where it should be."""


class ResidencyCheck(TorchFunctionMode):
    """Tags results and rejects mixed-device calls (see the module notes)."""

    def __init__(self) -> None:
        super().__init__()
        self.default: int = HOST

    @contextmanager
    def scope(self, device: int) -> Iterator[None]:
        """Factories called inside make their tensors on ``device`` (CUDA: ``torch.device``)."""
        saved, self.default = self.default, device
        try:
            yield
        finally:
            self.default = saved

    def __torch_function__(self, func, types, args=(), kwargs=None):  # type: ignore[override]
        kwargs = kwargs or {}
        leaves, _ = tree_flatten((args, kwargs))
        tensors = [x for x in leaves if isinstance(x, torch.Tensor)]
        tags = {tag_of(x) for x in tensors if x.dim() > 0}
        if len(tags) > 1:
            a, b = sorted(tags)[:2]
            raise ResidencyError(
                "Expected all tensors to be on the same device, but found at least two devices, "
                f"{where(a)} and {where(b)} ({getattr(func, '__name__', func)})"
            )
        out = func(*args, **kwargs)
        name = getattr(func, "__name__", "")
        if name in _TO_HOST or (name == "to" and _moves(args[1:], kwargs)):
            result = HOST
            if any(out is x for x in tensors):  # CPU returned the tensor itself: CUDA copies
                out = out.detach()
        elif tags:
            result = tags.pop()
        elif tensors:  # only 0-dim operands: where they live
            result = tag_of(tensors[0]) if tag_of(tensors[0]) != HOST else self.default
        else:  # a factory
            result = self.default
        if isinstance(out, torch.Tensor) or isinstance(out, tuple | list):
            tag(out, result)
        return out


def _moves(args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    """Whether a ``Tensor.to`` call names a device (rather than only a dtype)."""
    for x in (*args, kwargs.get("device")):
        if isinstance(x, torch.device | str):
            return True
    return False


__all__ = ["HOST", "ResidencyCheck", "ResidencyError", "tag", "tag_of", "where"]
