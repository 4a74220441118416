"""Eager attention's costs (Framework.score_passes, Framework.eager_attention_gemms), checked
against closed forms: a·s² score elements per sequence, the passes the framework record names,
HBM at the generation's memory efficiency; the six score GEMMs' shapes per head."""

from __future__ import annotations

import dataclasses

import pytest

from cost_models.catalog import get_gpu
from cost_models.efficiency import compute_constants
from cost_models.gemm_shape import GemmShape
from cost_models.profiles import ProfileSet
from planner.costing.framework import Framework
from planner.costing.layer_cost import _score_traffic_bytes
from planner.costing.layer_gemms import _eager_attention_shapes, layer_gemm_factors
from planner.costing.published_stacks import AMP_DEEPSPEED_MEGATRON, SAILOR_DEEPSPEED
from planner.costing.stage_cost import stage_cost
from planner.costing.validation.common import graph_for

OPT = graph_for("opt-350m", precision="fp32")
BLOCK = next(i for i, layer in enumerate(OPT.layers) if layer.kind == "block")


def test_score_bytes_closed_form() -> None:
    layer = OPT.layers[BLOCK]
    elements = 16 * 2048 ** 2  # OPT-350M: 16 heads, sequence 2048
    fwd, bwd = _score_traffic_bytes(layer, OPT, SAILOR_DEEPSPEED)
    assert (fwd, bwd) == (4 * 4 * elements, 5 * 4 * elements)  # fp32: mask + softmax passes
    assert _score_traffic_bytes(layer, OPT, AMP_DEEPSPEED_MEGATRON) == (0.0, 0.0)


def test_score_passes_add_their_hbm_time() -> None:
    gpu = get_gpu("GH200-96GB")
    no_passes = dataclasses.replace(SAILOR_DEEPSPEED, score_passes=(0, 0))
    mb = 2

    def cost(fw: Framework) -> tuple[float, float]:
        c = stage_cost(OPT, BLOCK, BLOCK + 1, gpu, 1, mb, "none", precision="fp32",
                       profiles=ProfileSet(), framework=fw)
        return c.fwd_s, c.bwd_s

    (f1, b1), (f0, b0) = cost(SAILOR_DEEPSPEED), cost(no_passes)
    rate = gpu.hbm_gb_per_s * 1e9 * compute_constants(gpu.generation).memory_eff
    elements = mb * 16 * 2048 ** 2
    assert f1 - f0 == pytest.approx(4 * 4 * elements / rate, rel=1e-9)
    assert b1 - b0 == pytest.approx(5 * 4 * elements / rate, rel=1e-9)


def test_eager_score_gemm_shapes() -> None:
    fwd, bwd = _eager_attention_shapes(OPT.layers[BLOCK], 2048, ts=2, micro_batch=2)
    batch = 2 * 16 // 2  # heads of the micro-batch on one of 2 TP ranks
    assert fwd == (GemmShape(batch * 2048, 2048, 64), GemmShape(batch * 2048, 64, 2048))
    assert bwd == (GemmShape(batch * 2048, 2048, 64),) + (GemmShape(batch * 2048, 64, 2048),) * 3


def test_score_gemms_are_memory_bound_at_head_dim_64() -> None:
    """Q·Kᵀ at d = 64 in fp32 is 2·s²·64 FLOPs per 4·s² bytes written: 32 FLOP/B, below the
    GH200's TF32 rate over its HBM rate, so pricing by shape slows the forward."""
    gpu = get_gpu("GH200-96GB")
    layer = OPT.layers[BLOCK]
    eager = layer_gemm_factors(layer, 2048, gpu, "fp32", 1, 4, 1.0, eager_attention=True)
    wide = layer_gemm_factors(layer, 2048, gpu, "fp32", 1, 4, 1.0, eager_attention=False)
    assert eager[0] > wide[0] and eager[1] > wide[1]
    assert eager[2] == wide[2]  # the weight gradient has no attention GEMMs


def test_records_refuse_inconsistent_settings() -> None:
    with pytest.raises(ValueError):
        Framework(score_passes=(1, 1))
    with pytest.raises(ValueError):
        Framework(eager_attention_gemms=True)
    with pytest.raises(ValueError):
        Framework(keeps_attention_probs=True, score_passes=(-1, 0))
