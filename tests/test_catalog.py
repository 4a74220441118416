"""The GPU catalog against the vendors' datasheets, typed here independently of gpus.yaml."""

from __future__ import annotations

import math
import re

import pytest

from cost_models.catalog import CATALOG_PATH, all_gpus, get_gpu, gpu_for_device, load_catalog

# Datasheet figures as printed, one row per catalog entry:
#   (name, memory GB, memory GB/s, fp32, fp16, bf16, fp8, divisor)
# fp16/bf16/fp8 are the tensor figures as the document prints them; `sparse` marks rows whose
# document prints only the 2:4-sparsity figure (dense = half). GeForce rows carry the
# FP32-accumulate figure of the architecture whitepaper. MI250X figures are per module (two
# GCDs); the catalog entry is one GCD, so every figure of that row is halved.
# None = the GPU has no tensor support for that dtype.
DATASHEET = [
    # NVIDIA Tesla V100 datasheet (Jan 2018): SXM2 / PCIe columns.
    ("V100-SXM2-16GB", 16, 900, 15.7, 125, None, None, "dense"),
    ("V100-SXM2-32GB", 32, 900, 15.7, 125, None, None, "dense"),
    ("V100-PCIE-16GB", 16, 900, 14, 112, None, None, "dense"),
    ("V100-PCIE-32GB", 32, 900, 14, 112, None, None, "dense"),
    # NVIDIA T4 datasheet: 65 TFLOPS mixed precision, 8.1 FP32, 320 GB/s.
    ("T4", 16, 320, 8.1, 65, None, None, "dense"),
    # NVIDIA TITAN RTX specifications: "130 Tensor TFLOPS", 16.3 FP32, 672 GB/s.
    ("TITAN-RTX", 24, 672, 16.3, 130, None, None, "dense"),
    # Turing whitepaper Table 1, RTX 2080 Ti: FP16 tensor 107.6 (FP16 acc) / 53.8 (FP32 acc).
    ("RTX-2080-Ti", 11, 616, 13.4, 53.8, None, None, "dense"),
    # NVIDIA A100 datasheet r4: FP16/BF16 624* (sparse), FP32 19.5.
    ("A100-SXM4-40GB", 40, 1555, 19.5, 624, 624, None, "sparse"),
    ("A100-SXM4-80GB", 80, 2039, 19.5, 624, 624, None, "sparse"),
    ("A100-PCIE-40GB", 40, 1555, 19.5, 624, 624, None, "sparse"),
    ("A100-PCIE-80GB", 80, 1935, 19.5, 624, 624, None, "sparse"),
    # NVIDIA A10 datasheet: BF16/FP16 250* (sparse), FP32 31.2, 600 GB/s.
    ("A10", 24, 600, 31.2, 250, 250, None, "sparse"),
    # A10G: no NVIDIA datasheet; Baseten's A10 vs A10G table (dense): 70 / 70, FP32 31.52.
    ("A10G", 24, 600, 31.52, 70, 70, None, "dense"),
    # GA102 whitepaper, RTX 3090: FP16/BF16 tensor with FP32 accumulate 142* (sparse).
    ("RTX-3090", 24, 936, 35.6, 142, 142, None, "sparse"),
    # RTX A6000 datasheet: tensor 309.7 (sparse), FP32 38.7, 768 GB/s.
    ("RTX-A6000", 48, 768, 38.7, 309.7, 309.7, None, "sparse"),
    # NVIDIA L4 datasheet: FP16/BF16 242*, FP8 485* (sparse), FP32 30.3, 300 GB/s.
    ("L4", 24, 300, 30.3, 242, 242, 485, "sparse"),
    # NVIDIA L40S datasheet prints dense and sparse: BF16/FP16 362.05 | 733*, FP8 733 | 1466*.
    ("L40S", 48, 864, 91.6, 362.05, 362.05, 733, "dense"),
    # Ada whitepaper, RTX 4090, FP32 accumulate, dense: FP16/BF16 165.2, FP8 330.3.
    ("RTX-4090", 24, 1008, 82.6, 165.2, 165.2, 330.3, "dense"),
    # NVIDIA H100 datasheet: SXM / PCIe / NVL columns, tensor figures with sparsity.
    ("H100-SXM5-80GB", 80, 3350, 67, 1979, 1979, 3958, "sparse"),
    ("H100-PCIE-80GB", 80, 2000, 51, 1513, 1513, 3026, "sparse"),
    ("H100-NVL-94GB", 94, 3900, 60, 1671, 1671, 3341, "sparse"),
    # NVIDIA H200 datasheet, SXM.
    ("H200-SXM-141GB", 141, 4800, 67, 1979, 1979, 3958, "sparse"),
    # NVIDIA GH200 datasheet prints dense | sparse: BF16 990 | 1979, FP8 1979 | 3958.
    ("GH200-96GB", 96, 4000, 67, 990, 990, 1979, "dense"),
    # NVIDIA DGX B200 product page: 1,440 GB and 64 TB/s over 8 GPUs; HGX B200 (1,000 W) dense
    # | sparse: FP32 80, FP16/BF16 2,250 | 4,500, FP8 4,500 | 9,000 (DGX: FP8 72 PF sparse / 8).
    ("B200-180GB", 180, 8000, 80, 2250, 2250, 4500, "dense"),
    # AMD Instinct MI250X datasheet, per OAM module (2 GCDs): 128 GB, 3276.8 GB/s, FP32 vector
    # 47.9, FP16/BF16 383 (no sparsity on CDNA2).
    ("MI250X-GCD", 128, 3276.8, 47.9, 383, 383, None, "per-module"),
    # AMD Instinct MI300X datasheet: 192 GB, 5.3 TB/s, FP32 vector 163.4, FP16/BF16 1307.4,
    # FP8 2614.9 (dense).
    ("MI300X", 192, 5300, 163.4, 1307.4, 1307.4, 2614.9, "dense"),
]

# Published rounding (e.g. 130 vs 130.5 TFLOPS for Titan RTX) stays within 1 %.
REL = 0.01


def _close(actual: float, expected: float) -> bool:
    return math.isclose(actual, expected, rel_tol=REL)


@pytest.mark.parametrize("row", DATASHEET, ids=[r[0] for r in DATASHEET])
def test_catalog_numbers_match_datasheet(row: tuple) -> None:
    name, mem_gb, bw, fp32, fp16, bf16, fp8, kind = row
    spec = get_gpu(name)
    assert spec.name == name
    per_unit = 2.0 if kind == "per-module" else 1.0
    dense = 2.0 if kind == "sparse" else per_unit
    assert _close(spec.memory_gib, mem_gb / per_unit), spec.memory_gib
    assert _close(spec.hbm_gb_per_s, bw / per_unit), spec.hbm_gb_per_s
    assert _close(spec.peak("fp32"), fp32 / per_unit), spec.peak_tflops
    assert _close(spec.peak("fp16"), fp16 / dense), spec.peak_tflops
    for dtype, printed in (("bf16", bf16), ("fp8", fp8)):
        if printed is None:
            assert dtype not in spec.peak_tflops, f"{name} must not claim {dtype}"
        else:
            assert _close(spec.peak(dtype), printed / dense), (dtype, spec.peak_tflops)


def test_every_catalog_entry_has_a_datasheet_row() -> None:
    names = [s.name for s in all_gpus()]
    assert sorted(names) == sorted(r[0] for r in DATASHEET)
    assert len(names) >= 20
    assert len(set(names)) == len(names)


# Per-GPU NVLink as datasheets print it (both directions summed): the catalog stores one way.
NVLINK_BIDIRECTIONAL_GB_PER_S = {
    "V100-SXM2-16GB": 300,  # V100 datasheet: NVLink 300 GB/s
    "A100-SXM4-80GB": 600,  # A100 datasheet: NVLink 600 GB/s
    "H100-SXM5-80GB": 900,  # H100 datasheet: NVLink 900 GB/s
    "H200-SXM-141GB": 900,  # H200 datasheet: NVLink 900 GB/s
    "RTX-3090": 112.5,  # GA102 whitepaper: NVLink bridge 112.5 GB/s
    "MI300X": 896,  # MI300X datasheet: 7 x 128 GB/s Infinity Fabric
}
PCIE_BIDIRECTIONAL_GB_PER_S = {"T4": 32, "A100-PCIE-40GB": 64, "L40S": 64, "H100-PCIE-80GB": 128}


@pytest.mark.parametrize("name,total", sorted(NVLINK_BIDIRECTIONAL_GB_PER_S.items()))
def test_nvlink_is_stored_per_direction(name: str, total: float) -> None:
    assert get_gpu(name).nvlink_gb_per_s == pytest.approx(total / 2)


@pytest.mark.parametrize("name,total", sorted(PCIE_BIDIRECTIONAL_GB_PER_S.items()))
def test_pcie_is_stored_per_direction(name: str, total: float) -> None:
    spec = get_gpu(name)
    assert spec.pcie_gb_per_s == pytest.approx(total / 2)
    assert spec.intra_node_link == "pcie"
    assert spec.intra_node_gb_per_s == spec.pcie_gb_per_s


def test_no_bf16_or_tf32_on_volta_and_turing() -> None:
    old = [s for s in all_gpus() if s.generation in ("volta", "turing")]
    assert {s.name for s in old} >= {"V100-SXM2-16GB", "T4", "TITAN-RTX", "RTX-2080-Ti"}
    for spec in old:
        assert "bf16" not in spec.peak_tflops and "tf32" not in spec.peak_tflops, spec.name
        with pytest.raises(KeyError, match="no bf16"):
            spec.peak("bf16")


def test_geforce_tensor_rate_is_half_the_fp16_accumulate_headline() -> None:
    # Headlines with FP16 accumulate: Turing WP Table 1 (2080 Ti 107.6), GA102 WP (3090 142
    # dense), Ada WP (4090 330.3 dense). Training accumulates in FP32: half of each.
    for name, headline in (("RTX-2080-Ti", 107.6), ("RTX-3090", 142), ("RTX-4090", 330.3)):
        assert get_gpu(name).peak("fp16") == pytest.approx(headline / 2, rel=REL)


def test_every_number_has_a_source() -> None:
    numeric = ("memory_gib", "hbm_gb_per_s", "intra_node_gb_per_s", "pcie_gb_per_s", "tdp_w")
    for spec in all_gpus():
        for field in numeric:
            assert spec.sources.get(field, "").strip(), (spec.name, field)
        for dtype in spec.peak_tflops:
            cite = spec.sources.get(f"peak_tflops.{dtype}") or spec.sources.get("peak_tflops")
            assert cite and cite.strip(), (spec.name, dtype)
        if spec.nvlink_gb_per_s is not None:
            assert spec.sources.get("nvlink_gb_per_s"), spec.name
        if spec.price_per_gpu_hour is not None:
            # An example price must say where and when it was seen.
            assert re.search(r"20\d\d", spec.sources["price_per_gpu_hour"]), spec.name


ALIASES = {
    "a100-80g": "A100-SXM4-80GB",
    "A100 80GB": "A100-SXM4-80GB",
    "a100 sxm4 80gb": "A100-SXM4-80GB",
    "A100_SXM4_80GB": "A100-SXM4-80GB",
    "A100-40": "A100-SXM4-40GB",  # Sailor
    "A100-80": "A100-SXM4-80GB",  # Sailor
    "V100-16": "V100-SXM2-16GB",  # Sailor
    "GH-96": "GH200-96GB",  # Sailor
    "RTX-3090": "RTX-3090",  # Sailor
    "RTX-2080": "RTX-2080-Ti",  # Sailor's 11 GB "RTX-2080"
    "Titan-RTX": "TITAN-RTX",  # Sailor
    "T4 (g4dn.12xlarge)": "T4",  # AMP
    "V100 (p3.8xlarge)": "V100-SXM2-16GB",  # AMP
    "h100": "H100-SXM5-80GB",
    "H100 PCIe": "H100-PCIE-80GB",
    "MI250X": "MI250X-GCD",
    "l40s": "L40S",
}


@pytest.mark.parametrize("alias,name", sorted(ALIASES.items()))
def test_aliases_resolve(alias: str, name: str) -> None:
    assert get_gpu(alias).name == name


def test_unknown_gpu_suggests_the_nearest_name() -> None:
    with pytest.raises(LookupError) as info:
        get_gpu("A100-SXM4-80")
    message = str(info.value)
    assert "unknown GPU type 'A100-SXM4-80'" in message
    assert "did you mean A100-SXM4-80GB?" in message
    assert "`hetplan gpus`" in message
    with pytest.raises(LookupError, match="unknown GPU type 'TPUv4'"):
        get_gpu("TPUv4")


def test_catalog_order_is_file_order_and_stable() -> None:
    first = [s.name for s in all_gpus()]
    again = [s.name for s in load_catalog(CATALOG_PATH)]
    assert first == again
    assert first[0] == "V100-SXM2-16GB"


# Names as the driver reports them (torch.cuda.get_device_name / nvidia-smi), with the
# memory torch reports, for `hetplan profile` to label its rows.
@pytest.mark.parametrize(("reported", "memory_gib", "expected"), [
    ("NVIDIA H200", 139.8, "H200-SXM-141GB"),
    ("NVIDIA H100 80GB HBM3", 79.1, "H100-SXM5-80GB"),
    ("NVIDIA H100 PCIe", 79.1, "H100-PCIE-80GB"),
    ("NVIDIA H100 NVL", 93.1, "H100-NVL-94GB"),
    ("NVIDIA A100-SXM4-40GB", 39.4, "A100-SXM4-40GB"),
    ("NVIDIA A100 80GB PCIe", 79.2, "A100-PCIE-80GB"),
    ("Tesla V100-SXM2-32GB", 31.7, "V100-SXM2-32GB"),
    ("Tesla T4", 14.7, "T4"),
    ("NVIDIA GeForce RTX 2080 Ti", 10.7, "RTX-2080-Ti"),
    ("NVIDIA GH200 480GB", 95.0, "GH200-96GB"),
    ("AMD Instinct MI300X", 191.5, "MI300X"),
    ("NVIDIA B200", 179.1, "B200-180GB"),
])
def test_driver_device_names_map_to_catalog_entries(reported, memory_gib, expected) -> None:
    assert gpu_for_device(reported, memory_gib).name == expected


def test_unknown_device_name_asks_for_gpu_flag() -> None:
    with pytest.raises(LookupError, match="--gpu"):
        gpu_for_device("NVIDIA B300", 268.0)
