"""Published GPU specifications: the uncalibrated GPU model of the executor (issue 34).

:func:`nominal_gpu` turns a torch device name (``torch.cuda.get_device_properties(i).name``,
e.g. ``"NVIDIA H200"``, ``"Tesla V100-SXM2-32GB"``) into the rates the simulator needs, and
:func:`gpu_device` into a :class:`~doppler_lab.hardware.Device`. ``doppler-lab calibrate``
measures the real rates; this is what a GPU is taken to be before that.

The table :data:`GPU_SPECS` holds vendor peaks, all *dense* (the datasheets' tensor-core
figures marked "with sparsity" halved):

- ``fp32_flops``: FP32 on the CUDA cores (no tensor cores). PyTorch's float32 matmuls run here
  unless TF32 is switched on (``torch.backends.cuda.matmul.allow_tf32`` defaults to False).
- ``half_flops``: FP16 on the tensor cores with FP32 accumulate (what cuBLAS uses for torch's
  float16 matmuls). GeForce cards run this at half their FP16-accumulate rate; the table has the
  FP32-accumulate figure. P100 has no tensor cores: its packed FP16 rate (2x FP32).
- ``bf16_flops``: BF16 on the tensor cores; ``None`` where the GPU has no BF16 hardware (P100,
  V100, T4: torch's bfloat16 then runs at about the FP32 rate).
- ``tf32_flops``: TF32 on the tensor cores (``None`` before Ampere).
- ``mem_bytes_per_s``, ``memory_bytes``: memory bandwidth and size as sold (decimal GB).

Sources (numbers written from the documents named, from memory, and spot-checked against
public spec summaries found with a search engine; no vendor page was fetched here):
NVIDIA datasheets of Tesla P100, V100 (SXM2, PCIe), V100S, T4, A100 (40 GB, 80 GB; SXM4 and
PCIe), A10, A30, A40, RTX A6000, L4, L40, L40S, H100 (SXM5, PCIe, NVL), H200 (SXM, NVL), GH200,
HGX B200 (the 8-GPU board's totals divided by 8); the NVIDIA Ampere GA102 and Ada Lovelace
whitepapers' appendices (GeForce RTX 3090, RTX 4090, RTX 6000 Ada: the FP16 and BF16 tensor rates
with FP32 accumulate); AMD Instinct MI250X and MI300X datasheets (``fp32_flops`` the vector
rate, ``half_flops`` / ``bf16_flops`` the matrix cores' dense rate).

Achievable rates. Peaks are not what a kernel gets: large cuBLAS matmuls reach about 0.7 to 0.9
of the tensor-core and FP32 peaks (clocks fall below boost under load) and a streaming kernel
about 0.8 to 0.9 of the memory bandwidth. :data:`ACHIEVABLE_FLOPS` (0.7) and
:data:`ACHIEVABLE_BANDWIDTH` (0.8) are the shares the devices here get: conservative ends of
those ranges, for the large ops that dominate a makespan (small ops are bound by the launch
overhead anyway). :data:`HOST_LAUNCH_S` (15 us) is the per-op cost of the executor's Python
host loop that dispatches each op (the CUDA launch itself is about 5 us; the Python dispatch
around it about as much again and more), the floor of every op's time.

A GPU that is not in the table is estimated from its properties (:func:`estimate_gpu`): SM
count x clock x FLOPs per SM per clock of its architecture (compute capability), conservative
defaults where a property is unknown; the result says which way it was made (``source``).
"""

from __future__ import annotations

import math
import re
from typing import Any, NamedTuple

GB = 1e9
TB = 1e12
TFLOPS = 1e12

#: shares of the peak FLOP/s and of the peak memory bandwidth that the modelled ops reach
ACHIEVABLE_FLOPS = 0.7
ACHIEVABLE_BANDWIDTH = 0.8
#: the stream executor's host time per op launch (one Python dispatcher): every op's floor
HOST_LAUNCH_S = 15e-6


class GpuSpec(NamedTuple):
    """Peak (dense) rates of one GPU model; see the module docstring for each field."""

    name: str
    fp32_flops: float
    half_flops: float
    mem_bytes_per_s: float
    memory_bytes: float
    bf16_flops: float | None = None
    tf32_flops: float | None = None
    source: str = ""


def _spec(
    name: str,
    fp32: float,
    half: float,
    bf16: float | None,
    tf32: float | None,
    bw_gb: float,
    mem_gb: float,
    source: str,
) -> GpuSpec:
    """A spec from TFLOP/s, GB/s and GB."""
    return GpuSpec(
        name,
        fp32 * TFLOPS,
        half * TFLOPS,
        bw_gb * GB,
        mem_gb * GB,
        None if bf16 is None else bf16 * TFLOPS,
        None if tf32 is None else tf32 * TFLOPS,
        source,
    )


_NV = "NVIDIA datasheet"
_GA102 = "NVIDIA Ampere GA102 whitepaper (FP32-accumulate tensor rate)"
_ADA = "NVIDIA Ada Lovelace whitepaper (FP32-accumulate tensor rate)"
_AMD = "AMD Instinct datasheet"

#: (name patterns, spec): a pattern matches whole words of the lower-cased torch name with
#: punctuation as spaces ("Tesla V100-SXM2-32GB" -> "tesla v100 sxm2 32gb"); the longest
#: matching pattern wins, ties go to the spec whose memory is closest to the device's
GPU_SPECS: tuple[tuple[tuple[str, ...], GpuSpec], ...] = (
    # Pascal (no tensor cores; FP16 packed at 2x FP32)
    (("p100 pcie 16gb", "p100 pcie", "p100"),
     _spec("Tesla P100 PCIe 16GB", 9.3, 18.7, None, None, 732, 16, f"{_NV} (Tesla P100)")),
    (("p100 pcie 12gb",),
     _spec("Tesla P100 PCIe 12GB", 9.3, 18.7, None, None, 549, 12, f"{_NV} (Tesla P100)")),
    (("p100 sxm2", "p100 sxm", "p100"),
     _spec("Tesla P100 SXM2", 10.6, 21.2, None, None, 732, 16, f"{_NV} (Tesla P100)")),
    # Volta, Turing (FP16 tensor cores, no BF16)
    (("v100 sxm2", "v100 sxm", "v100"),
     _spec("Tesla V100 SXM2", 15.7, 125, None, None, 900, 32, f"{_NV} (Tesla V100)")),
    (("v100 pcie",),
     _spec("Tesla V100 PCIe", 14, 112, None, None, 900, 32, f"{_NV} (Tesla V100)")),
    (("v100s", "v100s pcie"),
     _spec("Tesla V100S PCIe", 16.4, 130, None, None, 1134, 32, f"{_NV} (Tesla V100S)")),
    (("t4",), _spec("Tesla T4", 8.1, 65, None, None, 320, 16, f"{_NV} (T4)")),
    # Ampere
    (("a100 sxm4 40gb", "a100 sxm 40gb", "a100 40gb", "a100 sxm4", "a100 sxm", "a100"),
     _spec("A100 SXM4 40GB", 19.5, 312, 312, 156, 1555, 40, f"{_NV} (A100)")),
    (("a100 sxm4 80gb", "a100 sxm 80gb", "a100 80gb", "a100 sxm4", "a100 sxm", "a100"),
     _spec("A100 SXM4 80GB", 19.5, 312, 312, 156, 2039, 80, f"{_NV} (A100)")),
    (("a100 pcie 40gb", "a100 40gb pcie", "a100 pcie"),
     _spec("A100 PCIe 40GB", 19.5, 312, 312, 156, 1555, 40, f"{_NV} (A100)")),
    (("a100 pcie 80gb", "a100 80gb pcie", "a100 pcie"),
     _spec("A100 PCIe 80GB", 19.5, 312, 312, 156, 1935, 80, f"{_NV} (A100)")),
    (("a10",), _spec("A10", 31.2, 125, 125, 62.5, 600, 24, f"{_NV} (A10)")),
    (("a30",), _spec("A30", 10.3, 165, 165, 82, 933, 24, f"{_NV} (A30)")),
    (("a40",), _spec("A40", 37.4, 149.7, 149.7, 74.8, 696, 48, f"{_NV} (A40)")),
    (("rtx a6000", "a6000"),
     _spec("RTX A6000", 38.7, 154.8, 154.8, 77.4, 768, 48, f"{_NV} (RTX A6000), {_GA102}")),
    (("geforce rtx 3090", "rtx 3090"),
     _spec("GeForce RTX 3090", 35.6, 71, 71, 35.6, 936, 24, _GA102)),
    # Ada Lovelace
    (("l4",), _spec("L4", 30.3, 121, 121, 60, 300, 24, f"{_NV} (L4)")),
    (("l40",), _spec("L40", 90.5, 181, 181, 90.5, 864, 48, f"{_NV} (L40)")),
    (("l40s",), _spec("L40S", 91.6, 362, 362, 183, 864, 48, f"{_NV} (L40S)")),
    (("rtx 6000 ada",), _spec("RTX 6000 Ada", 91.1, 364.2, 364.2, 182.1, 960, 48, _ADA)),
    (("geforce rtx 4090", "rtx 4090"),
     _spec("GeForce RTX 4090", 82.6, 165.2, 165.2, 82.6, 1008, 24, _ADA)),
    # Hopper
    (("h100 80gb hbm3", "h100 sxm5", "h100 sxm", "h100"),
     _spec("H100 SXM5 80GB", 67, 989.4, 989.4, 494.7, 3350, 80, f"{_NV} (H100 SXM)")),
    (("h100 pcie",),
     _spec("H100 PCIe 80GB", 51, 756, 756, 378, 2000, 80, f"{_NV} (H100 PCIe)")),
    (("h100 nvl",),
     _spec("H100 NVL 94GB", 60, 835.5, 835.5, 417.5, 3900, 94, f"{_NV} (H100 NVL)")),
    (("h200", "h200 sxm"),
     _spec("H200 SXM 141GB", 67, 989.4, 989.4, 494.7, 4800, 141, f"{_NV} (H200 SXM)")),
    (("h200 nvl",),
     _spec("H200 NVL 141GB", 60, 835.5, 835.5, 417.5, 4800, 141, f"{_NV} (H200 NVL)")),
    (("gh200",),
     _spec("GH200 96GB HBM3", 67, 989.4, 989.4, 494.7, 4000, 96, f"{_NV} (GH200)")),
    (("gh200",),
     _spec("GH200 144GB HBM3e", 67, 989.4, 989.4, 494.7, 4900, 144, f"{_NV} (GH200)")),
    # Blackwell
    (("b200",),
     _spec("B200 180GB", 75, 2250, 2250, 1125, 8000, 180, f"{_NV} (HGX B200, per GPU)")),
    # AMD (ROCm builds of torch name them "AMD Instinct MI300X")
    (("mi250x",), _spec("Instinct MI250X", 47.9, 383, 383, None, 3277, 128, f"{_AMD} (MI250X)")),
    (("mi300x",),
     _spec("Instinct MI300X", 81.7, 1307.4, 1307.4, 653.7, 5300, 192, f"{_AMD} (MI300X)")),
)  # fmt: skip

#: FLOPs per SM per clock by compute capability: (FP32 on CUDA cores, FP16 and BF16 tensor
#: cores with FP32 accumulate (None: no BF16 hardware, runs at the FP32 rate), TF32) of the
#: data-centre parts (GeForce cards: half the tensor rates); checked against the table (V100:
#: 80 SMs x 1.53 GHz x 1024 = 125 TFLOP/s, A100: 108 x 1.41 GHz x 2048 = 312, L4: 58 x
#: 2.04 GHz x 1024 = 121, H100 SXM: 132 x 1.83 GHz x 4096 = 989)
PER_SM_CLOCK: dict[tuple[int, int], tuple[float, float, float | None, float | None]] = {
    (6, 0): (128, 256, None, None),  # GP100: 64 FP32 lanes, packed FP16
    (7, 0): (128, 1024, None, None),  # Volta
    (7, 5): (128, 1024, None, None),  # Turing
    (8, 0): (128, 2048, 2048, 1024),  # A100
    (8, 6): (256, 1024, 1024, 512),  # GA10x
    (8, 9): (256, 1024, 1024, 512),  # Ada
    (9, 0): (256, 4096, 4096, 2048),  # Hopper
    (10, 0): (256, 8192, 8192, 4096),  # Blackwell (B200)
}
#: an unknown architecture: Volta's FP32 lanes and half its tensor rate (conservative)
DEFAULT_PER_SM_CLOCK = (128.0, 512.0, None, None)
#: an unknown GPU without SM count or clock: about a T4 / V100 PCIe, on the low side
DEFAULT_FP32_FLOPS = 10 * TFLOPS
DEFAULT_HALF_FLOPS = 40 * TFLOPS
DEFAULT_MEM_BYTES_PER_S = 500 * GB
DEFAULT_MEMORY_BYTES = 16 * GB


class NominalGpu(NamedTuple):
    """What :func:`nominal_gpu` makes of one GPU.

    Attributes:
        model: the table's name of the model, or the device name when estimated.
        source: ``table`` (published specs, :data:`GPU_SPECS`) or ``estimate``
            (:func:`estimate_gpu`).
        detail: which table entry and document, or how the estimate was made.
        peak_flops_per_s: peak FLOP/s by dtype (``float32``, ``float16``, ``bfloat16``).
        peak_mem_bytes_per_s: peak memory bandwidth.
        flops_per_s: achievable FLOP/s by dtype (peaks times :data:`ACHIEVABLE_FLOPS`).
        mem_bytes_per_s: achievable bandwidth (peak times :data:`ACHIEVABLE_BANDWIDTH`).
        memory_bytes: the device's memory (torch's ``total_memory`` when given).
        launch_overhead_s: per-op floor (:data:`HOST_LAUNCH_S`).
        spec: the peaks as a :class:`GpuSpec`.
    """

    model: str
    source: str
    detail: str
    peak_flops_per_s: dict[str, float]
    peak_mem_bytes_per_s: float
    flops_per_s: dict[str, float]
    mem_bytes_per_s: float
    memory_bytes: float
    launch_overhead_s: float
    spec: GpuSpec


def _words(name: str) -> str:
    return " ".join(re.split(r"[^a-z0-9]+", name.lower())).strip()


def match_spec(name: str, total_memory_bytes: float | None = None) -> GpuSpec | None:
    """The table's spec for a torch device name, or ``None``: the longest pattern that matches
    whole words of the name; among specs with that pattern, the one whose memory is closest
    (by ratio) to ``total_memory_bytes`` (the first listed without it)."""
    words = f" {_words(name)} "
    best: list[GpuSpec] = []
    best_len = 0
    for patterns, spec in GPU_SPECS:
        hit = max((len(p) for p in patterns if f" {p} " in words), default=0)
        if hit > best_len:
            best, best_len = [spec], hit
        elif hit and hit == best_len:
            best.append(spec)
    if not best:
        return None
    if total_memory_bytes and total_memory_bytes > 0 and len(best) > 1:
        return min(best, key=lambda s: abs(math.log(s.memory_bytes / total_memory_bytes)))
    return best[0]


def estimate_gpu(
    name: str,
    total_memory_bytes: float | None = None,
    sm_count: int | None = None,
    clock_hz: float | None = None,
    capability: tuple[int, int] | None = None,
) -> tuple[GpuSpec, str]:
    """Peak rates of a GPU the table does not know, and how they were made.

    With ``sm_count`` and ``clock_hz``: SM count x clock x :data:`PER_SM_CLOCK` of its compute
    ``capability`` (a known major version with another minor: its lowest known minor; unknown:
    :data:`DEFAULT_PER_SM_CLOCK`), tensor rates halved for a GeForce card. Without them: the
    conservative :data:`DEFAULT_FP32_FLOPS` and :data:`DEFAULT_HALF_FLOPS`. The memory bandwidth
    is not in torch's properties: :data:`DEFAULT_MEM_BYTES_PER_S`.
    """
    mem = float(total_memory_bytes) if total_memory_bytes and total_memory_bytes > 0 else None
    mem = mem or DEFAULT_MEMORY_BYTES
    ok = bool(sm_count and sm_count > 0 and clock_hz and clock_hz > 0 and math.isfinite(clock_hz))
    if not ok:
        detail = (
            f"estimate: {name!r} is not in the table and its SM count and clock are unknown: "
            f"default {DEFAULT_FP32_FLOPS / TFLOPS:g} TFLOP/s FP32, "
            f"{DEFAULT_HALF_FLOPS / TFLOPS:g} FP16, {DEFAULT_MEM_BYTES_PER_S / GB:g} GB/s"
        )
        spec = GpuSpec(
            name, DEFAULT_FP32_FLOPS, DEFAULT_HALF_FLOPS, DEFAULT_MEM_BYTES_PER_S, mem, None, None
        )
        return spec._replace(source=detail), detail
    per = None
    arch = "unknown architecture"
    if capability is not None:
        cap = (int(capability[0]), int(capability[1]))
        per = PER_SM_CLOCK.get(cap)
        if per is None:
            same = sorted(k for k in PER_SM_CLOCK if k[0] == cap[0])
            per = PER_SM_CLOCK[same[0]] if same else None
        arch = f"compute capability {cap[0]}.{cap[1]}"
    if per is None:
        per = DEFAULT_PER_SM_CLOCK
        arch += " (conservative default per SM)"
    fp32_c, half_c, bf16_c, tf32_c = per
    if "geforce" in _words(name).split():
        half_c, bf16_c = half_c / 2, None if bf16_c is None else bf16_c / 2
        tf32_c = None if tf32_c is None else tf32_c / 2
    sm_hz = float(sm_count) * float(clock_hz)  # type: ignore[arg-type]
    spec = GpuSpec(
        name,
        sm_hz * fp32_c,
        sm_hz * half_c,
        DEFAULT_MEM_BYTES_PER_S,
        mem,
        None if bf16_c is None else sm_hz * bf16_c,
        None if tf32_c is None else sm_hz * tf32_c,
    )
    detail = (
        f"estimate: {name!r} is not in the table: {sm_count} SMs x {clock_hz / 1e9:.3g} GHz x "
        f"{fp32_c:g} FP32 / {half_c:g} FP16 FLOPs per SM per clock ({arch}); memory bandwidth "
        f"unknown, default {DEFAULT_MEM_BYTES_PER_S / GB:g} GB/s"
    )
    return spec._replace(source=detail), detail


def nominal_gpu(
    name: str,
    total_memory_bytes: float | None = None,
    sm_count: int | None = None,
    clock_hz: float | None = None,
    *,
    capability: tuple[int, int] | None = None,
    tf32: bool = False,
    achievable_flops: float = ACHIEVABLE_FLOPS,
    achievable_bandwidth: float = ACHIEVABLE_BANDWIDTH,
    launch_overhead_s: float = HOST_LAUNCH_S,
) -> NominalGpu:
    """The nominal rates of the GPU that torch calls ``name``.

    ``name`` to ``capability`` are what torch reports of a device; the other keywords are the
    model's constants.

    Args:
        name: ``torch.cuda.get_device_properties(i).name`` (case and punctuation do not matter).
        total_memory_bytes: its ``total_memory`` (the device's memory; picks between variants of
            one name, e.g. A100 40 GB and 80 GB).
        sm_count, clock_hz, capability: ``multi_processor_count``, the SM clock and
            ``(major, minor)``, for a GPU the table does not know (:func:`estimate_gpu`).
        tf32: float32 matmuls run on the tensor cores as TF32 (where the GPU has TF32).
        achievable_flops, achievable_bandwidth: shares of the peaks the modelled ops reach.
        launch_overhead_s: the per-op floor.
    """
    spec = match_spec(name, total_memory_bytes)
    if spec is not None:
        source = "table"
        detail = f"table: {spec.name} ({spec.source})"
    else:
        source = "estimate"
        spec, detail = estimate_gpu(name, total_memory_bytes, sm_count, clock_hz, capability)
    fp32 = spec.tf32_flops if tf32 and spec.tf32_flops else spec.fp32_flops
    peak = {
        "float32": fp32,
        "float16": spec.half_flops,
        "bfloat16": spec.bf16_flops if spec.bf16_flops else spec.fp32_flops,
    }
    memory = (
        float(total_memory_bytes)
        if total_memory_bytes and total_memory_bytes > 0
        else spec.memory_bytes
    )
    return NominalGpu(
        model=spec.name,
        source=source,
        detail=detail,
        peak_flops_per_s=peak,
        peak_mem_bytes_per_s=spec.mem_bytes_per_s,
        flops_per_s={k: v * achievable_flops for k, v in peak.items()},
        mem_bytes_per_s=spec.mem_bytes_per_s * achievable_bandwidth,
        memory_bytes=memory,
        launch_overhead_s=float(launch_overhead_s),
        spec=spec,
    )


def gpu_device(
    label: str,
    name: str,
    total_memory_bytes: float | None = None,
    sm_count: int | None = None,
    clock_hz: float | None = None,
    **options: Any,
):
    """A ``kind="gpu"`` :class:`~doppler_lab.hardware.Device` named ``label`` with the nominal
    (achievable) rates of :func:`nominal_gpu` (``options``: its keyword arguments)."""
    from .cluster import Device

    nom = nominal_gpu(name, total_memory_bytes, sm_count, clock_hz, **options)
    return Device(
        name=label,
        kind="gpu",
        flops_per_s=dict(nom.flops_per_s),
        mem_bytes_per_s=nom.mem_bytes_per_s,
        memory_bytes=nom.memory_bytes,
        launch_overhead_s=nom.launch_overhead_s,
    )
