"""The search's sharding post-pass (`planner/search/sharding.py`) and uneven shard fractions in
the cost model: the ZeRO stage is the estimate-best one (checked by enumerating the stages and
layouts independently), and a plan's `shard_fraction`s move its memory as the closed form says."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from planner.cluster.load import cluster_from_dict
from planner.costing import estimate
from planner.costing.megatron import megatron_plan
from planner.errors import SpecError
from planner.graph import ModelSpec, load_model, load_model_spec
from planner.schema import Plan
from planner.search import plan as search_plan
from planner.search.sharding import cephalo_fractions

# Eight 24 GB A10s, one per node (so TP stays 1), and a 9-layer model of Llama-3-70B's width:
# no pipeline depth leaves a stage small enough at ZeRO-0/1/2 (the deepest, 8 stages, holds two
# layers whole), while ZeRO-3 over all eight GPUs keeps 1/8 of the state plus two gathered layers.
_A10S = {"name": "a10-x8", "nodes": [{"name": "n", "count": 8, "gpu": "A10",
                                       "gpus_per_node": 1, "intra_node": "pcie",
                                       "inter_node_gbps": 200}]}


def _wide() -> Any:
    data = load_model_spec("tiny-llama").model_dump(mode="json")
    data.update(name="wide9", hidden_size=8192, num_layers=9, num_attention_heads=64,
                num_kv_heads=8, ffn_hidden_size=29696, vocab_size=256, seq_len=1024,
                training={"global_batch_size": 16, "precision": "bf16", "optimizer": "adam"})
    return load_model(ModelSpec.model_validate(data))


def _with_zero(p: Plan, zero: int) -> Plan:
    data = p.to_dict()
    data.pop("predicted", None)
    data["zero"], data["zero1"] = zero, zero >= 1
    return Plan.from_dict(data)


def test_model_that_fits_only_at_zero3_gets_a_zero3_plan() -> None:
    model, cluster = _wide(), cluster_from_dict(_A10S)
    # Brute force over every even layout and ZeRO stage: only ZeRO-3 fits.
    fits = []
    for pp, z, rc in itertools.product((1, 2, 4, 8), (0, 1, 2, 3), ("none", "full")):
        dp = 8 // pp
        if dp == 1 and z:
            continue
        est = estimate(model, cluster, megatron_plan(
            model, cluster, tp=1, pp=pp, dp=dp, micro_batch=1, global_batch=16, recompute=rc,
            zero1=z >= 1, zero=z))
        if est.feasible:
            fits.append((est.iteration_time_s, z, pp))
    assert fits and {z for _, z, _ in fits} == {3}
    result = search_plan(model, cluster, global_batch_size=16, micro_batch_sizes=(1,))
    assert result.best.zero == 3
    assert result.estimates[0].iteration_time_s <= min(fits)[0] + 1e-12
    # The chosen stage is the estimate-best for the chosen layout (stages enumerated here).
    times = {z: estimate(model, cluster, _with_zero(result.best, z)) for z in range(4)}
    best = min((e.iteration_time_s, z) for z, e in times.items() if e.feasible)
    assert best[1] == 3


def test_search_picks_the_fastest_zero_stage_on_a_small_instance() -> None:
    # tiny-llama on four A100s: every stage fits; the search's ZeRO stage must be the fastest
    # of the four for its layout (ties to the lower stage), enumerated independently here.
    cluster = cluster_from_dict({"name": "four", "nodes": [
        {"name": "n", "count": 1, "gpu": "A100-SXM4-80GB", "gpus_per_node": 4,
         "intra_node": "nvlink", "inter_node_gbps": 100}]})
    model = load_model("tiny-llama")
    result = search_plan(model, cluster, global_batch_size=8)
    for chosen in result.candidates:
        if len(chosen.pipelines) < 2:
            continue
        times = [(estimate(model, cluster, _with_zero(chosen, z)).iteration_time_s, z)
                 for z in range(4)]
        assert chosen.zero_stage == min(times)[1], times


def _hetero_plan(fractions: tuple[float, float] | None) -> Plan:
    # Two pipelines on two GPU types: an 80 GB A100 and a 16 GB V100, same layers. GPT-Neo
    # 2.7B cut to 8 of its 32 blocks (0.96 B parameters): hetplan's runtime keeps fp32
    # weights and gradients and each GEMM weight's autocast copy whole (10 B/param), which at
    # 32 blocks leaves the V100 no room for any share of the sharded state.
    spec = load_model_spec("gpt-neo-2.7b").model_dump(mode="json")
    spec["num_layers"] = 8
    pipes: list[dict[str, Any]] = [
        {"microbatches": 3, "stages": [{"layers": [0, 10], "gpu": "A100-SXM4-80GB", "tp": 1,
                                        "ranks": [0], "recompute": "full"}]},
        {"microbatches": 1, "stages": [{"layers": [0, 10], "gpu": "V100-SXM2-16GB", "tp": 1,
                                        "ranks": [1], "recompute": "full"}]}]
    if fractions is not None:
        for p, f in zip(pipes, fractions, strict=True):
            p["shard_fraction"] = f
    return Plan.from_dict({
        "model": spec, "global_batch_size": 4, "micro_batch_size": 1, "zero1": True,
        "pipelines": pipes, "ranks": [{"rank": 0, "node": "a", "local_rank": 0},
                                      {"rank": 1, "node": "v", "local_rank": 0}],
        "cluster": {"name": "av", "nodes": [
            {"name": "a", "count": 1, "gpu": "A100-SXM4-80GB", "gpus_per_node": 1,
             "intra_node": "nvlink", "inter_node_gbps": 100},
            {"name": "v", "count": 1, "gpu": "V100-SXM2-16GB", "gpus_per_node": 1,
             "intra_node": "nvlink", "inter_node_gbps": 100}]}})


def test_shard_fractions_move_state_as_the_closed_form_says() -> None:
    even = estimate(None, None, _hetero_plan(None))
    uneven = estimate(None, None, _hetero_plan((0.8, 0.2)))
    for a, b in zip(even.stages, uneven.stages, strict=True):
        f = 0.8 if a.pipeline == 0 else 0.2
        # Optimizer state: the whole state (2 × the even half) times the fraction; the peak
        # moves by the same amount (ZeRO-1 shards nothing else).
        assert b.optimizer_gib == pytest.approx(2 * a.optimizer_gib * f, rel=1e-12)
        assert b.peak_memory_gib - a.peak_memory_gib == pytest.approx(
            b.optimizer_gib - a.optimizer_gib, rel=1e-9)
    # Cephalo's split from the even estimate: each GPU then fills the same part of the memory
    # it had free beside its unsharded state, and the V100 (even: over its 16 GiB) fits.
    assert not even.feasible
    fractions = cephalo_fractions(_hetero_plan(None), even)
    assert fractions is not None and fractions[0] > 0.5
    split = estimate(None, None, _hetero_plan(fractions))
    used = [(b.peak_memory_gib - a.peak_memory_gib + a.sharded_gib / 2)
            / (a.memory_capacity_gib - a.peak_memory_gib + a.sharded_gib / 2)
            for a, b in zip(even.stages, split.stages, strict=True)]
    assert split.feasible and used[0] == pytest.approx(used[1], rel=1e-4)


def test_bad_shard_fractions_are_one_field_error() -> None:
    with pytest.raises(SpecError, match="must sum to 1"):
        _hetero_plan((0.7, 0.2))
    data = _hetero_plan((0.5, 0.5)).to_dict()
    del data["pipelines"][1]["shard_fraction"]
    with pytest.raises(SpecError, match="pipelines.1: shard_fraction missing"):
        Plan.from_dict(data)


def test_zero2_and_3_are_offered_only_where_they_run_as_priced() -> None:
    # FSDP2 runs ZeRO-2/3 over identical replicas as priced. Over replicas of different shapes
    # the runtime's ZeRO-2 slices reduce gradients once per step, so the peak still holds them
    # whole (runtime/zero.py): estimate's ZeRO-2 peak would be optimistic, and it is not offered.
    from planner.search.sharding import sharding_variants

    same = _hetero_plan(None)  # one shape on both GPUs: FSDP2's even shards run ZeRO-3
    assert [p.zero_stage for p in sharding_variants(same)] == [1, 0, 2, 3]
    data = same.to_dict()
    v100 = data["pipelines"][1]["stages"][0]
    data["pipelines"][1]["stages"] = [{**v100, "layers": [0, 5], "ranks": [1]},
                                      {**v100, "layers": [5, 10], "ranks": [2]}]
    data["ranks"].append({"rank": 2, "node": "v", "local_rank": 1})
    data["cluster"]["nodes"][1]["gpus_per_node"] = 2
    hetero = Plan.from_dict(data)
    assert [p.zero_stage for p in sharding_variants(hetero)] == [1, 0]
    # A stack that shards by its own rules (torchtitan's FSDP2) is offered every stage.
    assert [p.zero_stage for p in sharding_variants(hetero, fsdp_only=False)] == [1, 0, 2, 3]
    for p, f in zip(data["pipelines"], (0.8, 0.2), strict=True):
        p["shard_fraction"] = f
    assert [p.zero_stage for p in sharding_variants(Plan.from_dict(data))] == [1, 0, 1]
