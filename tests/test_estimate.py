"""estimate / megatron_plan: rank order, hand-computed iteration times, determinism, refusals."""

from __future__ import annotations

import json

import pytest

from cost_models.comm import Link, ring_allreduce_s
from cost_models.efficiency import LINK_EFFICIENCY
from cost_models.memory import FRAMEWORK_OVERHEAD_GIB
from cost_models.profiles import ProfileSet
from planner.costing import estimate, megatron_plan, stage_cost, with_prediction
from planner.errors import HetplanError
from planner.schema import Plan
from tests.test_cost_fixtures import cluster, gpt_graph, gpu

NONE = ProfileSet()


def _setup(nodes: int = 2, per_node: int = 8, layers: int = 8):
    graph = gpt_graph(layers=layers)
    return graph, cluster(("a", gpu(), nodes, per_node, 100.0, 2.0))


def test_megatron_rank_order_tp_fastest_then_dp_then_pp() -> None:
    graph, cl = _setup()
    tp, pp, dp = 2, 4, 2
    plan = megatron_plan(graph, cl, tp=tp, pp=pp, dp=dp, micro_batch=1, global_batch=16)
    for d, pipe in enumerate(plan.pipelines):
        for s, st in enumerate(pipe.stages):
            base = s * dp * tp + d * tp
            assert st.ranks == tuple(range(base, base + tp))
    # Stage s holds ranks [s·dp·tp, (s+1)·dp·tp) across its DP replicas.
    stage1 = sorted(r for pipe in plan.pipelines for r in pipe.stages[1].ranks)
    assert stage1 == list(range(4, 8))
    nodes = {r.rank: r.node for r in plan.ranks}
    assert nodes[0] == "a-0" and nodes[8] == "a-1"
    assert plan.pipelines[0].stages[0].layers[0] == 0
    assert plan.pipelines[0].stages[-1].layers[1] == len(graph.layers)


def test_layers_per_stage_and_refusals_with_arithmetic() -> None:
    graph, cl = _setup()
    plan = megatron_plan(graph, cl, tp=1, pp=3, dp=1, micro_batch=1, global_batch=4,
                         layers_per_stage=[2, 5, 3])
    assert [st.layers for st in plan.pipelines[0].stages] == [(0, 2), (2, 7), (7, 10)]
    with pytest.raises(HetplanError, match=r"summing to 10 layers.*sum to 9"):
        megatron_plan(graph, cl, tp=1, pp=3, dp=1, micro_batch=1, global_batch=4,
                      layers_per_stage=[2, 4, 3])
    with pytest.raises(HetplanError, match=r"tp \(8\) × pp \(2\) × dp \(2\) = 32 GPUs"):
        megatron_plan(graph, cl, tp=8, pp=2, dp=2, micro_batch=1, global_batch=4)
    with pytest.raises(HetplanError, match="not a multiple"):
        megatron_plan(graph, cl, tp=1, pp=1, dp=3, micro_batch=2, global_batch=8)
    with pytest.raises(HetplanError, match="spans nodes"):
        megatron_plan(graph, cluster(("a", gpu(), 2, 6, 100.0, None)), tp=4, pp=3, dp=1,
                      micro_batch=1, global_batch=4)


def test_single_stage_iteration_is_microbatches_times_stage_plus_step() -> None:
    graph, cl = _setup(nodes=1, per_node=1)
    plan = megatron_plan(graph, cl, tp=1, pp=1, dp=1, micro_batch=2, global_batch=8)
    est = estimate(graph, cl, plan, profiles=NONE)
    c = stage_cost(graph, 0, len(graph.layers), cl.groups[0].gpu, 1, 2, "none",
                   precision="bf16", intra_node_gb_per_s=cl.groups[0].intra_node_gb_per_s,
                   intra_node_link="nvlink", profiles=NONE)
    assert est.iteration_time_s == pytest.approx(4 * (c.fwd_s + c.bwd_s) + c.optimizer_step_s)
    tokens = 8 * graph.seq_len
    assert est.tokens_per_s == pytest.approx(tokens / est.iteration_time_s)
    assert est.mfu == pytest.approx(graph.train_flops * 8 / est.iteration_time_s / 300e12)
    assert est.usd_per_hour == pytest.approx(2.0)
    assert est.usd_per_million_tokens == pytest.approx(2.0 / (est.tokens_per_s * 3600 / 1e6))


def test_dp_gradient_ring_over_the_nic_is_added_after_the_flush() -> None:
    graph = gpt_graph(layers=2)
    cl = cluster(("a", gpu(), 2, 1, 100.0, None), latency_us=5.0)
    plan = megatron_plan(graph, cl, tp=1, pp=1, dp=2, micro_batch=1, global_batch=2)
    est = estimate(graph, cl, plan, profiles=NONE)
    single = estimate(graph, cl, megatron_plan(graph, cl, tp=1, pp=1, dp=1, micro_batch=1,
                                               global_batch=1), profiles=NONE)
    # One GPU per node: each ring member has the node's whole NIC (100 Gbit/s × efficiency).
    link = Link(100 / 8 * LINK_EFFICIENCY["network"], 5e-6)
    # fp32 gradients (GRAD_REDUCE_BYTES = 4), one ring per layer.
    sync = sum(ring_allreduce_s(layer.params * 4, 2, link) for layer in graph.layers)
    assert est.dp_sync_s == pytest.approx(sync)
    assert est.iteration_time_s == pytest.approx(single.iteration_time_s + sync)
    overlapped = estimate(graph, cl, plan, profiles=NONE, overlap_dp=True)
    assert overlapped.iteration_time_s < est.iteration_time_s


def test_infeasible_plan_names_stage_gpu_and_numbers() -> None:
    graph = gpt_graph(layers=8, h=2048, seq=2048)
    small = gpu(name="SMALL-GPU", memory_gib=2.0)
    cl = cluster(("s", small, 1, 4, 100.0, None))
    plan = megatron_plan(graph, cl, tp=1, pp=2, dp=1, micro_batch=4, global_batch=8)
    est = estimate(graph, cl, plan, profiles=NONE)
    assert not est.feasible
    first = est.stages[0]
    assert est.problems[0] == (f"pipeline 0 stage 0 (SMALL-GPU): needs "
                               f"{first.peak_memory_gib:.1f} GiB per GPU; SMALL-GPU has 2.0 GiB")
    assert first.peak_memory_gib > FRAMEWORK_OVERHEAD_GIB


def test_estimate_is_deterministic_and_prediction_round_trips() -> None:
    graph, cl = _setup()
    plan = megatron_plan(graph, cl, tp=2, pp=2, dp=2, micro_batch=1, global_batch=8,
                         schedule="interleaved", virtual_stages=2,
                         layers_per_stage=[2, 3, 3, 2])
    a = estimate(graph, cl, plan, profiles=NONE)
    b = estimate(graph, cl, plan, profiles=NONE)
    assert json.dumps(a.to_dict()) == json.dumps(b.to_dict())
    filled = with_prediction(plan, a)
    assert filled.predicted["iteration_time_s"] == a.iteration_time_s
    assert len(filled.predicted["stages"]) == len(a.stages) == 4
    again = Plan.from_dict(json.loads(filled.model_copy(
        update={"model": {"name": "x"}, "cluster": {"name": "y"}}).to_json()))
    assert again.predicted == filled.predicted


def test_heterogeneous_pipelines_wait_for_the_slowest() -> None:
    graph = gpt_graph(layers=4)
    fast, slow = gpu(name="FAST", tflops=600.0), gpu(name="SLOW", tflops=100.0)
    cl = cluster(("f", fast, 1, 2, 100.0, None), ("s", slow, 1, 2, 100.0, None))
    ranks = [{"rank": i, "node": "f" if i < 2 else "s", "local_rank": i % 2} for i in range(4)]
    plan = Plan.from_dict({
        "global_batch_size": 8, "micro_batch_size": 1,
        "pipelines": [
            {"microbatches": 4, "stages": [{"layers": [0, 6], "gpu": "FAST", "tp": 2,
                                            "ranks": [0, 1]}]},
            {"microbatches": 4, "stages": [{"layers": [0, 6], "gpu": "SLOW", "tp": 2,
                                            "ranks": [2, 3]}]}],
        "ranks": ranks})
    est = estimate(graph, cl, plan, profiles=NONE)
    slow_only = [s for s in est.stages if s.gpu == "SLOW"][0]
    assert est.iteration_time_s > 4 * (slow_only.fwd_ms + slow_only.bwd_ms) / 1e3
    assert {s.gpu for s in est.stages} == {"FAST", "SLOW"}


def test_one_f_one_b_with_fewer_microbatches_than_stages_is_priced() -> None:
    graph, cl = _setup(nodes=1, per_node=4)
    plan = megatron_plan(graph, cl, tp=1, pp=4, dp=1, micro_batch=1, global_batch=2)
    est = estimate(graph, cl, plan, profiles=NONE)
    gpipe = estimate(graph, cl, plan.model_copy(update={"schedule": "gpipe"}), profiles=NONE)
    # m ≤ S: 1F1B's order differs from GPipe's only where it cannot matter for time.
    assert est.iteration_time_s == pytest.approx(gpipe.iteration_time_s)
    assert est.feasible
