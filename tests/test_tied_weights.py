"""A tied LM head (GPT-2, OPT) on another stage than the embedding: the extractor records the
shared matrix, the stage holding the head pays for its copy, and the copies' gradients are
all-reduced (hetplan's runtime: one all-reduce over every copy; Megatron / DeepSpeed: per
pipeline, then the copy joins its stage's DP all-reduce). Numbers are closed forms."""

from __future__ import annotations

import dataclasses

import pytest

from cost_models.efficiency import LINK_EFFICIENCY
from cost_models.profiles import ProfileSet
from planner.costing import Framework, estimate, megatron_plan, stage_cost
from planner.graph import load_model
from tests.test_cost_fixtures import cluster, gpt_graph, gpu

NONE = ProfileSet()
GIB = 2**30


def test_extractor_records_the_tied_embedding_matrix() -> None:
    """GPT-2 medium: the head reuses the 50257 × 1024 token embedding (counted once, in the
    embedding); Llama 3 8B unties them."""
    g = load_model("gpt2-medium").graph
    assert (g.layers[-1].tied_params, g.layers[-1].tied_to) == (50257 * 1024, 0)
    assert all(layer.tied_params == 0 for layer in g.layers[:-1])
    llama = load_model("llama3-8b").graph
    assert all(layer.tied_params == 0 for layer in llama.layers)


def _tied(layers: int = 2, vocab: int = 51200, h: int = 1024):
    base = gpt_graph(layers=layers, vocab=vocab, h=h)
    # The head's GEMM takes the tied table as its weight (Layer.gemm_params counts it).
    head = dataclasses.replace(base.layers[-1], tied_params=vocab * h, tied_to=0,
                               gemm_params=vocab * h)
    return dataclasses.replace(base, layers=(*base.layers[:-1], head)), vocab * h


def test_the_stage_holding_only_the_head_keeps_a_copy() -> None:
    graph, tied = _tied()
    g, last = gpu(), len(graph.layers)
    head_only = stage_cost(graph, last - 1, last, g, 2, 1, "none", precision="bf16",
                           profiles=NONE)
    whole = stage_cost(graph, 0, last, g, 2, 1, "none", precision="bf16", profiles=NONE)
    head = graph.layers[-1]
    # A vocabulary the TP degree does not split (unknown here, `vocab_size` 0): the head and
    # its copy are whole on each of the 2 TP ranks, as hetplan's runtime keeps them.
    assert head_only.params_per_gpu == head.params + tied
    # hetplan's runtime: fp32 weights and gradients (4 + 4 B) and a slice's fp32 master and
    # moments (12 B) for the head and its copy, and the autocast region's bf16 copy of the
    # table its GEMM uses (2 B).
    assert head_only.static_bytes_per_gpu == pytest.approx(20 * (head.params + tied))
    assert head_only.autocast_bytes_per_gpu == pytest.approx(2 * tied)
    blocks = sum(x.params for x in graph.layers[1:-1]) / 2
    assert whole.params_per_gpu == round(graph.layers[0].params + blocks + head.params)
    split = stage_cost(graph, last - 1, last, g, 2, 1, "none", precision="bf16", profiles=NONE,
                       framework=Framework(pads_vocab=True))
    assert split.params_per_gpu == (head.params + tied) / 2


def test_tied_all_reduce_in_one_pipeline_is_a_two_member_ring() -> None:
    """Two stages on two nodes, one GPU each, 100 Gbit/s: 2α + B / bw with B = 4 B (fp32
    gradient) × the matrix, bw = 100/8 × network efficiency GB/s."""
    graph, tied = _tied()
    cl = cluster(("a", gpu(), 2, 1, 100.0, None), latency_us=5.0)
    plan = megatron_plan(graph, cl, tp=1, pp=2, dp=1, micro_batch=1, global_batch=4)
    est = estimate(graph, cl, plan, profiles=NONE)
    bw = 100 / 8 * LINK_EFFICIENCY["network"] * 1e9
    expected = 2 * 5e-6 + 4 * tied / bw
    assert est.tied_sync_s == pytest.approx(expected, rel=1e-9)
    assert est.dp_sync_s == pytest.approx(expected, rel=1e-9)  # nothing else to reduce
    untied = estimate(gpt_graph(layers=2), cl, plan, profiles=NONE)
    assert untied.tied_sync_s == 0.0


def test_megatron_pairs_then_the_copy_joins_its_stages_dp_ring() -> None:
    """Two pipelines × two stages, each stage on its own node (4 nodes, 1 GPU each).
    hetplan's runtime: one 4-member ring over the matrix; the embedding's own ring carries
    only its untied rest. Megatron: a 2-member ring per pipeline (fp16 here), and the copy's
    DP ring (2 members) on the last stage."""
    graph, tied = _tied()
    cl = cluster(("a", gpu(), 4, 1, 100.0, None), latency_us=5.0)
    plan = megatron_plan(graph, cl, tp=1, pp=2, dp=2, micro_batch=1, global_batch=4)
    bw = 100 / 8 * LINK_EFFICIENCY["network"] * 1e9
    a = 5e-6

    def ring(nbytes: float, n: int) -> float:
        return 2 * (n - 1) * a + 2 * (n - 1) / n * nbytes / bw

    ours = estimate(graph, cl, plan, profiles=NONE)
    assert ours.tied_sync_s == pytest.approx(ring(4 * tied, 4), rel=1e-9)
    mega = estimate(graph, cl, plan, profiles=NONE,
                    framework=Framework(vocab_parallel=True, tied_grad_pairs=True,
                                        tied_grad_bytes=2))
    assert mega.tied_sync_s == pytest.approx(ring(2 * tied, 2), rel=1e-9)
    # Stages [embed, block 0] and [block 1, head]; each layer's DP ring is fp32, the last
    # stage's includes the copy, and both stages take part in their pipeline's pair ring.
    first = sum(ring(4 * layer.params, 2) for layer in graph.layers[:2])
    last = sum(ring(4 * layer.params, 2) for layer in graph.layers[2:]) + ring(4 * tied, 2)
    assert mega.dp_sync_s == pytest.approx(max(first, last) + ring(2 * tied, 2), rel=1e-9)


def test_memory_refusal_counts_the_copy() -> None:
    """GPT-2 medium on two 1 GiB-short GPUs: the last stage's copy (51.5 M params × 18 B =
    0.86 GiB: hetplan's runtime at ZeRO-0 keeps fp32 weights, gradients and Adam's moments,
    4 + 4 + 8 B, and the autocast region's bf16 copy of the table the head's GEMM uses, 2 B)
    is in its peak memory."""
    graph, tied = _tied(vocab=50257)
    cl = cluster(("a", gpu(), 2, 1, 100.0, None))
    plan = megatron_plan(graph, cl, tp=1, pp=2, dp=1, micro_batch=1, global_batch=2)
    with_copy = estimate(graph, cl, plan, profiles=NONE)
    without = estimate(gpt_graph(layers=2, vocab=50257), cl, plan, profiles=NONE)
    diff = with_copy.stages[-1].peak_memory_gib - without.stages[-1].peak_memory_gib
    assert diff == pytest.approx((16 + 2) * tied / GIB, rel=1e-9)
    assert with_copy.stages[0].peak_memory_gib == without.stages[0].peak_memory_gib


def test_search_tables_price_the_copy_like_the_estimate() -> None:
    """The search's per-range memory and Adam step (numpy over every [i, j)) equal
    stage_cost's for the real GPT-2 medium graph, ranges with and without the copy."""
    from planner.costing.stage_memory import stage_peak_memory_gib
    from planner.search.tables import RECOMPUTE, option_costs

    graph = load_model("gpt2-medium").graph
    cl = cluster(("a", gpu(), 2, 4, 100.0, None))
    n = len(graph.layers)
    opt = option_costs(graph, cl, 0, 2, 1, precision="bf16", sequence_parallel=False,
                       profiles=NONE)
    for rc_index, rc in enumerate(RECOMPUTE):
        for i, j in ((0, n), (0, 5), (5, n), (n - 1, n), (3, n - 1)):
            cost = stage_cost(graph, i, j, gpu(), 2, 1, rc, precision="bf16", profiles=NONE)
            assert opt.memory_gib(rc_index, 3.0, 2)[i, j] == pytest.approx(
                stage_peak_memory_gib(cost, 3.0, 2), rel=1e-12)
            assert opt.update_s[i, j] == pytest.approx(cost.optimizer_step_s, rel=1e-12)
