"""Framework execution properties: defaults change nothing; each property changes exactly the
work it describes (hand-computed from the cost functions)."""

from __future__ import annotations

import dataclasses

import pytest

from cost_models.compute import gemm_s, memory_s
from cost_models.efficiency import KERNELS_PER_BLOCK_FWD, compute_constants
from cost_models.fusion import fused_block_bytes_per_token, fused_traffic_ratio
from cost_models.profiles import ProfileSet
from planner.costing import DEFAULT_FRAMEWORK, Framework, estimate, megatron_plan, stage_cost
from planner.costing.links import p2p_time_s
from planner.costing.published_stacks import DEEPSPEED_PIPELINE
from planner.simulate import StageTiming, simulate
from tests.test_cost_fixtures import cluster, gpt_graph, gpu

NONE = ProfileSet()


def test_fused_bytes_closed_form_llama2_7b() -> None:
    # Llama 2 7B block (h 4096, FFN 11008, MHA): norms 4h + residuals 6h + flash I/O 2h + 2kv
    # + RoPE 2(h + kv) + SwiGLU 3·FFN elements, 2 B each.
    h, ffn = 4096, 11008
    elems = 4 * h + 6 * h + 2 * h + 2 * h + 2 * (h + h) + 3 * ffn
    assert fused_block_bytes_per_token(h, ffn, h, gated=True, rotary=True) == 2 * elems
    assert fused_traffic_ratio(2 * elems * 4, h, ffn, h, gated=True, rotary=True) == 0.25
    assert fused_traffic_ratio(1.0, h, ffn, h, gated=True, rotary=True) == 1.0  # never > 1


def test_framework_rejects_nonsense() -> None:
    with pytest.raises(ValueError, match="memory_traffic_scale"):
        Framework(memory_traffic_scale=0.0)
    with pytest.raises(ValueError, match="both"):
        Framework(recompute_gemm_fraction=0.5)


def test_default_framework_argument_is_the_default() -> None:
    graph = gpt_graph(layers=4)
    g = gpu()
    a = stage_cost(graph, 0, 6, g, 2, 2, "selective", precision="bf16", profiles=NONE)
    b = stage_cost(graph, 0, 6, g, 2, 2, "selective", precision="bf16", profiles=NONE,
                   framework=DEFAULT_FRAMEWORK)
    assert a == b


def test_memory_traffic_scale_removes_exactly_that_share_of_block_traffic() -> None:
    graph = gpt_graph(layers=1)
    g = gpu()
    blk = graph.layers[1]
    base = stage_cost(graph, 1, 2, g, 1, 1, "none", precision="bf16", profiles=NONE)
    half = stage_cost(graph, 1, 2, g, 1, 1, "none", precision="bf16", profiles=NONE,
                      framework=Framework(memory_traffic_scale=0.5))
    mem = memory_s(blk.fwd_memory_bytes, g)
    assert base.fwd_s - half.fwd_s == pytest.approx(0.5 * mem, rel=1e-9)
    assert base.bwd_s - half.bwd_s == pytest.approx(0.5 * 2 * mem, rel=1e-9)


def test_framework_selective_policy_reruns_its_shares() -> None:
    graph = gpt_graph(layers=1)
    g = gpu()
    blk = graph.layers[1]
    none = stage_cost(graph, 1, 2, g, 1, 1, "none", precision="bf16", profiles=NONE)
    fw = Framework(recompute_gemm_fraction=0.4, recompute_memory_fraction=1.0)
    sel = stage_cost(graph, 1, 2, g, 1, 1, "selective", precision="bf16", profiles=NONE,
                     framework=fw)
    kernels = KERNELS_PER_BLOCK_FWD * compute_constants(g.generation).kernel_s
    rerun = (0.4 * gemm_s(blk.fwd_matmul_flops, g, "bf16", blk.matmul_dim)
             + memory_s(blk.fwd_memory_bytes, g) + kernels)
    assert sel.bwd_s - none.bwd_s == pytest.approx(rerun, rel=1e-9)
    assert sel.fwd_s == none.fwd_s


def test_blocking_p2p_matches_hand_built_simulation() -> None:
    # Two stages on two nodes: blocking p2p keeps both ends busy for the transfer.
    graph = gpt_graph(layers=4)
    g = gpu()
    cl = cluster(("a", g, 2, 1, 10.0, None))
    plan = megatron_plan(graph, cl, tp=1, pp=2, dp=1, micro_batch=1, global_batch=8)
    est = estimate(graph, cl, plan, profiles=NONE, framework=DEEPSPEED_PIPELINE)
    free = estimate(graph, cl, plan, profiles=NONE)
    st = [stage_cost(graph, *s.layers, g, 1, 1, "none", precision="bf16", profiles=NONE)
          for s in plan.pipelines[0].stages]
    nodes = {n.name: n for n in cl.nodes}
    send = p2p_time_s(st[0].p2p_bytes, nodes["a-0"], 1, nodes["a-1"], 5e-6)
    chunks = [StageTiming(fwd_s=st[0].fwd_s + send, bwd_s=st[0].bwd_s + send, send_s=0.0,
                          device=0),
              StageTiming(fwd_s=st[1].fwd_s + send, bwd_s=st[1].bwd_s + send, send_s=0.0,
                          device=1)]
    opt = [st[0].optimizer_step_s, st[1].optimizer_step_s]
    tl = simulate(chunks, 8, "1f1b", optimizer_s=opt, detail=False)
    assert est.iteration_time_s == pytest.approx(tl.makespan_s, rel=1e-9)
    assert est.iteration_time_s > free.iteration_time_s


def test_causal_flash_skips_half_the_attention_core() -> None:
    base = gpt_graph(layers=1)
    s_, h = base.seq_len, base.layers[1].matmul_dim
    blk = dataclasses.replace(base.layers[1], fwd_attention_flops=4.0 * s_ * s_ * h)
    graph = dataclasses.replace(base, layers=(base.layers[0], blk, base.layers[2]))
    g = gpu()
    full = stage_cost(graph, 1, 2, g, 1, 1, "none", precision="bf16", profiles=NONE,
                      framework=Framework(attention_flops_share=1.0))
    causal = stage_cost(graph, 1, 2, g, 1, 1, "none", precision="bf16", profiles=NONE,
                        framework=Framework(attention_flops_share=0.5))
    w = blk.matmul_dim
    fwd_cut = (gemm_s(blk.fwd_matmul_flops, g, "bf16", w)
               - gemm_s(blk.fwd_matmul_flops - 0.5 * blk.fwd_attention_flops, g, "bf16", w))
    assert full.fwd_s - causal.fwd_s == pytest.approx(fwd_cut, rel=1e-9)
    # The backward computes the attention core twice over (dQ, dK, dV): twice the saving.
    assert full.bwd_s - causal.bwd_s == pytest.approx(2 * fwd_cut, rel=1e-9)
    assert full.bwd_weight_s == causal.bwd_weight_s


WHOLE_VOCAB = Framework(vocab_parallel=False)


def _with_vocab(graph, vocab: int):
    """The fixture graph with its embedding and head recording their vocabulary size."""
    layers = list(graph.layers)
    for i in (0, len(layers) - 1):
        layers[i] = dataclasses.replace(layers[i], vocab_size=vocab)
    return dataclasses.replace(graph, layers=tuple(layers))


def test_runtime_splits_embedding_and_head_when_tp_divides_the_vocabulary() -> None:
    """planner/runtime/stage.py (apply_vocab_tp) splits them only when the TP degree divides
    the vocabulary; otherwise each TP rank holds and runs them whole (no TP traffic for them),
    exactly as at TP 1. Megatron pads the vocabulary, so it always splits."""
    from planner.costing.framework import MEGATRON_CORE

    g = gpu()

    def cost(graph, layer: int, tp: int, fw=DEFAULT_FRAMEWORK):
        return stage_cost(graph, layer, layer + 1, g, tp, 1, "none", precision="bf16",
                          profiles=NONE, framework=fw)

    even, odd = _with_vocab(gpt_graph(layers=2), 51200), _with_vocab(gpt_graph(layers=2), 50257)
    for graph, splits in ((even, True), (odd, False)):
        for index in (0, len(graph.layers) - 1):
            layer = graph.layers[index]
            four, one = cost(graph, index, 4), cost(graph, index, 1)
            # Only the vocab × hidden table splits; GPT's s × h position table stays whole on
            # every TP rank (the fixture's head holds only its final norm, split as the graph
            # records no LM matrix for it).
            table = (layer.vocab_size * layer.matmul_dim if layer.kind == "embedding"
                     else layer.params)
            if splits:
                assert four.params_per_gpu == layer.params - table + table / 4
                # The head's GEMM divides by 4; the embedding (a lookup) gains an all-reduce.
                assert (four.fwd_s < one.fwd_s) == (layer.kind == "head")
            else:
                assert four.params_per_gpu == layer.params
                assert (four.fwd_s, four.bwd_s) == pytest.approx((one.fwd_s, one.bwd_s),
                                                                 rel=1e-12)
            assert (cost(graph, index, 4, MEGATRON_CORE).params_per_gpu
                    == layer.params - table + table / 4)
            assert cost(graph, index, 4, WHOLE_VOCAB).params_per_gpu == layer.params
    # The blocks are split either way.
    assert cost(odd, 1, 4).params_per_gpu == odd.layers[1].params / 4


def test_whole_head_costs_its_full_state_and_logits_in_memory() -> None:
    """Peak memory of the last stage at TP 4, embedding and head whole minus split: the head's
    16 B/param of mixed-precision Adam state and its loss's fp32 log-probabilities (4·s·V B),
    3/4 of each, and the loss's transient buffers; the head's 2·s·h B of hidden-sized inputs
    are whole either way."""
    graph = _with_vocab(gpt_graph(layers=2, vocab=51200), 51200)
    head = graph.layers[-1]
    cl = cluster(("a", gpu(), 2, 4, 100.0, None))
    plan = megatron_plan(graph, cl, tp=4, pp=2, dp=1, micro_batch=1, global_batch=4)
    whole = estimate(graph, cl, plan, profiles=NONE, framework=WHOLE_VOCAB)
    split = estimate(graph, cl, plan, profiles=NONE)
    gib = 2 ** 30
    inflight = 1  # 1F1B: the last of 2 stages holds one micro-batch
    logprobs = 4.0 * graph.seq_len * 51200
    # The loss's buffers beside them (vocab_cost.loss_transient_bytes), one micro-batch's:
    # 8 B per logit whole; split, 12 B per logit of this rank's quarter (loss_parallel).
    loss = (8.0 - 12.0 / 4) * graph.seq_len * 51200
    expected = (0.75 * (16 * head.params + inflight * logprobs) + loss) / gib
    assert (whole.stages[-1].peak_memory_gib - split.stages[-1].peak_memory_gib
            == pytest.approx(expected, rel=1e-9))


def test_default_framework_describes_the_runtime_attention(monkeypatch) -> None:
    """The default prices a causal kernel because the runtime asks SDPA for one."""
    import torch

    import planner.models.attention as attn

    seen = {}
    real = torch.nn.functional.scaled_dot_product_attention

    def spy(*args, **kwargs):
        seen.update(kwargs)
        return real(*args, **kwargs)

    monkeypatch.setattr(attn.F, "scaled_dot_product_attention", spy)
    core = attn.CoreAttention(impl="sdpa")
    q = torch.randn(1, 2, 8, 4)
    core(q, q, q)
    assert seen.get("is_causal") is True
    assert DEFAULT_FRAMEWORK.attention_flops_share == 0.5
    # The runtime splits the vocabulary without padding it (apply_vocab_tp).
    assert DEFAULT_FRAMEWORK.vocab_parallel is True and DEFAULT_FRAMEWORK.pads_vocab is False


def test_eager_attention_keeps_what_the_math_attention_graph_measures() -> None:
    """`keeps_attention_probs` on the flash graph = the op-by-op attention's measured graph
    (the extractor counts what autograd saves there: Korthikanti's 5·a·s² with dropout)."""
    from planner.graph.extract import extract
    from planner.graph.spec import ModelSpec

    spec = ModelSpec.from_dict(dict(name="eager", architecture="gpt", hidden_size=256,
                                    num_layers=2, num_attention_heads=8, vocab_size=64,
                                    seq_len=128, training={"precision": "fp16"}))
    flash = extract(spec)
    a100 = gpu()
    for dropout in (0.0, 0.1):
        fw = Framework(keeps_attention_probs=True, attention_dropout=dropout > 0)
        math_graph = extract(spec, attn_impl="math", dropout=dropout)
        for tp, mb in ((1, 1), (2, 3)):
            def act(graph, framework, recompute="none", tp=tp, mb=mb):
                c = stage_cost(graph, 1, 2, a100, tp, mb, recompute, precision="fp16",
                               profiles=NONE, framework=framework)
                return c.activation_bytes_per_microbatch, c.recompute_transient_bytes

            eager, _ = act(flash, fw)
            measured, _ = act(math_graph, DEFAULT_FRAMEWORK)
            # The model's dropout also masks the two residual branches (1 byte per element
            # each, outside attention; split over TP as the rest of the block is here).
            residual_masks = mb * 2 * spec.seq_len * spec.hidden_size / tp if dropout else 0.0
            # Left over: the flash kernel's fp32 log-sum-exp (4·a·s bytes, 0.2 % here).
            assert eager == pytest.approx(measured - residual_masks, rel=0.005), (dropout, tp)
            assert eager > act(flash, DEFAULT_FRAMEWORK)[0]
            # Full recompute keeps only the block inputs; the probabilities exist only while
            # one block is recomputed.
            held, transient = act(flash, fw, "full")
            assert held == act(flash, DEFAULT_FRAMEWORK, "full")[0]
            s, a = spec.seq_len, spec.num_attention_heads
            per_elem = 2 * 2 + 1 if dropout else 2
            assert transient - act(flash, DEFAULT_FRAMEWORK, "full")[1] == pytest.approx(
                mb * a * s * s * per_elem / tp)
    with pytest.raises(ValueError, match="keeps_attention_probs"):
        Framework(attention_dropout=True)
