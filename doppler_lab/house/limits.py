"""Size and value limits on input, in one place (README "Limits" lists them).

Readers and parsers check these before they allocate anything sized by the input, and say which
limit a value passed in one line (a :class:`~doppler_lab.house.errors.DopplerLabError`). They are far
above anything the workbench runs (the largest shipped graphs have about 20,000 nodes on 8
devices) and far below what would exhaust memory or overflow a float.

Example:
    >>> from doppler_lab.house.errors import ConfigError
    >>> check_limit(5, "MAX_DEVICES", "--devices", ConfigError)
    5
    >>> check_limit(10**30, "MAX_DEVICES", "--devices", ConfigError)
    Traceback (most recent call last):
    ...
    doppler_lab.house.errors.ConfigError: --devices is 1e+30; the limit is 1024 (doppler_lab.house.limits.MAX_DEVICES)
"""

from __future__ import annotations

import math
from typing import Any

#: devices of a cluster (presets sized by ``--devices``, cluster files, profiles, checkpoints)
MAX_DEVICES = 1024
#: nodes of a graph (graph files, workload generators, imported models)
MAX_NODES = 2_000_000
#: edges of a graph
MAX_EDGES = 20_000_000
#: link resources of a cluster (one more than the largest route id)
MAX_LINKS = 65_536
#: elements along one dimension of a workload tensor (after ``scale``)
MAX_DIM = 2**31 - 1
#: layers / blocks / stages of a zoo model (``mlp:layers=...``)
MAX_MODEL_LAYERS = 1024
#: any other size parameter of a zoo model (hidden, seq, vocab, batch, ...)
MAX_MODEL_SIZE = 1_000_000
#: message-passing steps of a policy (``mp_steps``, ``placeto_steps``)
MAX_MP_STEPS = 64
#: widths of a policy's layers (``hidden``, ``head_hidden``, ...) and its other sizes
MAX_POLICY_SIZE = 16_384
#: intra-op threads per CPU device (``execute --threads``; each is a thread of this process)
MAX_THREADS = 256
#: timed runs and warm-up runs of ``execute`` / ``calibrate`` / Stage III
MAX_REPEATS = 100_000
#: seconds of any timeout or time limit (one week)
MAX_SECONDS = 7 * 24 * 3600.0
#: simulator calls, episodes, or other counts of a search or training budget
MAX_BUDGET = 10**9
#: sigma of the simulator's lognormal duration noise
MAX_NOISE = 10.0
#: bytes of a document read whole (graph, cluster, placement, trace, profile JSON; paper
#: graphs; notebooks' summaries; a run's metrics.csv)
MAX_FILE_BYTES = 2**32
#: bytes of a tensor file (checkpoints, stored-weight sidecars, saved programs)
MAX_TENSOR_FILE_BYTES = 2**36
#: compute ops of a placer whose time grows with the square of the graph (clustering, m-sct:
#: about a minute at the limit on 2 cores; heft, etf and cp take seconds on 100,000 ops)
MAX_QUADRATIC_PLACER_OPS = 20_000
#: compute ops of cp-rollout (a simulation per critical-path step: minutes at the limit)
MAX_ROLLOUT_PLACER_OPS = 5_000
#: compute ops of placeto: it holds each node's parents, children and parallel nodes as a
#: (3, n, n) float32 array (1.2 GB at the limit, 4.8 GB at 20,000 ops)
MAX_PLACETO_OPS = 10_000
#: compute ops x devices of the learned placers (doppler, placeto, gdp): their rollouts hold
#: features per (node, device) for every episode (about 1.5 GB for the 17 default rollouts at
#: the limit; the largest shipped graphs on 8 devices are 160,000)
MAX_LEARNED_PLACER_CELLS = 2_000_000
#: bytes of memory a command may allocate for a model's stored weights (also checked against
#: the memory available)
MAX_WEIGHT_BYTES = 2**40
#: a finite float that leaves room for sums of times (makespans, totals) to stay finite
MAX_TIME = 1e300

LIMITS: dict[str, Any] = {
    name: value for name, value in dict(globals()).items() if name.startswith("MAX_")
}


def check_limit(value: Any, limit: str, what: str, fail: Any) -> Any:
    """``value`` if it is at most the limit named ``limit`` (``"MAX_DEVICES"``), else ``fail``
    (an error type or a function from a message to an error) naming ``what`` and the limit."""
    bound = LIMITS[limit]
    if value > bound:
        shown = f"{bound:g}" if isinstance(bound, float) else str(bound)
        raise fail(
            f"{what} is {_show(value)}; the limit is {shown} (doppler_lab.house.limits.{limit})"
        )
    return value


def _show(value: Any) -> str:
    text = f"{value:g}" if isinstance(value, float) else str(value)
    return text if len(text) <= 20 else f"{float(value):.3g}"


def available_memory_bytes() -> float:
    """Memory this machine can still give (``MemAvailable``, else free pages; ``inf`` when
    unknown)."""
    import os

    try:
        with open("/proc/meminfo", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return float(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return float(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
    except (OSError, ValueError, AttributeError):
        return float("inf")


#: bytes below which :func:`check_memory` does not read the memory available (cheap calls stay
#: cheap)
SMALL_ALLOCATION_BYTES = 256 * 2**20


def check_memory(need: float, what: str, fail: Any, advice: str) -> None:
    """Raise ``fail`` when ``need`` bytes are more than this machine can give now: one line
    naming ``what`` needs them, what is available and ``advice`` (what to ask for instead);
    before the allocation, so never a :class:`MemoryError` half-way."""
    if need <= SMALL_ALLOCATION_BYTES:
        return
    free = available_memory_bytes()
    if need > free:
        raise fail(
            f"{what} need {format_bytes(need)} of memory; {format_bytes(free)} is available; expected {advice}"
        )


def format_bytes(x: float | None) -> str:
    """``1.5 GB``, ``12 MB``, ``none`` for no cap (decimal units)."""
    if x is None or not math.isfinite(x):
        return "none"
    for unit, size in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if abs(x) >= size:
            return f"{x / size:.3g} {unit}"
    return f"{x:.0f} B"
