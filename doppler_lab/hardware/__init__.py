"""Hardware: devices, clusters and their links (:mod:`~doppler_lab.hardware.cluster`), the
transfer rule (:mod:`~doppler_lab.hardware.rules`), the host thread behind the devices
(:mod:`~doppler_lab.hardware.host`) and published GPU peaks
(:mod:`~doppler_lab.hardware.gpu_specs`). The face re-exports the cluster module and
:class:`~doppler_lab.hardware.host.Host`.
"""

from .cluster import (
    CLUSTER_FIELDS,
    DEVICE_FIELDS,
    DEVICE_KINDS,
    GB,
    PRESETS,
    Cluster,
    Device,
    host_memory_bytes,
    links_from_dict,
    make_cluster,
    make_cpu,
    make_h100x8,
    make_multihost,
    make_p100x4,
    make_uniform,
    make_v100x8,
    parse_multihost,
    switch_routes,
)
from .host import Host

__all__ = [
    "GB",
    "Device",
    "DEVICE_KINDS",
    "DEVICE_FIELDS",
    "Cluster",
    "CLUSTER_FIELDS",
    "Host",
    "host_memory_bytes",
    "links_from_dict",
    "switch_routes",
    "make_p100x4",
    "make_v100x8",
    "make_h100x8",
    "make_cpu",
    "make_uniform",
    "make_multihost",
    "parse_multihost",
    "PRESETS",
    "make_cluster",
]

_TIMING = {"CostModel", "lower_bound"}


def __getattr__(name: str):
    if name in _TIMING:  # named, not imported: hardware sits below the timing wing
        raise ImportError(
            f"doppler_lab.hardware.{name} moved to the timing wing: "
            f"from doppler_lab.timing.cost_model import {name}"
        )
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
