"""Sizing a workload to a time budget: the largest round ``scale`` whose predicted run fits,
and the spec that asks for it (``ffnn`` -> ``ffnn:scale=0.25``; specs are read by
:mod:`doppler_lab.workloads.specs`).

The prediction is any callable (the executor's cost model, the simulator, a flop count), so
this module needs nothing but the generators.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable

from ..house.errors import DopplerLabError
from ..ir.graph import DataflowGraph
from . import WORKLOADS, build
from .specs import parse_graph_spec

__all__ = ["scale_within", "with_scale"]


def scale_within(
    spec: str, predict_s: Callable[[DataflowGraph], float], budget_s: float = 60.0
) -> tuple[float, float] | None:
    """The largest round ``scale`` of workload ``spec`` whose predicted time fits ``budget_s``.

    Tries round values (``0.5``, ``0.25``, ``0.1``, ...) below the spec's own scale, starting
    from the cube-law guess (matmul flops grow with the cube of the scale) and stepping down or
    up by what :func:`predict_s` says of each built graph.

    Returns:
        ``(scale, predicted seconds)``, or ``None`` when ``spec`` is not a workload with a
        numeric ``scale`` or no round value below it fits.

    Example:
        >>> scale_within("chainmm", lambda g: g.flops.sum() / 1e12, budget_s=1.0)
        (0.5, 0.824...)
    """
    try:
        parsed = parse_graph_spec(spec)
    except DopplerLabError:
        return None
    if parsed.kind != "workload":  # a file, a paper graph or an imported model
        return None
    name, params = parsed.target, dict(parsed.params)
    default = inspect.signature(WORKLOADS[name]).parameters.get("scale")
    scale0 = params.get("scale", None if default is None else default.default)
    if isinstance(scale0, bool) or not isinstance(scale0, int | float) or scale0 <= 0:
        return None
    ladder = [v for v in _round_values() if v < scale0]
    seen: dict[int, float | None] = {}

    def fits(i: int) -> bool:
        if i not in seen:
            try:
                seen[i] = float(predict_s(build(name, **{**params, "scale": ladder[i]})))
            except DopplerLabError:  # too small for its blocks
                seen[i] = None
        t = seen[i]
        return t is not None and t <= budget_s

    if not ladder:
        return None
    whole = float(predict_s(build(name, **{**params, "scale": scale0})))
    guess = scale0 * (budget_s / whole) ** (1 / 3) if whole > 0 else scale0
    i = next((k for k, v in enumerate(ladder) if v <= guess), len(ladder) - 1)
    while not fits(i):
        if i + 1 >= len(ladder) or seen[i] is None:
            return None
        i += 1
    while i > 0 and fits(i - 1):
        i -= 1
    return ladder[i], seen[i]  # type: ignore[return-value]


def _round_values() -> list[float]:
    """Round scales, largest first: 7.5, 5, 2.5, 2, 1, 0.75, 0.5, 0.25, 0.2, 0.1, ... 0.001."""
    out = [k * 10.0**e for e in range(0, -4, -1) for k in (7.5, 5.0, 2.5, 2.0, 1.0)]
    return [round(v, 6) for v in out]


def with_scale(spec: str, scale: float) -> str:
    """Workload ``spec`` with its ``scale`` parameter set (written with ``:g``).

    Example:
        >>> with_scale("ffnn", 0.25), with_scale("ffnn:layers=2,scale=1", 0.1)
        ('ffnn:scale=0.25', 'ffnn:layers=2,scale=0.1')
    """
    return str(parse_graph_spec(spec, ("workload",)).with_params(scale=f"{scale:g}"))
