"""The few fitted constants of the analytic cost model, per GPU generation and link kind.

Everything else in the model is physics (FLOPs, bytes, datasheet peaks). These constants
say how much of a datasheet peak real training kernels reach. Each names the data it was
fitted on; docs/cost-model.md lists them with their fits and residuals.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "GEMM_DIM_HALF",
    "KERNELS_PER_BLOCK_FWD",
    "KERNEL_GAP_S",
    "LINK_EFFICIENCY",
    "LINK_LATENCY_S",
    "ComputeConstants",
    "compute_constants",
    "constants_for",
    "installed_calibration",
    "set_calibration",
]


@dataclass(frozen=True, slots=True)
class ComputeConstants:
    """How close one GPU generation's training kernels come to its datasheet peaks."""

    tensor_eff: float
    """Fraction of the dense 16-bit (and fp8) tensor-core peak a wide training GEMM reaches."""
    tf32_eff: float
    """Fraction of the dense TF32 tensor-core peak (fp32 training on Ampere and later)."""
    cuda_eff: float
    """Fraction of the FP32 CUDA-core peak reached when GEMMs run without tensor cores (fp32 on
    GPUs without TF32)."""
    memory_eff: float
    """Fraction of HBM bandwidth reached by elementwise / norm / softmax kernels and Adam."""
    kernel_s: float
    """Per-kernel fixed cost (launch + framework dispatch), seconds."""
    fitted_on: str
    """The data the constants were fitted on."""
    fp8_eff: float | None = None
    """Fraction of the dense fp8 peak a wide fp8 GEMM reaches (None: `tensor_eff`)."""


# 16-bit tensor efficiency (first number): Ampere and Hopper fitted on the bf16 large runs
# (torchtitan A100/H100, Llama 3 405B, BLOOM, MT-NLG: bench/fit_constants.py --large); Volta
# from Megatron-LM's V100 figure (Shoeybi et al. 2019: 39 TFLOP/s sustained per V100 = 30 % of
# the 125 peak end to end, i.e. ~40 % inside the GEMMs); Turing borrows Volta's (AMP's T4
# profile implies 0.10 in DeepSpeed-Megatron 1.1.5: that framework's figure, kept in the
# profile file, not here). TF32 and FP32 (CUDA-core) efficiencies: fitted on Sailor's TP-1
# layer times (bench/fit_constants.py), each layer priced as Sailor's stack ran it
# (`SAILOR_DEEPSPEED`: eager attention over the full s×s scores, whose unfused fp32 mask and
# softmax passes move a·s² elements through HBM; Megatron's FusedScaleMaskSoftmax has no fp32
# kernel). Fitted before with the default record (causal flash attention: half the attention
# FLOPs, no score traffic, the score GEMMs at the wide rate), the GEMM efficiencies absorbed
# OPT-350M's score traffic and its memory-bound head-dim-64 score GEMMs and came out low:
# Ampere/Hopper TF32 0.40/0.26 -> 0.74/0.50, Volta/Turing FP32 0.76/0.60 -> 0.94/0.84 (rms
# log error 0.28 -> 0.22 at 20 us per kernel; cuBLAS's large SGEMM/TF32 GEMMs reach a similar
# share of peak). Per-kernel cost: one value for all generations, the
# framework's dispatch cost; the Sailor fit is flat between 20 and 60 us (rms log error
# 0.30 -> 0.28), 20 us keeps large-model estimates unaffected.
_KERNEL_S = 20e-6
_CONSTANTS: dict[str, ComputeConstants] = {
    "volta": ComputeConstants(0.40, 0.40, 0.94, 0.70, _KERNEL_S,
                              "tensor: Megatron-LM 2019 V100; fp32: sailor V100-16 TP1 layers"),
    "turing": ComputeConstants(0.40, 0.40, 0.84, 0.70, _KERNEL_S,
                               "tensor: volta's; fp32: sailor Titan-RTX / RTX-2080 TP1 layers"),
    "ampere": ComputeConstants(0.63, 0.74, 0.70, 0.70, _KERNEL_S,
                               "bf16: torchtitan A100, BLOOM, MT-NLG; tf32: sailor A100 / 3090"),
    "ada": ComputeConstants(0.63, 0.74, 0.70, 0.70, _KERNEL_S,
                            "no public training data: ampere's values"),
    # fp8 (0.48 of the fp8 peak): fitted on nemo_h100.csv's 7 rows priced with the megatron
    # record (0.46 / 0.48 / 0.50 / 0.55 -> MAPE 3.8 / 3.0 / 4.5 / 11.8 %); fp8 GEMMs reach a
    # smaller share of their doubled peak than bf16 (scaling, casts, the same memory traffic).
    "hopper": ComputeConstants(0.62, 0.50, 0.70, 0.70, _KERNEL_S,
                               "bf16: torchtitan H100, Llama 3 405B; tf32: sailor GH-96 TP1; "
                               "fp8: NeMo H100", fp8_eff=0.48),
    "blackwell": ComputeConstants(0.62, 0.50, 0.70, 0.70, _KERNEL_S,
                                  "no public training data: hopper's values", fp8_eff=0.48),
    "cdna2": ComputeConstants(0.40, 0.26, 0.60, 0.65, _KERNEL_S,
                              "no public training data: a guess below hopper"),
    "cdna3": ComputeConstants(0.45, 0.26, 0.60, 0.65, _KERNEL_S,
                              "no public training data: a guess below hopper"),
}

# "ampere's values" / "hopper's values" above must stay equal to them (a test checks).
_DEFAULT = ComputeConstants(0.40, 0.26, 0.60, 0.65, _KERNEL_S,
                            "unknown generation: a conservative default")


def compute_constants(generation: str) -> ComputeConstants:
    """The constants for a GPU generation (`volta`, `ampere`, `hopper`, ...)."""
    return _CONSTANTS.get(generation.lower(), _DEFAULT)


_CALIBRATION: dict[str, float] = {}
"""Per GPU name: a measured-run refit of the achievable compute efficiency (`hetplan calibrate`);
"*" applies to every GPU without its own entry; "kernel_s" replaces the per-kernel cost."""


def set_calibration(scales: dict[str, float]) -> None:
    """Install a calibration (`planner.costing.calibrate`); {} restores the shipped constants.
    Cost tables cached under the old constants are dropped by the caller."""
    _CALIBRATION.clear()
    _CALIBRATION.update(scales)


def installed_calibration() -> dict[str, float]:
    """A copy of the calibration in force ({}: the shipped constants)."""
    return dict(_CALIBRATION)


def constants_for(gpu_name: str, generation: str) -> ComputeConstants:
    """`compute_constants(generation)` with the installed calibration of this GPU applied: its
    compute efficiencies (tensor, fp8, TF32, CUDA core) × the refitted scale, capped at 1."""
    c = compute_constants(generation)
    if not _CALIBRATION:
        return c
    k = _CALIBRATION.get(gpu_name, _CALIBRATION.get("*", 1.0))
    kernel_s = _CALIBRATION.get("kernel_s", c.kernel_s)
    if k == 1.0 and kernel_s == c.kernel_s:
        return c
    return ComputeConstants(min(1.0, c.tensor_eff * k), min(1.0, c.tf32_eff * k),
                            min(1.0, c.cuda_eff * k), c.memory_eff, kernel_s,
                            c.fitted_on + " (calibrated)",
                            None if c.fp8_eff is None else min(1.0, c.fp8_eff * k))


GEMM_DIM_HALF = 96.0
"""A GEMM whose narrow dimension (hidden size / TP) is d runs at d / (d + GEMM_DIM_HALF) of the
wide-GEMM efficiency (short K loops, pipeline fill): 91 % at d = 1024, 57 % at d = 128.
Not fitted: a shape assumption; the Sailor TP>1 rows mix this with PCIe traffic and cannot
separate it. The efficiencies above were fitted with it in place, so it stays; the tile and
wave quantisation of each GEMM's own shape multiply on top (`cost_models.gemm_shape`,
docs/cost-model.md §1a)."""

KERNELS_PER_BLOCK_FWD = 24
"""Kernels one transformer block's forward launches in eager PyTorch/Megatron (norms 2, QKV,
attention ~6, projection, MLP 3-4, dropout/residual ~6, bias adds): a count, not a fit.
Backward launches twice as many."""

KERNEL_GAP_S = 3e-6
"""GPU-side gap between back-to-back kernels when the host has queued them ahead (asynchronous
launches): the launch latency of a queued kernel, ~2-4 us (NVIDIA developer blog "Getting
Started with CUDA Graphs", 2019: a 2.9 us kernel takes 3.8 us per launch back to back without
graphs, i.e. ~1 us of gap, and ~9.6 us when each launch is synchronised; 3 us also covers the
tail of each kernel's last wave). Used only by frameworks whose dispatch overlaps the GPU
(`Framework.host_dispatch_overlapped`). Not fitted."""

LINK_EFFICIENCY: dict[str, float] = {
    # Achieved bus bandwidth over the link's datasheet rate for large NCCL collectives:
    # nccl-tests all_reduce_perf busbw on DGX A100 (~230 of 300 GB/s NVLink per direction),
    # PCIe Gen3/4 x16 (~10-12 of 16 / ~20-24 of 32 GB/s), InfiniBand/Ethernet (~90 %).
    "nvlink": 0.78,
    "pcie": 0.70,
    "network": 0.90,
}

LINK_LATENCY_S: dict[str, float] = {
    # NCCL small-message latency per step: ~ 2-5 us inside a node, 5-10 us over IB/RoCE
    # (nccl-tests, 8-byte all_reduce_perf); the cluster file's network.latency_us overrides.
    "nvlink": 3e-6,
    "pcie": 6e-6,
    "network": 10e-6,
}
