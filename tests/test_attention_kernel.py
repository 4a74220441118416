"""The attention core priced at its kernel's own published rate (cost_models/attention.py).

Expected figures are closed forms of the published kernel throughputs (FA3 paper Fig. 5 / 6 on
H100, FA2 paper §4.1 on A100) and of the FLOP-weighted time factor of `layer_gemm_factors`.
"""

from __future__ import annotations

import dataclasses

import pytest

from cost_models.attention import (
    FA2_A100,
    KERNEL_EFFICIENCY,
    PRICED,
    TRITON_FA1_SLOWDOWN,
    attention_scale_on,
    attention_time_scale,
    kernel_on,
)
from cost_models.catalog import get_gpu
from cost_models.efficiency import compute_constants
from planner.costing.framework import DEEPSPEED, MEGATRON_CORE, TORCHTITAN, Framework
from planner.costing.layer_gemms import layer_gemm_factors
from planner.costing.published_stacks import (
    AMP_DEEPSPEED_MEGATRON,
    MEGATRON_EAGER,
    SAILOR_DEEPSPEED,
)
from planner.costing.validation.mpt_foundry import LLM_FOUNDRY
from planner.graph.layers import Layer
from tests.block_layers import block_layer


def _mpt_block(h: int = 4096, heads: int = 32, ffn: int = 16384, seq: int = 16384) -> Layer:
    """An MPT-7B block (multi-head attention, a 4h GeLU MLP) at `seq` tokens."""
    return block_layer(h, heads, heads, ffn, seq, 4 * h * h + 2 * h * ffn, "blocks.0")


def test_published_figures() -> None:
    # FA3 paper (Shah et al. 2024) Fig. 5/6, head dim 128, H100 SXM5: FA2 forward causal
    # 334 TFLOP/s; backward 320 non-causal × FA2's causal ratio 333 / 370. The efficiency
    # times the catalog's H100 peak must give those rates back (before: ÷ 989, a restated
    # peak 0.05 % below the catalog's 989.5).
    from cost_models.catalog import get_gpu

    peak = get_gpu("H100-SXM5-80GB").peak_tflops["bf16"]
    fwd, bwd = KERNEL_EFFICIENCY[("fa2", "hopper")]
    assert fwd * peak == pytest.approx(334)
    assert bwd * peak == pytest.approx(320 * 333 / 370)
    # FA2 paper §4.1 on A100: up to 73 % forward, 63 % backward, at the same causal ratio.
    fa2_a100 = FA2_A100
    assert fa2_a100 == pytest.approx((0.73 * 333 / 370, 0.63 * 333 / 370))
    # The Triton kernel: FA2's figure over its published slowdown, forward and backward apart.
    tri = KERNEL_EFFICIENCY[("triton-fa1", "ampere")]
    assert tri == pytest.approx((FA2_A100[0] / TRITON_FA1_SLOWDOWN[0],
                                 FA2_A100[1] / TRITON_FA1_SLOWDOWN[1]))
    # Every kernel's backward is slower than its forward, and no kernel beats the peak.
    for f, b in KERNEL_EFFICIENCY.values():
        assert 0 < b < f < 1


def test_scale_is_the_ratio_of_rates_where_priced() -> None:
    assert ("triton-fa1", "hopper") in PRICED
    f, b = KERNEL_EFFICIENCY[("triton-fa1", "hopper")]
    assert attention_time_scale("triton-fa1", "hopper", 0.62) == pytest.approx((0.62 / f,
                                                                                0.62 / b))
    # Published but not priced (docs/cost-model.md §7), no kernel, no figure for the
    # generation, or GEMMs not at the 16-bit peak: the GEMM rate, as before.
    assert ("fa2", "hopper") not in PRICED
    assert attention_time_scale("fa2", "hopper", 0.62) == (1.0, 1.0)
    assert attention_time_scale("", "hopper", 0.62) == (1.0, 1.0)
    assert attention_time_scale("triton-fa1", "volta", 0.40) == (1.0, 1.0)
    assert attention_time_scale("triton-fa1", "ampere", 0.63, "tf32") == (1.0, 1.0)
    # On a GPU, against that generation's fitted 16-bit GEMM efficiency; fp8 keeps bf16.
    h100 = get_gpu("H100-SXM5-80GB")
    eff = compute_constants("hopper").tensor_eff
    assert attention_scale_on("triton-fa1", h100, "bf16") == pytest.approx((eff / f, eff / b))
    assert attention_scale_on("triton-fa1", h100, "fp8") == attention_scale_on(
        "triton-fa1", h100, "bf16")


@pytest.mark.parametrize("seq", [2048, 16384])
def test_factor_moves_by_the_attention_time_alone(seq: int) -> None:
    """The FLOP-weighted factor is (attention·s + Σ linear·shape) / (attention + Σ linear): a
    kernel scale s moves it by exactly attention·(s − 1) / total, forward and backward apart,
    and never touches the weight-gradient pass (no attention there)."""
    a100 = get_gpu("A100-SXM4-80GB")
    block = _mpt_block(seq=seq)
    base = layer_gemm_factors(block, seq, a100, "bf16", 1, 1, 0.5)
    s_f, s_b = 1.25, 2.2
    moved = layer_gemm_factors(block, seq, a100, "bf16", 1, 1, 0.5,
                               attention_scale=(s_f, s_b))
    att = 0.5 * block.fwd_attention_flops
    linear = block.fwd_matmul_flops - block.fwd_attention_flops
    assert moved[0] - base[0] == pytest.approx(att * (s_f - 1) / (att + linear))
    assert moved[1] - base[1] == pytest.approx(2 * att * (s_b - 1) / (2 * att + linear))
    assert moved[2] == base[2]


def test_long_sequences_pay_more() -> None:
    """The attention core grows as s² against the linear layers' s: the same kernel scale
    costs a 16k-token block several times what it costs a 2k-token one."""
    a100 = get_gpu("A100-SXM4-80GB")
    scale = attention_scale_on("triton-fa1", a100, "bf16")
    rise = []
    for seq in (2048, 16384):
        block = _mpt_block(seq=seq)
        base = layer_gemm_factors(block, seq, a100, "bf16", 1, 1, 0.5)
        moved = layer_gemm_factors(block, seq, a100, "bf16", 1, 1, 0.5,
                                   attention_scale=scale)
        rise.append(moved[1] / base[1])
    assert rise[0] > 1.0
    assert rise[1] - 1 > 4 * (rise[0] - 1)


def test_te_runs_cudnn_on_hopper_and_fa2_on_ampere(monkeypatch: pytest.MonkeyPatch) -> None:
    """Transformer Engine's DotProductAttention prefers cuDNN fused attention on Hopper and
    later, FlashAttention-2 before; a generation with neither keeps the GEMM rate."""
    assert kernel_on("te", "hopper") == kernel_on("te", "blackwell") == "cudnn"
    assert kernel_on("te", "ampere") == "fa2"
    assert kernel_on("te", "volta") == ""
    assert kernel_on("fa2", "hopper") == "fa2"
    # Not priced as shipped (docs/cost-model.md §1b: the joint refit is not shipped), so "te"
    # keeps the GEMM rate; once cuDNN on Hopper is priced, "te" takes its figure there.
    assert attention_time_scale("te", "hopper", 0.62) == (1.0, 1.0)
    import cost_models.attention as attention

    monkeypatch.setattr(attention, "PRICED", PRICED | {("cudnn", "hopper")})
    f, b = KERNEL_EFFICIENCY[("cudnn", "hopper")]
    assert attention_time_scale("te", "hopper", 0.62) == pytest.approx((0.62 / f, 0.62 / b))
    assert attention_time_scale("te", "ampere", 0.63) == (1.0, 1.0)


def test_unpriced_figures_from_their_papers() -> None:
    # FlashAttention-2 on A100 is the FA2 paper's figure (73 % / 63 % at the causal ratio).
    assert KERNEL_EFFICIENCY[("fa2", "ampere")] == FA2_A100
    # cuDNN on B200, FA4 paper abstract: FA4 up to 1605 TFLOP/s bf16 and up to 1.3x cuDNN
    # 9.13, of the 2250 TFLOP/s dense peak; backward at cuDNN's Hopper backward / forward.
    f, b = KERNEL_EFFICIENCY[("cudnn", "blackwell")]
    assert f == pytest.approx(1605 / 1.3 / 2250)
    assert b / f == pytest.approx((517 * 529 / 600) / 534)
    assert get_gpu("B200-180GB").peak_tflops["bf16"] == 2250
    for key in (("fa2", "ampere"), ("cudnn", "blackwell")):
        assert key not in PRICED


def test_records_name_their_kernel() -> None:
    assert Framework().attention_kernel == "fa2"  # hetplan's runtime: SDPA flash (FA2)
    assert TORCHTITAN.attention_kernel == "fa2"
    assert MEGATRON_CORE.attention_kernel == "te"
    assert LLM_FOUNDRY.attention_kernel == "triton-fa1"
    for eager in (MEGATRON_EAGER, DEEPSPEED, SAILOR_DEEPSPEED, AMP_DEEPSPEED_MEGATRON):
        assert eager.attention_kernel == ""
    with pytest.raises(ValueError, match="attention_kernel"):
        dataclasses.replace(TORCHTITAN, attention_kernel="flash9")
