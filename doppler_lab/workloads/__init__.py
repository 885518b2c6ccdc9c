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
from collections.abc import Callable
from types import MappingProxyType
from typing import Any

from ..house.errors import ConfigError, DopplerLabError
from ..house.limits import MAX_DIM
from ..house.settings import check_setting, parse_item, unknown_setting
from ..house.settings import parse_spec as _parse_spec
from ..ir.graph import DataflowGraph
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
    """``value`` checked against the type of the parameter's default
    (:func:`doppler_lab.house.settings.check_setting`)."""
    owner = f"workload {workload!r}"
    if isinstance(default, bool):
        kind = "bool"
    elif isinstance(default, int):
        kind = "int"  # never 8.0 or true: "1e3" parses as 1000
    elif isinstance(default, float):
        if isinstance(value, str) and key == "scale":  # a named scale ("tiny"): checked there
            return value
        kind = "float"
    elif isinstance(default, str):
        kind = "str"
    else:
        return value
    lo = 0 if key == "seed" else None  # numpy takes no negative seed
    hi = MAX_DIM if kind == "int" else None
    return check_setting(value, kind, owner, key, "parameter", minimum=lo, maximum=hi)


def build(name: str, **params: Any) -> DataflowGraph:
    """The graph of workload ``name`` with ``params`` (others at their defaults).

    Raises:
        ConfigError: unknown workload or parameter, a value of the wrong type or out of range.
    """
    defaults = _defaults(name)
    for key in params:
        if key not in defaults:
            raise unknown_setting(f"workload {name!r}", key, defaults, "parameter")
    checked = {k: _coerce(name, k, v, defaults[k]) for k, v in params.items()}
    _check_size(name, checked)
    return WORKLOADS[name](**checked)


#: an integer parameter above this is checked up front: the graph's size is extrapolated from
#: two small builds (a count like ``layers`` or ``blocks`` grows the graph polynomially)
_SIZE_CHECK_ABOVE = 64


def _check_size(name: str, params: dict[str, Any]) -> None:
    """Refuse, before building, a graph that would pass :data:`~doppler_lab.house.limits.MAX_NODES`.

    The large integer parameters (above :data:`_SIZE_CHECK_ABOVE`) are set to 16 for one build;
    each one is then halved to 8 for another, giving its exponent ``k`` (nodes ~ value**k); the
    estimate is the first build's node count times each ``(value / 16) ** k``."""
    from ..house.limits import MAX_NODES

    big = {
        k: v
        for k, v in params.items()
        if isinstance(v, int) and not isinstance(v, bool) and v > _SIZE_CHECK_ABOVE
    }
    if not big:
        return
    base = {**params, **{k: 16 for k in big}}
    try:
        n16 = WORKLOADS[name](**base).num_nodes
        estimate = float(n16)
        for key, value in big.items():
            n8 = WORKLOADS[name](**{**base, key: 8}).num_nodes
            estimate *= (value / 16) ** max(math.log2(max(n16, 1) / max(n8, 1)), 0.0)
    except DopplerLabError:  # the small sizes do not fit the other parameters: no estimate
        return
    if estimate > MAX_NODES:
        what = ", ".join(f"{k}={v}" for k, v in big.items())
        raise ConfigError(
            f"workload {name!r}: {what} gives about {estimate:.3g} nodes; the limit is "
            f"{MAX_NODES} (doppler_lab.house.limits.MAX_NODES)"
        )


def parse_param(item: str, context: str = "") -> tuple[str, Any]:
    """``"heads=8"`` -> ``("heads", 8)``; values parsed as ints, floats (``1/256`` too),
    ``true``/``false`` or strings (:func:`doppler_lab.house.settings.parse_item`)."""
    return parse_item(item, context.rstrip(": ") or "workload spec", "parameter")


def parse_spec(spec: str) -> tuple[str, dict[str, Any]]:
    """``"llama_block:heads=8,seq=512"`` -> ``("llama_block", {"heads": 8, "seq": 512})``
    (:func:`doppler_lab.house.settings.parse_spec`); the workload form of the graph spec
    grammar (:mod:`doppler_lab.workloads.specs`)."""
    return _parse_spec(spec, f"workload spec {spec.strip()!r}", "parameter")


def build_from_spec(spec: str) -> DataflowGraph:
    """A graph from ``"name"`` or ``"name:key=value,key=value"`` (see :func:`parse_spec`): a
    workload only; any graph spec (files, models, paper graphs) is
    :func:`doppler_lab.workloads.specs.graph_from_spec`."""
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
