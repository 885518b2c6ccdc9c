"""Parametric workload generators and their registry.

Every einsum workload (``chainmm``, ``ffnn``, ``llama_block``, ``llama_layer``, ``moe_layer``)
is built from block-partitioned tensors (:mod:`doppler_lab.workloads._blocks`): every node is
executable and its flops and bytes follow from its shapes. Defaults have the size of the DOPPLER
paper's graphs; ``scale`` shrinks the tensors (same structure) so tests can run them, and block,
layer and size parameters grow them past 10,000 nodes. ``random_dag`` makes cost-only random
DAGs. :mod:`doppler_lab.workloads.assemble` rebuilds the dense tensors from a run.

Example:
    >>> g = build_from_spec("chainmm:matrices=3,scale=0.001")
    >>> g.meta["generator"], g.num_nodes
    ('chainmm', 36)
"""

from __future__ import annotations

import inspect
import math
import re
from collections.abc import Callable
from types import MappingProxyType
from typing import Any

from ..errors import ConfigError
from ..graph import DataflowGraph
from ..validate import is_int, is_number, parse_int_text, parse_number_text, show
from .chainmm import chainmm
from .ffnn import ffnn
from .llama import llama_block, llama_layer
from .moe import moe_layer
from .random_dag import random_dag

__all__ = ["WORKLOADS", "build", "build_from_spec", "describe", "parse_param", "parse_spec"]

#: name -> generator (read-only)
WORKLOADS: MappingProxyType[str, Callable[..., DataflowGraph]] = MappingProxyType(
    {
        "chainmm": chainmm,
        "ffnn": ffnn,
        "llama_block": llama_block,
        "llama_layer": llama_layer,
        "moe_layer": moe_layer,
        "random_dag": random_dag,
    }
)

_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def _generator(name: str) -> Callable[..., DataflowGraph]:
    try:
        return WORKLOADS[name]
    except KeyError:
        raise ConfigError(
            f"unknown workload {name!r}; expected one of {', '.join(WORKLOADS)}"
        ) from None


def _defaults(name: str) -> dict[str, Any]:
    sig = inspect.signature(_generator(name))
    return {p.name: p.default for p in sig.parameters.values()}


def _coerce(workload: str, key: str, value: Any, default: Any) -> Any:
    """``value`` checked against the type of the parameter's default."""
    if isinstance(default, bool):
        ok, expected = isinstance(value, bool), "true or false"
    elif isinstance(default, int):
        ok, expected = is_int(value), "an integer"  # never 8.0 or true: "1e3" parses as 1000
        if key == "seed":  # numpy takes no negative seed
            ok, expected = ok and value >= 0, "an integer >= 0"
    elif isinstance(default, float):
        if isinstance(value, str) and key == "scale":  # a named scale ("tiny"): checked there
            return value
        ok, expected = is_number(value) and math.isfinite(value), "a finite number"
        value = float(value) if ok else value
    elif isinstance(default, str):
        ok, expected = isinstance(value, str), "a string"
    else:
        ok, expected = True, ""
    if not ok:
        raise ConfigError(
            f"workload {workload!r}: parameter {key}={show(value)}; expected {expected}"
        )
    return value


def build(name: str, **params: Any) -> DataflowGraph:
    """The graph of workload ``name`` with ``params`` (others at their defaults).

    Raises:
        ConfigError: unknown workload or parameter, a value of the wrong type or out of range.
    """
    defaults = _defaults(name)
    for key in params:
        if key not in defaults:
            raise ConfigError(
                f"workload {name!r} has no parameter {key!r}; expected one of {', '.join(defaults)}"
            )
    checked = {k: _coerce(name, k, v, defaults[k]) for k, v in params.items()}
    return WORKLOADS[name](**checked)


def _parse_value(text: str) -> Any:
    """``8`` / ``1e3`` -> int, ``1e-5`` / ``0.5`` / ``1/256`` -> float, ``true``/``false`` ->
    bool, anything else (``nan``, ``1_000``, ``٣``) -> the string itself, which a numeric
    parameter then rejects."""
    low = text.lower()
    if low in ("true", "false"):
        return low == "true"
    whole = parse_int_text(text)
    if whole is not None:
        return whole
    number = parse_number_text(text)
    if number is not None:
        return number
    num, slash, den = text.partition("/")
    if slash:
        a, b = parse_number_text(num), parse_number_text(den)
        if a is not None and b and math.isfinite(a / b):
            return a / b
    return text


def parse_param(item: str, context: str = "") -> tuple[str, Any]:
    """``"heads=8"`` -> ``("heads", 8)``; values parsed as ints, floats (``1/256`` too),
    ``true``/``false`` or strings."""
    key, eq, value = item.partition("=")
    key = key.strip()
    if not eq or not _NAME_RE.match(key) or not value.strip():
        raise ConfigError(f"{context}{item!r} is not of the form key=value")
    return key, _parse_value(value.strip())


def parse_spec(spec: str) -> tuple[str, dict[str, Any]]:
    """``"llama_block:heads=8,seq=512"`` -> ``("llama_block", {"heads": 8, "seq": 512})``."""
    name, _, rest = spec.strip().partition(":")
    params: dict[str, Any] = {}
    for item in filter(None, (s.strip() for s in rest.split(","))):
        key, value = parse_param(item, f"workload spec {spec!r}: ")
        if key in params:
            raise ConfigError(f"workload spec {spec!r}: parameter {key!r} is given twice")
        params[key] = value
    return name.strip(), params


def build_from_spec(spec: str) -> DataflowGraph:
    """A graph from ``"name"`` or ``"name:key=value,key=value"`` (see :func:`parse_spec`)."""
    name, params = parse_spec(spec)
    return build(name, **params)


def describe() -> list[dict[str, Any]]:
    """One entry per workload: ``name``, ``summary`` (first docstring line) and ``params``
    (name -> default)."""
    out = []
    for name, fn in WORKLOADS.items():
        doc = inspect.getdoc(fn) or ""
        out.append(
            {"name": name, "summary": doc.splitlines()[0] if doc else "", "params": _defaults(name)}
        )
    return out
