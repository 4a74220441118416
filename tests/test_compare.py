"""`compare` rows: the numbers are estimate's, ranking, GPUs used, time and cost to train."""

from __future__ import annotations

import pytest

from planner.cluster import load_cluster
from planner.costing import estimate, megatron_plan
from planner.errors import HetplanError
from planner.report.compare import CompareRow, gpus_used, parse_tokens, plan_row, rank_rows
from tests.test_cost_fixtures import gpt_graph


@pytest.fixture(scope="module")
def graph():
    return gpt_graph(h=1024, layers=8, heads=16, seq=1024)


def test_row_equals_estimate(graph) -> None:
    cluster = load_cluster("lab-mixed")
    plan = megatron_plan(graph, cluster, tp=2, pp=2, dp=2, micro_batch=2, global_batch=32)
    est = estimate(graph, cluster, plan)
    row = plan_row("lab", cluster, plan, est, tokens=1e9)
    assert row.tokens_per_s == est.tokens_per_s
    assert row.iteration_time_s == est.iteration_time_s
    assert row.mfu == est.mfu
    assert row.usd_per_hour == est.usd_per_hour
    assert row.usd_per_million_tokens == est.usd_per_million_tokens
    # Megatron order over lab-mixed's nodes: tp 2 × dp 2 × pp 2 = the first 8 A100 ranks.
    assert row.gpus_used == {"A100-SXM4-80GB": 8, "V100-SXM2-32GB": 0, "T4": 0}
    assert row.gpus_available == {"A100-SXM4-80GB": 16, "V100-SXM2-32GB": 32, "T4": 8}
    assert row.train_time_s == pytest.approx(1e9 / est.tokens_per_s)
    assert row.train_cost_usd == pytest.approx(row.train_time_s / 3600 * est.usd_per_hour)
    # The plan uses 8 A100 at the file's 1.8 $/GPU-h.
    assert est.usd_per_hour == pytest.approx(8 * 1.8)
    # Renting all of lab-mixed: 16 A100 at 1.8 plus the catalog's V100 and T4 prices.
    v100 = cluster.groups[1].price_per_gpu_hour
    t4 = cluster.groups[2].price_per_gpu_hour
    assert row.cluster_usd_per_hour == pytest.approx(16 * 1.8 + 32 * v100 + 8 * t4)
    d = row.to_dict()
    assert {"cluster", "tokens_per_s", "usd_per_hour", "usd_per_million_tokens"} <= set(d)


def test_gpus_used_counts_every_pipeline(graph) -> None:
    cluster = load_cluster("lab-mixed")
    # tp 4 × dp 2 × pp 4 = 32 ranks: 16 A100 (stages 0-1) then 16 V100 (stages 2-3).
    plan = megatron_plan(graph, cluster, tp=4, pp=4, dp=2, micro_batch=1, global_batch=16)
    assert gpus_used(plan, cluster) == {"A100-SXM4-80GB": 16, "V100-SXM2-32GB": 16, "T4": 0}


def test_rank_rows_fastest_first_infeasible_last() -> None:
    rows = [CompareRow(cluster="slow", feasible=True, tokens_per_s=10.0),
            CompareRow(cluster="none", feasible=False, problem="needs 90 GiB"),
            CompareRow(cluster="fast", feasible=True, tokens_per_s=30.0),
            CompareRow(cluster="tie", feasible=True, tokens_per_s=10.0)]
    assert [r.cluster for r in rank_rows(rows)] == ["fast", "slow", "tie", "none"]


@pytest.mark.parametrize(("text", "tokens"), [("2e12", 2e12), ("300B", 3e11), ("1.5T", 1.5e12),
                                              ("800m", 8e8), ("1_000", 1000.0)])
def test_parse_tokens(text: str, tokens: float) -> None:
    assert parse_tokens(text) == pytest.approx(tokens)


@pytest.mark.parametrize("text", ["", "lots", "-5B", "0", "inf"])
def test_parse_tokens_refuses(text: str) -> None:
    with pytest.raises(HetplanError, match="positive token count"):
        parse_tokens(text)
