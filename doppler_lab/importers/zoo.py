"""The model zoo: small seeded PyTorch models to import, by name, wherever a workload is accepted.

A model spec is ``NAME`` or ``NAME:key=value,...`` (the workloads' syntax; the grammar of every
graph spec is :mod:`doppler_lab.workloads.specs`) with ``NAME`` one of :data:`MODELS`, or
``FILE.py:FUNC`` / ``FILE.py:FUNC:key=value,...`` for a function in a user's file that returns
``(model, example_args)`` (its keyword arguments come from the parameters). The import options
:data:`IMPORT_OPTIONS` (``granularity``, ``depth``, ``merge``) may be given in any spec; they go
to :func:`doppler_lab.importers.from_module`, the other parameters to the model.

Weights are random (nothing is downloaded) and seeded by ``seed``: the same spec gives the same
model, inputs and graph.

Example:
    >>> model, args = make_model("mlp:layers=2,hidden=16")
    >>> tuple(model(*args).shape)
    (8, 10)
"""

from __future__ import annotations

import importlib.util
import inspect
import re
import sys
from collections.abc import Callable
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from ..house.deps import require
from ..house.errors import ConfigError
from ..house.limits import MAX_MODEL_LAYERS, MAX_MODEL_SIZE
from ..house.settings import check_setting, unknown_setting
from ..house.validate import one_line

if TYPE_CHECKING:  # pragma: no cover
    import torch
    from torch import nn

    from ..ir.graph import DataflowGraph

    ModelAndArgs = tuple[nn.Module, tuple[Any, ...]]

# torch (and .models, which subclasses torch.nn.Module) is imported by the functions that build
# a model: listing the zoo (describe_models, `doppler-lab workloads list`) does not load it

__all__ = [
    "IMPORT_OPTIONS",
    "MODELS",
    "describe_models",
    "import_model",
    "is_model_spec",
    "make_model",
    "split_spec",
]

#: spec parameters that go to the importer, not to the model
IMPORT_OPTIONS: tuple[str, ...] = ("granularity", "depth", "merge")

_FILE_SPEC = re.compile(r"^(?P<file>.+?\.py):(?P<func>[A-Za-z_][A-Za-z0-9_]*)(?::(?P<params>.*))?$")
_PROGRAM_SPEC = re.compile(r"^(?P<file>.+?\.pt2)(?::(?P<params>.*))?$")


def _check_heads(model: str, hidden: int, heads: int, kv_heads: int = 0) -> None:
    if hidden % heads:
        raise ConfigError(
            f"{model}: parameter heads={heads} does not divide hidden={hidden}; expected a divisor"
        )
    if kv_heads and heads % kv_heads:
        raise ConfigError(
            f"{model}: parameter kv_heads={kv_heads} does not divide heads={heads}; expected a divisor"
        )


def _token_ids(batch: int, seq: int, vocab: int) -> tuple[torch.Tensor]:
    import torch

    return (torch.randint(0, vocab, (batch, seq)),)


def hf_llama(
    layers: int = 2,
    hidden: int = 64,
    heads: int = 4,
    kv_heads: int = 0,
    seq: int = 16,
    vocab: int = 128,
    batch: int = 1,
    seed: int = 0,
) -> ModelAndArgs:
    """A Hugging Face Llama (``LlamaForCausalLM``, random weights) returning its logits.

    ``kv_heads`` 0 means ``heads`` (no grouped-query attention); the MLP is 4 x ``hidden`` wide.
    """
    require("transformers", "the model zoo's 'hf-llama'")
    from transformers import LlamaConfig, LlamaForCausalLM

    from .models import CausalLMLogits

    _check_heads("hf-llama", hidden, heads, kv_heads)
    config = LlamaConfig(
        vocab_size=vocab,
        hidden_size=hidden,
        intermediate_size=4 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads or heads,
        max_position_embeddings=max(64, seq),
        bos_token_id=0,
        eos_token_id=0,
        use_cache=False,
    )
    return CausalLMLogits(LlamaForCausalLM(config)).eval(), _token_ids(batch, seq, vocab)


def hf_gpt2(
    layers: int = 2,
    hidden: int = 64,
    heads: int = 4,
    seq: int = 16,
    vocab: int = 128,
    batch: int = 1,
    seed: int = 0,
) -> ModelAndArgs:
    """A Hugging Face GPT-2 (``GPT2LMHeadModel``, random weights) returning its logits."""
    require("transformers", "the model zoo's 'hf-gpt2'")
    from transformers import GPT2Config, GPT2LMHeadModel

    from .models import CausalLMLogits

    _check_heads("hf-gpt2", hidden, heads)
    config = GPT2Config(
        vocab_size=vocab,
        n_embd=hidden,
        n_layer=layers,
        n_head=heads,
        n_positions=max(64, seq),
        bos_token_id=0,
        eos_token_id=0,
        use_cache=False,
    )
    return CausalLMLogits(GPT2LMHeadModel(config)).eval(), _token_ids(batch, seq, vocab)


def mlp(
    layers: int = 3, hidden: int = 64, classes: int = 10, batch: int = 8, seed: int = 0
) -> ModelAndArgs:
    """An MLP written in the repo: ``layers`` Linear + GELU blocks and a Linear head."""
    import torch

    from .models import MLP

    return MLP(layers, hidden, classes).eval(), (torch.randn(batch, hidden),)


def resnet(
    stages: int = 2,
    blocks: int = 1,
    channels: int = 8,
    image: int = 16,
    classes: int = 10,
    batch: int = 2,
    seed: int = 0,
) -> ModelAndArgs:
    """A small ResNet written in the repo (BatchNorm in eval mode, random running statistics)."""
    import torch

    from .models import ResNet, randomise_batchnorm

    model = ResNet(stages, blocks, channels, classes)
    randomise_batchnorm(model, torch.Generator().manual_seed(seed))
    return model.eval(), (torch.randn(batch, 3, image, image),)


#: name -> model factory (read-only); every parameter is an integer >= 1 (``seed`` >= 0)
MODELS: MappingProxyType[str, Callable[..., ModelAndArgs]] = MappingProxyType(
    {"hf-llama": hf_llama, "hf-gpt2": hf_gpt2, "mlp": mlp, "resnet": resnet}
)


def is_model_spec(spec: str) -> bool:
    """Whether ``spec`` names a zoo model, a ``FILE.py:FUNC`` or a saved program ``FILE.pt2``."""
    s = spec.strip()
    return bool(_FILE_SPEC.match(s) or _PROGRAM_SPEC.match(s)) or s.partition(":")[0] in MODELS


def split_spec(spec: str) -> tuple[str, dict[str, Any], dict[str, Any]]:
    """``spec`` -> ``(name, model parameters, import options)``; ``name`` is a zoo name,
    ``FILE.py:FUNC`` or ``FILE.pt2`` (a saved ``ExportedProgram``).

    Raises:
        ConfigError: a malformed spec or a parameter given twice.
    """
    from ..house.settings import parse_spec

    owner = f"model spec {spec.strip()!r}"
    m = _FILE_SPEC.match(spec.strip())
    p = _PROGRAM_SPEC.match(spec.strip())
    if m:
        name = f"{m['file']}:{m['func']}"
        _, params = parse_spec(f"file:{m['params'] or ''}", owner)
    elif p:
        name = p["file"]
        _, params = parse_spec(f"file:{p['params'] or ''}", owner)
    else:
        name, params = parse_spec(spec, owner)
    options = {k: params.pop(k) for k in IMPORT_OPTIONS if k in params}
    return name, params, options


def _check_params(name: str, params: dict[str, Any]) -> None:
    defaults = inspect.signature(MODELS[name]).parameters
    for key, value in params.items():
        if key not in defaults:
            raise unknown_setting(f"model {name!r}", key, [*defaults, *IMPORT_OPTIONS], "parameter")
        low = 0 if key in ("seed", "kv_heads") else 1
        high = (
            2**63 - 1
            if key == "seed"
            else MAX_MODEL_LAYERS
            if key in ("layers", "stages", "blocks")
            else MAX_MODEL_SIZE
        )
        check_setting(value, "int", f"model {name!r}", key, "parameter", minimum=low, maximum=high)


def _load_function(name: str) -> Callable[..., Any]:
    file, _, func = name.rpartition(":")
    path = Path(file)
    if not path.is_file():
        raise ConfigError(f"model file {file!r} does not exist; expected FILE.py:FUNC")
    module_name = f"doppler_lab_user_model_{abs(hash(str(path.resolve())))}"
    loader_spec = importlib.util.spec_from_file_location(module_name, path)
    if loader_spec is None or loader_spec.loader is None:
        raise ConfigError(f"model file {file!r} cannot be loaded as a Python module")
    module = importlib.util.module_from_spec(loader_spec)
    sys.modules[module_name] = module  # dataclasses and pickling look modules up here
    try:
        loader_spec.loader.exec_module(module)
    except Exception as exc:
        sys.modules.pop(module_name, None)
        raise ConfigError(f"model file {file!r} failed to load: {_one_line(exc)}") from exc
    fn = getattr(module, func, None)
    if not callable(fn):
        raise ConfigError(f"model file {file!r} has no function {func!r}")
    return fn


def _one_line(exc: BaseException) -> str:
    text = one_line(exc, 300)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _call_user_function(name: str, params: dict[str, Any]) -> ModelAndArgs:
    from torch import nn

    fn = _load_function(name)
    try:
        out = fn(**params)
    except TypeError as exc:
        raise ConfigError(f"{name}: {_one_line(exc)}") from exc
    except Exception as exc:
        raise ConfigError(f"{name} raised {_one_line(exc)}") from exc
    if (
        not isinstance(out, tuple)
        or len(out) != 2
        or not isinstance(out[0], nn.Module)
        or not isinstance(out[1], tuple | list)
    ):
        raise ConfigError(
            f"{name} returned {type(out).__name__}; expected (model, example_args): an "
            "nn.Module and a tuple of its positional arguments"
        )
    return out[0], tuple(out[1])


def _unknown(name: str) -> ConfigError:
    return ConfigError(
        f"unknown model {name!r}; expected a zoo model ({', '.join(MODELS)}), FILE.py:FUNC or a "
        "saved program FILE.pt2 (graph specs of every kind: doppler_lab.workloads.specs)"
    )


def _make(name: str, params: dict[str, Any]) -> ModelAndArgs:
    import torch

    if _FILE_SPEC.match(name):
        seed = params.get("seed", 0)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed if isinstance(seed, int) else 0)
            return _call_user_function(name, params)
    if name not in MODELS:
        raise _unknown(name)
    _check_params(name, params)
    seed = params.get("seed", 0)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return MODELS[name](**params)


def make_model(spec: str) -> ModelAndArgs:
    """The model and example arguments of ``spec`` (import options in it are ignored).

    Raises:
        ConfigError: an unknown model, parameter or file; a value out of range.
    """
    name, params, _ = split_spec(spec)
    return _make(name, params)


def import_model(spec: str, **options: Any) -> DataflowGraph:
    """The dataflow graph of ``spec``: :func:`make_model` (or a saved program), then
    :func:`doppler_lab.importers.from_module` with the import options of the spec and
    ``options`` (``granularity``, ``depth``, ``merge``; ``None`` values are not given).

    Raises:
        ConfigError: a bad spec (see :func:`make_model`), an option given twice.
        ImportModelError: a model the importer cannot take (see :mod:`doppler_lab.importers`).
    """
    name, params, spec_options = split_spec(spec)
    for key, value in options.items():
        if key not in IMPORT_OPTIONS:
            raise ConfigError(
                f"unknown import option {key!r}; expected one of {', '.join(IMPORT_OPTIONS)}"
            )
        if value is None:
            continue
        if key in spec_options:
            raise ConfigError(
                f"import option {key!r} is given twice (in {spec!r} and as an option)"
            )
        spec_options[key] = value
    options = spec_options
    if name.endswith(".pt2"):
        if params:
            raise ConfigError(
                f"{name}: a saved program takes only the import options "
                f"({', '.join(IMPORT_OPTIONS)}), got {', '.join(params)}"
            )
        if not Path(name).is_file():
            raise ConfigError(f"saved program {name!r} does not exist")
        from . import from_exported

        return from_exported(name, name=spec.strip(), **options)
    model, args = _make(name, params)
    from . import from_module

    return from_module(model, args, name=spec.strip(), **options)


def describe_models() -> list[dict[str, Any]]:
    """One entry per zoo model: ``name``, ``summary`` (first docstring line) and ``params``
    (name -> default; the import options are not listed)."""
    out = []
    for name, fn in MODELS.items():
        sig = inspect.signature(fn)
        doc = inspect.getdoc(fn) or ""
        out.append(
            {
                "name": name,
                "summary": doc.splitlines()[0].replace("``", "") if doc else "",
                "params": {p.name: p.default for p in sig.parameters.values()},
            }
        )
    return out
