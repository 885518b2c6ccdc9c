"""CPU worker devices keep the memory they free, as a GPU's caching allocator does.

A tensor above glibc's mmap threshold (128 KiB to start with, raised as large blocks are freed)
gets fresh pages from the kernel and gives them back when it is freed: every such op output
then pays a page fault per 4 KiB page inside the op, and every free an ``munmap`` whose TLB
shootdown interrupts the other devices' threads. On the workloads of ``bench fidelity``
(reports/notes/bench_notes.md, "CPU allocator") that made elementwise ops on the attention
scores and the MoE experts take up to 7x their calibrated time on a cold page, and gave the copy
lane's clones heavy tails. ``doppler-lab bench allocator`` measures what holding the memory
does to the makespans (reports/bench/allocator.md: 11.5% lower over its 100 pairs).

:func:`hold_freed_memory` sets glibc's thresholds (``mallopt``) so that freed blocks stay in
the process for the next op, the behaviour of the CUDA caching allocator the CPU workers stand
in for. It applies to the whole process (the CPU backend's threads share one heap; the ``dist``
backend calls it in each device process) and only where the C library is glibc; elsewhere it
does nothing and says so (:func:`allocator_state`). Memory freed by a run is kept for the next
one instead of returned to the system: a process's resident size stays near its largest run's.
``DOPPLER_LAB_CPU_ALLOCATOR=system`` in the environment leaves the C library's policy as it is
(:func:`wanted`), for a comparison with runs measured before.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import threading
from typing import Any

from ..house.errors import ConfigError

#: glibc's mallopt parameters
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
#: blocks up to this size come from the heap and are kept when freed (1 GiB: any op output of a
#: CPU-sized workload); the heap's top is returned to the system only above as much free
HOLD_BYTES = 1 << 30

#: the environment variable that can keep the C library's own policy
ENV = "DOPPLER_LAB_CPU_ALLOCATOR"

_lock = threading.Lock()
_state: dict[str, Any] = {"allocator": "system"}


def _glibc() -> Any | None:
    """The C library, where it is glibc (``mallopt`` and ``gnu_get_libc_version`` present)."""
    if os.name != "posix":
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    except OSError:
        return None
    if not hasattr(libc, "mallopt") or not hasattr(libc, "gnu_get_libc_version"):
        return None
    return libc


def glibc_present() -> bool:
    """Whether this process's C library is glibc (where :func:`hold_freed_memory` applies)."""
    return _glibc() is not None


def hold_freed_memory() -> dict[str, Any]:
    """Make this process keep the memory it frees (once; later calls return the same state).

    Returns:
        :func:`allocator_state`: ``{"allocator": "held", "hold_bytes": ...}`` where glibc took
        the settings, else ``{"allocator": "system", "why": ...}``.
    """
    with _lock:
        if _state.get("allocator") == "held" or "why" in _state:
            return dict(_state)
        libc = _glibc()
        if libc is None:
            _state.update(allocator="system", why="not glibc: the C library's own policy")
            return dict(_state)
        ok = libc.mallopt(_M_MMAP_THRESHOLD, HOLD_BYTES) == 1
        ok = libc.mallopt(_M_TRIM_THRESHOLD, HOLD_BYTES) == 1 and ok
        if ok:
            _state.clear()
            _state.update(allocator="held", hold_bytes=HOLD_BYTES)
        else:
            _state.update(allocator="system", why="mallopt refused the thresholds")
        return dict(_state)


def wanted() -> bool:
    """Whether CPU backends should hold freed memory: yes unless ``DOPPLER_LAB_CPU_ALLOCATOR``
    says ``system``.

    Raises:
        ConfigError: the variable holds anything but ``held`` or ``system``.
    """
    value = os.environ.get(ENV, "held").strip().lower() or "held"
    if value not in ("held", "system"):
        raise ConfigError(f"{ENV}={value!r}: expected 'held' (the default) or 'system'")
    return value == "held"


def allocator_state() -> dict[str, Any]:
    """What :func:`hold_freed_memory` did in this process (``allocator``: ``held`` or
    ``system``; ``why`` where it could not)."""
    with _lock:
        return dict(_state)
