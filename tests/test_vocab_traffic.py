"""The memory-bound traffic a vocab-split LM head and embedding move per TP rank: only the
vocabulary-sized tensors divide. Expected bytes come from the loss's closed form (what
`cross_entropy(logits.float(), labels)` reads and writes per logit) and from the graph's own
op-by-op record of the head, not from the pricing code."""

from __future__ import annotations

import importlib

import pytest

from cost_models.profiles import ProfileSet
from planner.costing import layer_cost
from planner.costing.framework import FRAMEWORKS
from planner.costing.links import link_of_kind
from planner.graph.extract import extract, measure_chain_model
from planner.graph.load_spec import load_model_spec
from planner.models import build_model
from tests.test_cost_fixtures import gpu

_VOCAB_OPS = ("aten._to_copy", "aten._log_softmax", "aten.nll_loss_forward")


def _priced_bytes(monkeypatch: pytest.MonkeyPatch, name: str, kind: str, tp: int, sp: bool,
                  framework: str = "hetplan") -> float:
    """Forward memory-bound bytes per sequence `layer_costs` hands to the compute model."""
    seen = []
    real = layer_cost.layer_compute_s

    def spy(work, *args, **kwargs):  # type: ignore[no-untyped-def]
        seen.append(work.fwd_memory_bytes)
        return real(work, *args, **kwargs)

    monkeypatch.setattr(layer_cost, "layer_compute_s", spy)
    graph = extract(load_model_spec(name))
    layer = next(x for x in graph.layers if x.kind == kind)
    layer_cost.layer_costs(layer, graph, gpu(), tp, 1, "none", "bf16", sp,
                           link_of_kind("nvlink", 300.0), ProfileSet(), FRAMEWORKS[framework])
    return seen[0]


@pytest.mark.parametrize("sp", [False, True])
def test_llama3_8b_head_divides_only_its_vocabulary_traffic(monkeypatch: pytest.MonkeyPatch,
                                                            sp: bool) -> None:
    # bf16 logits, seq 8192, vocab 128,256: the fp32 cast reads 2 B and writes 4 B per logit,
    # log_softmax reads and writes 4 B, nll_loss reads 4 B: 18 B per logit divide by TP 8;
    # the final norm's traffic stays whole on every rank, SP or not (hetplan gathers the
    # sequence before the head). Before: 0.5625 of the whole without SP, 1/8 with it.
    graph = extract(load_model_spec("llama3-8b"))
    head = graph.layers[-1]
    vocab = 8192 * 128_256 * 18
    expected = head.fwd_memory_bytes - vocab + vocab / 8
    assert _priced_bytes(monkeypatch, "llama3-8b", "head", 8, sp) == pytest.approx(expected)


def test_megatron_sp_runs_the_final_norm_split(monkeypatch: pytest.MonkeyPatch) -> None:
    graph = extract(load_model_spec("llama3-8b"))
    head = graph.layers[-1]
    vocab = 8192 * 128_256 * 18
    expected = (head.fwd_memory_bytes - vocab) / 8 + vocab / 8
    got = _priced_bytes(monkeypatch, "llama3-8b", "head", 8, True, "megatron")
    assert got == pytest.approx(expected)


@pytest.mark.parametrize("sp", [False, True])
def test_the_embedding_lookup_write_is_whole_on_every_rank(monkeypatch: pytest.MonkeyPatch,
                                                           sp: bool) -> None:
    graph = extract(load_model_spec("llama3-8b"))
    whole = graph.layers[0].fwd_memory_bytes
    # the lookup writes seq × hidden bf16 and reads as much of the table (graph's gather
    # count), plus the int64 ids: 2 · 8192 · 4096 · 2 + 8192 · 8 bytes.
    assert whole == 2 * 8192 * 4096 * 2 + 8192 * 8
    assert _priced_bytes(monkeypatch, "llama3-8b", "embedding", 8, sp) == whole


def test_the_vocabulary_traffic_is_what_the_graph_records_for_the_loss() -> None:
    # The graph's own op record of tiny-llama's head (fp32: no cast): the loss's ops are the
    # vocabulary-sized part, the norm's the rest (the labels' 8 B per token aside).
    spec = load_model_spec("tiny-llama").replace(num_layers=1)
    ex = importlib.import_module("planner.graph.extract")
    model = build_model(spec, device="meta", dtype=ex.torch_dtype(spec.training.precision))
    ops = measure_chain_model(model, spec.seq_len)[-1].ops
    loss = sum(o["bytes"] for o in ops if o["op"] in _VOCAB_OPS)
    from planner.costing.vocab_cost import vocab_traffic_bytes

    graph = extract(load_model_spec("tiny-llama"))
    assert vocab_traffic_bytes(graph.layers[-1], graph) <= loss
    assert loss - vocab_traffic_bytes(graph.layers[-1], graph) <= 8 * spec.seq_len + 8


def _head_activation(name: str, framework: str, tp: int, sp: bool) -> float:
    graph = extract(load_model_spec(name))
    return layer_cost.layer_costs(graph.layers[-1], graph, gpu(), tp, 1, "none", "bf16", sp,
                                  link_of_kind("nvlink", 300.0), ProfileSet(),
                                  FRAMEWORKS[framework])[4]


@pytest.mark.parametrize(("framework", "input_share", "norm_share", "stream_bytes"),
                         [("hetplan", 1, 1, 4), ("torchtitan", 1, 1 / 8, 2),
                          ("megatron", 1 / 8, 1 / 8, 2)])
def test_llama3_8b_head_activations_under_sp(framework: str, input_share: float,
                                             norm_share: float, stream_bytes: int) -> None:
    # Closed form per sequence (bf16, s 8192, h 4096, V 128,256): the final norm keeps its
    # input s·h·2 and an fp32 rstd per token, the LM head its input s·h·2, the loss the fp32
    # log-probabilities s·V·4 (÷ TP 8). Under SP hetplan gathers before the norm (all whole);
    # torchtitan runs the norm sequence-parallel but its ColwiseParallel(input_layouts=
    # Shard(1)) output layer replicates its input before F.linear (whole); Megatron saves the
    # split input (÷ 8). Before: torchtitan priced as Megatron. hetplan's norm input is its
    # fp32 residual stream (autocast with fp32 weights; tests/test_block_activations.py).
    s, h, v = 8192, 4096, 128_256
    expected = (input_share * s * h * 2 + norm_share * (s * h * stream_bytes + 4 * s)
                + s * v * 4 / 8)
    got = _head_activation("llama3-8b", framework, 8, True)
    assert got == pytest.approx(expected, abs=8)
