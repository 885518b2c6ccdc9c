"""Argument helpers shared by the subcommands: graphs, clusters, placements, JSON output.

Graph and cluster specs are read by :mod:`doppler_lab.workloads.specs` (one grammar for every
command)."""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from collections.abc import Callable
from typing import Any

import numpy as np

from ..hardware.cluster import Cluster
from ..house.errors import ConfigError, PlacementError, SimulationError
from ..house.jsonutil import to_jsonable
from ..house.limits import LIMITS
from ..house.userfiles import file_or_folder
from ..house.validate import parse_int_text, parse_number_text, show
from ..ir.graph import DataflowGraph
from ..ir.placement import Placement, random_placement, round_robin, single_device
from ..timing.sim import SEMANTICS

PLACEMENT_KEYWORDS = ("round-robin", "single", "random")


def _over(value: float, limit: str | None) -> str | None:
    """The message part for ``value`` over the named limit (or over 64 bits), else None."""
    if limit is not None and value > LIMITS[limit]:
        bound = LIMITS[limit]
        shown = f"{bound:g}" if isinstance(bound, float) else str(bound)
        return f"must be <= {shown} (doppler_lab.house.limits.{limit})"
    if abs(value) >= 2**63:
        return "must fit in 64 bits"
    return None


def int_arg(minimum: int | None = None, limit: str | None = None) -> Callable[[str], int]:
    """An argparse ``type=``: an integer written in ASCII digits (``1e3`` too), at least
    ``minimum`` and at most the limit named ``limit`` (:mod:`doppler_lab.house.limits`; always within
    64 bits); never ``2.0``, ``1_0``, ``true`` or ``nan``. Its message reads after the option's
    name: ``--devices must be >= 1, got '0'``."""

    def integer(text: str) -> int:
        value = parse_int_text(text)
        if value is None:
            raise argparse.ArgumentTypeError(f"must be an integer, got {text!r}")
        if minimum is not None and value < minimum:
            raise argparse.ArgumentTypeError(f"must be >= {minimum}, got {text!r}")
        over = _over(value, limit)
        if over:
            raise argparse.ArgumentTypeError(f"{over}, got {text!r}")
        return value

    return integer


def number_arg(
    minimum: float | None = None, above: float | None = None, limit: str | None = None
) -> Callable[[str], float]:
    """An argparse ``type=``: a finite number (never ``nan``, ``inf``, ``1_0``), at least
    ``minimum``, greater than ``above`` and at most the limit named ``limit`` when given."""

    def number(text: str) -> float:
        value = parse_number_text(text)
        if value is None:
            raise argparse.ArgumentTypeError(f"must be a finite number, got {text!r}")
        if minimum is not None and value < minimum:
            raise argparse.ArgumentTypeError(f"must be >= {show(minimum)}, got {text!r}")
        if above is not None and value <= above:
            raise argparse.ArgumentTypeError(f"must be > {show(above)}, got {text!r}")
        if limit is not None and value > LIMITS[limit]:
            raise argparse.ArgumentTypeError(f"{_over(value, limit)}, got {text!r}")
        return value

    return number


def add_graph_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "graph",
        metavar="GRAPH",
        help="a graph spec: a workload (chainmm:scale=0.1), a model (hf-llama:layers=2, "
        "FILE.py:FUNC, FILE.pt2), a JSON graph, a paper .txt graph or paper:NAME (README, "
        "'Graph and cluster specs')",
    )


def add_cluster_arguments(p: argparse.ArgumentParser, default_help: str = "") -> None:
    p.add_argument(
        "--cluster",
        metavar="SPEC",
        help="a cluster spec: preset (p100x4, v100x8, h100x8, cpu, uniform), cpu:N, uniform:N, "
        "multihost:..., or a cluster/profile JSON (README, 'Graph and cluster specs'); default: "
        "uniform devices for graphs with explicit costs (paper graphs), p100x4 otherwise"
        + default_help,
    )
    p.add_argument(
        "--devices",
        type=int_arg(1, "MAX_DEVICES"),
        metavar="N",
        help="number of devices (cpu/uniform clusters)",
    )


#: the policy-gradient estimators (:data:`doppler_lab.policies.reinforce.ESTIMATORS`, written
#: out here so that ``--help`` imports no torch)
ESTIMATOR_CHOICES = ("reinforce", "ppo")


def add_estimator_argument(p: argparse.ArgumentParser, default: str) -> None:
    """``--estimator``: how the policy-gradient stages update (``default`` says which one runs
    when it is left out)."""
    p.add_argument(
        "--estimator",
        choices=ESTIMATOR_CHOICES,
        help="policy-gradient estimator: reinforce (the paper's: one step per batch of "
        "episodes) or ppo (clipped steps, several passes over each batch, normalised "
        f"advantages); default {default}",
    )


def add_semantics_argument(p: argparse.ArgumentParser, what: str = "simulator semantics") -> None:
    """``--semantics`` (``what`` opens its help); :func:`resolve_semantics` gives its default."""
    p.add_argument(
        "--semantics",
        choices=SEMANTICS,
        help=f"{what}; default: paper for graphs with explicit costs (the paper's files), wc "
        "otherwise",
    )


def resolve_semantics(args: argparse.Namespace, graph: DataflowGraph) -> str:
    """``--semantics``, or by default ``paper`` for a graph with explicit costs, else ``wc``."""
    return args.semantics or ("paper" if graph.compute_cost is not None else "wc")


def add_placement_argument(p: argparse.ArgumentParser) -> None:
    """``--placement``: what :func:`resolve_placement` accepts."""
    p.add_argument(
        "--placement",
        default="round-robin",
        metavar="round-robin|single|random|FILE|PLACER",
        help="how to place the graph: a baseline, a placement JSON (what `place --out` writes) "
        "or a placer name (default: round-robin)",
    )


def resolve_cluster(args: argparse.Namespace, graph: DataflowGraph | None = None) -> Cluster:
    """``--cluster`` (a cluster spec, :func:`doppler_lab.workloads.specs.cluster_from_spec`,
    sized by ``--devices``), else uniform devices for a graph with explicit costs (as many as
    its per-device costs, else 4 or ``--devices``), else ``p100x4``."""
    from ..workloads.specs import cluster_from_spec

    devices = getattr(args, "devices", None)
    if devices is not None and devices < 1:
        raise ConfigError(f"--devices must be >= 1, got {devices}")
    if getattr(args, "cluster", None) is not None:  # '' is an error, not the default
        return cluster_from_spec(args.cluster, devices)
    explicit = graph is not None and graph.compute_cost is not None
    if explicit or devices is not None:
        # per-device costs fix the device count
        width = graph.compute_cost.shape[1] if explicit and graph.compute_cost.ndim == 2 else 4
        return cluster_from_spec("uniform", devices or width)
    return cluster_from_spec("p100x4")


def resolve_cost_model(args: argparse.Namespace, graph: DataflowGraph, cluster: Cluster):
    """The calibrated cost model when ``--cluster`` names a calibration profile, else ``None``
    (the simulator then builds the roofline model of the cluster)."""
    spec = getattr(args, "cluster", None)
    if not spec or not str(spec).endswith(".json"):
        return None
    from ..io.documents import load_profile

    profile = load_profile(spec)
    return profile.cost_model(graph) if profile is not None else None


def resolve_placement(
    spec: str,
    graph: DataflowGraph,
    cluster: Cluster,
    seed: int | None = None,
    progress: bool = False,
) -> Placement:
    """``round-robin``, ``single``, ``random``, a placement JSON file, or a placer name (with a
    progress bar on stderr when ``progress`` and the placer shows one)."""
    d = cluster.num_devices
    if spec == "round-robin":
        return round_robin(graph, d)
    if spec == "single":
        return single_device(graph, d)
    if spec == "random":
        return random_placement(graph, d, np.random.default_rng(seed))
    if spec.endswith(".json"):
        from ..house.userfiles import input_file
        from ..io.documents import load_placement

        return load_placement(input_file(spec, "placement file", PlacementError), graph).validate(
            graph, d
        )
    try:
        from ..placers import available_placers, place, placer_options
    except ImportError:
        raise PlacementError(
            f"unknown placement {spec!r}; expected one of {PLACEMENT_KEYWORDS} or a .json file"
        ) from None
    if spec not in (known := available_placers()):
        if os.path.lexists(spec):  # p.JSON: not a placer
            raise PlacementError(
                f"placement {spec!r} is {file_or_folder(spec)} whose name does not end in "
                ".json; expected a placement FILE.json (what `place --out` writes), a baseline "
                "or a placer"
            )
        raise PlacementError(
            f"unknown placement {spec!r}; expected one of {PLACEMENT_KEYWORDS}, a .json file, "
            f"or a placer: {', '.join(known)}"
        )
    shown = {"progress": True} if progress and "progress" in placer_options(spec) else {}
    from ..house.progress import timer

    # a placer without its own bar: a line counting the seconds once it passes 2 s
    ops = f"{spec}: placing {graph.compute_nodes.size:,} ops"
    with timer(ops, enabled=progress and not shown, delay_s=2.0):
        return place(spec, graph, cluster, seed=seed, **shown)


def print_json(obj: dict[str, Any]) -> None:
    json.dump(to_jsonable(obj), sys.stdout, allow_nan=False)
    sys.stdout.write("\n")


def source_label(source: str) -> str:
    """A learned placer's winning candidate in words: ``greedy`` -> ``greedy rollout``,
    ``sample`` -> ``sampled rollout``, ``greedy on K devices`` -> ``greedy rollout on K
    devices``, ``clustering`` -> ``clustering placement``, a memory baseline (``etf``,
    ``m-sct``, ``pipeline``) -> ``NAME placement``, ``partition`` as it is."""
    from ..placers.repair import MEMORY_BASELINE_PLACERS

    if source == "clustering" or source in MEMORY_BASELINE_PLACERS:
        return f"{source} placement"
    return (
        str(source).replace("greedy", "greedy rollout", 1).replace("sample", "sampled rollout", 1)
    )


def ratio_text(value: float | None) -> str:
    """A ratio to the lower bound, or ``n/a`` when the bound is 0 (every cost 0)."""
    return "n/a" if value is None else f"{value:.3f}"


def ratio_to_lower_bound(makespan: float, lower: float) -> float | None:
    """``makespan / lower`` (None when the bound is 0: every cost 0).

    Raises:
        SimulationError: the ratio overflows (a bound near 0 beside large transfer times).
    """
    if not lower > 0:
        return None
    with np.errstate(over="ignore"):
        ratio = float(np.float64(makespan) / np.float64(lower))
    if not math.isfinite(ratio):
        raise SimulationError(
            f"the makespan {makespan:.6g} over the lower bound {lower:.6g} overflows; expected "
            "compute costs that are not all near 0"
        )
    return ratio
