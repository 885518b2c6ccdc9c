"""``--memory-cap`` and the memory fields of ``simulate``, ``place`` and ``execute``."""

from __future__ import annotations

import argparse
import math
from typing import Any

import numpy as np

from ..hardware.cluster import Cluster
from ..ir.trace import Trace
from ..timing.memory import format_bytes, memory_caps, memory_report
from ._common import number_arg

_UNITS = {"tb": 1e12, "gb": 1e9, "mb": 1e6, "kb": 1e3, "b": 1.0}


def memory_cap_arg(text: str) -> float:
    """``BYTES`` (``16e9``, ``16GB``, ``512MB``: decimal units) or ``none`` (``inf``)."""
    t = text.strip().lower()
    if t == "none":
        return math.inf
    for unit, size in _UNITS.items():
        if t.endswith(unit) and t[: -len(unit)].strip():
            try:
                return number_arg(above=0)(t[: -len(unit)].strip()) * size
            except argparse.ArgumentTypeError:
                break  # the message names what was typed, not what is left of it
    try:
        return number_arg(above=0)(text)
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(
            f"must be a number of bytes > 0 with an optional unit (16e9, 16GB, 512MB; units "
            f"{', '.join(u.upper() for u in _UNITS)}) or none, got {text!r}"
        ) from None


def add_memory_cap_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--memory-cap",
        type=memory_cap_arg,
        metavar="BYTES|none",
        help="memory of every device (e.g. 16e9 or 16GB; none: unconstrained): the placers "
        "keep to it and the feasibility check uses it; default: each device's memory_bytes",
    )


def memory_fields(trace: Trace, cluster: Cluster, cap: float | None) -> dict[str, Any]:
    """``peak_memory_bytes``, ``memory_bytes`` (the caps) and ``feasible`` (with
    ``over_memory`` when false) of ``trace`` on ``cluster``; ``cap`` is ``--memory-cap``."""
    caps = memory_caps(cluster, "device" if cap is None else (None if math.isinf(cap) else cap))
    return memory_report(trace.peak_memory_bytes, caps)


def memory_lines(fields: dict[str, Any]) -> list[str]:
    """Text lines: peak / cap per device, and the devices over their cap."""
    peaks = fields["peak_memory_bytes"]
    if peaks is None:
        return []
    caps = fields["memory_bytes"]
    pairs = " ".join(
        f"{format_bytes(p)}/{format_bytes(c)}" for p, c in zip(peaks, caps, strict=True)
    )
    lines = [f"  memory       {pairs}  (peak/cap per device)"]
    if not fields["feasible"]:
        over = ", ".join(
            f"device {o['device']} by {format_bytes(o['excess_bytes'])}"
            for o in fields["over_memory"]
        )
        lines.append(f"  infeasible   over memory on {over}")
    elif not np.any(np.asarray(peaks) > 0):
        lines[0] += " -- the graph has no tensor sizes"
    return lines
