"""The `--framework` records' behaviours, each against a closed form, and `hetplan frameworks`."""

from __future__ import annotations

import json

import pytest

from cost_models.comm import allreduce_s
from cost_models.compute import LayerWork, gemm_s, layer_compute_s, memory_s
from cost_models.efficiency import KERNEL_GAP_S, compute_constants
from cost_models.fusion import fused_traffic_ratio
from cost_models.profiles import ProfileSet
from planner.costing import Framework, estimate, megatron_plan, stage_cost
from planner.costing.framework import FRAMEWORKS
from planner.costing.links import link_of_kind
from planner.costing.validation.common import graph_for
from tests.cli import run_cli
from tests.test_cost_fixtures import cluster, gpt_graph, gpu

NONE = ProfileSet()


def test_host_dispatch_overlap_is_the_longer_of_gpu_work_and_dispatch() -> None:
    g = gpu()
    k = compute_constants(g.generation).kernel_s
    for flops in (1e6, 1e12):  # launch-bound and GEMM-bound
        work = LayerWork(flops, flops, flops, 1e6, 4096.0, 24)
        serial = layer_compute_s(work, g, "bf16")
        ov = layer_compute_s(work, g, "bf16", dispatch_overlapped=True)
        gpu_fwd = gemm_s(flops, g, "bf16", 4096.0) + memory_s(1e6, g)
        assert serial[0] == pytest.approx(gpu_fwd + 24 * k)
        assert ov[0] == pytest.approx(max(gpu_fwd + 24 * KERNEL_GAP_S, 24 * k))


def test_framework_dp_overlap_equals_estimate_overlap_dp() -> None:
    graph = gpt_graph(layers=8)
    cl = cluster(("a", gpu(), 2, 8, 100.0, 2.0))
    plan = megatron_plan(graph, cl, tp=2, pp=2, dp=4, micro_batch=1, global_batch=16)
    a = estimate(graph, cl, plan, profiles=NONE, overlap_dp=True)
    b = estimate(graph, cl, plan, profiles=NONE, framework=Framework(dp_overlap=True))
    c = estimate(graph, cl, plan, profiles=NONE)
    assert a.iteration_time_s == pytest.approx(b.iteration_time_s, rel=1e-12)
    assert b.iteration_time_s < c.iteration_time_s


def test_tp_comm_overlap_hides_at_most_the_gemm_time() -> None:
    graph = gpt_graph(layers=1)
    g = gpu()
    base = stage_cost(graph, 1, 2, g, 4, 2, "none", precision="bf16", profiles=NONE)
    ov = stage_cost(graph, 1, 2, g, 4, 2, "none", precision="bf16", profiles=NONE,
                    framework=Framework(tp_comm_overlap=True))
    blk = graph.layers[1]
    gemm = gemm_s(2 * blk.fwd_matmul_flops / 4, g, "bf16", blk.matmul_dim / 4)
    hidden = base.fwd_s - ov.fwd_s
    assert 0 < hidden <= gemm * (1 + 1e-9)
    # What is hidden is the whole TP traffic or the whole GEMM time, whichever is shorter.
    link = link_of_kind(g.intra_node_link, g.intra_node_gb_per_s)
    comm = blk.tp_allreduces_fwd * allreduce_s(2 * blk.tp_allreduce_bytes, 4, link)
    assert hidden == pytest.approx(min(comm, gemm), rel=1e-9)


def test_fused_kernels_use_the_blocks_own_dimensions() -> None:
    graph = graph_for("llama3-8b", seq_len=1024)
    blk = next(x for x in graph.layers if x.kind == "block")
    ratio = fused_traffic_ratio(blk.fwd_memory_bytes / 1024, 4096, 14336, 1024, gated=True,
                                rotary=True)  # Llama 3 8B: 8 KV heads of 128
    g = gpu()
    base = stage_cost(graph, 1, 2, g, 1, 1, "none", precision="bf16", profiles=NONE)
    fused = stage_cost(graph, 1, 2, g, 1, 1, "none", precision="bf16", profiles=NONE,
                       framework=Framework(fused_kernels=True))
    mem = memory_s(blk.fwd_memory_bytes, g)
    assert base.fwd_s - fused.fwd_s == pytest.approx((1 - ratio) * mem, rel=1e-9)
    assert 0.25 < ratio < 0.4


def test_frameworks_command_lists_every_record_with_sources(
        capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(["frameworks", "--json"], capsys)
    assert code == 0, err
    recs = json.loads(out)["frameworks"]
    assert [r["name"] for r in recs] == ["hetplan", "megatron", "torchtitan", "deepspeed"]
    assert all(r["sources"] for r in recs)
    by = {r["name"]: r for r in recs}
    assert by["megatron"]["tp_comm_overlap"] and by["megatron"]["fused_kernels"]
    assert by["torchtitan"]["dp_overlap"] and not by["torchtitan"]["fused_kernels"]
    assert by["deepspeed"]["p2p_blocking"] and not by["deepspeed"]["causal_flash_attention"]
    assert not by["hetplan"]["dp_overlap"]
    # hetplan's runtime sends the whole boundary to each receiving TP rank (topology.py).
    assert by["hetplan"]["p2p_per_tp_rank"] == "whole boundary"
    assert all(by[n]["p2p_per_tp_rank"] == "1/tp of the boundary"
               for n in ("megatron", "torchtitan", "deepspeed"))
    # Megatron's distributed optimizer and DeepSpeed's pipeline engine shard optimizer state
    # only; torchtitan and hetplan's runtime run FSDP2 (what estimate's zero note points to).
    assert {n: r["max_zero_with_pipelines"] for n, r in by.items()} == {
        "hetplan": 3, "megatron": 1, "torchtitan": 3, "deepspeed": 1}
    assert set(by) == set(FRAMEWORKS)
    # Each names its attention kernel; none of the four is priced apart from the GEMM rate
    # yet (cost_models.attention.PRICED: only llm-foundry's Triton kernel).
    assert by["torchtitan"]["attention_kernel"] == "fa2"
    assert by["megatron"]["attention_kernel"] == "te"
    assert by["deepspeed"]["attention_kernel"] == "eager (GEMM rate)"
    assert all(r["attention_kernel_priced_on"] == [] for r in recs)


def test_per_framework_report_pools_rows_once() -> None:
    from planner.costing.validation.common import Row, per_framework_reports, summarise

    a = [Row("x", 100.0, 110.0, framework="m"), Row("y", 100.0, 80.0, framework="t")]
    b = [Row("z", 10.0, 10.5, framework="m")]
    reps = [summarise("f1", "g1", "s", a, ""), summarise("f1", "all", "s", a, ""),
            summarise("f2", "all", "s", b, ""), summarise("f1", "peak memory g1", "GiB", a, "")]
    out = {r.group: r for r in per_framework_reports(reps)}
    assert out["m"].counted == 2 and out["m"].mape_pct == pytest.approx(7.5)
    assert out["t"].counted == 1 and out["t"].mape_pct == pytest.approx(20.0)
