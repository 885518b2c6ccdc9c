"""How a backend is chosen: :func:`make_backend` from a name, a cluster (or its file), or a
:class:`~doppler_lab.executor.backend.Backend`.

Above the backends (:mod:`.cpu`, :mod:`.dist`, :mod:`.streams`), which import only the interface
in :mod:`.backend`.
"""

from __future__ import annotations

from pathlib import Path

from ..hardware.cluster import Cluster
from ..house.errors import ClusterError, ConfigError
from .backend import Backend, default_cpu_devices, make_cpu_cluster

BACKENDS: tuple[str, ...] = ("cpu", "dist", "cuda", "cuda-shared", "inline", "inline-strict")


def cluster_from_file(path: str | Path) -> Cluster:
    """A cluster from a cluster JSON or a calibration profile JSON."""
    from ..house.userfiles import input_file
    from ..io.documents import load_cluster

    p = input_file(path, "cluster file")

    return load_cluster(p)  # cluster JSON or calibration profile


def _join_torchrun(
    spec: str | Cluster, num_devices: int | None, threads_per_device: int | None
) -> Backend:
    """Under ``torchrun``: this rank's :class:`~.torchrun.TorchrunBackend` (``dist``: the
    job's default multi-host cluster)."""
    import os

    from .torchrun import join_torchrun, torchrun_cluster

    world = int(os.environ["WORLD_SIZE"])
    if num_devices is not None and num_devices != world:
        raise ConfigError(
            f"--devices {num_devices} under torchrun with WORLD_SIZE {world}; expected one rank "
            "per device"
        )
    cluster = torchrun_cluster() if isinstance(spec, str) else spec
    return join_torchrun(cluster, threads_per_device)


def make_backend(
    spec: str | Cluster | Backend = "cpu",
    num_devices: int | None = None,
    threads_per_device: int | None = None,
) -> Backend:
    """A backend from ``cpu``, ``dist``, ``cuda``, ``cuda-shared``, ``inline``, a cluster/profile JSON path, a
    ``multihost:...`` cluster spec, a :class:`Cluster` (CPU or GPU devices), or a
    :class:`Backend` (returned as is).

    Under ``torchrun`` (its environment set), ``dist`` and every cluster join the job's process
    group instead (:mod:`.torchrun`): rank ``r`` is device ``r``, ``dist`` meaning the job's
    hosts (:func:`~.torchrun.torchrun_cluster`).

    Args:
        spec: what to run on.
        num_devices: devices for ``cpu``/``cuda``/``inline`` (default: 2-4 CPU workers, or every
            visible GPU); must match a cluster's size when one is given.
        threads_per_device: intra-op threads of each CPU worker (default: cores / devices).
    """
    if isinstance(spec, Backend):
        if num_devices is not None and num_devices != spec.num_devices:
            raise ConfigError(f"backend has {spec.num_devices} devices, not {num_devices}")
        return spec
    if num_devices is not None and num_devices < 1:
        raise ConfigError(f"the number of devices must be >= 1, got {num_devices}")
    if isinstance(spec, str) and spec.endswith(".json"):
        spec = cluster_from_file(spec)
    if isinstance(spec, str) and (spec == "multihost" or spec.startswith("multihost:")):
        from ..hardware.cluster import make_cluster

        spec = make_cluster(spec)
    from .torchrun import under_torchrun

    if under_torchrun() and (spec == "dist" or isinstance(spec, Cluster)):
        return _join_torchrun(spec, num_devices, threads_per_device)
    if isinstance(spec, Cluster):
        if num_devices is not None and num_devices != spec.num_devices:
            raise ClusterError(
                f"cluster {spec.name!r} has {spec.num_devices} devices, not {num_devices}"
            )
        kinds = {dev.kind for dev in spec.devices}
        if kinds == {"cpu"}:
            from .cpu import CpuBackend

            return CpuBackend(spec, threads_per_device=threads_per_device)
        if kinds == {"gpu"}:
            import torch

            from .streams import make_cuda_backend

            shared = spec.num_devices > torch.cuda.device_count()
            return make_cuda_backend(spec.num_devices, cluster=spec, shared=shared)
        raise ClusterError(
            f"cluster {spec.name!r} mixes device kinds {sorted(kinds)}; the executor runs all-cpu "
            "or all-gpu clusters"
        )
    if spec == "cpu":
        from .cpu import CpuBackend

        return CpuBackend(
            make_cpu_cluster(num_devices or default_cpu_devices()),
            threads_per_device=threads_per_device,
        )
    if spec in ("cuda", "cuda-shared"):
        from .streams import make_cuda_backend

        return make_cuda_backend(num_devices, shared=spec == "cuda-shared")
    if spec == "dist":
        from .dist import DistBackend

        return DistBackend(
            num_devices or default_cpu_devices(), threads_per_device=threads_per_device
        )
    if spec in ("inline", "inline-strict"):
        from .streams import make_inline_backend

        return make_inline_backend(num_devices or 2, strict=spec == "inline-strict")
    raise ConfigError(
        f"unknown backend {spec!r}; expected one of {BACKENDS}, a cluster/profile .json or a Cluster"
    )
