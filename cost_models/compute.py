"""Compute time of one layer's forward, activation-gradient and weight-gradient work.

A roofline per op class: GEMM/attention FLOPs against the dense tensor peak × a fitted
efficiency, times the shape losses of the layer's GEMMs (`cost_models.gemm_shape`);
memory-bound work (norms, softmax, elementwise) against HBM bandwidth × a fitted efficiency;
plus a fixed cost per kernel launch. The
constants live in `cost_models.efficiency`, with the data they were fitted on.
"""

from __future__ import annotations

from dataclasses import dataclass

from cost_models.efficiency import GEMM_DIM_HALF, KERNEL_GAP_S, constants_for
from cost_models.gpu import GpuSpec

__all__ = [
    "ADAM_BYTES_PER_PARAM",
    "LayerWork",
    "adam_step_s",
    "element_bytes",
    "gemm_s",
    "gemm_wide_flops_per_s",
    "layer_compute_s",
    "matmul_dtype",
    "memory_s",
    "needs_loss_scaling",
    "peak_tflops",
    "training_dtype",
]


def training_dtype(gpu: GpuSpec, precision: str) -> str:
    """The dtype forward and backward run in at a training precision on `gpu`: the one rule
    the cost model prices and the runtime autocasts to. bf16 becomes fp16 with dynamic loss
    scaling on GPUs without bf16 tensor cores (V100, T4); fp8, which the runtime does not
    run, counts as bf16 here; fp32 stays fp32."""
    if precision == "fp32":
        return "fp32"
    if precision == "fp16":
        return "fp16"
    if precision in ("bf16", "fp8"):
        return "bf16" if gpu.supports_bf16 else "fp16"
    raise ValueError(f"unknown precision {precision!r}; use bf16, fp16, fp32 or fp8")


def needs_loss_scaling(gpu: GpuSpec, precision: str) -> bool:
    """Whether training at `precision` on `gpu` computes in fp16, hence scales the loss."""
    return training_dtype(gpu, precision) == "fp16"


_DTYPES: dict[tuple[int, str], tuple[GpuSpec, str]] = {}


def matmul_dtype(gpu: GpuSpec, precision: str) -> str:
    """The tensor-core dtype GEMMs run in at a training precision.

    bf16 falls back to fp16 on GPUs without bf16 (V100, T4, Turing GeForce: same speed, loss
    scaling instead); fp32 training uses TF32 where the GPU has it (PyTorch
    `allow_tf32`/Megatron default on Ampere+), plain FP32 otherwise; fp8 falls back to bf16.
    """
    # Remembered per GPU object (specs are frozen): an estimate asks once per rank, 1024 times
    # at 1024 GPUs.
    hit = _DTYPES.get((id(gpu), precision))
    if hit is not None and hit[0] is gpu:
        return hit[1]
    dtype = _matmul_dtype(gpu, precision)
    if len(_DTYPES) >= 4096:
        _DTYPES.clear()
    _DTYPES[(id(gpu), precision)] = (gpu, dtype)
    return dtype


def _matmul_dtype(gpu: GpuSpec, precision: str) -> str:
    chain = {
        "bf16": (training_dtype(gpu, "bf16"), "fp32"),
        "fp16": ("fp16", "bf16", "fp32"),
        "fp32": ("tf32", "fp32"),
        "fp8": ("fp8", "bf16", "fp16", "fp32"),
    }.get(precision)
    if chain is None:
        raise ValueError(f"unknown precision {precision!r}; use bf16, fp16, fp32 or fp8")
    for dtype in chain:
        if gpu.peak_tflops.get(dtype, 0.0) > 0:
            return dtype
    raise ValueError(f"{gpu.name} lists no peak for {precision} (peak_tflops: {gpu.peak_tflops})")


def peak_tflops(gpu: GpuSpec, precision: str) -> float:
    """Dense peak TFLOP/s GEMMs can reach at `precision` (see `matmul_dtype`)."""
    return gpu.peak_tflops[matmul_dtype(gpu, precision)]


def gemm_wide_flops_per_s(gpu: GpuSpec, precision: str) -> float:
    """FLOP/s a large, well-shaped GEMM reaches: the dtype's dense peak × the generation's fitted
    efficiency (the ceiling `cost_models.gemm_shape` adds shape losses below)."""
    c = constants_for(gpu.name, gpu.generation)
    dtype = matmul_dtype(gpu, precision)
    unit_eff = {"fp32": c.cuda_eff, "tf32": c.tf32_eff,
                "fp8": c.fp8_eff or c.tensor_eff}.get(dtype, c.tensor_eff)
    return gpu.peak_tflops[dtype] * 1e12 * unit_eff


def element_bytes(gpu: GpuSpec, precision: str) -> float:
    """Bytes per GEMM operand element at the dtype GEMMs run in."""
    return {"fp32": 4.0, "tf32": 4.0, "fp8": 1.0}.get(matmul_dtype(gpu, precision), 2.0)


def gemm_s(flops: float, gpu: GpuSpec, precision: str, width: float,
           shape_scale: float = 1.0) -> float:
    """Time of `flops` of GEMM work whose narrow dimension is `width` elements, × `shape_scale`
    (>= 1: the tile and wave quantisation and memory-bound losses of the GEMMs' shapes,
    `planner.costing.layer_gemms`)."""
    if flops <= 0:
        return 0.0
    eff_width = width / (width + GEMM_DIM_HALF)
    return flops / (gemm_wide_flops_per_s(gpu, precision) * eff_width) * shape_scale


def memory_s(nbytes: float, gpu: GpuSpec) -> float:
    """Time of memory-bound kernels moving `nbytes` through HBM."""
    if nbytes <= 0:
        return 0.0
    return nbytes / (gpu.hbm_gb_per_s * 1e9 * constants_for(gpu.name, gpu.generation).memory_eff)


@dataclass(frozen=True, slots=True)
class LayerWork:
    """One layer's work on ONE GPU for one micro-batch (already scaled by batch and TP)."""

    fwd_matmul_flops: float
    bwd_act_matmul_flops: float
    bwd_weight_matmul_flops: float
    fwd_memory_bytes: float
    """HBM traffic of the forward's memory-bound ops; backward moves twice as much."""
    gemm_width: float
    """Narrow GEMM dimension on this GPU (hidden size / TP for a block)."""
    kernels_fwd: int
    """Kernels the forward launches (backward launches twice as many)."""
    gemm_scale: tuple[float, float, float] = (1.0, 1.0, 1.0)
    """(forward, activation-gradient, weight-gradient) multipliers of the GEMM time: the tile,
    wave and memory-bound losses of this layer's GEMM shapes on this GPU (1.0: none)."""
    bwd_memory_bytes: float | None = None
    """HBM traffic of the backward's memory-bound ops (None: twice `fwd_memory_bytes`)."""


def _with_launches(gpu_s: float, kernels: int, kernel_s: float, overlapped: bool) -> float:
    """A pass of `kernels` kernels whose GPU work takes `gpu_s`. Host dispatch is either
    serial with the GPU work (additive: each kernel costs `kernel_s` more; synchronising
    frameworks, and the fits of docs/cost-model.md §2), or runs ahead of it on the CPU
    (asynchronous CUDA launches): the pass then takes the longer of the GPU work plus the
    GPU-side gap between back-to-back kernels and the host's dispatch of all of them."""
    if not overlapped:
        return gpu_s + kernels * kernel_s
    return max(gpu_s + kernels * KERNEL_GAP_S, kernels * kernel_s)


def layer_compute_s(work: LayerWork, gpu: GpuSpec, precision: str,
                    dispatch_overlapped: bool = False) -> tuple[float, float, float]:
    """(forward, activation-gradient, weight-gradient) seconds, communication excluded.

    Memory-bound backward work and the backward's launches go to the activation-gradient
    part: weight gradients are plain GEMMs. `dispatch_overlapped`: the framework's host
    dispatch runs ahead of the GPU (`_with_launches`).
    """
    kernel_s = constants_for(gpu.name, gpu.generation).kernel_s
    sf, sa, sw = work.gemm_scale
    w = work.gemm_width
    n, ov = work.kernels_fwd, dispatch_overlapped
    fwd = _with_launches(gemm_s(work.fwd_matmul_flops, gpu, precision, w, sf)
                         + memory_s(work.fwd_memory_bytes, gpu), n, kernel_s, ov)
    bwd_bytes = (2 * work.fwd_memory_bytes if work.bwd_memory_bytes is None
                 else work.bwd_memory_bytes)
    bwd_act = _with_launches(gemm_s(work.bwd_act_matmul_flops, gpu, precision, w, sa)
                             + memory_s(bwd_bytes, gpu), n, kernel_s, ov)
    bwd_weight = _with_launches(gemm_s(work.bwd_weight_matmul_flops, gpu, precision, w, sw),
                                n, kernel_s, ov)
    return fwd, bwd_act, bwd_weight


ADAM_BYTES_PER_PARAM = 28.0
"""HBM traffic of one fused Adam step per parameter: read and write fp32 master weight,
momentum and variance (24 B), read the gradient (2-4 B, 2 counted with fp32 grads' extra in
the rounding), write the 16-bit weight copy (2 B). Multi-tensor apply: launches are negligible."""


def adam_step_s(params: float, gpu: GpuSpec) -> float:
    """Memory-bound Adam step for `params` parameters held on one GPU."""
    return memory_s(params * ADAM_BYTES_PER_PARAM, gpu)
