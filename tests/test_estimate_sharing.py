"""What `estimate` shares between replicas and calls changes no answer."""

from __future__ import annotations

import dataclasses
import importlib

from planner.cluster import load_cluster
from planner.costing import estimate, megatron_plan
from planner.graph import load_model

est_module = importlib.import_module("planner.costing.estimate")


def test_renumbered_row_is_replace() -> None:
    # A replica's row is its twin's with the pipeline number changed: every field is copied
    # (a field added to StageEstimate later is copied too).
    model, cluster = load_model("gpt2-amp"), load_cluster("amp-het")
    plan = megatron_plan(model, cluster, tp=1, pp=4, dp=4, micro_batch=2, global_batch=32)
    row = estimate(model, cluster, plan).stages[0]
    assert est_module._renumbered(row, 7) == dataclasses.replace(row, pipeline=7)


def test_repeated_and_copied_plans_give_equal_estimates() -> None:
    # The rank -> node map and per-rank sums are kept per (ranks tuple, cluster) object and
    # simulations per input: a second call, a ZeRO copy sharing the ranks tuple, and a fresh
    # cluster object all agree with a first, cold call.
    model = load_model("gpt2-amp")
    cluster = load_cluster("amp-het")
    plan = megatron_plan(model, cluster, tp=1, pp=4, dp=4, micro_batch=2, global_batch=32)
    est_module._simulate.cache_clear()
    first = estimate(model, cluster, plan)
    assert estimate(model, cluster, plan) == first
    assert estimate(model, load_cluster("amp-het"), plan) == first
    copy = plan.model_copy(update={"zero": 1})
    assert copy.ranks is plan.ranks
    fresh = megatron_plan(model, cluster, tp=1, pp=4, dp=4, micro_batch=2, global_batch=32,
                          zero=1)
    assert estimate(model, cluster, copy) == estimate(model, load_cluster("amp-het"), fresh)
