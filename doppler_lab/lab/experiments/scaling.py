"""Notebook 10: milliseconds per inference and training episode against graph size, DOPPLER
against Placeto; fitted exponents (1 is linear)."""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
from tqdm.auto import tqdm

from ...hardware.cluster import Cluster
from ...house.errors import ConfigError
from ...ir.graph import DataflowGraph
from ...ir.placement import round_robin
from ...policies.checkpoint import make_policy
from ...policies.policy_config import POLICY_PRESETS
from ...policies.speed import episode_times
from ...timing.sim import Simulator
from ...workloads.specs import cluster_from_spec, graph_from_spec
from .common import finite_or_none, spec_with, torch_threads

#: method -> policy kind
SCALING_METHODS: dict[str, str] = {
    "doppler": "dual",
    "placeto": "placeto",
    "placeto-recompute": "placeto",
    "gdp": "gdp",
}
#: method -> policy attributes set after it is built (``placeto-recompute``: Placeto with every
#: row of every step recomputed, as its authors compute it; ``placeto`` recomputes only what a
#: step changes)
SCALING_POLICY_ATTRS: dict[str, dict[str, Any]] = {"placeto-recompute": {"incremental": False}}


def _simulate_ms(graph: DataflowGraph, cluster: Cluster, repeats: int, batch: int) -> float:
    """Milliseconds of simulated makespan per episode, ``batch`` placements per call (as in
    a training update)."""

    sim = Simulator(graph, cluster, "wc")
    pls = [round_robin(graph, cluster.num_devices)] * batch
    sim.makespans(pls)  # compile
    ts = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        sim.makespans(pls)
        ts.append(time.perf_counter() - t0)
    return float(np.median(ts) * 1e3 / batch)


@dataclass(frozen=True)
class ScalingSetup:
    """What :func:`scaling_rows` times (notebook 10's parameters).

    Attributes:
        workload: a workload spec.
        size_param: the parameter that sizes it (``layers``, ``matrices``).
        sizes: its values, increasing.
        cluster: the cluster preset.
        methods: keys of :data:`SCALING_METHODS`.
        max_nodes: per method, the largest graph (compute nodes) it is timed on (Placeto's
            per-step re-embedding makes it quadratic); larger sizes are skipped. A method
            without a cap of its own takes its policy kind's (``placeto-recompute``:
            ``placeto``'s).
        repeats: timed calls per measurement (the median); the first size of each method is
            also warmed up (numba and PyG compile once).
        batch: DOPPLER's training episodes per encoder pass for ``train_batched_ms``
            (0: not measured); the others are timed one episode per update only.
        policy: policy-config overrides.
        seed: seed of the policies' weights.
    """

    workload: str = "llama_block"
    size_param: str = "layers"
    sizes: Sequence[int] = (1, 2, 4)
    cluster: str = "p100x4"
    methods: Sequence[str] = ("doppler", "placeto")
    max_nodes: Mapping[str, int] | None = None
    repeats: int = 3
    batch: int = 4
    policy: Mapping[str, Any] | None = None
    seed: int = 0


def scaling_rows(setup: ScalingSetup | None = None, progress: bool = False) -> list[dict[str, Any]]:
    """Milliseconds per episode of each method on the setup's workload at each size (one torch
    thread; default :class:`ScalingSetup`), with a progress bar when ``progress``.

    Returns:
        One row per (size, method): ``method``, ``size``, ``nodes`` (compute nodes), ``edges``,
        ``inference_ms``, ``train_ms``, ``train_batched_ms``, ``simulate_ms`` (the simulated
        makespan of an episode, batched as in a Stage II update), and the per-node microseconds.
    """

    s = setup or ScalingSetup()
    workload, size_param, sizes, methods = s.workload, s.size_param, s.sizes, s.methods
    repeats, batch, seed = s.repeats, s.batch, s.seed
    bad = [m for m in methods if m not in SCALING_METHODS]
    if bad:
        raise ConfigError(f"scaling: method {bad[0]!r}; expected one of {list(SCALING_METHODS)}")
    if list(sizes) != sorted(sizes) or not sizes:
        raise ConfigError(f"scaling: sizes {list(sizes)} must be given, increasing")
    cl = cluster_from_spec(s.cluster)
    caps = dict(s.max_nodes or {})
    base = POLICY_PRESETS["default"].replace(**dict(s.policy or {}))
    warmed: set[str] = set()
    rows = []
    with torch_threads(1):
        for size in tqdm(sizes, desc="sizes", disable=not progress):
            g = graph_from_spec(spec_with(workload, **{size_param: size}))
            n = int(g.compute_nodes.size)
            sim_ms = _simulate_ms(g, cl, repeats, max(batch, 1))
            for m in methods:
                kind = SCALING_METHODS[m]
                if n > caps.get(m, caps.get(kind, math.inf)):
                    continue
                pol = make_policy(base.replace(kind=kind), cl.num_devices, seed)
                for name, value in SCALING_POLICY_ATTRS.get(m, {}).items():
                    setattr(pol, name, value)
                t = episode_times(
                    pol, g, cl, repeats, batch if m == "doppler" else 0, m not in warmed
                )
                warmed.add(m)
                rows.append(
                    {
                        "method": m,
                        "size": size,
                        "nodes": n,
                        "edges": int(g.num_edges),
                        **t,
                        "simulate_ms": sim_ms,
                        "inference_us_per_node": t["inference_ms"] * 1e3 / n,
                        "train_us_per_node": t["train_ms"] * 1e3 / n,
                    }
                )
    return rows


#: the fitted range starts where fixed costs no longer dominate: at the first size from which
#: the per-node cost falls by less than this share to the next size (a cost that falls faster
#: is still paying off a fixed part, the encoder's setup and Python's per-call overhead)
FIXED_COST_SETTLED = 0.10


def fitted_from(per_node: Sequence[float], settled: float = FIXED_COST_SETTLED) -> int:
    """The index (sizes increasing) where the fitted range starts: the first size whose
    per-node cost the next size's is at least ``1 - settled`` of; at most the second-to-last
    size, so that two sizes are fitted.

    Example:
        >>> fitted_from([184.1, 130.3, 134.0, 131.7, 124.6, 167.8, 188.2])
        1
    """
    per = [float(x) for x in per_node]
    for i in range(len(per) - 1):
        if per[i + 1] >= (1.0 - settled) * per[i]:
            return i
    return max(0, len(per) - 2)


def scaling_fit(rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Per method, for inference and training: the exponent of time ~ nodes^k (least squares
    on logs; 1 is linear) over the sizes where fixed costs no longer dominate
    (:func:`fitted_from`: ``*_fit_from_nodes`` to ``max_nodes``), the exponent over every
    size (``*_exponent_all_sizes``), and the spread of the per-node cost (max / min)."""
    frame = pd.DataFrame(list(rows))
    out = []
    for m, f in frame.groupby("method", sort=False):
        f = f.sort_values("nodes")
        rec: dict[str, Any] = {"method": m, "sizes": len(f), "max_nodes": int(f.nodes.max())}
        rec["fixed_cost_settled"] = FIXED_COST_SETTLED  # the rule that chose the fitted range
        for what in ("inference", "train"):
            per = f[f"{what}_us_per_node"]
            start = fitted_from(per.tolist())
            tail = f.iloc[start:]

            def exponent(g: pd.DataFrame, what: str = what) -> float:
                if g.nodes.nunique() < 2:
                    return math.nan
                return float(np.polyfit(np.log(g.nodes), np.log(g[f"{what}_ms"]), 1)[0])

            rec[f"{what}_exponent"] = exponent(tail)
            rec[f"{what}_fit_from_nodes"] = int(tail.nodes.min())
            rec[f"{what}_exponent_all_sizes"] = exponent(f)
            rec[f"{what}_us_per_node_min"] = float(per.min())
            rec[f"{what}_us_per_node_max"] = float(per.max())
            rec[f"{what}_per_node_spread"] = float(per.max() / per.min())
        out.append(rec)
    return out


def speedup_rows(
    rows: Sequence[Mapping[str, Any]], method: str = "doppler", baseline: str = "placeto"
) -> list[dict[str, Any]]:
    """At each size both were timed: ``baseline`` time / ``method`` time (inference, training)."""
    frame = pd.DataFrame(list(rows))
    a = frame[frame.method == method].set_index("nodes")
    b = frame[frame.method == baseline].set_index("nodes")
    both = a.index.intersection(b.index)
    return [
        {
            "nodes": int(n),
            "inference_speedup": float(b.at[n, "inference_ms"] / a.at[n, "inference_ms"]),
            "train_speedup": float(b.at[n, "train_ms"] / a.at[n, "train_ms"]),
        }
        for n in both
    ]


def scaling_key_numbers(
    rows: Sequence[Mapping[str, Any]], method: str = "doppler", baseline: str = "placeto"
) -> dict[str, Any]:
    """The report index's numbers: ``method``'s time exponents and per-node spread, its
    milliseconds per episode on the largest graph, and the speed-up over ``baseline`` (and over
    ``baseline-recompute`` where it was timed) on the largest graph both were timed on."""
    fit = {f["method"]: f for f in scaling_fit(rows)}
    out: dict[str, Any] = {}
    if method in fit:
        f = fit[method]
        big = max((r for r in rows if r["method"] == method), key=lambda r: r["nodes"])
        out.update(
            {
                f"{method} inference exponent": f["inference_exponent"],
                f"{method} train exponent": f["train_exponent"],
                f"{method} inference per-node spread": f["inference_per_node_spread"],
                f"{method} largest graph nodes": big["nodes"],
                f"{method} inference ms (largest)": big["inference_ms"],
                f"{method} train ms (largest)": big["train_ms"],
            }
        )
    for other in (baseline, f"{baseline}-recompute"):  # the second where it was timed
        if other in fit:
            out[f"{other} inference exponent"] = fit[other]["inference_exponent"]
        sp = speedup_rows(rows, method, other)
        if sp:
            out[f"inference speed-up over {other}"] = sp[-1]["inference_speedup"]
            out[f"train speed-up over {other}"] = sp[-1]["train_speedup"]
    return {k: finite_or_none(v) for k, v in out.items()}
