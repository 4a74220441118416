"""Context parallelism in the cost model: work and activations divided by cp, the K/V ring's
bytes and its overlap with attention, the link it crosses, and the plan's cp-block rules."""

from __future__ import annotations

import pytest

import planner
from cost_models.catalog import get_gpu
from cost_models.comm import Link, p2p_s
from cost_models.context import ring_attention_bytes, ring_attention_exposed_s
from cost_models.profiles import ProfileSet
from planner.cluster import load_cluster
from planner.costing import estimate, megatron_plan
from planner.costing.framework import DEFAULT_FRAMEWORK, Framework
from planner.costing.links import cp_ring_link, intra_link, nic_link
from planner.costing.stage_cost import kv_bytes_per_sequence, stage_cost
from planner.errors import HetplanError, SpecError
from planner.schema import Plan

A100 = get_gpu("A100-SXM4-80GB")
NONE = ProfileSet()
FAST = Link(1e9, 0.0)  # a ring that never shows: isolates the compute side


def _llama(seq_len: int):
    model = planner.load_model("tiny-llama")
    return planner.load_model(model.spec.replace(seq_len=seq_len))


RING = Framework(cp_ring_overlap=True)  # hetplan's defaults, but Megatron-Core's K/V ring


def _stage(graph, cp: int, link: Link | None = None, tp: int = 1, mb: int = 2,
           recompute: str = "none", framework: Framework = RING, sp: bool = False):
    return stage_cost(graph, 0, len(graph.layers), A100, tp, mb, recompute, precision="bf16",
                      cp=cp, cp_link=link if cp > 1 else None, profiles=NONE,
                      framework=framework, sequence_parallel=sp)


def test_ring_bytes_closed_form() -> None:
    # K and V of seq/cp tokens: 2 · (seq/cp) · kv_heads · head_dim · 4 B (fp32), sent cp-1
    # times; tiny-llama has 2 KV heads of 64 / 4 = 16 dimensions.
    graph = _llama(64).graph
    block = graph.layers[1]
    assert kv_bytes_per_sequence(block, graph) == 2 * 64 * 2 * 16 * 4
    kv = kv_bytes_per_sequence(block, graph) / 4
    fwd, bwd = ring_attention_bytes(kv, 4)
    assert fwd == 3 * 2 * (64 / 4) * 2 * 16 * 4
    assert bwd == 2 * fwd  # K, V again plus dK, dV
    assert ring_attention_bytes(kv, 1) == (0.0, 0.0)


def test_ring_overlaps_attention_per_step() -> None:
    link = Link(10.0, 1e-5)
    kv = 4e8
    send = p2p_s(kv, link)
    # Attention longer than every send: fully hidden.
    assert ring_attention_exposed_s(kv, 4 * 10 * send, 4, link) == (0.0, 0.0)
    # Shorter: each of the cp-1 steps shows the send minus the step's attention (max, not sum).
    attn = 4 * send / 2
    fwd, bwd = ring_attention_exposed_s(kv, attn, 4, link)
    assert fwd == pytest.approx(3 * (send - attn / 4))
    assert bwd == pytest.approx(3 * (p2p_s(2 * kv, link) - 2 * attn / 4))


@pytest.mark.parametrize("cp", [2, 4])
@pytest.mark.parametrize("recompute", ["none", "full"])
def test_activations_divide_by_cp(cp: int, recompute: str) -> None:
    graph = _llama(64).graph
    one = _stage(graph, 1, recompute=recompute)
    many = _stage(graph, cp, FAST, recompute=recompute)
    assert many.activation_bytes_per_microbatch == pytest.approx(
        one.activation_bytes_per_microbatch / cp, rel=1e-12)
    assert many.params_per_gpu == one.params_per_gpu  # weights are whole on every cp rank
    assert many.p2p_bytes == pytest.approx(one.p2p_bytes / cp)


def test_cp_is_the_micro_batch_split_when_the_ring_is_free() -> None:
    # Each GPU does 1/cp of every sequence's work (zig-zag balances the causal part), which
    # is exactly the work of mb/cp sequences: cp 2 at mb 2 prices as mb 1.
    graph = _llama(64).graph
    half = _stage(graph, 2, FAST, mb=2)
    single = _stage(graph, 1, mb=1)
    assert half.fwd_s == pytest.approx(single.fwd_s, rel=1e-12)
    assert half.bwd_s == pytest.approx(single.bwd_s, rel=1e-12)


@pytest.mark.parametrize("recompute", ["none", "selective", "full"])
def test_cp_with_sequence_parallel_is_the_micro_batch_split(recompute: str) -> None:
    # The runtime runs sequence parallelism inside each cp rank's seq/cp tokens (the residual
    # stream sliced over TP, attention inputs all-gathered over TP, then K/V over cp): per
    # GPU, the work, TP collectives and activations of mb/cp whole sequences under SP.
    graph = _llama(64).graph
    both = _stage(graph, 2, FAST, tp=2, mb=2, recompute=recompute, sp=True)
    sp_only = _stage(graph, 1, tp=2, mb=1, recompute=recompute, sp=True)
    assert both.fwd_s == pytest.approx(sp_only.fwd_s, rel=1e-12)
    assert both.bwd_s == pytest.approx(sp_only.bwd_s, rel=1e-12)
    assert both.activation_bytes_per_microbatch == pytest.approx(
        sp_only.activation_bytes_per_microbatch, rel=1e-12)
    assert both.recompute_transient_bytes == pytest.approx(
        sp_only.recompute_transient_bytes, rel=1e-12)
    # SP splits what TP alone keeps whole (norm inputs, dropout masks): less than cp alone.
    assert both.activation_bytes_per_microbatch < _stage(
        graph, 2, FAST, tp=2, mb=2, recompute=recompute).activation_bytes_per_microbatch


def test_cp_with_ep_is_the_micro_batch_split() -> None:
    # Routing is per token: each cp rank dispatches its seq/cp tokens over the ep-group, so
    # the all-to-alls, expert GEMMs and activations are those of mb/cp whole sequences.
    graph = planner.load_model("tiny-moe").graph
    a2a = Link(5.0, 1e-5)

    def cost(cp: int, mb: int):
        return stage_cost(graph, 0, len(graph.layers), A100, 1, mb, "none", precision="bf16",
                          cp=cp, cp_link=FAST if cp > 1 else None, profiles=NONE,
                          framework=RING, ep=2, ep_link=a2a)

    both, ep_only = cost(2, 2), cost(1, 1)
    assert both.fwd_s == pytest.approx(ep_only.fwd_s, rel=1e-12)
    assert both.bwd_s == pytest.approx(ep_only.bwd_s, rel=1e-12)
    assert both.activation_bytes_per_microbatch == pytest.approx(
        ep_only.activation_bytes_per_microbatch, rel=1e-12)
    assert both.params_per_gpu == ep_only.params_per_gpu  # E/ep experts on every cp rank


def test_megatron_plan_ep_over_dp_times_cp() -> None:
    # EP over consecutive pipelines, data- or context-parallel: ep 4 over dp 2 × cp 2.
    model = planner.load_model("tiny-moe")
    cl = load_cluster("dgx-a100")
    plan = megatron_plan(model, cl, tp=1, pp=2, dp=2, cp=2, ep=4, micro_batch=1,
                         global_batch=2)
    assert plan.cp(0) == 2 and plan.pipelines[3].stages[1].ep == 4
    est = estimate(model, cl, plan, profiles=NONE)
    assert est.feasible and all(s.cp == 2 for s in est.stages)
    with pytest.raises(HetplanError, match="dp × cp = 2"):
        megatron_plan(model, cl, tp=1, pp=1, dp=1, cp=2, ep=4, micro_batch=1, global_batch=1)


def test_slow_ring_costs_its_bytes_per_block() -> None:
    # On a link 1e6 times slower than the attention, the exposed time is the ring's bytes
    # over the link: (cp-1) · K/V block of seq/cp tokens per block, forward; twice backward.
    graph = _llama(64).graph
    slow = Link(1e-3, 0.0)
    cp, mb = 4, 2
    base, ring = _stage(graph, cp, FAST, mb=mb), _stage(graph, cp, slow, mb=mb)
    blocks = [lay for lay in graph.layers if lay.kind == "block"]
    kv = sum(mb / cp * kv_bytes_per_sequence(lay, graph) for lay in blocks)
    expect = (cp - 1) * kv / slow.bytes_per_s
    assert ring.fwd_s - base.fwd_s == pytest.approx(expect, rel=1e-3)
    assert ring.bwd_s - base.bwd_s == pytest.approx(2 * expect, rel=1e-3)


def test_ring_across_nodes_costs_more_than_inside_a_node() -> None:
    cl = load_cluster("dgx-a100")
    n0, n1 = cl.nodes[0], cl.nodes[1]
    used = {n0.name: 8, n1.name: 8}
    inside = cp_ring_link([n0] * 4, used, 5e-6)
    across = cp_ring_link([n0, n0, n1, n1], used, 5e-6)
    assert inside == intra_link(n0)
    # Across nodes: the NIC shared by the 8 GPUs in use on the node.
    assert across.gb_per_s == pytest.approx(nic_link(n0, 1 / 8, 5e-6).gb_per_s)
    graph = _llama(512).graph
    assert _stage(graph, 4, across).fwd_s > _stage(graph, 4, inside).fwd_s


def test_estimate_cp_memory_and_dp_sync_over_dp_times_cp() -> None:
    model = _llama(4096)
    cl = load_cluster("dgx-a100")
    kw = dict(tp=2, pp=2, micro_batch=1, global_batch=8, zero=1, zero1=True)
    one = estimate(model, cl, megatron_plan(model, cl, dp=2, **kw), profiles=NONE)
    four = estimate(model, cl, megatron_plan(model, cl, dp=2, cp=4, **kw), profiles=NONE)
    for a, b in zip(one.stages, four.stages, strict=False):
        assert b.cp == 4 and a.cp == 1
        assert b.memory.activations_gib == pytest.approx(a.memory.activations_gib / 4,
                                                         rel=1e-9)
        # ZeRO-1 shards the optimizer state over the dp · cp ranks that reduce gradients.
        assert b.optimizer_gib == pytest.approx(a.optimizer_gib / 4, rel=1e-9)
    assert len(four.stages) == 4 * len(one.stages)  # dp · cp pipelines of pp stages
    assert four.dp_sync_s > one.dp_sync_s  # a ring over 8 GPUs instead of 2
    # The same tokens per iteration: global batch × seq_len.
    assert four.tokens_per_s * four.iteration_time_s == pytest.approx(8 * 4096)


def test_megatron_plan_cp_rank_layout() -> None:
    model = _llama(64)
    plan = megatron_plan(model, load_cluster("dgx-a100"), tp=2, pp=2, dp=2, cp=2,
                         micro_batch=1, global_batch=4)
    # TP fastest, then CP, then DP, then PP: pipelines 0, 1 are one cp-block.
    assert [st.ranks for st in plan.pipelines[1].stages] == [(2, 3), (10, 11)]
    assert [p.microbatches for p in plan.pipelines] == [2, 2, 2, 2]
    assert plan.cp(0) == 2


def test_cp_plan_rules() -> None:
    model = _llama(64)
    plan = megatron_plan(model, load_cluster("dgx-a100"), tp=1, pp=2, dp=1, cp=2,
                         micro_batch=1, global_batch=2)
    data = plan.to_dict()
    data["pipelines"][0]["stages"][1]["cp"] = 1
    with pytest.raises(SpecError, match="every stage of a pipeline"):
        Plan.from_dict(data)
    data = plan.to_dict()
    data["global_batch_size"] = 4  # the cp-block counts its samples once
    with pytest.raises(SpecError, match="global_batch_size 4"):
        Plan.from_dict(data)
    data = plan.to_dict()
    data["pipelines"][1]["microbatches"] = 3
    with pytest.raises(SpecError):
        Plan.from_dict(data)
    with pytest.raises(HetplanError, match="2 × cp = 8"):
        megatron_plan(_llama(36), load_cluster("dgx-a100"), tp=1, pp=1, dp=1, cp=4,
                      micro_batch=1, global_batch=1)


def test_export_names_the_cp_degree() -> None:
    from planner.export import export_plan

    model = _llama(64)
    cl = load_cluster("dgx-a100")
    plan = megatron_plan(model, cl, tp=2, pp=2, dp=2, cp=2, micro_batch=1, global_batch=4)
    plan = plan.model_copy(update={"model": model.spec.to_dict(), "cluster": dict(cl.spec)})
    text = export_plan(plan, "megatron")
    assert "--context-parallel-size 2" in text and "DP 2" in text
    assert "context_parallel_degree = 2" in export_plan(plan, "torchtitan")


def test_hetplan_runtime_prices_its_blocking_all_gather_and_causal_work() -> None:
    # hetplan's runtime (runtime/context.py) all-gathers K/V before attention and all-reduces
    # the gathered gradient, nothing overlapped; each zig-zag query chunk attends causally to
    # the keys before its end, so the compute is the causal ring's.
    graph = _llama(64).graph
    slow = Link(1e-3, 0.0)
    cp, mb = 4, 2
    base = _stage(graph, cp, FAST, mb=mb, framework=DEFAULT_FRAMEWORK)
    gathered = _stage(graph, cp, slow, mb=mb, framework=DEFAULT_FRAMEWORK)
    blocks = [lay for lay in graph.layers if lay.kind == "block"]
    whole = [cp * mb / cp * kv_bytes_per_sequence(lay, graph) for lay in blocks]
    # Ring all-gather moves (n-1)/n of the result; ring all-reduce twice that.
    assert gathered.fwd_s - base.fwd_s == pytest.approx(
        sum((cp - 1) / cp * w for w in whole) / slow.bytes_per_s, rel=1e-3)
    assert gathered.bwd_s - base.bwd_s == pytest.approx(
        sum(2 * (cp - 1) / cp * w for w in whole) / slow.bytes_per_s, rel=1e-3)
    # On a free link: the ring's compute exactly (only the causal half of the scores).
    ring = _stage(graph, cp, FAST, mb=mb)
    assert base.fwd_s == pytest.approx(ring.fwd_s, rel=1e-12)
    assert base.bwd_s == pytest.approx(ring.bwd_s, rel=1e-12)
