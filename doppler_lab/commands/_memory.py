"""``--memory-cap`` and the memory fields of ``simulate``, ``place`` and ``execute``."""

from __future__ import annotations

import argparse
import math
from typing import Any

import numpy as np

from ..hardware.cluster import Cluster
from ..house.errors import ClusterError
from ..ir.trace import Trace
from ..timing.memory import format_bytes, memory_report, memory_reserves
from ._common import number_arg

_UNITS = {"tb": 1e12, "gb": 1e9, "mb": 1e6, "kb": 1e3, "b": 1.0}


def _bytes_arg(text: str, number: Any, what: str, none: bool = False) -> float:
    """``text`` as bytes, with an optional decimal unit (``16GB``, ``512MB``), by ``number``;
    a bad value is named as typed (``16XB``), not as what is left of it."""
    t = text.strip().lower()
    value: float | None = None
    for unit, size in _UNITS.items():
        if t.endswith(unit) and t[: -len(unit)].strip():
            try:
                value = number(t[: -len(unit)].strip()) * size
            except argparse.ArgumentTypeError:
                pass
            break
    if value is None:
        try:
            value = number(text)
        except argparse.ArgumentTypeError:
            pass
    # a finite number times its unit can overflow (1e300GB): never a silent 'none'
    if value is None or not math.isfinite(value):
        raise argparse.ArgumentTypeError(
            f"must be a number of bytes {what} with an optional unit (16e9, 16GB, 512MB; units "
            f"{', '.join(u.upper() for u in _UNITS)}){' or none' if none else ''}, got {text!r}"
            + (" (too large)" if value is not None else "")
        )
    return value


def memory_cap_arg(text: str) -> float:
    """``BYTES`` (``16e9``, ``16GB``, ``512MB``: decimal units) or ``none`` (``inf``)."""
    if text.strip().lower() == "none":
        return math.inf
    return _bytes_arg(text, number_arg(above=0), "> 0", none=True)


def memory_reserve_arg(text: str) -> float:
    """``BYTES`` kept free on every device for the runtime (``0.5GB``, ``0``)."""
    return _bytes_arg(text, number_arg(minimum=0), ">= 0")


def add_memory_cap_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--memory-cap",
        type=memory_cap_arg,
        metavar="BYTES|none",
        help="memory of every device (e.g. 16e9 or 16GB; none: unconstrained): the placers "
        "keep to it less the runtime reserve and the feasibility check uses it; default: each "
        "device's memory_bytes",
    )
    p.add_argument(
        "--memory-reserve",
        type=memory_reserve_arg,
        metavar="BYTES",
        help="memory of every device kept free for the runtime (CUDA context, allocator slack; "
        "e.g. 0.5GB or 0); default: 256 MiB + 2%% of a GPU's memory, none on CPUs",
    )


def with_memory_args(cluster: Cluster, cap: float | None, reserve: float | None) -> Cluster:
    """``cluster`` with ``--memory-cap`` and ``--memory-reserve`` applied (each None: unset).

    Raises:
        ClusterError: a reserve not below a device's memory (one line naming both).
    """
    if cap is None and reserve is None:
        return cluster
    try:
        return cluster.with_memory("keep" if cap is None else cap, reserve)
    except ClusterError as exc:
        raise ClusterError(f"--memory-reserve {format_bytes(reserve)}: {exc}") from None


def memory_fields(
    trace: Trace, cluster: Cluster, cap: float | None, reserve: float | None = None
) -> dict[str, Any]:
    """``peak_memory_bytes``, ``memory_bytes`` (each device's memory), ``memory_reserve_bytes``
    (kept for the runtime) and ``feasible`` (with ``over_memory`` when false: the peak over the
    memory less the reserve) of ``trace`` on ``cluster``; ``cap`` is ``--memory-cap`` and
    ``reserve`` ``--memory-reserve``."""
    capped = with_memory_args(cluster, cap, reserve)
    memory = np.array([dev.memory_bytes for dev in capped.devices], dtype=np.float64)
    return memory_report(trace.peak_memory_bytes, memory, memory_reserves(capped))


def memory_lines(fields: dict[str, Any], peak: str = "peak") -> list[str]:
    """Text lines: peak / cap per device, and the devices over their cap; ``peak`` names the
    peaks (``"measured peak"`` for a run of the executor)."""
    peaks = fields["peak_memory_bytes"]
    if peaks is None:
        return []
    caps = fields["memory_bytes"]
    pairs = " ".join(
        f"{format_bytes(p)}/{format_bytes(c)}" for p, c in zip(peaks, caps, strict=True)
    )
    lines = [f"  memory       {pairs}  ({peak}/memory per device)"]
    reserve = fields.get("memory_reserve_bytes") or []
    if any(r > 0 for r in reserve):
        kept = " ".join(format_bytes(r) for r in reserve)
        lines.append(f"  reserve      {kept}  (per device, kept for the runtime)")
    if not fields["feasible"]:
        over = ", ".join(
            f"device {o['device']} by {format_bytes(o['excess_bytes'])}"
            for o in fields["over_memory"]
        )
        lines.append(f"  infeasible   over memory on {over}")
    elif not np.any(np.asarray(peaks) > 0):
        lines[0] += " -- the graph has no tensor sizes"
    return lines
