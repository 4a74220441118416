"""The search's space: schedule filters hold for every source of plans, GPipe is in the default
space, and the certificate (lower bound, gap, exact) is consistent with the plan returned."""

from __future__ import annotations

import pytest

from planner.search import plan
from tests.test_search_exact import GPUS, make_cluster, scale_memory, tiny_graph


def _single_type():
    graph = tiny_graph(4)
    return graph, scale_memory(make_cluster([(GPUS[1], 4, 0)]), graph, [0.6])


@pytest.mark.parametrize("schedule", ["gpipe", "interleaved", "1f1b"])
def test_schedule_filter_holds_on_single_type_cluster(schedule):
    """Megatron seeds (1F1B layouts) used to leak into a GPipe-only search."""
    graph, cluster = _single_type()
    result = plan(graph, cluster, global_batch_size=8, schedules=[schedule], top_k=10)
    assert {p.schedule for p in result.candidates} == {schedule}


def test_default_space_is_at_least_as_good_as_each_schedule():
    graph = tiny_graph(5)
    cluster = scale_memory(make_cluster([(GPUS[0], 2, 0), (GPUS[2], 2, 0)]), graph, [0.5, 0.4])
    best = plan(graph, cluster, global_batch_size=8).estimates[0].iteration_time_s
    for schedule in ("1f1b", "gpipe", "interleaved"):
        alone = plan(graph, cluster, global_batch_size=8, schedules=[schedule])
        assert best <= alone.estimates[0].iteration_time_s * (1 + 1e-12), schedule


def test_certificate_is_consistent():
    graph, cluster = _single_type()
    for objective in ("throughput", "cost"):
        result = plan(graph, cluster, global_batch_size=8, objective=objective)
        est, st = result.estimates[0], result.stats
        found = est.iteration_time_s if objective == "throughput" else est.usd_per_million_tokens
        assert st.lower_bound is not None and 0 < st.lower_bound <= found
        assert st.gap_pct == pytest.approx(100 * (found - st.lower_bound) / found)
        assert st.exact == (st.gap_pct < 1e-7)
        assert st.exact or st.notes  # a gap always names the reductions


def test_cost_objective_and_budget_are_searched():
    """The cost objective may use fewer GPUs; it never costs more per token than the fastest
    plan, and a budget holds for every candidate."""
    graph = tiny_graph(4)
    cluster = scale_memory(make_cluster([(GPUS[0], 2, 0), (GPUS[1], 2, 0)]), graph, [1.2, 1.2])
    fast = plan(graph, cluster, global_batch_size=8)
    cheap = plan(graph, cluster, global_batch_size=8, objective="cost")
    usd = cheap.estimates[0].usd_per_million_tokens
    assert usd <= fast.estimates[0].usd_per_million_tokens * (1 + 1e-12)
    assert all(usd <= e.usd_per_million_tokens * (1 + 1e-12) for e in fast.estimates)
    budget = fast.estimates[0].usd_per_hour / 2
    capped = plan(graph, cluster, global_batch_size=8, budget_usd_per_hour=budget, top_k=10)
    assert all(e.usd_per_hour <= budget + 1e-9 for e in capped.estimates)
