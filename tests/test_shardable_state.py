"""The ZeRO-shardable state of a stage (`stage_memory.shardable_gib`, what Cephalo's split
divides): on dense stages it equals the slope of the peak in the shard fraction (the
definition the estimate used before), and on an expert-parallel stage it counts the routed
experts' optimizer state, which that slope missed, as a closed form from the module's own
parameter count says."""

from __future__ import annotations

import pytest

from planner.costing.stage_cost import stage_cost
from planner.costing.stage_memory import shardable_gib, stage_memory
from planner.graph import load_model
from planner.graph.load_spec import load_model_spec
from planner.models import build_model
from tests.test_cost_fixtures import gpu

GIB = 2**30
ADAM_BYTES = 12  # fp32 master weights + two Adam moments per parameter (ZeRO, SC'20, §3.1)


def _peak(cost, zero: int, dp: int, f: float, ep: int = 1) -> float:
    return stage_memory(cost, 2.0, dp, zero, ep=ep, fraction=f).total_gib


@pytest.mark.parametrize(("name", "start", "end", "tp"), [
    ("gpt2-medium", 0, 9, 1), ("tiny-llama", 1, 4, 2), ("llama3-8b", 10, 34, 4)])
@pytest.mark.parametrize("zero", [1, 2, 3])
def test_dense_stage_equals_the_slope_of_its_peak(name: str, start: int, end: int, tp: int,
                                                  zero: int) -> None:
    graph = load_model(name).graph
    cost = stage_cost(graph, start, end, gpu(), tp, 1, "none",
                      precision="bf16")
    slope = 2 * (_peak(cost, zero, 4, 1.0) - _peak(cost, zero, 4, 0.5))
    assert shardable_gib(cost, zero) == pytest.approx(slope, rel=1e-12)
    assert shardable_gib(cost, 0) == 0.0


def test_expert_parallel_stage_counts_every_experts_optimizer_state() -> None:
    # tiny-moe whole on one stage at ep 2 over 8 replicas: a GPU holds half the experts, whose
    # Adam state is sliced over the 4 replicas holding the same half. A share f of the ZeRO
    # state then holds f of every parameter's Adam state, experts counted whole: the slope is
    # 12 B × all parameters (the module's own count, not the cost model's).
    graph = load_model("tiny-moe").graph
    cost = stage_cost(graph, 0, len(graph.layers), gpu(), 1, 1, "none",
                      precision="bf16", ep=2)
    whole = build_model(load_model_spec("tiny-moe"), device="cpu")
    params = sum(p.numel() for p in whole.parameters())
    assert cost.expert_optimizer_bytes_per_gpu > 0
    assert shardable_gib(cost, 1, ep=2) == pytest.approx(ADAM_BYTES * params / GIB, rel=1e-9)
    # It is the peak's slope where the share is below 1 / ep (an even 1/8 or 1/4 share) ...
    assert _peak(cost, 1, 8, 1 / 4, ep=2) - _peak(cost, 1, 8, 1 / 8, ep=2) == pytest.approx(
        shardable_gib(cost, 1, ep=2) / 8, rel=1e-9)
    # ... which the old two-point slope (fractions 1 and 0.5, both past 1 / ep) missed.
    blind = 2 * (_peak(cost, 1, 8, 1.0, ep=2) - _peak(cost, 1, 8, 0.5, ep=2))
    assert blind < shardable_gib(cost, 1, ep=2) - cost.expert_optimizer_bytes_per_gpu / GIB
