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

from ..io.stored import MAX_GENERATED_SEED, generated_recipe

__all__ = ["DEFAULT_STD", "fake_parameters", "params_on_meta", "recipe_for", "tensor_seed"]

#: std of the generated ``normal`` weights (Hugging Face's default ``initializer_range``)
DEFAULT_STD = 0.02


@contextmanager
def params_on_meta() -> Iterator[None]:
    """Within the block, every parameter a module registers goes to the ``meta`` device (its
    initialisation then costs nothing); buffers stay where they are made. A tied parameter
    (the same object registered twice) stays one object."""
    register = nn.Module.register_parameter

    def to_meta(module: nn.Module, name: str, param: nn.Parameter | None) -> None:
        register(module, name, param)
        p = module._parameters.get(name)
        if p is not None and p.device.type != "meta":
            module._parameters[name] = nn.Parameter(p.to("meta"), requires_grad=p.requires_grad)

    nn.Module.register_parameter = to_meta  # type: ignore[method-assign]
    try:
        yield
    finally:
        nn.Module.register_parameter = register  # type: ignore[method-assign]


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
