"""Compute model: roofline pieces, dtype fallbacks, stage cost sums and TP traffic."""

from __future__ import annotations

import pytest

from cost_models.comm import Link, allreduce_s, ring_allreduce_s
from cost_models.compute import gemm_s, matmul_dtype, memory_s
from cost_models.efficiency import GEMM_DIM_HALF, LINK_EFFICIENCY, LINK_LATENCY_S
from cost_models.efficiency import compute_constants as cc
from cost_models.gpu import GpuSpec
from cost_models.profiles import ProfileSet
from planner.costing.stage_cost import layer_cost_table, stage_cost
from tests.test_cost_fixtures import gpt_graph, gpu

NONE = ProfileSet()


def _volta() -> GpuSpec:
    return GpuSpec(name="V", vendor="nvidia", generation="volta", memory_gib=32, hbm_gb_per_s=900,
                   peak_tflops={"fp32": 15.7, "fp16": 125.0}, intra_node_gb_per_s=150,
                   intra_node_link="nvlink", pcie_gb_per_s=16, tdp_w=300)


def test_dtype_fallbacks() -> None:
    v = _volta()
    assert matmul_dtype(v, "bf16") == "fp16"  # V100 has no bf16: fp16 at the same speed
    assert matmul_dtype(v, "fp32") == "fp32"  # no TF32 on Volta: CUDA cores
    a = gpu()
    a = GpuSpec(**{**{f: getattr(a, f) for f in a.__slots__},
                   "peak_tflops": {"fp32": 19.5, "tf32": 156.0, "bf16": 312.0, "fp16": 312.0}})
    assert matmul_dtype(a, "fp32") == "tf32"
    assert matmul_dtype(a, "fp8") == "bf16"
    with pytest.raises(ValueError, match="precision"):
        matmul_dtype(a, "int4")


def test_gemm_roofline_closed_form() -> None:
    g = gpu(tflops=300.0)
    eff = cc("ampere").tensor_eff * 1024 / (1024 + GEMM_DIM_HALF)
    assert gemm_s(1e12, g, "bf16", 1024) == pytest.approx(1e12 / (300e12 * eff))
    # Narrower GEMMs run less efficiently.
    assert gemm_s(1e12, g, "bf16", 128) > gemm_s(1e12, g, "bf16", 1024)
    assert memory_s(1e9, g) == pytest.approx(1e9 / (2000e9 * cc("ampere").memory_eff))


def test_stage_cost_is_the_sum_of_its_layers() -> None:
    graph = gpt_graph(layers=6)
    g = gpu()
    whole = stage_cost(graph, 0, 8, g, 2, 4, "none", precision="bf16", profiles=NONE)
    parts = [stage_cost(graph, i, i + 1, g, 2, 4, "none", precision="bf16", profiles=NONE)
             for i in range(8)]
    assert whole.fwd_s == pytest.approx(sum(p.fwd_s for p in parts))
    assert whole.bwd_s == pytest.approx(sum(p.bwd_s for p in parts))
    assert whole.params_per_gpu == sum(p.params_per_gpu for p in parts)
    assert whole.p2p_bytes == parts[-1].p2p_bytes


def test_tp_adds_two_allreduces_forward_and_two_backward_per_block() -> None:
    h, seq, mb, t = 1024, 1024, 2, 4
    graph = gpt_graph(h=h, layers=1, seq=seq)
    g = gpu()
    table = layer_cost_table(graph, g, t, mb, "none", precision="bf16", profiles=NONE)
    link = Link(g.intra_node_gb_per_s * LINK_EFFICIENCY["nvlink"], LINK_LATENCY_S["nvlink"])
    fast_link = Link(1e12 * LINK_EFFICIENCY["nvlink"], LINK_LATENCY_S["nvlink"])
    nbytes = mb * 2.0 * seq * h  # one TP all-reduce: the block's (b, s, h) output, 16-bit
    # Ring at this size: 2(n-1)/n·B/bw + 2(n-1)·alpha; the fast link leaves only latency.
    assert allreduce_s(nbytes, t, link) == ring_allreduce_s(nbytes, t, link)
    comm = 2 * (allreduce_s(nbytes, t, link) - allreduce_s(nbytes, t, fast_link))
    # Same layer with an infinitely fast link: the difference is the TP traffic.
    fast = layer_cost_table(graph, g, t, mb, "none", precision="bf16",
                            intra_node_gb_per_s=1e12, profiles=NONE)
    fwd_block = table.fwd_s[2] - table.fwd_s[1]
    fwd_fast = fast.fwd_s[2] - fast.fwd_s[1]
    assert fwd_block - fwd_fast == pytest.approx(comm, rel=1e-3)
    assert (table.bwd_s[2] - table.bwd_s[1]) - (fast.bwd_s[2] - fast.bwd_s[1]) == pytest.approx(
        comm, rel=1e-3)


def test_recompute_costs_order() -> None:
    graph = gpt_graph(layers=4)
    g = gpu()
    costs = {r: stage_cost(graph, 1, 5, g, 1, 2, r, precision="bf16", profiles=NONE)
             for r in ("none", "selective", "full")}
    assert costs["none"].bwd_s < costs["selective"].bwd_s < costs["full"].bwd_s
    assert costs["full"].bwd_s == pytest.approx(costs["none"].bwd_s + costs["none"].fwd_s)
    assert costs["none"].fwd_s == costs["full"].fwd_s
    # The recompute share is reported apart (Gantt charts draw it separately).
    assert costs["full"].recompute_s == pytest.approx(costs["full"].fwd_s)
    assert costs["none"].recompute_s == 0.0


def test_bad_range_and_arguments_are_refused() -> None:
    graph = gpt_graph(layers=2)
    with pytest.raises(ValueError, match="outside"):
        stage_cost(graph, 2, 9, gpu(), 1, 1, "none", precision="bf16", profiles=NONE)
    with pytest.raises(ValueError, match="recompute"):
        stage_cost(graph, 0, 1, gpu(), 1, 1, "some", precision="bf16", profiles=NONE)


def test_matmul_dtype_is_remembered_per_gpu_object_not_per_name() -> None:
    """The per-GPU cache (an estimate asks once per rank) never answers for another spec of
    the same name: a copy without bf16 tensor cores falls back to fp16, as it must."""
    from dataclasses import replace

    a100 = gpu("A100-SXM4-80GB")
    assert matmul_dtype(a100, "bf16") == "bf16"
    no_bf16 = replace(a100, peak_tflops={k: v for k, v in a100.peak_tflops.items()
                                         if k != "bf16"})
    assert matmul_dtype(no_bf16, "bf16") == "fp16"
    assert matmul_dtype(a100, "bf16") == "bf16"
