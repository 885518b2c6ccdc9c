"""Raw measurements kept beside a report, so that a profile can be refitted (and a model checked)
offline, without the machine that measured them.

``doppler-lab bench fidelity`` and ``doppler-lab gpu-check`` write one gzip-compressed JSON
document each (``fidelity_raw.json.gz``) next to their report:

- ``calibration``: what the calibration measured (:class:`CalibrationRaw`): every op duration
  (signature, device, seconds), every transfer (pair, bytes, copy and delay seconds), the
  dispatch gap per device, the uncalibrated cluster and the machine's notes;
- ``workloads``: per workload its spec, the placements (device per node) and every timed run's
  makespan (placements x runs, in measuring order), and whatever else the command recorded.

``doppler-lab calibrate --from FILE`` refits the profile from ``calibration``
(:func:`refit_profile`); :meth:`CalibrationRaw.fit` is the same fit the live calibration makes,
so a refit of a run's raw file gives that run's profile, number for number.

This module imports no torch.
"""

from __future__ import annotations

import gzip
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..hardware.cluster import Cluster
from ..house.errors import ClusterError, FormatError
from ..house.jsonutil import to_jsonable
from ..house.validate import is_int, parse_json, show, want_fields, want_number
from .calibration import LinkSample, OpSample, Profile, _finite, fit_profile

RAW_FORMAT = "doppler_lab.raw"
RAW_VERSION = 1
#: the file name beside a report
RAW_FILE = "fidelity_raw.json.gz"


@dataclass(frozen=True, eq=False)
class CalibrationRaw:
    """Everything a calibration measured, before fitting.

    Attributes:
        name: the profile's label.
        backend: the executor backend measured.
        base: the uncalibrated cluster of the devices (what the fit starts from).
        op_samples: every op duration.
        link_samples: every transfer.
        dispatch_s: per device, the executor's gap between two ops.
        meta: machine, threads, when (the fit adds its report).
        host_probe: the host thread's periods
            (:func:`~doppler_lab.executor.profiling.host_probe`; empty: not measured, and the
            fit gives no host).
    """

    name: str
    backend: str
    base: Cluster
    op_samples: Sequence[OpSample]
    link_samples: Sequence[LinkSample]
    dispatch_s: tuple[float, ...]
    meta: Mapping[str, Any] = field(default_factory=dict)
    host_probe: Mapping[str, float] = field(default_factory=dict)

    def fit(self, name: str | None = None) -> Profile:
        """The profile these measurements give (:func:`~.calibration.fit_profile`)."""
        return fit_profile(
            name or self.name,
            self.backend,
            self.base,
            self.op_samples,
            self.link_samples,
            self.dispatch_s,
            self.meta,
            self.host_probe,
        )

    def to_dict(self) -> dict[str, Any]:
        """Columns, with each op signature's fields stored once."""
        keys: dict[tuple[str, str, float, float, str], int] = {}
        which = []
        for s in self.op_samples:
            k = (s.signature, s.kind_op, s.flops, s.moved_bytes, s.dtype)
            which.append(keys.setdefault(k, len(keys)))
        sigs = list(keys)
        links = self.link_samples
        return {
            "name": self.name,
            "backend": self.backend,
            "cluster": self.base.to_dict(),
            "dispatch_s": [float(x) for x in self.dispatch_s],
            "ops": {
                "signature": [k[0] for k in sigs],
                "kind_op": [k[1] for k in sigs],
                "flops": [k[2] for k in sigs],
                "moved_bytes": [k[3] for k in sigs],
                "dtype": [k[4] for k in sigs],
                "sample_signature": which,
                "device": [s.device for s in self.op_samples],
                "time_s": [s.time_s for s in self.op_samples],
            },
            "links": {
                "src": [s.src for s in links],
                "dst": [s.dst for s in links],
                "bytes": [s.bytes for s in links],
                "copy_s": [s.copy_s for s in links],
                "delay_s": [s.delay_s for s in links],
            },
            "meta": _finite(to_jsonable(dict(self.meta))),
        } | ({"host_probe": to_jsonable(dict(self.host_probe))} if self.host_probe else {})

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], source: str = "<dict>") -> CalibrationRaw:
        """The measurements of a :meth:`to_dict` document.

        Raises:
            FormatError: naming ``source`` and the bad field.
        """
        try:
            base = Cluster.from_dict(_field(d, "cluster", dict, source))
        except ClusterError as exc:
            raise FormatError(f"raw calibration cluster: {exc}", source) from None
        n = base.num_devices
        ops = _field(d, "ops", dict, source)
        sig = [_column(ops, k, source) for k in ("signature", "kind_op", "flops", "moved_bytes")]
        sig.append(_column(ops, "dtype", source))
        _same_length(sig, "ops signature columns", source)
        which, dev, time_s = (
            _column(ops, k, source) for k in ("sample_signature", "device", "time_s")
        )
        _same_length([which, dev, time_s], "ops sample columns", source)
        _indices(which, len(sig[0]), "ops sample_signature", source)
        _indices(dev, n, "ops device", source)
        _times(time_s, "ops time_s", source)
        op_samples = [
            OpSample(sig[0][i], sig[1][i], float(sig[2][i]), float(sig[3][i]), sig[4][i], d_, t)
            for i, d_, t in zip(which, dev, map(float, time_s))
        ]
        links = _field(d, "links", dict, source)
        cols = [_column(links, k, source) for k in ("src", "dst", "bytes", "copy_s", "delay_s")]
        _same_length(cols, "links columns", source)
        _indices(cols[0], n, "links src", source)
        _indices(cols[1], n, "links dst", source)
        for k, c in zip(("bytes", "copy_s", "delay_s"), cols[2:]):
            _times(c, f"links {k}", source, signed=k == "delay_s")
        link_samples = [
            LinkSample(a, b, float(x), float(c), float(w)) for a, b, x, c, w in zip(*cols)
        ]
        dispatch = _field(d, "dispatch_s", list, source)
        _times(dispatch, "dispatch_s", source)
        if len(dispatch) != n:
            raise FormatError(f"raw dispatch_s has {len(dispatch)} items, expected {n}", source)
        return cls(
            name=str(_field(d, "name", str, source)),
            backend=str(_field(d, "backend", str, source)),
            base=base,
            op_samples=op_samples,
            link_samples=link_samples,
            dispatch_s=tuple(float(x) for x in dispatch),
            meta=dict(_field(d, "meta", dict, source)),
            host_probe=_host_probe(d.get("host_probe", {}), source),
        )


def write_raw(
    path: str | Path,
    source: str,
    calibration: CalibrationRaw | None,
    workloads: Mapping[str, Any],
    extra: Mapping[str, Any] | None = None,
) -> Path:
    """Write a raw document (gzip JSON, reproducible bytes) to ``path``; returns the path.

    Args:
        path: the file (``.json.gz``).
        source: the command that measured (``bench fidelity``, ``gpu-check``).
        calibration: the calibration's measurements (None: none were made).
        workloads: per workload, what was measured (plain JSON values).
        extra: other top-level fields (e.g. the GPU check's probe).
    """
    from ..house.atomic import atomic_write

    doc = {
        "format": RAW_FORMAT,
        "version": RAW_VERSION,
        "source": source,
        "calibration": None if calibration is None else calibration.to_dict(),
        "workloads": _finite(to_jsonable(dict(workloads))),
        **_finite(to_jsonable(dict(extra or {}))),
    }
    text = json.dumps(doc, separators=(",", ":"), allow_nan=False)
    return atomic_write(path, gzip.compress(text.encode("utf-8"), mtime=0))


def read_raw(path: str | Path) -> dict[str, Any]:
    """The raw document in ``path`` (gzip JSON, or plain JSON), with ``calibration`` as a
    :class:`CalibrationRaw` (None when the run made none).

    Raises:
        FormatError: the file cannot be read or is not a raw document.
    """
    p = Path(path)
    try:
        data = p.read_bytes()
    except OSError as exc:
        raise FormatError(f"cannot read: {exc.strerror or exc}", str(p)) from None
    if data[:2] == b"\x1f\x8b":
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError) as exc:
            raise FormatError(f"not a readable gzip file ({exc})", str(p)) from None
    doc = parse_json(data, str(p))
    if not isinstance(doc, dict) or doc.get("format") != RAW_FORMAT:
        got = doc.get("format") if isinstance(doc, dict) else type(doc).__name__
        raise FormatError(
            f"not a raw measurements file (format {show(got)}, expected {RAW_FORMAT!r})", str(p)
        )
    if doc.get("version") != RAW_VERSION:
        raise FormatError(
            f"raw measurements version {show(doc.get('version'))}, expected {RAW_VERSION}", str(p)
        )
    cal = doc.get("calibration")
    if cal is not None:
        if not isinstance(cal, dict):
            raise FormatError("raw calibration is not an object", str(p))
        doc["calibration"] = CalibrationRaw.from_dict(cal, str(p))
    return doc


def refit_profile(path: str | Path, name: str | None = None) -> Profile:
    """The profile refitted from the calibration measurements in the raw file ``path``.

    Raises:
        FormatError: the file is not a raw document, or its run made no calibration.
    """
    cal = read_raw(path)["calibration"]
    if cal is None:
        raise FormatError("this run made no calibration; nothing to refit", str(path))
    return cal.fit(name)


# -- checks ----------------------------------------------------------------------------------
def _host_probe(d: Any, source: str) -> dict[str, float]:
    """The checked ``host_probe`` record: its periods (seconds, floats) and device count (an
    int, as :func:`~doppler_lab.executor.profiling.host_probe` records it: a float would be
    written as ``2.0`` and refused by the next read)."""
    from .calibration import HOST_PROBE_FIELDS

    def fail(msg: str) -> FormatError:
        return FormatError(f"raw {msg}", source)

    d = want_fields(d, "host_probe", fail, (), ("devices", *HOST_PROBE_FIELDS))
    out: dict[str, float] = {
        k: want_number(v, f"host_probe {k}", fail, minimum=0) for k, v in d.items()
    }
    if out:
        devices = d.get("devices")
        if not is_int(devices) or devices < 1:
            raise fail(f"host_probe devices is {show(devices)}; expected an integer >= 1")
        out["devices"] = int(devices)
    return out


def _field(d: Mapping[str, Any], key: str, kind: type, source: str) -> Any:
    if not isinstance(d, Mapping) or key not in d:
        raise FormatError(f"raw calibration has no {key!r}", source)
    v = d[key]
    if not isinstance(v, kind):
        raise FormatError(
            f"raw calibration {key!r} is {type(v).__name__}, expected {kind.__name__}", source
        )
    return v


def _column(d: Mapping[str, Any], key: str, source: str) -> list[Any]:
    return _field(d, key, list, source)


def _same_length(cols: Sequence[list[Any]], what: str, source: str) -> None:
    sizes = {len(c) for c in cols}
    if len(sizes) > 1:
        raise FormatError(f"raw {what} differ in length ({sorted(sizes)})", source)


def _indices(xs: list[Any], n: int, what: str, source: str) -> None:
    for i, x in enumerate(xs):
        if not (isinstance(x, int) and not isinstance(x, bool) and 0 <= x < n):
            raise FormatError(
                f"raw {what}[{i}] = {show(x)}, expected an integer in [0, {n})", source
            )


def _times(xs: list[Any], what: str, source: str, signed: bool = False) -> None:
    arr = np.asarray(
        [x if isinstance(x, int | float) and not isinstance(x, bool) else math.nan for x in xs],
        dtype=np.float64,
    )
    bad = np.flatnonzero(~np.isfinite(arr) | (False if signed else arr < 0))
    if bad.size:
        i = int(bad[0])
        want = "a finite number" if signed else "a finite number >= 0"
        raise FormatError(f"raw {what}[{i}] = {show(xs[i])}, expected {want}", source)
