"""Calibrated cost models: a measured :class:`Profile` of real devices, and the simulator's
:class:`CalibratedCostModel` built from it.

A profile holds what ``doppler-lab calibrate`` measured with the executor (see
:mod:`doppler_lab.executor.profiling`):

- per-op durations by *signature* (kind, op, operand shapes, dtype, params) and device (a
  low quantile of the samples, :data:`OP_TIME_QUANTILE`);
- per device, a fitted roofline: ``flops_per_s``, ``mem_bytes_per_s``, the per-call cost of a
  tiny op and the executor's dispatch gap between two ops (together: ``launch_overhead_s``);
- ``op_scale`` per ``"kind:op"``: the median ratio of measured time to the fitted roofline;
- links: latency and bandwidth per ordered device pair, as seen by a consumer (copy plus the
  wake-ups around it).

:meth:`Profile.cluster` is a :class:`~doppler_lab.hardware.Cluster` with the fitted devices and
links, and :meth:`Profile.cost_model` the cost model of a graph on it: an op whose signature was
measured on a device costs its measured time plus the dispatch gap there; any other op costs the
fitted roofline times its ``op_scale``. Use it as
``Simulator(graph, profile.cluster, "wc", cost_model=profile.cost_model(graph))``.

This module imports no torch.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from ..hardware.cluster import Cluster, Device, links_from_dict
from ..hardware.host import Host
from ..house.errors import ClusterError, FormatError
from ..house.jsonutil import to_jsonable
from ..house.validate import (
    is_int,
    read_json_file,
    show,
    want_fields,
    want_number,
    want_numbers,
    want_object,
    want_str,
)
from ..ir.graph import DataflowGraph
from ..ir.ops import OpSpec
from .cost_model import CostModel

PROFILE_FORMAT = "doppler_lab.profile"
PROFILE_VERSION = 1
#: fields of a profile document: the first seven are required
PROFILE_FIELDS = (
    "format",
    "version",
    "name",
    "backend",
    "devices",
    "bandwidth_bytes_per_s",
    "latency_s",
    "routes",
    "link_names",
    "dispatch_s",
    "op_scale",
    "op_times",
    "meta",
    "host",
)


def op_signature(spec: OpSpec) -> str:
    """A key naming what an op computes and on which shapes: equal keys, equal work."""
    shapes = ";".join("x".join(map(str, s)) for s in spec.in_shapes)
    params = ",".join(f"{k}={v}" for k, v in spec.params)
    return f"{spec.kind}:{spec.op}|{shapes}|{spec.dtype}|{params}"


@dataclass(frozen=True)
class OpSample:
    """One measured op duration.

    Attributes:
        signature: :func:`op_signature` of the op.
        kind_op: ``"kind:op"``.
        flops, moved_bytes: its work and the bytes it reads and writes.
        dtype: its element type.
        device: the device it ran on.
        time_s: measured duration (seconds).
    """

    signature: str
    kind_op: str
    flops: float
    moved_bytes: float
    dtype: str
    device: int
    time_s: float

    @classmethod
    def of(cls, spec: OpSpec, device: int, time_s: float) -> OpSample:
        return cls(
            op_signature(spec),
            f"{spec.kind}:{spec.op}",
            spec.flops,
            spec.in_bytes + spec.out_bytes,
            spec.dtype,
            int(device),
            float(time_s),
        )


@dataclass(frozen=True)
class LinkSample:
    """One measured transfer: ``bytes`` from ``src`` to ``dst``; ``copy_s`` the copy itself,
    ``delay_s`` from the producer's end to the consumer's start."""

    src: int
    dst: int
    bytes: float
    copy_s: float
    delay_s: float


@dataclass(frozen=True, eq=False)
class Profile:
    """Measured devices, links and op times, and the cost model they give.

    Attributes:
        name: profile label.
        backend: the executor backend measured (``cpu``, ``cuda``).
        devices: fitted devices (flops, memory bandwidth, launch overhead).
        bandwidth_bytes_per_s, latency_s: ``(D, D)`` fitted links.
        routes, link_names: the link resources (as the measured backend's copy lanes).
        op_scale: per ``"kind:op"`` factor on the fitted roofline.
        op_times: ``{signature: [seconds per device or None]}`` measured op durations.
        dispatch_s: per device, the executor's gap between two ops (part of launch overhead).
        meta: machine, threads, fit residuals, when.
        host: the host thread's fitted costs (:class:`~doppler_lab.hardware.host.Host`; None:
            not measured, the simulator has no host resource).
    """

    name: str
    backend: str
    devices: tuple[Device, ...]
    bandwidth_bytes_per_s: np.ndarray
    latency_s: np.ndarray
    routes: np.ndarray | None = None
    link_names: tuple[str, ...] = ()
    op_scale: Mapping[str, float] = field(default_factory=dict)
    op_times: Mapping[str, list[float | None]] = field(default_factory=dict)
    dispatch_s: tuple[float, ...] = ()
    meta: Mapping[str, Any] = field(default_factory=dict)
    host: Host | None = None

    @property
    def num_devices(self) -> int:
        return len(self.devices)

    @property
    def cluster(self) -> Cluster:
        """The fitted devices and links as a :class:`Cluster`."""
        return Cluster(
            name=f"{self.name} (calibrated)",
            devices=self.devices,
            bandwidth_bytes_per_s=self.bandwidth_bytes_per_s,
            latency_s=self.latency_s,
            routes=self.routes,
            link_names=self.link_names,
            host=self.host,
        )

    def cost_model(self, graph: DataflowGraph, use_op_times: bool = True) -> CalibratedCostModel:
        """The calibrated cost model of ``graph`` (measured op times where known)."""
        return CalibratedCostModel(graph, self, use_op_times=use_op_times)

    def coverage(self, graph: DataflowGraph) -> float:
        """Fraction of ``graph``'s ops whose signature was measured on every device."""
        if graph.specs is None:
            return 0.0
        comp = graph.compute_nodes
        hit = 0
        for v in comp:
            times = self.op_times.get(op_signature(graph.specs[v]))  # type: ignore[arg-type]
            hit += times is not None and all(t is not None for t in times)
        return hit / max(1, comp.size)

    # -- persistence ----------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        bw = np.array(self.bandwidth_bytes_per_s, dtype=np.float64)
        np.fill_diagonal(bw, 0.0)
        return {
            "format": PROFILE_FORMAT,
            "version": PROFILE_VERSION,
            "name": self.name,
            "backend": self.backend,
            "devices": [d.to_dict() for d in self.devices],
            "bandwidth_bytes_per_s": bw.tolist(),
            "latency_s": np.asarray(self.latency_s, dtype=np.float64).tolist(),
            "routes": None if self.routes is None else np.asarray(self.routes).tolist(),
            "link_names": list(self.link_names),
            "dispatch_s": list(self.dispatch_s),
            "op_scale": dict(self.op_scale),
            "op_times": {k: list(v) for k, v in sorted(self.op_times.items())},
            "meta": _finite(to_jsonable(self.meta)),
        } | ({} if self.host is None else {"host": self.host.to_dict()})

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], source: str = "<dict>") -> Profile:
        """The profile of a :meth:`to_dict` document; every field is checked.

        Raises:
            FormatError: naming ``source`` and the bad field.
        """

        def fail(msg: str) -> FormatError:
            return FormatError(msg, source)

        want_object(d, "calibration profile", fail)
        if d.get("format") != PROFILE_FORMAT:
            raise fail(
                f"not a calibration profile (format {show(d.get('format'))}, expected {PROFILE_FORMAT!r})"
            )
        if not is_int(d.get("version")) or d.get("version") != PROFILE_VERSION:
            raise fail(f"profile version {show(d.get('version'))}, expected {PROFILE_VERSION}")
        d = want_fields(d, "profile", fail, PROFILE_FIELDS[:7], PROFILE_FIELDS)
        links = links_from_dict(d, "profile", fail)
        n = len(links["devices"])
        op_times = {}
        for key, times in want_object(d.get("op_times", {}), "profile op_times", fail).items():
            op_times[key] = want_numbers(
                times, f"profile op_times[{key!r}]", fail, length=n, minimum=0, nullable=True
            )
        op_scale = want_object(d.get("op_scale", {}), "profile op_scale", fail)
        dispatch = want_numbers(d.get("dispatch_s", []), "profile dispatch_s", fail, minimum=0)
        if dispatch and len(dispatch) != n:
            raise fail(f"profile dispatch_s has {len(dispatch)} items; expected {n} or none")
        profile = cls(
            name=d["name"],
            backend=want_str(d["backend"], "profile backend", fail),
            **links,
            op_scale={
                k: want_number(v, f"profile op_scale[{k!r}]", fail, minimum=0)
                for k, v in op_scale.items()
            },
            op_times=op_times,
            dispatch_s=tuple(dispatch),  # type: ignore[arg-type]
            meta=dict(want_object(d.get("meta", {}), "profile meta", fail)),
        )
        try:
            profile.cluster  # noqa: B018 - the links are checked where the cluster is built
        except ClusterError as exc:
            raise fail(str(exc)) from None
        return profile

    def save(self, path: str | Path) -> Path:
        from ..house.atomic import atomic_write

        return atomic_write(path, json.dumps(self.to_dict(), indent=1, allow_nan=False))

    @classmethod
    def load(cls, path: str | Path) -> Profile:
        from ..house.userfiles import input_file

        p = input_file(path, "profile file", FormatError)
        return cls.from_dict(read_json_file(p), source=str(path))


class CalibratedCostModel(CostModel):
    """A :class:`CostModel` whose compute times come from a :class:`Profile`: measured op times
    (plus the dispatch gap) where the profile has the op's signature on that device, else the
    fitted roofline times ``op_scale``."""

    def __init__(self, graph: DataflowGraph, profile: Profile, use_op_times: bool = True):
        self.profile = profile
        self.use_op_times = use_op_times
        super().__init__(graph, profile.cluster, op_scale=profile.op_scale)

    def _modelled_compute(self, op_scale: Mapping[str, float]) -> np.ndarray:
        out = super()._modelled_compute(op_scale)
        g, prof = self.graph, self.profile
        if not self.use_op_times or g.specs is None:
            return out
        gaps = prof.dispatch_s or (0.0,) * prof.num_devices
        for v, spec in enumerate(g.specs):
            if spec is None or spec.kind == "input":
                continue
            times = prof.op_times.get(op_signature(spec))
            if times is None:
                continue
            for d, t in enumerate(times[: out.shape[1]]):
                if t is not None:
                    out[v, d] = t + gaps[d]
        return out


# -- fitting -------------------------------------------------------------------------------------
def _median(xs: Iterable[float]) -> float:
    arr = np.fromiter(xs, dtype=np.float64)
    return float(np.median(arr)) if arr.size else math.nan


def _throughput(work_time: list[tuple[float, float]]) -> float:
    """Total work / total time over the larger half of the samples (by work); NaN if none."""
    if not work_time:
        return math.nan
    arr = np.array(sorted(work_time))
    top = arr[arr.shape[0] // 2 :]
    total = float(top[:, 1].sum())
    return float(top[:, 0].sum()) / total if total > 0 else math.nan


def fit_links(
    samples: Iterable[LinkSample], num_devices: int, dispatch_s: tuple[float, ...]
) -> tuple[np.ndarray, np.ndarray]:
    """``(bandwidth, latency)`` per ordered pair from transfer samples.

    Bandwidth: bytes over copy time, fitted as ``copy_s = a + bytes / bw`` over the sizes.
    Latency: what a consumer waits beyond the copy's bandwidth term and its own dispatch gap,
    ``delay - bytes / bw - dispatch``, medians per pair. Pairs never measured get the mean of
    the measured ones.
    """
    by_pair: dict[tuple[int, int], list[LinkSample]] = {}
    for s in samples:
        by_pair.setdefault((s.src, s.dst), []).append(s)
    d = num_devices
    bw = np.full((d, d), np.nan)
    lat = np.full((d, d), np.nan)
    for (a, b), ss in by_pair.items():
        x = np.array([s.bytes for s in ss])
        y = np.array([s.copy_s for s in ss])
        if np.unique(x).size >= 2:
            slope = float(np.polyfit(x, y, 1)[0])
        else:
            slope = float(np.median(y / np.maximum(x, 1.0)))
        bw[a, b] = 1.0 / slope if slope > 0 else 1e12
        lat[a, b] = max(0.0, _median(s.delay_s - s.bytes / bw[a, b] - dispatch_s[b] for s in ss))
    off = ~np.eye(d, dtype=bool)
    known = off & np.isfinite(bw)
    if d > 1:
        bw[off & ~known] = np.mean(bw[known]) if known.any() else 5e9
        lat[off & ~known] = np.mean(lat[known]) if known.any() else 20e-6
    np.fill_diagonal(bw, 0.0)
    np.fill_diagonal(lat, 0.0)
    return bw, lat


def fit_devices(
    base: tuple[Device, ...], samples: Iterable[OpSample], dispatch_s: tuple[float, ...]
) -> tuple[tuple[Device, ...], dict[str, float], dict[str, Any]]:
    """Fit each device's roofline and the per-``kind:op`` scales to op samples.

    Per device: ``call_s`` = the median time of the cheapest tenth of its samples (what any
    op costs; refined once the roofline below is fitted, to their time beyond it); ``flops_per_s`` = total flops / total (time - call) over the larger half (by
    flops) of its einsum samples; ``mem_bytes_per_s`` likewise over elementwise and reduce
    samples (bytes read and written). ``launch_overhead_s`` = call + dispatch gap. Then per ``kind:op``:
    ``op_scale`` = median of (time - call) / roofline. Returns (devices, op_scale, fit report).
    """
    ss = list(samples)
    devices = []
    report: dict[str, Any] = {}
    call = []
    for d, dev in enumerate(base):
        mine = [s for s in ss if s.device == d]
        if not mine:
            devices.append(dev)
            call.append(max(0.0, dev.launch_overhead_s - dispatch_s[d]))
            continue
        times = np.sort([s.time_s for s in mine])
        c = float(np.median(times[: max(1, times.size // 10)]))
        rate = _throughput(
            [
                (s.flops, s.time_s - c)
                for s in mine
                if s.kind_op.startswith("einsum:") and s.time_s > 2 * c
            ]
        )
        mem = [
            (s.moved_bytes, s.time_s - c)
            for s in mine
            if s.kind_op.split(":")[0] in ("elementwise", "reduce") and s.time_s > 2 * c
        ]
        bw = _throughput(mem)
        rate = rate if math.isfinite(rate) else dev.rate("float32")
        bw = bw if math.isfinite(bw) else dev.mem_bytes_per_s
        # refine the per-call cost now that the roofline is known: what the cheapest ops take
        # beyond it
        cheap = sorted(mine, key=lambda s: s.time_s)[: max(1, len(mine) // 10)]
        c = max(0.0, _median(s.time_s - max(s.flops / rate, s.moved_bytes / bw) for s in cheap))
        flops = {k: v * rate / dev.rate("float32") for k, v in dev.flops_per_s.items()}
        flops["float32"] = rate
        devices.append(
            replace(dev, flops_per_s=flops, mem_bytes_per_s=bw, launch_overhead_s=c + dispatch_s[d])
        )
        call.append(c)
        report[f"device {d}"] = {
            "call_s": c,
            "flops_per_s": rate,
            "mem_bytes_per_s": bw,
            "samples": len(mine),
        }
    ratios: dict[str, list[float]] = {}
    for s in ss:
        dev = devices[s.device]
        roof = max(s.flops / dev.rate(s.dtype), s.moved_bytes / dev.mem_bytes_per_s)
        if roof > 0 and s.time_s > call[s.device]:
            ratios.setdefault(s.kind_op, []).append((s.time_s - call[s.device]) / roof)
    op_scale = {k: _median(v) for k, v in sorted(ratios.items())}
    # how well the roofline alone explains the samples
    err = []
    for s in ss:
        dev = devices[s.device]
        roof = max(s.flops / dev.rate(s.dtype), s.moved_bytes / dev.mem_bytes_per_s)
        pred = roof * op_scale.get(s.kind_op, 1.0) + call[s.device]
        err.append(abs(pred - s.time_s) / s.time_s)
    report["roofline_median_rel_error"] = _median(err)
    return tuple(devices), op_scale, report


#: quantile of an op's measured durations kept in a profile: low, because other processes only
#: ever make an op slower (the devices' own contention is present in most samples anyway)
OP_TIME_QUANTILE = 0.25


def op_time_table(
    samples: Iterable[OpSample], num_devices: int, quantile: float = OP_TIME_QUANTILE
) -> dict[str, list[float | None]]:
    """``{signature: [seconds per device or None]}``: the ``quantile`` of each op's samples."""
    acc: dict[str, list[list[float]]] = {}
    for s in samples:
        acc.setdefault(s.signature, [[] for _ in range(num_devices)])[s.device].append(s.time_s)
    return {
        k: [float(np.quantile(x, quantile)) if x else None for x in v]
        for k, v in sorted(acc.items())
    }


#: the periods of a host probe (:func:`~doppler_lab.executor.profiling.host_probe`), seconds
HOST_PROBE_FIELDS = ("launch_alone_s", "launch_busy_s", "copy_alone_s", "copy_busy_s")
#: a period with every device busy this much above what the cores explain is host-bound
HOST_TOLERANCE = 0.15
#: a measured parallel capacity below this share of the devices slows the devices in the model
CAPACITY_SHARE = 0.95


def fit_host(
    probe: Mapping[str, float], capacity: float | None = None, routes: np.ndarray | None = None
) -> Host | None:
    """The host thread's costs from a host probe, and the devices' parallel capacity.

    The model (:class:`~doppler_lab.hardware.host.Host`): one host thread serves every launch
    (``launch_s``) and copy issue (``copy_s``) one at a time; the rest of an op's period runs
    on its device, ``capacity`` devices at full speed at once. ``capacity``
    (:func:`~doppler_lab.executor.profiling.parallel_capacity`) is kept where it is below
    :data:`CAPACITY_SHARE` of the ``D`` devices (at least 1: a device alone runs at its
    calibrated speed).

    Launches: with ``D`` independent chains, one a device, a period is the larger of the one
    alone (its device part stretched by ``D / capacity`` when the cores are short) and ``D``
    launches; so where the busy period exceeds what the cores explain (by
    :data:`HOST_TOLERANCE`), ``launch_s = busy / D``, else the host does not bind there and the
    cost is 0 (the measurements only bound it). Copies: the ``copy_s`` whose simulated probe
    (``D`` chains hopping from device to device, on the links ``routes``) has the measured busy
    period (bisection; 0 where the period is already explained without it).

    Returns ``None`` without a probe (the host is not modelled), else the :class:`Host`.
    """
    if not probe:
        return None
    d = int(probe.get("devices", 1))
    # below 1 is the load moving between the probe's two timings: one device alone runs at its
    # calibrated speed
    cap = None if capacity is None or capacity >= CAPACITY_SHARE * d else max(1.0, capacity)
    stretch = max(1.0, d / cap) if cap else 1.0
    alone, busy = probe.get("launch_alone_s"), probe.get("launch_busy_s")
    launch = 0.0
    if alone is not None and busy is not None and busy > alone * stretch * (1 + HOST_TOLERANCE):
        launch = min(busy / d, alone)
    copy = 0.0
    q1, qd = probe.get("copy_alone_s"), probe.get("copy_busy_s")
    if d > 1 and alone is not None and q1 is not None and qd is not None and q1 > alone:

        def period(c: float) -> float:
            return _copy_probe_period(alone, q1, Host(launch, c, cap), d, routes)

        lo, hi = 0.0, q1 - alone
        if period(lo) < qd * (1 - 1e-9):
            if period(hi) <= qd:
                lo = hi  # the whole bracket is within the period: no bisection to do
            else:
                for _ in range(40):
                    mid = 0.5 * (lo + hi)
                    lo, hi = (mid, hi) if period(mid) <= qd else (lo, mid)
            copy = lo
    return Host(launch_s=launch, copy_s=copy, parallel_capacity=cap)


def _copy_probe_period(
    alone_launch: float,
    alone_copy: float,
    host: Host,
    d: int,
    routes: np.ndarray | None,
    hops: int = 40,
) -> float:
    """The simulated busy period of the host probe's copy chains (``d`` chains, op ``i`` of
    chain ``c`` on device ``(c + i) % d``): each op costs ``alone_launch`` and each copy what
    remains of ``alone_copy`` once the op and the copy's issue are taken off."""
    from ..ir.graph import GraphBuilder
    from .sim import Simulator

    us = 1e-6  # raw units of the probe graph
    rest = max(alone_copy - alone_launch - host.copy_s, 0.0) / us
    b = GraphBuilder("host-probe")
    chains, dev = [], []
    for c in range(d):
        ops: list[int] = []
        for i in range(hops):
            ins = ops[-1:]
            ops.append(
                b.add_node(
                    f"c{c}_{i}", cost=alone_launch / us, inputs=ins, edge_costs=[rest] * len(ins)
                )
            )
            dev.append((c + i) % d)
        chains.append(ops)
    g = b.build(time_scale=us)
    devices = tuple(Device(f"d{i}", launch_overhead_s=0.0) for i in range(d))
    cluster = Cluster("host-probe", devices, np.ones((d, d)), np.zeros((d, d)), routes, (), host)
    tr = Simulator(g, cluster, "wc").run(np.array(dev))
    return float(np.median([np.median(np.diff(tr.start[ops])) for ops in chains]))


#: backends whose devices share the machine's cores (threads or processes): their profile's host
#: gets ``cores``, the measured parallel capacity (:class:`~doppler_lab.hardware.host.Host`)
CPU_BACKENDS = ("cpu", "dist")


def fit_profile(
    name: str,
    backend: str,
    base: Cluster,
    op_samples: Iterable[OpSample],
    link_samples: Iterable[LinkSample],
    dispatch_s: tuple[float, ...],
    meta: Mapping[str, Any] | None = None,
    host_probe: Mapping[str, float] | None = None,
) -> Profile:
    """A :class:`Profile` fitted to measurements on the devices of ``base`` (with a host where
    ``host_probe`` measured one: :func:`fit_host`)."""
    ops = list(op_samples)
    devices, op_scale, report = fit_devices(base.devices, ops, dispatch_s)
    bw, lat = fit_links(link_samples, base.num_devices, dispatch_s)
    capacity = (meta or {}).get("parallel_capacity")
    cap = capacity if isinstance(capacity, int | float) else None
    host = fit_host(host_probe or {}, cap, base.routes)
    if backend in CPU_BACKENDS and base.num_devices > 1 and cap is not None:
        # the devices and copy lanes share the cores the probe measured (replacing the coarser
        # capacity, which looks at devices only and at an op's start)
        cores = min(max(float(cap), 1.0), float(base.num_devices))
        host = replace(host or Host(), cores=cores, parallel_capacity=None)
    if host is not None:
        report = {**report, "host": host.to_dict(), "host_probe": dict(host_probe or {})}
    return Profile(
        name=name,
        backend=backend,
        devices=devices,
        bandwidth_bytes_per_s=bw,
        latency_s=lat,
        routes=base.routes,
        link_names=base.link_names,
        op_scale=op_scale,
        op_times=op_time_table(ops, base.num_devices),
        dispatch_s=tuple(dispatch_s),
        meta={**dict(meta or {}), "fit": report, "op_samples": len(ops)},
        host=host,
    )


def _finite(x: Any) -> Any:
    """``x`` with non-finite floats replaced by ``None`` (JSON has no NaN)."""
    if isinstance(x, Mapping):
        return {k: _finite(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [_finite(v) for v in x]
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return x
