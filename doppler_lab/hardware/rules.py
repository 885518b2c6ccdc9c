"""Estimate rules shared by the cost model, the simulator kernels, the episode state and the features.

One rule, one home: every place that needs the time of a transfer calls :func:`transfer_time`
(compiled code inlines it) or its numpy twin :data:`transfer_times` (the same function body run
by Python on scalars or broadcast arrays). This module sits below ``hardware``, ``schedule``,
``policies.features`` and ``sim`` and imports nothing from the package.

Compiled callers cache by their own source file: after changing a rule here, the simulator tests
(``tests/sim/test_front_door.py``) fail until those callers' numba caches (``__pycache__/*.nbi``) are
cleared.
"""

from __future__ import annotations

from numba import njit


@njit(inline="always")
def transfer_time(fixed, latency, nbytes, inv_bandwidth):
    """Time to move a tensor between two different devices, in the cost model's raw units.

    Args:
        fixed: the edge's explicit cost (0 when the cost is modelled).
        latency: the link's latency.
        nbytes: bytes moved (0 when the edge has an explicit cost).
        inv_bandwidth: the link's seconds per byte (in raw units).

    Returns:
        ``fixed + latency + nbytes * inv_bandwidth``, evaluated in that order everywhere.
    """
    return fixed + latency + nbytes * inv_bandwidth


transfer_times = transfer_time.py_func
"""The numpy twin of :func:`transfer_time`: the same body, for Python callers (scalars or arrays,
broadcasting like numpy)."""


@njit(inline="always")
def reserve_route(link_free, r1, r2, ready, dur):
    """Occupy link resources ``r1`` and ``r2`` (-1: none) for ``dur`` from the first instant both
    are free at or after ``ready`` (FIFO serialisation of the transfers sharing a resource).

    Args:
        link_free: ``(L,)`` when each link resource is next free; updated in place.
        r1, r2: the route's link resources.
        ready: when the transfer could start (its producer's finish).
        dur: its duration.

    Returns:
        ``(start, finish)`` of the transfer.
    """
    s = ready
    if r1 >= 0 and link_free[r1] > s:
        s = link_free[r1]
    if r2 >= 0 and link_free[r2] > s:
        s = link_free[r2]
    f = s + dur
    if r1 >= 0:
        link_free[r1] = f
    if r2 >= 0:
        link_free[r2] = f
    return s, f


__all__ = ["reserve_route", "transfer_time", "transfer_times"]
