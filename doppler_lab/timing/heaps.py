"""Binary heaps over parallel arrays for compiled code: the one heap of the timing wing.

A heap of ``size`` entries lives in ``k1[base:base + size]``, ``k2[...]`` and ``pay[...]``
(``base`` offsets a segment, so that one set of arrays holds a heap per device), ordered by
``(k1, k2)``: the first key, ties broken by the second. The simulator kernels
(:mod:`doppler_lab.timing.sim`) and the clustering placer's estimate
(:mod:`doppler_lab.placers.clustering`) inline these functions.

Compiled callers cache by their own source file: after changing a function here, clear their
numba caches (``__pycache__/*.nbi``), as for :mod:`doppler_lab.hardware.rules`.
"""

from __future__ import annotations

from numba import njit


@njit(inline="always")
def heap_less(a1, a2, b1, b2):
    """Whether the entry keyed ``(a1, a2)`` comes before the one keyed ``(b1, b2)``."""
    return a1 < b1 or (a1 == b1 and a2 < b2)


@njit(inline="always")
def heap_push(k1, k2, pay, base, size, x1, x2, p):
    """Add the entry ``(x1, x2)`` with payload ``p``; returns the new size."""
    i = size
    while i > 0:
        par = (i - 1) >> 1
        if heap_less(x1, x2, k1[base + par], k2[base + par]):
            k1[base + i] = k1[base + par]
            k2[base + i] = k2[base + par]
            pay[base + i] = pay[base + par]
            i = par
        else:
            break
    k1[base + i] = x1
    k2[base + i] = x2
    pay[base + i] = p
    return size + 1


@njit(inline="always")
def heap_pop(k1, k2, pay, base, size):
    """Remove the first entry (read it at ``base`` before calling); returns the new size."""
    size -= 1
    x1 = k1[base + size]
    x2 = k2[base + size]
    p = pay[base + size]
    i = 0
    while True:
        c = 2 * i + 1
        if c >= size:
            break
        r = c + 1
        if r < size and heap_less(k1[base + r], k2[base + r], k1[base + c], k2[base + c]):
            c = r
        if heap_less(k1[base + c], k2[base + c], x1, x2):
            k1[base + i] = k1[base + c]
            k2[base + i] = k2[base + c]
            pay[base + i] = pay[base + c]
            i = c
        else:
            break
    if size > 0:
        k1[base + i] = x1
        k2[base + i] = x2
        pay[base + i] = p
    return size


__all__ = ["heap_less", "heap_pop", "heap_push"]
