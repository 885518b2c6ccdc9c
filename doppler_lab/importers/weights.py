"""Models imported without their weights: parameters on the ``meta`` device, generated weights.

A model too large for host memory is built with :func:`params_on_meta` (every parameter lands
on the ``meta`` device and costs nothing; buffers such as rotary tables and masks stay real,
their values are needed), then exported with its parameters swapped for fake CPU tensors
(:func:`fake_parameters`): the exported graph is the one the materialised model gives, shapes,
dtypes and flops included. Each parameter becomes a *generated* input: a recipe in the graph
JSON (init, params, a seed of its own; :func:`recipe_for`) that the executor materialises on the
device that reads it (:func:`doppler_lab.io.stored.generate`).

Recipes follow the usual initialisation of language models: a bias is ``zeros``, the weight of
a normalisation module (``LayerNorm``, ``RMSNorm``, ``BatchNorm``: a class name with ``Norm``)
is ``ones``, every other parameter ``normal`` with mean 0 and std ``std`` (0.02, Hugging Face's
``initializer_range``). Seeds come from the model's seed and the parameter's name.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch import nn

from ..house.limits import available_memory_bytes
from ..io.stored import MAX_GENERATED_SEED, generated_recipe

__all__ = [
    "DEFAULT_STD",
    "LARGE_TENSOR_BYTES",
    "available_memory_bytes",
    "check_real_buffers",
    "check_weight_memory",
    "fake_parameters",
    "params_on_meta",
    "recipe_for",
    "tensor_seed",
]

#: std of the generated ``normal`` weights (Hugging Face's default ``initializer_range``)
DEFAULT_STD = 0.02


@contextmanager
def params_on_meta() -> Iterator[None]:
    """Within the block, every parameter a module registers goes to the ``meta`` device (its
    initialisation then costs nothing); buffers stay where they are made. A tied parameter
    (the same object registered twice) stays one object. A tensor made by a factory
    (``torch.empty``, ...) of over :data:`LARGE_TENSOR_BYTES` is made on ``meta`` at once, so a
    large weight is never allocated, not even before it is registered
    (:func:`check_real_buffers` then says if a buffer was among them)."""
    register = nn.Module.register_parameter

    def to_meta(module: nn.Module, name: str, param: nn.Parameter | None) -> None:
        register(module, name, param)
        p = module._parameters.get(name)
        if p is not None and p.device.type != "meta":
            module._parameters[name] = nn.Parameter(p.to("meta"), requires_grad=p.requires_grad)

    nn.Module.register_parameter = to_meta  # type: ignore[method-assign]
    try:
        with _LargeOnMeta():
            yield
    finally:
        nn.Module.register_parameter = register  # type: ignore[method-assign]


#: a tensor made while building a model with generated weights is made on ``meta`` above this
LARGE_TENSOR_BYTES = 64 * 2**20

_FACTORIES = (torch.empty, torch.zeros, torch.ones, torch.full, torch.rand, torch.randn)


def _factory_bytes(args: tuple, kwargs: dict) -> int:
    """Bytes of the tensor a factory call (``torch.empty(2, 3)``, ``torch.empty((2, 3))``)
    makes; 0 when its size cannot be read."""
    size = args[0] if len(args) == 1 and isinstance(args[0], list | tuple | torch.Size) else args
    size = kwargs.get("size", size)
    if not size or not all(isinstance(n, int) for n in size):
        return 0
    numel = 1
    for n in size:
        numel *= n
    dtype = kwargs.get("dtype") or torch.get_default_dtype()
    return numel * torch.empty((), dtype=dtype).element_size()


class _LargeOnMeta(torch.overrides.TorchFunctionMode):
    """Factory calls of over :data:`LARGE_TENSOR_BYTES` with no device make ``meta`` tensors."""

    def __torch_function__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
        kwargs = dict(kwargs or {})
        if (
            func in _FACTORIES
            and kwargs.get("device") is None
            and _factory_bytes(args if func is not torch.full else args[:1], kwargs)
            > LARGE_TENSOR_BYTES
        ):
            kwargs["device"] = "meta"
        return func(*args, **kwargs)


def check_weight_memory(model: nn.Module, what: str) -> int:
    """The bytes of ``model``'s parameters (built under :func:`params_on_meta`: shapes only),
    checked against ``MAX_WEIGHT_BYTES`` and the memory available before anything is allocated.

    Raises:
        ImportModelError: naming the model, the bytes it needs and what there is.
    """
    from ..house.errors import ImportModelError
    from ..house.limits import LIMITS
    from ..timing.memory import format_bytes

    unique = {id(p): p for p in model.parameters()}
    need = sum(p.numel() * p.element_size() for p in unique.values())
    limit, free = LIMITS["MAX_WEIGHT_BYTES"], available_memory_bytes()
    if need > min(limit, free):
        why = (
            f"the limit is {format_bytes(limit)} (doppler_lab.house.limits.MAX_WEIGHT_BYTES)"
            if need > limit
            else f"{format_bytes(free)} of memory is available"
        )
        raise ImportModelError(
            f"{what}: its stored weights need {format_bytes(need)}; {why}; expected a smaller "
            "model, or weights=none (weights generated where they are read, nothing allocated)"
        )
    return need


def check_real_buffers(model: nn.Module, what: str) -> None:
    """Raise if a buffer of ``model`` (built under :func:`params_on_meta`) has no values.

    Raises:
        ImportModelError: naming the buffer and its size.
    """
    from ..house.errors import ImportModelError

    for name, buf in model.named_buffers():
        if buf.device.type == "meta":
            raise ImportModelError(
                f"{what}: buffer {name!r} {tuple(buf.shape)} is over "
                f"{LARGE_TENSOR_BYTES // 2**20} MiB, which weights=none does not allocate; "
                "expected weights=stored for a model with such buffers"
            )


@contextmanager
def fake_parameters(model: nn.Module) -> Iterator[Any]:
    """Within the block, every parameter of ``model`` is a fake CPU tensor of its shape and
    dtype (no storage), tied parameters staying tied; yields the fake mode, which
    ``torch.export`` finds on them. The parameters are put back after."""
    from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode

    mode = FakeTensorMode(allow_non_fake_inputs=True)
    cpu = torch.device("cpu")
    fakes: dict[int, nn.Parameter] = {}
    saved: list[tuple[nn.Module, str, nn.Parameter]] = []
    for module in model.modules():
        for name, p in list(module._parameters.items()):
            if p is None:
                continue
            fake = fakes.get(id(p))
            if fake is None:
                # a FakeTensor is a meta tensor that reports a device: the graph is the CPU one
                meta = p.detach().to("meta")
                fake = nn.Parameter(FakeTensor(mode, meta, cpu), requires_grad=p.requires_grad)
                fakes[id(p)] = fake
            saved.append((module, name, p))
            module._parameters[name] = fake
    try:
        yield mode
    finally:
        for module, name, p in saved:
            module._parameters[name] = p


def tensor_seed(seed: int, name: str) -> int:
    """The seed of generated tensor ``name`` in a model seeded ``seed`` (below 2**53)."""
    digest = hashlib.blake2b(f"{int(seed)}:{name}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") & MAX_GENERATED_SEED


def recipe_for(
    name: str, module_class: str, seed: int, std: float = DEFAULT_STD
) -> tuple[str, dict]:
    """``(init, params)`` of parameter ``name`` (a state-dict key) of a module of class
    ``module_class`` (``""`` when unknown): ``zeros``, ``ones`` or a seeded ``normal``."""
    leaf = name.rsplit(".", 1)[-1]
    if leaf.endswith("bias"):
        return "zeros", {}
    if "norm" in module_class.lower() and leaf == "weight":
        return "ones", {}
    return "normal", generated_recipe("normal", tensor_seed(seed, name), mean=0.0, std=float(std))


def module_classes(model: nn.Module) -> dict[str, str]:
    """Module path -> class name, for every module of ``model``."""
    return {path: type(m).__name__ for path, m in model.named_modules()}
