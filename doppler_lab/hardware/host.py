"""The host thread behind a cluster's devices: :class:`Host`.

One host thread launches every op and issues every copy of the executor's run (the stream
executor's dispatcher on a GPU; on CPU workers, the Python bookkeeping that holds the
interpreter lock between two ops). The ``wc`` simulator makes it a resource next to the devices
and links: an op's launch occupies it for ``launch_s`` before the op starts on its device, a
copy's issue for ``copy_s`` before the copy takes its link, and launches and issues run one at
a time in the order the simulator reaches them.

``parallel_capacity``: how many devices compute at full speed at once (CPU workers share the
machine's cores and memory bandwidth): an op that starts while ``m`` devices (itself included)
are busy, with ``m`` above the capacity, takes ``m / parallel_capacity`` times its time.

``cores``: how many cores the busy devices and the busy copy lanes share (CPU workers: each
device and each copy lane is a thread of one process). While ``r`` of them run, with ``r`` above
``cores``, every running op progresses at ``cores / r`` of its speed: copies slow the devices'
ops, and busy devices slow each other where the cores (or their memory bandwidth) fall short. A
copy is slowed the same way, judged once when it is issued (by the threads that want a core then:
the busy devices, the issuing device if it has ops ready, and the copy's own).
A CPU profile's calibration sets it to the parallel capacity its probes measured (the median of
:data:`~doppler_lab.executor.profiling.CAPACITY_PROBES`; a fit on the op samples themselves was
tried and rejected: an op's measured time holds its waits for the interpreter lock, which do not
stop the other devices, so on small ops it fitted 1 core where the runs showed 1.8).
``parallel_capacity`` is the older, coarser form of the same effect (devices only, judged at an
op's start); a profile with ``cores`` has no capacity.

A cluster without a host (``Cluster.host is None``, every preset) or with a host whose costs are
all zero, no capacity and no cores runs the simulator exactly as before: the host binds only
where a calibrated profile or a cluster file gives it costs.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..house.errors import ClusterError
from ..house.validate import Fail, show, want_fields, want_number

#: fields of a host document (all optional)
HOST_FIELDS = ("launch_s", "copy_s", "parallel_capacity", "cores")


@dataclass(frozen=True)
class Host:
    """The host thread's costs.

    Attributes:
        launch_s: host time per op launch, seconds (part of the op's cost alone: the simulator
            takes it off the op's device time and puts it on the host).
        copy_s: host time per copy issued, seconds.
        parallel_capacity: devices that compute at full speed at once (``None``: all of them).
        cores: the cores that the busy devices and the busy copy lanes share (CPU workers: each
            device and each copy lane is a thread); ``0``: not modelled.
    """

    launch_s: float = 0.0
    copy_s: float = 0.0
    parallel_capacity: float | None = None
    cores: float = 0.0

    def __post_init__(self) -> None:
        check_host(self, "host", ClusterError)

    @property
    def binds(self) -> bool:
        """Whether the simulator gives this host any work (a cost or a capacity)."""
        return (
            self.launch_s > 0
            or self.copy_s > 0
            or self.parallel_capacity is not None
            or self.cores > 0
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "launch_s": self.launch_s,
            "copy_s": self.copy_s,
            "parallel_capacity": self.parallel_capacity,
        } | ({"cores": self.cores} if self.cores > 0 else {})  # older files stay the same

    @classmethod
    def from_dict(cls, d: Any, what: str = "host", fail: Fail = ClusterError) -> Host:
        """The host of a :meth:`to_dict` document; every field is checked.

        Raises:
            ``fail``: a wrong field, naming ``what`` and the field.
        """
        d = want_fields(d, what, fail, (), HOST_FIELDS)
        cap = d.get("parallel_capacity")
        return cls(
            launch_s=want_number(d.get("launch_s", 0.0), f"{what} launch_s", fail, minimum=0),
            copy_s=want_number(d.get("copy_s", 0.0), f"{what} copy_s", fail, minimum=0),
            cores=want_number(d.get("cores", 0.0), f"{what} cores", fail, minimum=0),
            parallel_capacity=None
            if cap is None
            else want_number(cap, f"{what} parallel_capacity", fail, above=0),
        )


def check_host(host: Host, what: str, fail: Fail) -> None:
    """Raise ``fail`` naming the first bad field of ``host``."""
    for name in ("launch_s", "copy_s", "cores"):
        v = getattr(host, name)
        if not isinstance(v, int | float) or not (0 <= v < float("inf")):
            unit = " (seconds)" if name.endswith("_s") else ""
            raise fail(f"{what} {name} is {show(v)}; expected a finite number >= 0{unit}")
    if 0 < host.cores < 1:
        raise fail(
            f"{what} cores is {show(host.cores)}; expected 0 (not modelled) or at least 1 "
            "(a device alone runs at its calibrated speed)"
        )
    cap = host.parallel_capacity
    if cap is not None and (not isinstance(cap, int | float) or not (0 < cap < float("inf"))):
        raise fail(f"{what} parallel_capacity is {show(cap)}; expected a finite number > 0 or null")


def host_from(d: Mapping[str, Any], what: str, fail: Fail) -> Host | None:
    """The optional ``host`` field of a cluster or profile document (absent or null: none)."""
    h = d.get("host")
    return None if h is None else Host.from_dict(h, f"{what} host", fail)


__all__ = ["HOST_FIELDS", "Host", "check_host", "host_from"]
