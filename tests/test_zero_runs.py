"""`estimate` prices each stage at the ZeRO stage hetplan's runtime runs there
(planner/costing/zero_runs.py): FSDP2's even shards where the runtime shards with FSDP2, ZeRO-1's
whole gradients and weights on the runtime's own slices (replicas of different shapes, uneven
fractions, experts, context parallelism, tied weights)."""

from __future__ import annotations

import dataclasses

import pytest

from planner.costing.framework import DEFAULT_FRAMEWORK, TORCHTITAN
from planner.costing.resolve import resolve_model
from planner.costing.zero_runs import priced_zero_stages
from planner.graph.load_spec import load_model_spec
from planner.schema import Plan
from tests.test_runtime_plans import priced_on_one_node, stage
from tests.test_runtime_zero2 import _MIXED, _plan

_SAME = [
    {"microbatches": 2, "stages": [stage(0, 3, [0, 1]), stage(3, 6, [2, 3])]},
    {"microbatches": 2, "stages": [stage(0, 3, [4, 5]), stage(3, 6, [6, 7])]},
]


def _llama(pipes, zero: int, fractions=None) -> Plan:
    return _plan(pipes, zero, fractions, model=load_model_spec("tiny-llama").model_dump(
        mode="json"))


def _memory(plan: Plan):
    return [(r.pipeline, r.stage, r.memory) for r in priced_on_one_node(plan)[1].stages]


def test_mixed_replicas_at_zero_2_and_3_are_priced_as_zero_1() -> None:
    """Replicas of different shapes run on the slices: their peak is ZeRO-1's, stage by stage
    and part by part, at ZeRO 2 and 3 alike (the runtime runs a ZeRO-3 plan there as ZeRO-2
    on slices, weights whole)."""
    one = _memory(_llama(_MIXED, 1))
    for zero in (2, 3):
        plan = _llama(_MIXED, zero)
        assert priced_zero_stages(plan, plan_graph(plan), DEFAULT_FRAMEWORK) == ((1, 1), (1, 1))
        assert _memory(plan) == one


def test_identical_replicas_keep_their_zero_stage() -> None:
    """Identical replicas run FSDP2: ZeRO-2 sheds gradients, ZeRO-3 shards weights too."""
    levels = {z: _memory(_llama(_SAME, z)) for z in (1, 2, 3)}
    for (_, _, m1), (_, _, m2), (_, _, m3) in zip(levels[1], levels[2], levels[3], strict=True):
        # ZeRO-1 on the slices holds fp32 gradients whole (4 B/param) and fp32 weights plus
        # one bf16 copy of each GEMM weight; FSDP2's ZeRO-2 holds half the fp32 weights (DP 2)
        # and every weight gathered through the step: GEMM weights in bf16, the token table
        # and norms in fp32 (runtime/fsdp.py).
        params_gib = m1.gradients_gib / 4
        gemm_gib = (m1.weights_gib - 4 * params_gib) / 2
        assert m2.gradients_gib < m1.gradients_gib
        assert m2.weights_gib == pytest.approx(
            4 * params_gib / 2 + 2 * gemm_gib + 4 * (params_gib - gemm_gib), rel=1e-9)
        # ZeRO-3: a shard of the weights plus the largest layer gathered whole (tiny layers:
        # more than ZeRO-2's whole weights here), so only that it is priced apart is checked.
        assert m3.weights_gib != m2.weights_gib
    plan = _llama(_SAME, 3)
    assert priced_zero_stages(plan, plan_graph(plan), DEFAULT_FRAMEWORK) == ((3, 3), (3, 3))


def test_uneven_fractions_and_tied_weights_leave_fsdp() -> None:
    plan = _llama(_SAME, 2, (0.75, 0.25))  # Cephalo shards: the slices
    assert priced_zero_stages(plan, plan_graph(plan), DEFAULT_FRAMEWORK) == ((1, 1), (1, 1))
    gpt = _plan(_SAME, 3, model=load_model_spec("tiny").model_dump(mode="json"))
    graph = plan_graph(gpt)
    assert any(layer.tied_params for layer in graph.layers)
    # The stages holding the tied embedding and head run on the slices.
    assert priced_zero_stages(gpt, graph, DEFAULT_FRAMEWORK) == ((1, 1), (1, 1))


def test_stacks_that_shard_everything_keep_the_plan_stage() -> None:
    plan = _llama(_MIXED, 3)
    assert priced_zero_stages(plan, plan_graph(plan), TORCHTITAN) == ((3, 3), (3, 3))
    custom = dataclasses.replace(DEFAULT_FRAMEWORK, zero_beyond_fsdp_runs_as_zero1=False)
    assert priced_zero_stages(plan, plan_graph(plan), custom) == ((3, 3), (3, 3))


def plan_graph(plan: Plan):
    return resolve_model(None, plan)[0]


def test_estimate_cli_says_which_stages_are_priced_at_zero_1(tmp_path, capsys) -> None:
    import json

    import yaml

    from tests.cli import run_cli

    data, _ = priced_on_one_node(_llama(_MIXED, 3))
    (tmp_path / "plan.json").write_text(json.dumps(data))
    (tmp_path / "one-node.yaml").write_text(yaml.safe_dump({"name": "one-node", "nodes": [
        {"name": "cpu", "count": 1, "gpu": "A100-SXM4-80GB", "gpus_per_node": 8,
         "intra_node": "nvlink", "inter_node_gbps": 100}]}))
    args = ["estimate", str(tmp_path / "plan.json"), str(tmp_path / "one-node.yaml")]
    code, out, _ = run_cli(args, capsys)
    assert code == 0
    assert "zero 3: 4 of 4 stages priced at ZeRO-1's memory" in " ".join(out.split())
    code, out, _ = run_cli([*args, "--json"], capsys)
    assert code == 0 and json.loads(out)["zero_priced"] == [[1, 1], [1, 1]]


def test_a_mesh_out_of_rank_order_stays_off_fsdp() -> None:
    """TP groups (0, 5) and (1, 4): their second column runs 5 then 4, which DeviceMesh cannot
    take (`runtime/fsdp.py` fsdp_mesh returns None and those layers stay on the slices)."""
    pipes = [
        {"microbatches": 2, "stages": [stage(0, 3, [0, 5]), stage(3, 6, [2, 3])]},
        {"microbatches": 2, "stages": [stage(0, 3, [1, 4]), stage(3, 6, [6, 7])]},
    ]
    plan = _llama(pipes, 3)
    assert priced_zero_stages(plan, plan_graph(plan), DEFAULT_FRAMEWORK) == ((1, 3), (1, 3))


def test_stages_on_the_slices_move_zero_1_bytes_in_a_mixed_plan() -> None:
    """Stage 0 off FSDP2 (mesh out of rank order), stage 1 on it at ZeRO-3: stage 0's exposed
    reduction is ZeRO-1's, computed apart from `estimate` by `grad_sync_s` on the ZeRO-1 plan
    (ZeRO-3's bytes, m·(4 + 2·2)/2 a parameter at m = 2 micro-batches, would be 8/3 of it)."""
    import importlib

    from planner.cluster.load import cluster_from_dict
    from planner.costing import estimate
    from planner.costing.grad_sync import grad_sync_s

    pipes = [
        {"microbatches": 2, "stages": [stage(0, 3, [0, 5]), stage(3, 6, [2, 3])]},
        {"microbatches": 2, "stages": [stage(0, 3, [1, 4]), stage(3, 6, [6, 7])]},
    ]
    data, _ = priced_on_one_node(_llama(pipes, 3))
    cluster = cluster_from_dict({"name": "one-node", "nodes": [
        {"name": "cpu", "count": 1, "gpu": "A100-SXM4-80GB", "gpus_per_node": 8,
         "intra_node": "nvlink", "inter_node_gbps": 100}]})
    mixed = Plan.from_dict(data)
    one = mixed.model_copy(update={"zero": 1})
    est_mod = importlib.import_module("planner.costing.estimate")  # the module, not the function
    layout = est_mod._layout(None, cluster, one, None, "bf16", DEFAULT_FRAMEWORK, 1.0)
    dp, tied = grad_sync_s(layout.graph, one, layout.devices, layout.used_gpus,
                           layout.latency_s, DEFAULT_FRAMEWORK)
    expected = max(dp[p][0] + tied[p][0] for p in range(2))
    got = estimate(None, cluster, mixed, precision="bf16").dp_sync_s
    assert expected > 0 and abs(got - expected) <= 1e-12 * expected


def test_tied_weights_reduce_at_zero_1_bytes_in_a_mixed_plan() -> None:
    """gpt2-amp (tied embedding and head) on amp-het, PP 4 × DP 4 at ZeRO-3: the blocks' stages
    run FSDP2, the tied ends the slices; the tied all-reduce moves ZeRO-1's bytes once a step
    (the ZeRO-1 plan's tied sync, not ZeRO-3's per micro-batch)."""
    from planner.cluster import load_cluster
    from planner.costing import estimate, megatron_plan
    from planner.graph import load_model

    model, cluster = load_model("gpt2-amp"), load_cluster("amp-het")
    plan = megatron_plan(model, cluster, tp=1, pp=4, dp=4, micro_batch=2, global_batch=32,
                         zero=3)
    assert priced_zero_stages(plan, model, DEFAULT_FRAMEWORK)[0] == (1, 3, 3, 1)
    one = estimate(model, cluster, plan.model_copy(update={"zero": 1}))
    assert one.tied_sync_s > 0
    assert estimate(model, cluster, plan).tied_sync_s == one.tied_sync_s


def test_local_ranks_torchrun_cannot_number_still_estimate() -> None:
    """A plan whose local ranks are not 0..k-1 on a node (launch refuses it; estimate and
    dryrun do not) prices at ZeRO-2 as at ZeRO-1: no rank order to check, no error."""
    from planner.cluster import load_cluster
    from planner.costing import estimate, megatron_plan
    from planner.graph import load_model

    model, cluster = load_model("tiny-llama"), load_cluster("dgx-a100")
    for zero in (1, 2):
        data = megatron_plan(model, cluster, tp=1, pp=2, dp=2, micro_batch=1, global_batch=8,
                             zero=zero).to_dict()
        for r in data["ranks"]:
            r["local_rank"] += 4
        assert estimate(model, cluster, Plan.from_dict(data)).iteration_time_s > 0
