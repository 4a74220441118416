"""The physics a framework record selects is in its fields, not its display name: a record
that copies hetplan's runtime under another name prices every plan the same."""

from __future__ import annotations

import dataclasses

import pytest

from cost_models.profiles import ProfileSet
from planner.costing.framework import FRAMEWORKS, HETPLAN_RUNTIME
from planner.costing.stage_cost import stage_cost
from planner.graph.extract import extract
from planner.graph.load_spec import load_model_spec
from tests.test_cost_fixtures import gpu


@pytest.mark.parametrize("name", ["tiny-moe", "tiny-llama"])
def test_a_renamed_hetplan_record_prices_the_same(name: str) -> None:
    # Before, `fw.name == "hetplan"` chose the per-expert MoE all-reduces and the SP gathers at
    # the stage edge and before the head: a copy named otherwise lost them.
    graph = extract(load_model_spec(name))
    renamed = dataclasses.replace(HETPLAN_RUNTIME, name="my-hetplan-fork")
    n = len(graph.layers)
    args = dict(precision="bf16", profiles=ProfileSet(), sequence_parallel=True)
    ours = stage_cost(graph, 1, n, gpu(), 2, 2, "none", framework=HETPLAN_RUNTIME, **args)
    copy = stage_cost(graph, 1, n, gpu(), 2, 2, "none", framework=renamed, **args)
    assert copy == ours


def test_only_hetplan_gathers_the_sequence_under_sp() -> None:
    for name, fw in FRAMEWORKS.items():
        assert fw.sp_edge_gathers == (name == "hetplan")
        assert fw.sp_gathers_before_head == (name == "hetplan")
        assert fw.moe_tp_allreduce_per_expert == (name == "hetplan")
        assert fw.moe_dispatch_whole_per_tp_rank == (name == "hetplan")
        assert fw.sp_head_input_replicated == (name in ("hetplan", "torchtitan"))


def test_frameworks_lists_te_kernels_by_generation(monkeypatch: pytest.MonkeyPatch) -> None:
    # Transformer Engine runs cuDNN fused attention on Hopper (TE's DotProductAttention
    # backend selection): were cuDNN priced on Hopper, the megatron record ("te") must say so.
    # Before: "te" was compared with "cudnn" by name and never matched.
    import cost_models.attention as attention
    from planner.cli.cmd_frameworks import framework_record

    monkeypatch.setattr(attention, "PRICED", frozenset({("cudnn", "hopper")}))
    assert framework_record("megatron")["attention_kernel_priced_on"] == ["hopper"]
    assert framework_record("hetplan")["attention_kernel_priced_on"] == []
