"""The published GPU table: torch device names to specs, the estimate for unknown GPUs, devices."""

from __future__ import annotations

import math
import subprocess
import sys

import pytest

from doppler_lab.hardware.gpu_specs import (
    ACHIEVABLE_BANDWIDTH,
    ACHIEVABLE_FLOPS,
    DEFAULT_FP32_FLOPS,
    GPU_SPECS,
    HOST_LAUNCH_S,
    gpu_device,
    match_spec,
    nominal_gpu,
)

MiB = 2**20

#: torch device names (``get_device_properties(i).name``) and ``total_memory`` as real machines
#: report them, with the table entry they must find
TORCH_NAMES = [
    ("NVIDIA H200", 143771 * MiB, "H200 SXM 141GB"),
    ("NVIDIA H200 NVL", 143771 * MiB, "H200 NVL 141GB"),
    ("NVIDIA H100 80GB HBM3", 81559 * MiB, "H100 SXM5 80GB"),
    ("NVIDIA H100 PCIe", 81559 * MiB, "H100 PCIe 80GB"),
    ("NVIDIA H100 NVL", 95830 * MiB, "H100 NVL 94GB"),
    ("NVIDIA GH200 480GB", 97871 * MiB, "GH200 96GB HBM3"),
    ("NVIDIA A100-SXM4-80GB", 81051 * MiB, "A100 SXM4 80GB"),
    ("NVIDIA A100-SXM4-40GB", 40536 * MiB, "A100 SXM4 40GB"),
    ("NVIDIA A100-PCIE-40GB", 40536 * MiB, "A100 PCIe 40GB"),
    ("NVIDIA A100 80GB PCIe", 81051 * MiB, "A100 PCIe 80GB"),
    ("Tesla V100-SXM2-32GB", 32510 * MiB, "Tesla V100 SXM2"),
    ("Tesla V100-SXM2-16GB", 16160 * MiB, "Tesla V100 SXM2"),
    ("Tesla V100-PCIE-16GB", 16160 * MiB, "Tesla V100 PCIe"),
    ("Tesla V100S-PCIE-32GB", 32510 * MiB, "Tesla V100S PCIe"),
    ("Tesla P100-PCIE-16GB", 16280 * MiB, "Tesla P100 PCIe 16GB"),
    ("Tesla P100-PCIE-12GB", 12198 * MiB, "Tesla P100 PCIe 12GB"),
    ("Tesla P100-SXM2-16GB", 16280 * MiB, "Tesla P100 SXM2"),
    ("Tesla T4", 15109 * MiB, "Tesla T4"),
    ("NVIDIA L4", 22563 * MiB, "L4"),
    ("NVIDIA L40", 45589 * MiB, "L40"),
    ("NVIDIA L40S", 45589 * MiB, "L40S"),
    ("NVIDIA A10", 22731 * MiB, "A10"),
    ("NVIDIA A30", 24062 * MiB, "A30"),
    ("NVIDIA A40", 45634 * MiB, "A40"),
    ("NVIDIA RTX A6000", 48685 * MiB, "RTX A6000"),
    ("NVIDIA RTX 6000 Ada Generation", 48632 * MiB, "RTX 6000 Ada"),
    ("NVIDIA GeForce RTX 4090", 24217 * MiB, "GeForce RTX 4090"),
    ("NVIDIA GeForce RTX 3090", 24268 * MiB, "GeForce RTX 3090"),
    ("NVIDIA B200", 182642 * MiB, "B200 180GB"),
    ("AMD Instinct MI300X", 196592 * MiB, "Instinct MI300X"),
]


@pytest.mark.parametrize("name, memory, model", TORCH_NAMES)
def test_torch_names_find_their_table_entry(name, memory, model):
    nom = nominal_gpu(name, memory)
    assert (nom.model, nom.source) == (model, "table")
    assert model in nom.detail
    assert nom.memory_bytes == memory  # the device's own memory, not the datasheet's
    # case and punctuation do not matter
    assert nominal_gpu(name.upper().replace(" ", "_"), memory).model == model


def test_longest_match_and_word_boundaries():
    assert match_spec("NVIDIA H100 PCIe").name == "H100 PCIe 80GB"  # not the plain "h100"
    assert match_spec("NVIDIA GH200 480GB").name.startswith("GH200")  # not "h200"
    assert match_spec("NVIDIA L40S").name == "L40S"  # "l40" is not a word of "l40s"
    assert match_spec("NVIDIA A10G") is None  # "a10" is not a word of "a10g"
    assert match_spec("NVIDIA GeForce RTX 4080") is None  # "rtx 4090"? no: "t4"? no
    # one name, two memory sizes: the closest one
    assert match_spec("NVIDIA A100", 80e9).name == "A100 SXM4 80GB"
    assert match_spec("NVIDIA A100", 40e9).name == "A100 SXM4 40GB"
    assert match_spec("NVIDIA GH200 480GB", 144e9).name == "GH200 144GB HBM3e"


def test_published_numbers_of_the_common_gpus():
    h200 = nominal_gpu("NVIDIA H200", 150e9)
    assert h200.peak_flops_per_s["float32"] == pytest.approx(67e12)
    assert h200.peak_flops_per_s["bfloat16"] == pytest.approx(989.4e12)
    assert h200.peak_mem_bytes_per_s == pytest.approx(4.8e12)
    v100 = nominal_gpu("Tesla V100-SXM2-32GB")
    assert v100.peak_flops_per_s["float16"] == pytest.approx(125e12)
    # no BF16 hardware before Ampere: bfloat16 runs at about the FP32 rate
    assert v100.peak_flops_per_s["bfloat16"] == v100.peak_flops_per_s["float32"]
    assert v100.memory_bytes == pytest.approx(32e9)  # the datasheet's without total_memory
    a100 = nominal_gpu("NVIDIA A100-SXM4-80GB")
    assert a100.peak_mem_bytes_per_s == pytest.approx(2039e9)
    # TF32 only when asked for, and only where the GPU has it
    assert nominal_gpu("NVIDIA A100-SXM4-80GB", tf32=True).peak_flops_per_s[
        "float32"
    ] == pytest.approx(156e12)
    assert nominal_gpu("Tesla T4", tf32=True).peak_flops_per_s["float32"] == pytest.approx(8.1e12)


def test_achievable_rates_are_shares_of_the_peaks():
    nom = nominal_gpu("NVIDIA L4")
    for dtype, peak in nom.peak_flops_per_s.items():
        assert nom.flops_per_s[dtype] == pytest.approx(peak * ACHIEVABLE_FLOPS)
    assert nom.mem_bytes_per_s == pytest.approx(nom.peak_mem_bytes_per_s * ACHIEVABLE_BANDWIDTH)
    assert nom.launch_overhead_s == HOST_LAUNCH_S
    assert 10e-6 <= HOST_LAUNCH_S <= 20e-6
    assert 0.5 <= ACHIEVABLE_FLOPS <= 0.9 and 0.6 <= ACHIEVABLE_BANDWIDTH <= 0.95


def test_unknown_gpu_is_estimated_from_its_properties():
    # an A10G (not in the table): 80 SMs at 1.71 GHz, compute capability 8.6
    nom = nominal_gpu("NVIDIA A10G", 23e9, 80, 1.71e9, capability=(8, 6))
    assert nom.source == "estimate" and "80 SMs" in nom.detail
    assert nom.peak_flops_per_s["float32"] == pytest.approx(80 * 1.71e9 * 256)
    assert nom.peak_flops_per_s["bfloat16"] == pytest.approx(80 * 1.71e9 * 1024)
    assert nom.memory_bytes == 23e9
    # the estimate agrees with the table where both apply (H100 SXM: 132 SMs, 1.83 GHz boost)
    est = nominal_gpu("Mystery Hopper", None, 132, 1.83e9, capability=(9, 0))
    table = nominal_gpu("NVIDIA H100 80GB HBM3")
    ratio = est.peak_flops_per_s["float16"] / table.peak_flops_per_s["float16"]
    assert 0.95 < ratio < 1.05
    # a GeForce card runs FP16 with FP32 accumulate at half rate
    gf = nominal_gpu("NVIDIA GeForce RTX 9999", None, 100, 2e9, capability=(8, 9))
    assert gf.peak_flops_per_s["float16"] == pytest.approx(100 * 2e9 * 512)
    # unknown architecture: conservative per-SM default; nothing known: fixed defaults
    arch = nominal_gpu("Future GPU", None, 100, 2e9, capability=(42, 0))
    assert arch.source == "estimate" and "conservative" in arch.detail
    bare = nominal_gpu("Mystery GPU", None)
    assert bare.source == "estimate" and "unknown" in bare.detail
    assert bare.peak_flops_per_s["float32"] == DEFAULT_FP32_FLOPS


@pytest.mark.parametrize("patterns, spec", GPU_SPECS, ids=[s.name for _, s in GPU_SPECS])
def test_every_table_entry_builds_a_device_with_finite_positive_rates(patterns, spec):
    dev = gpu_device("gpu:0", patterns[0], None)
    assert dev.kind == "gpu" and dev.name == "gpu:0"
    assert set(dev.flops_per_s) == {"float32", "float16", "bfloat16"}
    rates = [*dev.flops_per_s.values(), dev.mem_bytes_per_s, dev.memory_bytes]
    assert all(math.isfinite(r) and r > 0 for r in rates)
    assert dev.rate("float16") >= dev.rate("float32")  # tensor cores or packed FP16
    assert 0 < dev.launch_overhead_s < 1e-3
    # peaks in the range of real GPUs: 5..100 TFLOP/s FP32, 0.2..10 TB/s
    assert 5e12 <= spec.fp32_flops <= 100e12 and 0.2e12 <= spec.mem_bytes_per_s <= 10e12


@pytest.mark.parametrize(
    "args", [("NVIDIA H200", 150e9), ("Unknown", None), ("Unknown", 8e9, 20, 1.5e9)]
)
def test_gpu_device_from_name_and_properties(args):
    dev = gpu_device("x:0", *args)
    assert all(math.isfinite(v) and v > 0 for v in dev.flops_per_s.values())
    assert math.isfinite(dev.mem_bytes_per_s) and dev.mem_bytes_per_s > 0


def test_module_does_not_import_torch():
    code = "import sys, doppler_lab.hardware.gpu_specs as g; g.nominal_gpu('NVIDIA H200'); print('torch' in sys.modules)"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "False"
