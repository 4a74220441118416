"""The GpuSpec record: one GPU type's datasheet numbers, each with its source."""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["DTYPES", "GpuSpec"]

# Dense (no structured sparsity) tensor-core peaks; "fp32" is the non-tensor FP32 rate.
DTYPES = ("fp32", "tf32", "fp16", "bf16", "fp8")


@dataclass(frozen=True, slots=True, kw_only=True)
class GpuSpec:
    """One GPU type, as its vendor's datasheet gives it."""

    name: str
    """Canonical catalog name, e.g. `A100-SXM4-80GB`."""
    vendor: str
    """`nvidia` or `amd`."""
    generation: str
    """Architecture, e.g. `volta`, `turing`, `ampere`, `ada`, `hopper`, `cdna2`, `cdna3`."""
    memory_gib: float
    """Device memory in GiB (2^30 bytes)."""
    hbm_gb_per_s: float
    """Memory bandwidth, GB/s (10^9 bytes/s)."""
    peak_tflops: dict[str, float]
    """Dense peak per dtype in TFLOP/s (10^12); a dtype the GPU lacks is absent."""
    intra_node_gb_per_s: float
    """Per-GPU one-direction bandwidth of its usual intra-node link (NVLink, xGMI, PCIe), GB/s."""
    intra_node_link: str
    """`nvlink` (incl. NVSwitch / xGMI) or `pcie`."""
    pcie_gb_per_s: float
    """Unidirectional PCIe bandwidth of the host interface, GB/s."""
    nvlink_gb_per_s: float | None = None
    """Per-GPU unidirectional NVLink (or AMD xGMI) bandwidth, GB/s; None when the part has none.
    On PCIe cards with an NVLink bridge it joins pairs of GPUs only."""
    tdp_w: float
    """Board power, W."""
    sm_count: int | None = None
    """Streaming multiprocessors (AMD: compute units): how many GEMM tiles run at once, the
    wave size of `cost_models.gemm_shape`; None: unknown (no wave quantisation)."""
    notes: str = ""
    """What a user should know about this entry (variants, what one entry stands for)."""
    aliases: tuple[str, ...] = ()
    """Other names users type (`a100-80g`, `A100 80GB`)."""
    sources: dict[str, str] = field(default_factory=dict)
    """Field name -> citation (datasheet title, URL path, table)."""
    price_per_gpu_hour: float | None = None
    """Example on-demand cloud price, USD; its source is in `sources["price_per_gpu_hour"]`."""

    @property
    def supports_bf16(self) -> bool:
        """Whether the GPU has bf16 tensor cores (Ampere, Ada, Hopper, CDNA2+; not Volta or
        Turing, where bf16 would be emulated at FP32-core speed)."""
        return self.peak_tflops.get("bf16", 0.0) > 0

    def peak(self, dtype: str) -> float:
        """Dense peak TFLOP/s for `dtype`; KeyError when the GPU lacks it (no silent fallback)."""
        if dtype not in self.peak_tflops:
            raise KeyError(f"{self.name} has no {dtype} tensor throughput")
        return self.peak_tflops[dtype]
