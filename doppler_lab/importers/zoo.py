"""The model zoo: small seeded PyTorch models to import, by name, wherever a workload is accepted.

A model spec is ``NAME`` or ``NAME:key=value,...`` (the workloads' syntax; the grammar of every
graph spec is :mod:`doppler_lab.workloads.specs`) with ``NAME`` one of :data:`MODELS`, or
``FILE.py:FUNC`` / ``FILE.py:FUNC:key=value,...`` for a function in a user's file that returns
``(model, example_args)`` (its keyword arguments come from the parameters). The import options
:data:`IMPORT_OPTIONS` (``granularity``, ``depth``, ``merge``, ``weights``) may be given in any
spec; they go to :func:`doppler_lab.importers.from_module`, the other parameters to the model.

Weights are random (nothing is downloaded) and seeded by ``seed``: the same spec gives the same
model, inputs and graph. With ``weights=none`` the model is built with its parameters on the
``meta`` device and each becomes a generated weight (a seeded recipe the executor makes on the
device that reads it; see :mod:`doppler_lab.importers`): any size imports in little memory.

``hf-llama`` and ``hf-gpt2`` take a ``preset``, a published architecture (:data:`PRESETS`:
``llama2-7b``, ``llama2-13b``, ``llama3-8b``, ``gpt2-xl``) whose sizes the other parameters
override (``hf-llama:preset=llama2-13b,dtype=float16,seq=512,layers=4``); a preset defaults to
``weights=none`` and to its published dtype.

Example:
    >>> model, args = make_model("mlp:layers=2,hidden=16")
    >>> tuple(model(*args).shape)
    (8, 10)
"""

from __future__ import annotations

import contextlib
import importlib.util
import inspect
import os
import re
import sys
from collections.abc import Callable, Iterator
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from ..house.deps import require
from ..house.errors import ConfigError
from ..house.limits import MAX_MODEL_LAYERS, MAX_MODEL_SIZE
from ..house.settings import check_setting, unknown_setting
from ..house.userfiles import input_file
from ..house.validate import exception_line

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
IMPORT_OPTIONS: tuple[str, ...] = ("granularity", "depth", "merge", "weights")

#: dtypes a zoo model's parameters and activations may have
MODEL_DTYPES: tuple[str, ...] = ("float32", "float16", "bfloat16")

#: published architectures, by zoo model: the parameters each preset sets (sizes from the
#: models' config.json files; rope theta and norm epsilon as published; the dtype they ship in)
PRESETS: MappingProxyType[str, MappingProxyType[str, MappingProxyType[str, Any]]] = (
    MappingProxyType(
        {
            "hf-llama": MappingProxyType(
                {
                    "llama2-7b": MappingProxyType(
                        dict(
                            hidden=4096,
                            layers=32,
                            heads=32,
                            kv_heads=32,
                            intermediate=11008,
                            vocab=32000,
                            positions=4096,
                            rope_theta=10000.0,
                            norm_eps=1e-5,
                            dtype="float16",
                        )
                    ),
                    "llama2-13b": MappingProxyType(
                        dict(
                            hidden=5120,
                            layers=40,
                            heads=40,
                            kv_heads=40,
                            intermediate=13824,
                            vocab=32000,
                            positions=4096,
                            rope_theta=10000.0,
                            norm_eps=1e-5,
                            dtype="float16",
                        )
                    ),
                    "llama3-8b": MappingProxyType(
                        dict(
                            hidden=4096,
                            layers=32,
                            heads=32,
                            kv_heads=8,
                            intermediate=14336,
                            vocab=128256,
                            positions=8192,
                            rope_theta=500000.0,
                            norm_eps=1e-5,
                            dtype="bfloat16",
                        )
                    ),
                }
            ),
            "hf-gpt2": MappingProxyType(
                {
                    "gpt2-xl": MappingProxyType(
                        dict(
                            hidden=1600,
                            layers=48,
                            heads=25,
                            vocab=50257,
                            positions=1024,
                            dtype="float32",
                        )
                    ),
                }
            ),
        }
    )
)

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


def _token_ids(batch: int, seq: int, vocab: int, seed: int) -> tuple[torch.Tensor]:
    """Token ids drawn from ``seed`` alone: the same whether the weights were drawn before them
    or are generated (``weights=none`` draws nothing)."""
    import torch

    return (torch.randint(0, vocab, (batch, seq), generator=torch.Generator().manual_seed(seed)),)


def _positions(model: str, seq: int, positions: int) -> int:
    """The model's context length: ``positions``, or (0) room for ``seq``."""
    if not positions:
        return max(64, seq)
    if seq > positions:
        raise ConfigError(
            f"{model}: parameter seq={seq} is longer than positions={positions} (the model's "
            "context); expected seq <= positions"
        )
    return positions


def _build_hf(cls: Any, config: Any, dtype: str) -> Any:
    """A Hugging Face model built as ``from_pretrained`` builds it in ``dtype``: parameters in
    that dtype, buffers as the model makes them (rotary tables stay float32)."""
    import torch

    from .models import CausalLMLogits

    return CausalLMLogits(cls._from_config(config, dtype=getattr(torch, dtype))).eval()


def hf_llama(
    layers: int = 2,
    hidden: int = 64,
    heads: int = 4,
    kv_heads: int = 0,
    seq: int = 16,
    vocab: int = 128,
    batch: int = 1,
    seed: int = 0,
    intermediate: int = 0,
    positions: int = 0,
    rope_theta: float = 10000.0,
    norm_eps: float = 1e-6,
    dtype: str = "float32",
    preset: str = "",
) -> ModelAndArgs:
    """A Hugging Face Llama (``LlamaForCausalLM``, random weights) returning its logits.

    Its keyword parameters are the spec keys of ``hf-llama:...`` in the graph grammar
    (:mod:`doppler_lab.workloads.specs`), so they stay flat.

    ``kv_heads`` 0 means ``heads`` (no grouped-query attention); ``intermediate`` 0 makes the
    MLP 4 x ``hidden`` wide; ``positions`` 0 makes the context ``max(64, seq)``. ``preset``:
    llama2-7b, llama2-13b or llama3-8b (:data:`PRESETS`).
    """
    require("transformers", "the model zoo's 'hf-llama'")
    from transformers import LlamaConfig, LlamaForCausalLM

    _check_heads("hf-llama", hidden, heads, kv_heads)
    config = LlamaConfig(
        vocab_size=vocab,
        hidden_size=hidden,
        intermediate_size=intermediate or 4 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads or heads,
        max_position_embeddings=_positions("hf-llama", seq, positions),
        rms_norm_eps=norm_eps,
        rope_parameters={"rope_type": "default", "rope_theta": float(rope_theta)},
        bos_token_id=0,
        eos_token_id=0,
        use_cache=False,
    )
    return _build_hf(LlamaForCausalLM, config, dtype), _token_ids(batch, seq, vocab, seed)


def hf_gpt2(
    layers: int = 2,
    hidden: int = 64,
    heads: int = 4,
    seq: int = 16,
    vocab: int = 128,
    batch: int = 1,
    seed: int = 0,
    positions: int = 0,
    dtype: str = "float32",
    preset: str = "",
) -> ModelAndArgs:
    """A Hugging Face GPT-2 (``GPT2LMHeadModel``, random weights) returning its logits.

    Its keyword parameters are the spec keys of ``hf-gpt2:...`` in the graph grammar
    (:mod:`doppler_lab.workloads.specs`), so they stay flat.

    ``positions`` 0 makes the context ``max(64, seq)``; ``preset``: gpt2-xl (:data:`PRESETS`).
    """
    require("transformers", "the model zoo's 'hf-gpt2'")
    from transformers import GPT2Config, GPT2LMHeadModel

    _check_heads("hf-gpt2", hidden, heads)
    config = GPT2Config(
        vocab_size=vocab,
        n_embd=hidden,
        n_layer=layers,
        n_head=heads,
        n_positions=_positions("hf-gpt2", seq, positions),
        bos_token_id=0,
        eos_token_id=0,
        use_cache=False,
    )
    return _build_hf(GPT2LMHeadModel, config, dtype), _token_ids(batch, seq, vocab, seed)


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


def _check_choice(owner: str, key: str, value: Any, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise ConfigError(
            f"{owner}: parameter {key}={value!r} is not one of the choices; expected one of "
            f"{', '.join(choices) or '(none)'}"
        )


def _check_params(name: str, params: dict[str, Any]) -> None:
    defaults = inspect.signature(MODELS[name]).parameters
    owner = f"model {name!r}"
    for key, value in params.items():
        if key not in defaults:
            raise unknown_setting(owner, key, [*defaults, *IMPORT_OPTIONS], "parameter")
        if key == "preset":
            _check_choice(owner, key, value, tuple(PRESETS.get(name, {})))
            continue
        if key == "dtype":
            _check_choice(owner, key, value, MODEL_DTYPES)
            continue
        if key in ("rope_theta", "norm_eps"):
            check_setting(value, "float", owner, key, "parameter", above=0)
            continue
        low = 0 if key in ("seed", "kv_heads", "intermediate", "positions") else 1
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
    path = input_file(file, "model file")
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
        raise ConfigError(
            f"model file {file!r} failed to load: {exception_line(exc, 300, typed=True, first=False)}"
        ) from exc
    fn = getattr(module, func, None)
    if not callable(fn):
        raise ConfigError(f"model file {file!r} has no function {func!r}")
    return fn


class _UserExit(BaseException):
    """``os._exit`` called by a user's model code (caught by :func:`user_code`)."""

    def __init__(self, code: Any):
        super().__init__(code)
        self.code = code


@contextlib.contextmanager
def user_code(what: str) -> Iterator[None]:
    """Run a user's model code (``FILE.py:FUNC``, a saved program) contained: what it prints
    goes to stderr (stdout carries only the command's result, ``import --json`` too), and
    ``sys.exit``, ``os._exit``, ``KeyboardInterrupt`` and other ``BaseException`` exits become
    one :class:`ConfigError` line naming ``what`` (the command then exits with code 2).
    Errors of doppler_lab pass through; other exceptions are left to the caller."""
    sys.stdout.flush()
    try:  # output written below Python's sys.stdout (C code, os.write(1, ...)) as well
        saved = os.dup(1)
        os.dup2(2, 1)
    except OSError:
        saved = None
    real_exit = os._exit

    def no_exit(code: Any = 0) -> None:
        raise _UserExit(code)

    os._exit = no_exit  # type: ignore[assignment]
    try:
        with contextlib.redirect_stdout(sys.stderr):
            yield
    except SystemExit as exc:
        raise ConfigError(
            f"{what} called sys.exit({exc.code!r}); expected it to return (model, example_args)"
        ) from None
    except _UserExit as exc:
        raise ConfigError(
            f"{what} called os._exit({exc.code!r}); expected it to return (model, example_args)"
        ) from None
    except (Exception, GeneratorExit):
        raise
    except BaseException as exc:  # KeyboardInterrupt and the user's own BaseException types
        raise ConfigError(
            f"{what} raised {exception_line(exc, 300, typed=True, first=False)}; expected it to return"
        ) from None
    finally:
        os._exit = real_exit  # type: ignore[assignment]
        if saved is not None:
            sys.stderr.flush()
            os.dup2(saved, 1)
            os.close(saved)


def _call_user_function(name: str, params: dict[str, Any]) -> ModelAndArgs:
    from torch import nn

    fn = _load_function(name)
    try:
        out = fn(**params)
    except TypeError as exc:
        raise ConfigError(f"{name}: {exception_line(exc, 300, typed=True, first=False)}") from exc
    except Exception as exc:
        raise ConfigError(
            f"{name} raised {exception_line(exc, 300, typed=True, first=False)}"
        ) from exc
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


def _weights(params: dict[str, Any], options: dict[str, Any]) -> str:
    """The spec's ``weights``: as given, else ``none`` for a preset and ``stored`` otherwise."""
    from .options import WEIGHTS

    weights = options.get("weights")
    if weights is None:
        return "none" if params.get("preset") else "stored"
    if weights not in WEIGHTS:
        raise ConfigError(
            f"import option weights={weights!r} is not one of the choices; expected one of "
            f"{', '.join(WEIGHTS)}"
        )
    return str(weights)


def _make(name: str, params: dict[str, Any], weights: str = "stored") -> ModelAndArgs:
    import torch

    from .weights import check_real_buffers, check_weight_memory, params_on_meta

    # generated weights: parameters on the meta device, nothing allocated or initialised
    build = params_on_meta() if weights == "none" else contextlib.nullcontext()
    if _FILE_SPEC.match(name):
        seed = params.get("seed", 0)
        with torch.random.fork_rng(devices=[]), build, user_code(name):
            torch.manual_seed(seed if isinstance(seed, int) else 0)
            made = _call_user_function(name, params)
    else:
        if name not in MODELS:
            raise _unknown(name)
        _check_params(name, params)
        if params.get("preset"):  # the published sizes, under what the spec sets itself
            params = {**PRESETS[name][params["preset"]], **params}
        seed = params.get("seed", 0)
        if weights == "stored":  # their size first, from a build that allocates none of them
            with torch.random.fork_rng(devices=[]), params_on_meta():
                check_weight_memory(MODELS[name](**params)[0], f"model {name!r}")
        with torch.random.fork_rng(devices=[]), build:
            torch.manual_seed(seed)
            made = MODELS[name](**params)
    if weights == "none" and isinstance(made, tuple) and isinstance(made[0], torch.nn.Module):
        check_real_buffers(made[0], f"model {name!r}")
    return made


def make_model(spec: str) -> ModelAndArgs:
    """The model and example arguments of ``spec`` (import options in it are ignored, but for
    ``weights``: with ``none``, the default of a preset, the parameters are on the ``meta``
    device).

    Raises:
        ConfigError: an unknown model, parameter or file; a value out of range.
    """
    name, params, options = split_spec(spec)
    return _make(name, params, _weights(params, options))


def import_model(spec: str, **options: Any) -> DataflowGraph:
    """The dataflow graph of ``spec``: :func:`make_model` (or a saved program), then
    :func:`doppler_lab.importers.from_module` with the import options of the spec and
    ``options`` (``granularity``, ``depth``, ``merge``, ``weights``; ``None`` values are not
    given). Generated weights are seeded by the spec's ``seed``.

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
    seed = params.get("seed", 0)
    if name.endswith(".pt2"):
        if params:
            raise ConfigError(
                f"{name}: a saved program takes only the import options "
                f"({', '.join(IMPORT_OPTIONS)}), got {', '.join(params)}"
            )
        input_file(name, "saved program", limit="MAX_TENSOR_FILE_BYTES")
        from . import from_exported

        with user_code(name):  # torch.export.load can run code stored in the file
            return from_exported(name, name=spec.strip(), **options)
    options["weights"] = _weights(params, options)
    model, args = _make(name, params, options["weights"])
    from . import from_module

    # the export runs the model's forward: a user's code again
    with user_code(name) if _FILE_SPEC.match(name) else contextlib.nullcontext():
        return from_module(
            model, args, name=spec.strip(), seed=seed if isinstance(seed, int) else 0, **options
        )


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
