"""The extractor against independent figures: Megatron/Korthikanti formulas, published counts.

FLOP convention: attention is counted NON-causal (the full s×s score matrix), the
convention of Korthikanti et al. eq. 7 and of PaLM/torchtitan MFU; its backward is 2× its
forward. Activation bytes: with the default SDPA attention we count what a fused
(flash / memory-efficient) kernel keeps; with the op-by-op `math` attention and dropout,
the model is exactly Korthikanti's, whose Table 2 rows the measurement must reproduce.
"""

from __future__ import annotations

import pytest
import torch

from planner.graph import extract, load_model, load_model_spec
from planner.graph.extract import measure_chain_model
from planner.graph.spec import ModelSpec
from planner.models import build_model


def _megatron_params(h: int, layers: int, vocab: int, seq: int) -> float:
    """Narayanan et al. 2021 §5.1: 12·l·h²·(1 + 13/(12h) + (V+s)/(12·l·h))."""
    return 12 * layers * h**2 * (1 + 13 / (12 * h) + (vocab + seq) / (12 * layers * h))


def _eq7(seq: int, layers: int, h: int, vocab: int) -> float:
    """Korthikanti et al. 2022 eq. 7 per sequence, without recomputation (÷ batch)."""
    return 72 * seq * layers * h**2 * (1 + seq / (6 * h) + vocab / (12 * layers * h))


def test_gpt3_175b_params_match_megatron_formula() -> None:
    graph = extract(load_model_spec("gpt3-175b"))
    formula = _megatron_params(12288, 96, 51200, 2048)
    assert round(formula / 1e9, 1) == 174.6
    # The formula leaves out the final LayerNorm (2h); everything else is exact.
    assert graph.params == pytest.approx(formula + 2 * 12288, rel=1e-12)
    assert graph.layers[-1].params == 2 * 12288  # tied LM head counted in the embedding
    assert graph.layers[0].params == (51200 + 2048) * 12288


@pytest.mark.parametrize(("name", "published"), [
    ("llama3-70b", 70_553_706_496),  # Meta-Llama-3-70B checkpoint
    ("llama3-8b", 8_030_261_248),    # Meta-Llama-3-8B checkpoint
])
def test_llama3_params_match_published_checkpoints(name: str, published: int) -> None:
    assert extract(load_model_spec(name)).params == published


@pytest.mark.parametrize("name", ["gpt3-175b", "gpt2-medium", "opt-350m", "gpt-neo-2.7b"])
def test_training_flops_match_korthikanti_eq7(name: str) -> None:
    spec = load_model_spec(name)
    graph = extract(spec)
    expected = _eq7(spec.seq_len, spec.num_layers, spec.hidden_size, spec.vocab_size)
    assert graph.train_flops == pytest.approx(expected, rel=0.03)
    # Our blocks are eq. 7's blocks term by term, so the match is in fact exact.
    assert graph.train_flops == pytest.approx(expected, rel=1e-9)


def test_block_flops_split_into_dgrad_and_wgrad_closed_form() -> None:
    spec = load_model_spec("llama3-70b")
    s, h, f = spec.seq_len, spec.hidden_size, spec.ffn_hidden_size
    kv = spec.num_kv_heads * spec.head_dim
    gemm = 2 * s * (2 * h * h + 2 * h * kv + 3 * h * f)  # q, o, k, v, w1, w3, w2
    attention = 4 * s * s * h  # q·kᵀ and p·v over the full s×s matrix (non-causal)
    block = extract(spec).layers[1]
    assert block.fwd_flops == gemm + attention
    assert block.fwd_attention_flops == attention
    assert block.bwd_weight_flops == gemm
    assert block.bwd_act_flops == gemm + 2 * attention
    head = extract(spec).layers[-1]
    lm = 2 * s * h * spec.vocab_size
    assert (head.fwd_flops, head.bwd_act_flops, head.bwd_weight_flops) == (lm, lm, lm)


def _korthikanti_block(impl: str, dropout: float, dtype=torch.float16):
    s, h, a = 128, 256, 8
    spec = ModelSpec.from_dict(dict(name="k", architecture="gpt", hidden_size=h, num_layers=1,
                                    num_attention_heads=a, vocab_size=64, seq_len=s))
    model = build_model(spec, dtype=dtype, attn_impl=impl, dropout=dropout)
    return measure_chain_model(model, s)[1], s, h, a


def test_activation_bytes_reproduce_korthikanti_table2_no_recompute() -> None:
    st, s, h, a = _korthikanti_block("math", 0.1)
    table2 = s * h * (34 + 5 * a * s / h)  # fp16, b = 1
    layer_norm_stats = 2 * 2 * 4 * s  # mean and rstd (fp32) of two LayerNorms: not in Table 2
    assert st.saved_bytes == table2 + layer_norm_stats


def test_activation_bytes_selective_and_full_rows() -> None:
    from planner.graph.extract import layer_graph_from_stats

    st, s, h, a = _korthikanti_block("math", 0.1)
    graph = layer_graph_from_stats("k", s, 2, [st, st, st], [0, 1, 2], names=["e", "b", "h"],
                                   tp=[(1, (), 0, h)] * 3)
    block = graph.layers[1]
    assert block.activation_bytes_selective == 34 * s * h + 2 * 2 * 4 * s
    assert block.activation_bytes_full == 2 * s * h


def test_fused_attention_keeps_no_score_matrix() -> None:
    spec = load_model_spec("gpt3-175b")
    s, h, a = spec.seq_len, spec.hidden_size, spec.num_attention_heads
    block = extract(spec).layers[1]
    # Table 2's selective row without its two 1-byte dropout masks (no dropout here),
    # plus the kernel's fp32 log-sum-exp per head and query, plus LayerNorm statistics.
    expected = (34 - 2) * s * h + 4 * a * s + 2 * 2 * 4 * s
    assert block.activation_bytes == expected
    assert block.activation_bytes_selective == expected - 4 * a * s
    assert block.activation_bytes_full == 2 * s * h
    assert block.output_bytes == 2 * s * h
    assert (block.tp_allreduce_bytes, block.tp_allreduces_fwd) == (2 * s * h, 2)


def test_tp_limits_follow_heads_kv_heads_and_ffn() -> None:
    block = extract(load_model_spec("llama3-70b")).layers[1]
    assert block.max_tp == 8  # 8 KV heads
    assert block.allows_tp(8) and block.allows_tp(4) and not block.allows_tp(16)
    assert not block.allows_tp(3)
    assert extract(load_model_spec("gpt3-175b")).layers[1].max_tp == 96


def test_reused_block_equals_measuring_every_block() -> None:
    """extract() measures one block and copies it; a full measurement must agree."""
    spec = load_model_spec("tiny-llama")
    stats = measure_chain_model(build_model(spec, dtype=torch.float32), spec.seq_len)
    graph = extract(spec)
    for layer, st in zip(graph.layers, stats, strict=True):
        assert layer.fwd_flops == st.fwd_flops
        assert layer.bwd_act_flops == st.bwd_act_flops
        assert layer.activation_bytes == st.saved_bytes
        assert layer.params == st.params


def test_op_graph_is_a_chain_of_layers() -> None:
    graph = extract(load_model_spec("tiny"))
    ops = graph.op_graph
    import networkx as nx

    assert nx.is_directed_acyclic_graph(ops)
    layers = {data["layer"] for _, data in ops.nodes(data=True)}
    assert layers == set(range(len(graph.layers)))
    for u, v in ops.edges:
        assert ops.nodes[v]["layer"] - ops.nodes[u]["layer"] in (0, 1)
    crossings = {(ops.nodes[u]["layer"], ops.nodes[v]["layer"]) for u, v in ops.edges
                 if ops.nodes[u]["layer"] != ops.nodes[v]["layer"]}
    assert crossings == {(i, i + 1) for i in range(len(graph.layers) - 1)}
    assert sum(d["flops"] for _, d in ops.nodes(data=True)) == graph.fwd_flops


def test_extraction_is_deterministic() -> None:
    spec = load_model_spec("gpt2-amp")
    first = extract.__wrapped__(spec).to_dict()
    second = extract.__wrapped__(spec).to_dict()
    assert first == second


def test_load_model_api() -> None:
    model = load_model("llama3-8b")
    assert model.name == "llama3-8b" and model.seq_len == 8192 and model.precision == "bf16"
    assert [layer.name for layer in model.layers[:2]] == ["embed", "layers.0"]
    assert model.layers[-1].name == "head" and len(model.layers) == 34
    assert load_model(model) is model
    assert load_model(model.spec).graph is model.graph  # cached
