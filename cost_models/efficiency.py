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
    "LINK_EFFICIENCY",
    "LINK_LATENCY_S",
    "ComputeConstants",
    "compute_constants",
]


@dataclass(frozen=True, slots=True)
class ComputeConstants:
    """How close one GPU generation's training kernels come to its datasheet peaks."""

    matmul_eff: float
    """Fraction of the dense tensor peak a large training GEMM reaches."""
    memory_eff: float
    """Fraction of HBM bandwidth reached by elementwise / norm / softmax kernels and Adam."""
    kernel_s: float
    """Per-kernel fixed cost (launch + framework dispatch), seconds."""
    fitted_on: str
    """The data the constants were fitted on."""


# Fitted by bench/fit_constants.py (least squares on log time) on the per-layer forward and
# backward times of sailor_layer_profiles.csv (OPT-350M and GPT-Neo-2.7B, micro-batch 1-64,
# TP 1 only, so that no communication enters the fit) and amp_layer_profiles.csv (TP 1).
# Generations with no public per-layer data borrow the nearest measured one (say so below).
_CONSTANTS: dict[str, ComputeConstants] = {
    "volta": ComputeConstants(0.60, 0.70, 12e-6,
                              "sailor V100-16 TP1 fwd/bwd (OPT-350M, GPT-Neo-2.7B); AMP V100 TP1"),
    "turing": ComputeConstants(0.55, 0.70, 12e-6,
                               "sailor Titan-RTX, RTX-2080 TP1 fwd/bwd (OPT-350M); AMP T4 TP1"),
    "ampere": ComputeConstants(0.50, 0.70, 10e-6,
                               "sailor A100-40/80, RTX-3090 TP1 fwd/bwd (OPT-350M, GPT-Neo-2.7B)"),
    "ada": ComputeConstants(0.50, 0.70, 10e-6, "no public per-layer data: ampere's values"),
    "hopper": ComputeConstants(0.45, 0.70, 8e-6,
                               "sailor GH-96 TP1 fwd/bwd (OPT-350M, GPT-Neo-2.7B)"),
    "blackwell": ComputeConstants(0.45, 0.70, 8e-6, "no public per-layer data: hopper's values"),
    "cdna2": ComputeConstants(0.40, 0.65, 12e-6, "no public per-layer data: a guess below hopper"),
    "cdna3": ComputeConstants(0.40, 0.65, 12e-6, "no public per-layer data: a guess below hopper"),
}

_DEFAULT = ComputeConstants(0.45, 0.65, 12e-6, "unknown generation: a conservative default")


def compute_constants(generation: str) -> ComputeConstants:
    """The constants for a GPU generation (`volta`, `ampere`, `hopper`, ...)."""
    return _CONSTANTS.get(generation.lower(), _DEFAULT)


GEMM_DIM_HALF = 96.0
"""A GEMM whose narrow dimension (hidden size / TP) is d runs at d / (d + GEMM_DIM_HALF) of the
large-GEMM efficiency: tile quantisation and short K loops (fitted on sailor TP 2-8 rows
divided by TP 1 rows, compute part only)."""

KERNELS_PER_BLOCK_FWD = 24
"""Kernels one transformer block's forward launches in eager PyTorch/Megatron (norms 2, QKV,
attention ~6, projection, MLP 3-4, dropout/residual ~6, bias adds): a count, not a fit.
Backward launches twice as many."""

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
