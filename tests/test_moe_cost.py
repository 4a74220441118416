"""Expert parallelism in the cost model: memory divided by ep, all-to-all over the real link,
capacity factor, and the plan's ep-block rules."""

from __future__ import annotations

import json
import math

import pytest

import planner
from cost_models.catalog import get_gpu
from cost_models.comm import Link
from cost_models.profiles import ProfileSet
from planner.cluster import load_cluster
from planner.costing import estimate, megatron_plan
from planner.costing.stage_cost import stage_cost
from planner.errors import HetplanError, SpecError
from planner.schema import Plan
from tests.cli import run_cli

A100 = get_gpu("A100-SXM4-80GB")
NONE = ProfileSet()


def _stage(ep: int, link: Link | None = None, cf: float = 1.0, tp: int = 1):
    graph = planner.load_model("mixtral-8x7b").graph
    return graph, stage_cost(graph, 1, 2, A100, tp, 1, "none", precision="bf16", ep=ep,
                             ep_link=link, capacity_factor=cf, profiles=NONE)


@pytest.mark.parametrize("tp", [1, 2])
def test_expert_weights_divide_by_ep(tp: int) -> None:
    graph, one = _stage(1, tp=tp)
    _, eight = _stage(8, Link(100.0, 0.0), tp=tp)
    block = graph.layers[1]
    assert one.params_per_gpu - eight.params_per_gpu == round(
        block.expert_params * (1 - 1 / 8) / tp)


def test_all_to_all_is_priced_on_the_link_closed_form() -> None:
    # Against ep 4 on a near-free link, not ep 1: at ep 4 each expert's GEMMs also run on 4×
    # the rows (test_moe_expert_gemm_rows.py), which ep 1 would add to the difference.
    link = Link(gb_per_s=100.0, latency_s=1e-5)
    free = Link(gb_per_s=1e9, latency_s=0.0)
    graph, four = _stage(4, link)
    _, four_free = _stage(4, free)
    nbytes = graph.layers[1].a2a_bytes  # one sequence, bf16, top-2 copies
    a2a = 3 * link.latency_s + 3 / 4 * nbytes / link.bytes_per_s
    a2a_free = 3 / 4 * nbytes / free.bytes_per_s
    assert four.fwd_s - four_free.fwd_s == pytest.approx(2 * (a2a - a2a_free), rel=1e-9)
    assert four.bwd_s - four_free.bwd_s == pytest.approx(2 * (a2a - a2a_free), rel=1e-9)


def test_capacity_factor_charges_the_busiest_expert() -> None:
    # Only across GPUs: at ep 1 every GPU runs all experts on all s·k routed copies, however
    # they are routed (dropless), so the capacity factor changes nothing there (before, it
    # charged ep 1 the busiest expert's extra GEMMs too); at ep 4 of mixtral's 8 experts the
    # busiest GPU carries (1.25 + 6.75/7)/2 = 1.107 × its share; closed forms in
    # test_moe_a2a_bytes.
    link = Link(gb_per_s=100.0, latency_s=1e-5)
    _, even = _stage(4, link, cf=1.0)
    _, skew = _stage(4, link, cf=1.25)
    assert skew.fwd_s > even.fwd_s and skew.bwd_s > even.bwd_s
    assert _stage(1, cf=1.25)[1] == _stage(1, cf=1.0)[1]


def test_ep_across_nodes_costs_more_than_inside_a_node() -> None:
    model = planner.load_model("mixtral-8x7b")
    cluster = load_cluster("dgx-a100")
    times = {}
    for tp in (1, 2):  # ep 8 × tp 1 fills one node; × tp 2 spans two
        plan = megatron_plan(model, cluster, tp=tp, pp=4, dp=8, ep=8, micro_batch=1,
                             global_batch=64, recompute="full")
        est = estimate(model, cluster, plan, profiles=NONE)
        times[tp] = est.stages[0].fwd_ms
        plan1 = megatron_plan(model, cluster, tp=tp, pp=4, dp=8, ep=1, micro_batch=1,
                              global_batch=64, recompute="full")
        base = estimate(model, cluster, plan1, profiles=NONE).stages[0].fwd_ms
        times[tp] -= base
    # Crossing the NIC makes the all-to-all slower (hetplan's runtime sends the same bytes
    # per TP rank at tp 2; Megatron's dispatcher would halve them).
    assert times[2] > times[1] > 0


def test_cli_ep_lowers_memory_and_states_the_assumption(capsys) -> None:
    args = ["estimate", "mixtral-8x7b", "dgx-a100", "--tp", "2", "--pp", "4", "--dp", "8",
            "--recompute", "full", "--json"]
    code, out1, _ = run_cli([*args, "--ep", "1"], capsys)
    code8, out8, _ = run_cli([*args, "--ep", "8"], capsys)
    assert (code, code8) == (3, 0)  # exit 3: the plan does not fit (README, exit statuses)
    one, eight = json.loads(out1), json.loads(out8)
    assert not one["feasible"] and eight["feasible"]
    assert max(s["peak_memory_gib"] for s in eight["stages"]) < min(
        s["peak_memory_gib"] for s in one["stages"])
    assert eight["moe"]["capacity_factor"] == 1.25
    code, _, err = run_cli([*args[:-1], "--ep", "3"], capsys)
    assert code != 0 and "--ep 3" in err and len(err.strip().splitlines()) == 1


def test_ep_on_a_dense_model_is_refused() -> None:
    with pytest.raises(HetplanError, match="no experts"):
        megatron_plan(planner.load_model("tiny-llama"), load_cluster("dgx-a100"), tp=1, pp=1,
                      dp=2, ep=2, micro_batch=1, global_batch=2)


def test_ep_block_with_different_microbatches_is_refused() -> None:
    model = planner.load_model("tiny-moe")
    plan = megatron_plan(model, load_cluster("dgx-a100"), tp=1, pp=1, dp=2, ep=2,
                         micro_batch=1, global_batch=4)
    data = plan.to_dict()
    data["pipelines"][0]["microbatches"] = 3
    data["pipelines"][1]["microbatches"] = 1
    with pytest.raises(SpecError, match="ep 2 groups it with pipeline"):
        Plan.from_dict(data)


def test_capacity_factor_above_experts_over_top_k_is_refused(capsys) -> None:
    # Mixtral routes each token to 2 of 8 experts: the busiest expert can receive every token
    # once, 8 / 2 = 4× the mean load. 1e308 once priced an infinite, NaN iteration with exit 0.
    args = ["estimate", "mixtral-8x7b", "dgx-a100", "--tp", "2", "--pp", "4", "--dp", "8",
            "--ep", "8", "--recompute", "full", "--json", "--capacity-factor"]
    for cf in ("4.01", "1e308"):
        code, _, err = run_cli([*args, cf], capsys)
        assert code == 2 and "at most 4 (num_experts / top-k" in err
        assert len(err.strip().splitlines()) == 1
    code, out, err = run_cli([*args, "4"], capsys)
    assert code == 0, err
    assert math.isfinite(json.loads(out)["iteration_time_s"])
