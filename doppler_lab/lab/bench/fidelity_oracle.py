"""In-sample oracles of ``bench fidelity``: how well would the ``wc`` simulator rank the measured
placements if it knew what the timed runs themselves measured?

Each placement's median timed run is traced (``op_traces``: every op's start and end, every
copy's). Three oracles feed those measurements back into the host model
(:func:`~doppler_lab.lab.bench.fidelity._host_models`'s ``host``), one more piece each:

- ``oracle_ops``: each op's compute time on each device is the median of its measured durations
  there, over every traced run that put it there (an op never traced on a device keeps its
  table time, scaled by the median measured-to-table ratio of the ops that were);
- ``oracle_copies``: also each op's output takes the median of its measured copies to move
  (outputs never copied keep the modelled transfer);
- ``oracle_order``: also each placement's ops are dispatched in the order its traced run
  started them (``dispatch="priority"`` by measured start time), not FIFO by readiness.

They are fitted on the very runs they score (in-sample), so they bound what any op table, copy
model or dispatch rule of this simulator could reach on these measurements: where even
``oracle_order`` ranks below a target, the miss is not in the costs or the order the model
knows, but in what a single number per op cannot hold (per-run variation of the op times,
interference between concurrent ops) or in the measurements' own noise
(``spearman_ceiling``).
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

import numpy as np

from ...executor.fidelity_runs import median_rel_error, spearman
from ...ir.placement import Placement
from ...timing.sim import Simulator

#: the oracles, each adding one measured piece to the one before
ORACLES: tuple[str, ...] = ("oracle_ops", "oracle_copies", "oracle_order")


def _times(values: Sequence[float | None]) -> np.ndarray:
    return np.array([np.nan if v is None else v for v in values], dtype=np.float64)


def measured_op_times(
    g: Any, placements: Sequence[Placement], traces: Sequence[dict[str, Any]], table: np.ndarray
) -> np.ndarray:
    """``(N, D)`` compute times in the graph's raw units: per (op, device) the median measured
    duration over the traced runs, else the ``table``'s time times the median measured/table
    ratio of the (op, device) pairs that were traced."""
    n, d = table.shape
    seen: dict[tuple[int, int], list[float]] = {}
    for pl, tr in zip(placements, traces, strict=True):
        if not tr:
            continue
        dur = (_times(tr["end"]) - _times(tr["start"])) / g.time_scale
        dev = np.asarray(pl.device)
        for v in np.flatnonzero(np.isfinite(dur) & (dur > 0)):
            seen.setdefault((int(v), int(dev[v])), []).append(float(dur[v]))
    out = np.array(table, dtype=np.float64, copy=True)
    ratios = [np.median(ts) / table[k] for k, ts in seen.items() if table[k] > 0]
    if ratios:
        out *= float(np.median(ratios))
    for (v, dv), ts in seen.items():
        out[v, dv] = float(np.median(ts))
    out[np.asarray(g.is_input)] = 0.0
    return out


def measured_copy_times(g: Any, traces: Sequence[dict[str, Any]]) -> dict[int, float]:
    """``{edge: time}`` (raw units): for every edge out of an op whose output the traced runs
    copied, the median of those copies (a copy moves the producer's output, whichever consumer
    it serves first; one copy can serve several)."""
    seen: dict[int, list[float]] = {}
    for tr in traces:
        copies = (tr or {}).get("copies") or {}
        for a, start, end in zip(
            copies.get("src", []), copies.get("start", []), copies.get("end", []), strict=True
        ):
            if start is not None and end is not None and end >= start:
                seen.setdefault(int(a), []).append((end - start) / g.time_scale)
    src = np.asarray(g.edge_src)
    return {
        int(k): float(np.median(seen[int(src[k])]))
        for k in np.flatnonzero(np.isin(src, list(seen)))
    }


def oracle_scores(
    g: Any,
    placements: Sequence[Placement],
    measured: np.ndarray,
    traces: Sequence[dict[str, Any]],
    host_profile: Any,
) -> dict[str, float | None]:
    """``spearman_<oracle>`` and ``mre_<oracle>`` of each of :data:`ORACLES` against the
    ``measured`` makespans (None each where the runs were not traced)."""
    out: dict[str, float | None] = {}
    if len(traces) != len(placements) or not all(traces):
        return {f"{m}_{o}": None for o in ORACLES for m in ("spearman", "mre")}
    base = host_profile.cost_model(g)
    compute = measured_op_times(g, placements, traces, np.asarray(base.compute))
    copies = measured_copy_times(g, traces)
    off = ~np.eye(base.latency.shape[0], dtype=bool)
    latency = float(base.latency[off].mean()) if off.any() else 0.0
    for oracle in ORACLES:
        cm = copy.copy(base)
        cm.compute = compute
        if oracle != "oracle_ops" and copies:
            fixed = np.array(base.edge_fixed, dtype=np.float64, copy=True)
            moved = np.array(base.edge_bytes, dtype=np.float64, copy=True)
            for k, t in copies.items():  # the measured copy, the pair's latency aside
                fixed[k], moved[k] = max(t - latency, 0.0), 0.0
            cm.edge_fixed, cm.edge_bytes = fixed, moved
        sim = Simulator(g, host_profile.cluster, "wc", cost_model=cm)
        if oracle == "oracle_order":
            ordered = [
                Placement(pl.device, priority=np.nan_to_num(_times(tr["start"]), nan=0.0))
                for pl, tr in zip(placements, traces, strict=True)
            ]
            pred = sim.makespans(ordered, dispatch="priority")
        else:
            pred = sim.makespans(list(placements))
        out[f"spearman_{oracle}"] = spearman(pred, measured)
        out[f"mre_{oracle}"] = median_rel_error(pred, measured)
    return out


__all__ = ["ORACLES", "measured_copy_times", "measured_op_times", "oracle_scores"]
