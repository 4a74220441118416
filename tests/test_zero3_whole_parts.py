"""ZeRO-3 holds a device's largest layer whole while it runs (estimate's prefetch bytes): a
vocab-split embedding keeps its position table whole on every TP rank, as layer_cost prices
its parameters."""

from __future__ import annotations

from types import SimpleNamespace

from planner.costing.estimate import _largest_layer_params
from planner.costing.framework import FRAMEWORKS
from planner.graph.extract import extract
from planner.graph.load_spec import load_model_spec


def test_largest_layer_keeps_gpt_position_table_whole() -> None:
    # GPT-2 medium under Megatron (padded vocabulary, so TP 4 splits it): the embedding is the
    # largest layer, 50,257 × 1,024 token rows split four ways plus the 1,024 × 1,024
    # learned position table whole (Megatron's position embedding is a plain nn.Embedding).
    # Before: the whole layer ÷ 4, the position table too.
    spec = load_model_spec("gpt2-medium")
    graph = extract(spec)
    stage = SimpleNamespace(layers=(0, 2))
    plan = SimpleNamespace(pipelines=[SimpleNamespace(stages=[stage])])
    d = SimpleNamespace(pipeline=0, chunks=(0,), tp=4, ep=1)
    h = spec.hidden_size
    expected = spec.vocab_size * h / 4 + 1024 * h
    assert _largest_layer_params(graph, plan, d, FRAMEWORKS["megatron"]) == expected
