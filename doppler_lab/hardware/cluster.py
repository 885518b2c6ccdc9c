"""Hardware model: :class:`Device` and :class:`Cluster` (with link topology), and the presets.

Times of ops and transfers on a cluster are the timing wing's: :class:`doppler_lab.timing.cost_model.CostModel`.

A cluster has D devices, a bandwidth and a latency per ordered device pair, and a *route* per
pair: the shared link resources a transfer occupies (at most two, e.g. the source's egress port
and the destination's ingress port of a PCIe switch). The ``wc`` simulator serialises transfers
that share a resource; ``paper`` semantics ignores routes (unlimited parallel transfers).

Presets:
- ``p100x4``: 4 x P100 (16 GB) on a PCIe 3.0 switch: every transfer uses the sender's uplink and
  the receiver's downlink (about 12 GB/s each way).
- ``v100x8``: 8 x V100 (32 GB) in the DGX-1 hybrid cube-mesh: pairs joined by one or two NVLink
  2.0 links (25 or 50 GB/s per direction, a dedicated resource per direction); pairs without
  NVLink go through PCIe and the host (about 10 GB/s, sharing each GPU's PCIe up/down links).
- ``h100x8``: 8 x H100 SXM (80 GB) on NVSwitch: any pair at up to 450 GB/s per direction, sharing
  the sender's egress and the receiver's ingress.
- ``cpu``: N worker devices in one host (the executor's CPU backend), copies at memory speed;
  each holds an even share of this machine's physical memory (:func:`host_memory_bytes`).
- ``uniform``: N identical devices, no latency, no memory cap; for cost-only graphs with
  explicit costs.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any

import numpy as np

from ..house.errors import ClusterError, ConfigError
from ..house.limits import MAX_LINKS, check_limit
from ..house.validate import (
    Fail,
    is_number,
    want_fields,
    want_list,
    want_matrix,
    want_number,
    want_object,
    want_str,
)
from .host import Host, host_from

GB = 1e9


@dataclass(frozen=True)
class Device:
    """One device.

    Attributes:
        name: label shown in charts.
        kind: ``gpu`` or ``cpu``.
        flops_per_s: sustained compute rate per dtype (``{"float32": ..., "bfloat16": ...}``);
            dtypes not listed use ``float32``'s.
        mem_bytes_per_s: memory bandwidth (for memory-bound ops: the roofline's other side).
        memory_bytes: capacity in bytes (``inf``: unconstrained; a cluster file without it, or
            with ``null``, reads as unconstrained). The memory model's peaks
            (:mod:`doppler_lab.timing.memory`) are checked against it.
        launch_overhead_s: fixed cost per op (kernel launch / dispatch).
        memory_reserve_bytes: bytes of ``memory_bytes`` kept free for the runtime (CUDA context,
            the allocator's slack): placements must fit ``memory_bytes`` less this. None: the
            default of :meth:`runtime_reserve` (:data:`RESERVE_FIXED_BYTES` plus
            :data:`RESERVE_SHARE` of the memory on a GPU of at least :data:`RESERVE_MIN_MEMORY`
            bytes, none otherwise).
    """

    name: str
    kind: str = "gpu"
    flops_per_s: Mapping[str, float] = field(default_factory=lambda: {"float32": 10e12})
    mem_bytes_per_s: float = 500 * GB
    memory_bytes: float = 16 * GB
    launch_overhead_s: float = 5e-6
    memory_reserve_bytes: float | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "flops_per_s", dict(self.flops_per_s))
        if "float32" not in self.flops_per_s:
            raise ClusterError(f"device {self.name!r}: flops_per_s needs a 'float32' entry")
        for k, v in self.flops_per_s.items():
            if not (np.isfinite(v) and v > 0):
                raise ClusterError(f"device {self.name!r}: flops_per_s[{k!r}] = {v}, expected > 0")
        v = self.mem_bytes_per_s
        if not (np.isfinite(v) and v > 0):
            raise ClusterError(
                f"device {self.name!r}: mem_bytes_per_s = {v}, expected a finite value > 0"
            )
        if not (self.memory_bytes > 0):  # inf: unconstrained
            raise ClusterError(
                f"device {self.name!r}: memory_bytes = {self.memory_bytes}, expected a value > 0 "
                "(inf: unconstrained)"
            )
        if not (np.isfinite(self.launch_overhead_s) and self.launch_overhead_s >= 0):
            raise ClusterError(
                f"device {self.name!r}: launch_overhead_s = {self.launch_overhead_s}, expected >= 0"
            )

        r = self.memory_reserve_bytes
        if r is not None and not (is_number(r) and math.isfinite(r) and 0 <= r < self.memory_bytes):
            raise ClusterError(
                f"device {self.name!r}: memory reserve = {r!r}, expected bytes >= 0 and less "
                f"than its memory ({self.memory_bytes:.4g} bytes)"
            )

    def runtime_reserve(self) -> float:
        """Bytes of this device's memory kept for the runtime: ``memory_reserve_bytes`` when
        given, else on a GPU with at least :data:`RESERVE_MIN_MEMORY` bytes
        :data:`RESERVE_FIXED_BYTES` (the CUDA context) plus :data:`RESERVE_SHARE` of its memory
        (the allocator's slack: fragmentation, cached blocks), and 0 on a CPU, a device without
        a memory size or a smaller one (a test size, not a GPU)."""
        if self.memory_reserve_bytes is not None:
            return float(self.memory_reserve_bytes)
        m = float(self.memory_bytes)
        if self.kind != "gpu" or not math.isfinite(m) or m < RESERVE_MIN_MEMORY:
            return 0.0
        return RESERVE_FIXED_BYTES + RESERVE_SHARE * m

    def rate(self, dtype: str) -> float:
        return float(self.flops_per_s.get(dtype, self.flops_per_s["float32"]))

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "kind": self.kind,
            "flops_per_s": dict(self.flops_per_s),
            "mem_bytes_per_s": self.mem_bytes_per_s,
            "memory_bytes": self.memory_bytes if np.isfinite(self.memory_bytes) else None,
            "launch_overhead_s": self.launch_overhead_s,
        } | (
            {}
            if self.memory_reserve_bytes is None
            else {"memory_reserve_bytes": self.memory_reserve_bytes}
        )

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], what: str = "device") -> Device:
        """The device of a :meth:`to_dict` document; every field but ``memory_bytes`` (absent or
        ``null``: unconstrained) is required, and all are checked.

        Raises:
            ClusterError: a missing, unknown or wrongly typed field, naming ``what``.
        """
        d = want_fields(
            d, what, ClusterError, DEVICE_FIELDS[:4] + DEVICE_FIELDS[5:6], DEVICE_FIELDS
        )
        memory = d.get("memory_bytes")
        rates = want_object(d["flops_per_s"], f"{what} flops_per_s", ClusterError)
        return cls(
            name=want_str(d["name"], f"{what} name", ClusterError),
            kind=want_str(d["kind"], f"{what} kind", ClusterError, DEVICE_KINDS),
            flops_per_s={
                want_str(k, f"{what} flops_per_s key", ClusterError): want_number(
                    v, f"{what} flops_per_s[{k!r}]", ClusterError, above=0
                )
                for k, v in rates.items()
            },
            mem_bytes_per_s=want_number(
                d["mem_bytes_per_s"], f"{what} mem_bytes_per_s", ClusterError, above=0
            ),
            memory_bytes=math.inf
            if memory is None
            else want_number(memory, f"{what} memory_bytes", ClusterError, above=0),
            launch_overhead_s=want_number(
                d["launch_overhead_s"], f"{what} launch_overhead_s", ClusterError, minimum=0
            ),
            memory_reserve_bytes=None
            if d.get("memory_reserve_bytes") is None
            else want_number(
                d["memory_reserve_bytes"], f"{what} memory_reserve_bytes", ClusterError, minimum=0
            ),
        )


DEVICE_KINDS = ("gpu", "cpu")
DEVICE_FIELDS = (
    "name",
    "kind",
    "flops_per_s",
    "mem_bytes_per_s",
    "memory_bytes",
    "launch_overhead_s",
    "memory_reserve_bytes",
)
#: the runtime reserve of a GPU by default (:meth:`Device.runtime_reserve`): a fixed part for
#: the CUDA context (256 MiB; 300-500 MB measured on recent drivers, part of it outside the
#: device's usable memory already) ...
RESERVE_FIXED_BYTES = float(2**28)
#: ... plus this share of the device's memory for the caching allocator's slack
RESERVE_SHARE = 0.02
#: devices with less memory than this get no default reserve (caps of a few MB in tests and
#: examples are not GPUs)
RESERVE_MIN_MEMORY = 1 * GB


@dataclass(frozen=True, eq=False)
class Cluster:
    """Devices and the links between them.

    Attributes:
        name: preset or user label.
        devices: the D devices.
        bandwidth_bytes_per_s: ``(D, D)``; the diagonal is ignored.
        latency_s: ``(D, D)``; the diagonal is ignored.
        routes: ``(D, D, 2)`` link-resource ids each transfer occupies (-1: none); ``None`` gives
            every ordered pair its own resource.
        link_names: a label per resource id.
        host: the host thread's costs (:class:`~doppler_lab.hardware.host.Host`); ``None``
            (every preset): the simulator has no host resource.
    """

    name: str
    devices: tuple[Device, ...]
    bandwidth_bytes_per_s: np.ndarray
    latency_s: np.ndarray
    routes: np.ndarray | None = None
    link_names: tuple[str, ...] = ()
    host: Host | None = None

    def __post_init__(self) -> None:
        set_ = object.__setattr__
        if self.host is not None and not isinstance(self.host, Host):
            raise ClusterError(
                f"cluster {self.name!r}: host is {type(self.host).__name__}, expected a Host or None"
            )
        set_(self, "devices", tuple(self.devices))
        d = len(self.devices)
        if d == 0:
            raise ClusterError(f"cluster {self.name!r} has no devices")
        check_limit(d, "MAX_DEVICES", f"cluster {self.name!r}: the number of devices", ClusterError)
        bw = np.array(self.bandwidth_bytes_per_s, dtype=np.float64)
        lat = np.array(self.latency_s, dtype=np.float64)
        for arr, label in ((bw, "bandwidth_bytes_per_s"), (lat, "latency_s")):
            if arr.shape != (d, d):
                raise ClusterError(
                    f"cluster {self.name!r}: {label} has shape {arr.shape}, expected ({d}, {d})"
                )
        off = ~np.eye(d, dtype=bool)
        if d > 1 and not (np.isfinite(bw[off]).all() and (bw[off] > 0).all()):
            i, j = np.argwhere(off & ~((bw > 0) & np.isfinite(bw)))[0]
            raise ClusterError(
                f"cluster {self.name!r}: bandwidth {i}->{j} is {bw[i, j]}, expected > 0"
            )
        if d > 1 and not (np.isfinite(lat[off]).all() and (lat[off] >= 0).all()):
            i, j = np.argwhere(off & ~((lat >= 0) & np.isfinite(lat)))[0]
            raise ClusterError(
                f"cluster {self.name!r}: latency {i}->{j} is {lat[i, j]}, expected >= 0"
            )
        np.fill_diagonal(bw, np.inf)
        np.fill_diagonal(lat, 0.0)
        if self.routes is None:
            routes = np.full((d, d, 2), -1, dtype=np.int64)
            names = []
            for i in range(d):
                for j in range(d):
                    if i != j:
                        routes[i, j, 0] = len(names)
                        names.append(f"{i}->{j}")
            set_(self, "link_names", tuple(names))
        else:
            routes = np.array(self.routes, dtype=np.int64)
            if routes.shape != (d, d, 2):
                raise ClusterError(
                    f"cluster {self.name!r}: routes has shape {routes.shape}, expected ({d}, {d}, 2)"
                )
            nlinks = int(routes.max()) + 1
            if nlinks > MAX_LINKS:  # before any array or name sized by it
                raise ClusterError(
                    f"cluster {self.name!r}: route id {nlinks - 1} asks for {nlinks} link "
                    f"resources; the limit is {MAX_LINKS} (doppler_lab.house.limits.MAX_LINKS)"
                )
            if len(self.link_names) not in (0, nlinks):
                raise ClusterError(
                    f"cluster {self.name!r}: {len(self.link_names)} link names for {nlinks} link resources"
                )
            if not self.link_names:
                set_(self, "link_names", tuple(f"link{i}" for i in range(nlinks)))
        for a in (bw, lat, routes):
            a.setflags(write=False)
        set_(self, "bandwidth_bytes_per_s", bw)
        set_(self, "latency_s", lat)
        set_(self, "routes", routes)
        set_(self, "link_names", tuple(self.link_names))

    @property
    def num_devices(self) -> int:
        return len(self.devices)

    @property
    def num_links(self) -> int:
        return len(self.link_names)

    @cached_property
    def inv_bandwidth(self) -> np.ndarray:
        """Seconds per byte per ordered pair (0 on the diagonal)."""
        with np.errstate(over="ignore", divide="ignore"):
            inv = 1.0 / self.bandwidth_bytes_per_s
        inv.setflags(write=False)
        return inv

    def with_memory(
        self, memory_bytes: float | None | str = "keep", reserve_bytes: float | None = None
    ) -> Cluster:
        """The same cluster with every device's ``memory_bytes`` set to ``memory_bytes``
        (``None`` or ``inf``: unconstrained; ``"keep"``: each device's own), e.g.
        ``--memory-cap``, and its runtime reserve to ``reserve_bytes`` (``--memory-reserve``;
        None: the default of :meth:`Device.runtime_reserve` for the new memory); ``self`` when
        unchanged.

        Raises:
            ClusterError: a reserve that is negative or not below a device's memory.
        """
        devices = []
        for dev in self.devices:
            cap = dev.memory_bytes if isinstance(memory_bytes, str) else memory_bytes
            cap = math.inf if cap is None else float(cap)  # type: ignore[arg-type]
            devices.append(replace(dev, memory_bytes=cap, memory_reserve_bytes=reserve_bytes))
        if tuple(devices) == self.devices:
            return self
        return replace(self, devices=tuple(devices))

    def first(self, k: int) -> Cluster:
        """The sub-cluster of devices ``0..k-1`` with their links (the resources they use,
        renumbered); ``self`` when ``k`` is the device count."""
        d = self.num_devices
        if not (isinstance(k, int) and 1 <= k <= d):
            raise ClusterError(f"cluster {self.name!r}: first({k!r}); expected 1..{d} devices")
        if k == d:
            return self
        routes = np.array(self.routes[:k, :k])
        used = np.unique(routes[routes >= 0])
        renumber = np.full(self.num_links, -1, dtype=np.int64)
        renumber[used] = np.arange(used.size)
        routes[routes >= 0] = renumber[routes[routes >= 0]]
        return Cluster(
            f"{self.name}[:{k}]",
            self.devices[:k],
            self.bandwidth_bytes_per_s[:k, :k],
            self.latency_s[:k, :k],
            routes,
            tuple(self.link_names[i] for i in used),
            self.host,
        )

    def to_dict(self) -> dict[str, Any]:
        bw = self.bandwidth_bytes_per_s.copy()
        np.fill_diagonal(bw, 0.0)
        return {
            "format": "doppler_lab.cluster",
            "version": 1,
            "name": self.name,
            "devices": [dev.to_dict() for dev in self.devices],
            "bandwidth_bytes_per_s": bw.tolist(),
            "latency_s": self.latency_s.tolist(),
            "routes": self.routes.tolist(),
            "link_names": list(self.link_names),
        } | ({} if self.host is None else {"host": self.host.to_dict()})

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Cluster:
        """The cluster of a :meth:`to_dict` document; every field is checked.

        Raises:
            ClusterError: a missing, unknown or wrongly typed field, or inconsistent links.
        """
        d = want_fields(d, "cluster description", ClusterError, CLUSTER_FIELDS[:4], CLUSTER_FIELDS)
        return cls(**links_from_dict(d, "cluster", ClusterError), name=d["name"])

    def __repr__(self) -> str:
        return f"Cluster(name={self.name!r}, devices={self.num_devices}, links={self.num_links})"


#: fields of a cluster document: the first four are required
CLUSTER_FIELDS = ("name", "devices", "bandwidth_bytes_per_s", "latency_s") + (
    "routes",
    "link_names",
    "format",
    "version",
    "host",
)


def links_from_dict(d: Mapping[str, Any], what: str, fail: Fail) -> dict[str, Any]:
    """The checked ``devices``, ``bandwidth_bytes_per_s``, ``latency_s``, ``routes`` and
    ``link_names`` of a cluster (or calibration profile) document, and its optional ``host``, as
    :class:`Cluster` keywords; ``name`` must be a string."""
    want_str(d["name"], f"{what} name", fail)
    devs = want_list(d["devices"], f"{what} devices", fail)
    check_limit(len(devs), "MAX_DEVICES", f"{what}: the number of devices", fail)
    try:
        devices = tuple(Device.from_dict(x, f"{what} device {i}") for i, x in enumerate(devs))
    except ClusterError as exc:
        raise fail(str(exc)) from None
    n = len(devices)
    routes = d.get("routes")
    return {
        "devices": devices,
        "bandwidth_bytes_per_s": want_matrix(
            d["bandwidth_bytes_per_s"], f"{what} bandwidth_bytes_per_s", fail, (n, n)
        ),
        "latency_s": want_matrix(d["latency_s"], f"{what} latency_s", fail, (n, n)),
        "routes": None
        if routes is None
        else want_matrix(routes, f"{what} routes", fail, (n, n, 2), minimum=-1, integer=True),
        "link_names": tuple(
            want_str(x, f"{what} link_names[{i}]", fail)
            for i, x in enumerate(want_list(d.get("link_names", []), f"{what} link_names", fail))
        ),
        "host": host_from(d, what, fail),
    }

    def __repr__(self) -> str:
        return f"Cluster(name={self.name!r}, devices={self.num_devices}, links={self.num_links})"


# -- presets ----------------------------------------------------------------------------------
def switch_routes(d: int, prefix: str) -> tuple[np.ndarray, tuple[str, ...]]:
    """Each transfer a->b occupies a's egress port and b's ingress port (``routes``
    ``(d, d, 2)`` and a name per port); one device has no transfers and no ports."""
    routes = np.full((d, d, 2), -1, dtype=np.int64)
    for a in range(d):
        for b in range(d):
            if a != b:
                routes[a, b] = (a, d + b)
    if d < 2:  # one device: no transfers, no link resources
        return routes, ()
    names = tuple(f"{prefix}{a} out" for a in range(d)) + tuple(f"{prefix}{b} in" for b in range(d))
    return routes, names


def _gpu(name: str, fp32: float, half: float, mem_bw: float, mem: float, launch: float) -> Device:
    return Device(
        name=name,
        kind="gpu",
        flops_per_s={"float32": fp32, "float16": half, "bfloat16": half},
        mem_bytes_per_s=mem_bw,
        memory_bytes=mem,
        launch_overhead_s=launch,
    )


def make_p100x4() -> Cluster:
    d = 4
    devs = tuple(_gpu(f"P100:{i}", 9.3e12, 18.7e12, 732 * GB, 16 * GB, 5e-6) for i in range(d))
    routes, names = switch_routes(d, "pcie")
    return Cluster("p100x4", devs, np.full((d, d), 12 * GB), np.full((d, d), 10e-6), routes, names)


# DGX-1 (V100) hybrid cube-mesh: number of NVLinks between each pair (0: none, via PCIe/host)
_DGX1_NVLINKS = np.array(
    [
        [0, 1, 1, 2, 2, 0, 0, 0],
        [1, 0, 2, 1, 0, 2, 0, 0],
        [1, 2, 0, 2, 0, 0, 1, 0],
        [2, 1, 2, 0, 0, 0, 0, 1],
        [2, 0, 0, 0, 0, 1, 1, 2],
        [0, 2, 0, 0, 1, 0, 2, 1],
        [0, 0, 1, 0, 1, 2, 0, 2],
        [0, 0, 0, 1, 2, 1, 2, 0],
    ]
)


def make_v100x8() -> Cluster:
    d = 8
    devs = tuple(_gpu(f"V100:{i}", 15.7e12, 100e12, 900 * GB, 32 * GB, 5e-6) for i in range(d))
    bw = np.zeros((d, d))
    lat = np.zeros((d, d))
    routes = np.full((d, d, 2), -1, dtype=np.int64)
    names: list[str] = [f"pcie{i} out" for i in range(d)] + [f"pcie{i} in" for i in range(d)]
    for a in range(d):
        for b in range(d):
            if a == b:
                continue
            links = _DGX1_NVLINKS[a, b]
            if links:
                bw[a, b] = 25 * GB * links
                lat[a, b] = 5e-6
                routes[a, b, 0] = len(names)
                names.append(f"nvlink {a}->{b}")
            else:
                bw[a, b] = 10 * GB
                lat[a, b] = 15e-6
                routes[a, b] = (a, d + b)
    return Cluster("v100x8", devs, bw, lat, routes, tuple(names))


def make_h100x8() -> Cluster:
    d = 8
    devs = tuple(_gpu(f"H100:{i}", 67e12, 700e12, 3350 * GB, 80 * GB, 4e-6) for i in range(d))
    routes, names = switch_routes(d, "nvswitch")
    return Cluster("h100x8", devs, np.full((d, d), 450 * GB), np.full((d, d), 3e-6), routes, names)


def host_memory_bytes() -> float:
    """This machine's physical memory in bytes (``os.sysconf``, else ``psutil``; ``inf`` when
    neither can tell)."""
    try:
        return float(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (AttributeError, ValueError, OSError):
        pass
    try:
        import psutil

        return float(psutil.virtual_memory().total)
    except Exception:  # noqa: BLE001 - not installed, or no answer: unconstrained
        return math.inf


def make_cpu(
    num_devices: int = 4, flops_per_s: float = 20e9, copy_bytes_per_s: float = 5 * GB
) -> Cluster:
    """CPU worker devices in one host: copies share the host's memory system (one resource),
    and each device may hold an even share of the host's memory."""
    if num_devices < 1:
        raise ClusterError(f"a cpu cluster needs at least 1 device, got {num_devices}")
    d = num_devices
    share = host_memory_bytes() / d
    devs = tuple(
        Device(f"cpu:{i}", "cpu", {"float32": flops_per_s}, 10 * GB, share, 20e-6) for i in range(d)
    )
    routes = np.full((d, d, 2), -1, dtype=np.int64)
    for a in range(d):
        for b in range(d):
            if a != b:
                routes[a, b, 0] = 0
    return Cluster(
        f"cpu{d}",
        devs,
        np.full((d, d), copy_bytes_per_s),
        np.full((d, d), 5e-6),
        routes,
        ("host memory",) if d > 1 else (),
    )


def make_uniform(num_devices: int) -> Cluster:
    """N identical devices with no latency: for graphs whose costs are all explicit."""
    if num_devices < 1:
        raise ClusterError(f"a cluster needs at least 1 device, got {num_devices}")
    d = num_devices
    devs = tuple(Device(f"dev{i}", memory_bytes=math.inf, launch_overhead_s=0.0) for i in range(d))
    return Cluster(f"uniform{d}", devs, np.full((d, d), 1e12), np.zeros((d, d)))


def make_multihost(
    hosts: int = 2,
    devices_per_host: int = 2,
    *,
    kind: str = "cpu",
    intra_bytes_per_s: float | None = None,
    inter_bytes_per_s: float = 1.25 * GB,
    intra_latency_s: float | None = None,
    inter_latency_s: float = 50e-6,
) -> Cluster:
    """``hosts`` hosts of ``devices_per_host`` devices, host by host (device ``h * k + i``).

    Inside a host, CPU workers share the host's memory (one resource per host, as
    :func:`make_cpu`) and GPUs sit on a switch (an out and an in port each). Between hosts a
    transfer occupies the sending host's NIC out and the receiving host's NIC in, so the
    simulator sees every transfer that leaves a host contend for its NIC.

    Args:
        hosts, devices_per_host: the shape (>= 1 each).
        kind: ``cpu`` (defaults of :func:`make_cpu`) or ``gpu`` (H100-like devices, 450 GB/s
            inside a host).
        intra_bytes_per_s, intra_latency_s: links inside a host (default by ``kind``).
        inter_bytes_per_s, inter_latency_s: links between hosts (default 10 Gb/s Ethernet,
            50 us).
    """
    if hosts < 1 or devices_per_host < 1:
        raise ClusterError(
            f"a multihost cluster needs >= 1 host and >= 1 device a host, got {hosts} and "
            f"{devices_per_host}"
        )
    check_limit(hosts * devices_per_host, "MAX_DEVICES", "multihost devices", ClusterError)
    if kind not in DEVICE_KINDS:
        raise ClusterError(f"multihost device kind {kind!r}; expected one of {DEVICE_KINDS}")
    k, d = devices_per_host, hosts * devices_per_host
    if kind == "cpu":
        one = make_cpu(k).devices[0]  # the host's memory shared by its k devices
        intra_bw, intra_lat = intra_bytes_per_s or 5 * GB, intra_latency_s or 5e-6
    else:
        one = make_h100x8().devices[0]
        intra_bw, intra_lat = intra_bytes_per_s or 450 * GB, intra_latency_s or 3e-6
    for value, label in ((intra_bw, "intra_bytes_per_s"), (inter_bytes_per_s, "inter_bytes_per_s")):
        if not (np.isfinite(value) and value > 0):
            raise ClusterError(f"multihost {label} is {value}, expected a number > 0")
    devs = tuple(replace(one, name=f"host{h}/{kind}:{i}") for h in range(hosts) for i in range(k))
    names: list[str] = []
    intra_port: dict[tuple[int, str], int] = {}
    for h in range(hosts):
        if k == 1:  # one device a host: no transfers inside a host, no resources for them
            continue
        if kind == "cpu":
            intra_port[(h, "mem")] = len(names)
            names.append(f"host{h} memory")
        else:
            for i in range(k):
                intra_port[(h * k + i, "out")] = len(names)
                names.append(f"host{h} switch {i} out")
                intra_port[(h * k + i, "in")] = len(names)
                names.append(f"host{h} switch {i} in")
    nic = {}
    if hosts > 1:
        for h in range(hosts):
            nic[(h, "out")] = len(names)
            names.append(f"host{h} nic out")
            nic[(h, "in")] = len(names)
            names.append(f"host{h} nic in")
    bw, lat = np.full((d, d), inter_bytes_per_s), np.full((d, d), float(inter_latency_s))
    routes = np.full((d, d, 2), -1, dtype=np.int64)
    for a in range(d):
        for b in range(d):
            if a == b:
                continue
            ha, hb = a // k, b // k
            if ha != hb:
                routes[a, b] = (nic[(ha, "out")], nic[(hb, "in")])
                continue
            bw[a, b], lat[a, b] = intra_bw, intra_lat
            if kind == "cpu":
                routes[a, b, 0] = intra_port[(ha, "mem")]
            else:
                routes[a, b] = (intra_port[(a, "out")], intra_port[(b, "in")])
    return Cluster(f"multihost{hosts}x{k}{kind}", devs, bw, lat, routes, tuple(names))


def parse_multihost(spec: str) -> Cluster:
    """``multihost[:hosts=H,devices=K,kind=cpu|gpu,intra_gbps=X,inter_gbps=Y,inter_latency_us=Z]``
    (bandwidths in GB/s) -> :func:`make_multihost`."""
    from ..house.settings import check_setting, parse_item

    _, _, rest = spec.partition(":")
    kinds = {"hosts": "int", "devices": "int", "kind": "str"}
    kinds |= {k: "float" for k in ("intra_gbps", "inter_gbps", "inter_latency_us")}
    owner = f"cluster {spec!r}"
    kw: dict[str, Any] = {}
    for item in filter(None, rest.split(",")):
        key = item.partition("=")[0].strip()
        if key not in kinds or "=" not in item:
            raise ClusterError(
                f"{owner}: bad parameter {item!r}; expected key=value with key in {sorted(kinds)}"
            )
        try:
            key, value = parse_item(item, owner, "parameter")
            if key in kw:  # never the last of two silently
                raise ConfigError(f"{owner}: parameter {key!r} is given twice")
            bounds = {"minimum": 1} if kinds[key] == "int" else {"above": 0}
            kw[key] = check_setting(value, kinds[key], owner, key, "parameter", **bounds)
        except ConfigError as exc:
            raise ClusterError(str(exc)) from None
    args: dict[str, Any] = {"kind": kw.get("kind", "cpu")}
    for key, arg, unit in (
        ("intra_gbps", "intra_bytes_per_s", GB),
        ("inter_gbps", "inter_bytes_per_s", GB),
        ("inter_latency_us", "inter_latency_s", 1e-6),
    ):
        if key in kw:
            args[arg] = kw[key] * unit
            if not math.isfinite(args[arg]):  # 1e308 GB/s is no bandwidth: said as typed
                raise ClusterError(
                    f"{owner}: parameter {key}={kw[key]:g} is too large; expected a number "
                    f"below {1.7e308 / unit:.3g}"
                )
    return make_multihost(kw.get("hosts", 2), kw.get("devices", 2), **args)


PRESETS = {
    "p100x4": make_p100x4,
    "v100x8": make_v100x8,
    "h100x8": make_h100x8,
    "cpu": make_cpu,
    "uniform": make_uniform,
}


def make_cluster(spec: str | Cluster, num_devices: int | None = None) -> Cluster:
    """A cluster from a preset name (``p100x4``, ``v100x8``, ``h100x8``, ``cpu``, ``uniform``),
    a ``multihost:...`` spec (:func:`parse_multihost`) or a :class:`Cluster` (returned as is). ``num_devices`` sizes ``cpu`` and ``uniform``
    (default 4) and must match a fixed preset's size when given. Cluster JSON files and
    calibration profiles are read by :func:`doppler_lab.io.load_cluster` (the CLI's
    ``--cluster`` takes either)."""
    if isinstance(spec, Cluster):
        return spec
    if num_devices is not None:
        check_limit(num_devices, "MAX_DEVICES", "the number of devices", ClusterError)
    if spec == "multihost" or spec.startswith("multihost:"):
        c = parse_multihost(spec)
        if num_devices is not None and num_devices != c.num_devices:
            raise ClusterError(f"cluster {spec!r} has {c.num_devices} devices, not {num_devices}")
        return c
    if spec in ("cpu", "uniform"):
        return PRESETS[spec](num_devices or 4)
    if spec in PRESETS:
        c = PRESETS[spec]()
        if num_devices is not None and num_devices != c.num_devices:
            raise ClusterError(f"preset {spec!r} has {c.num_devices} devices, not {num_devices}")
        return c
    hint = " (cluster files: doppler_lab.io.load_cluster)" if spec.endswith(".json") else ""
    raise ClusterError(f"unknown cluster {spec!r}; expected one of {sorted(PRESETS)}{hint}")


# -- cost model -------------------------------------------------------------------------------
