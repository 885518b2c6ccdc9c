"""Placers: heuristics, search and exact methods that assign every node of a graph to a device.

Use them by name::

    from doppler_lab.placers import available_placers, place
    placement = place("cp", graph, cluster, seed=0, estimate="additive")

or build one with its options and call it (``get_placer(name, **options).place(graph, cluster,
rng)``). List schedulers (``cp``, ``cp-released``, ``heft``, ``cpop``, ``etf``, ``m-topo``) and
``exact`` also have ``schedule(graph, cluster, rng) -> Schedule`` (their own start and finish
per node); :class:`CriticalPathPlacer` has ``run`` for the decision trace, and
:class:`CriticalPathTeacher` applies the CP rules to any
:class:`~doppler_lab.timing.schedule.ListScheduleState` (imitation labels). This package never imports
torch: learned placers (``doppler``, ``placeto``, ``gdp``) are resolved lazily (see
:mod:`doppler_lab.placers.registry`).
"""

from __future__ import annotations

from .critical_path import (
    CPDecision,
    CPRun,
    CriticalPathPlacer,
    CriticalPathTeacher,
    ReleasedCriticalPathPlacer,
)
from .placer_base import Placer, Schedule, SchedulingPlacer, list_schedule
from .registry import (
    BUILTIN_PLACERS,
    LEARNED_PLACERS,
    POLICY_ALONE_SPEC,
    PlacerSpec,
    available_placers,
    check_placer_size,
    get_placer,
    parse_placer_spec,
    place,
    placer_options,
    placer_spec,
    placer_specs,
    split_placer_specs,
)

__all__ = [
    "BUILTIN_PLACERS",
    "CPDecision",
    "CPRun",
    "CriticalPathPlacer",
    "CriticalPathTeacher",
    "LEARNED_PLACERS",
    "POLICY_ALONE_SPEC",
    "Placer",
    "PlacerSpec",
    "ReleasedCriticalPathPlacer",
    "Schedule",
    "SchedulingPlacer",
    "available_placers",
    "check_placer_size",
    "get_placer",
    "parse_placer_spec",
    "list_schedule",
    "place",
    "placer_options",
    "placer_spec",
    "placer_specs",
    "split_placer_specs",
]
