"""The sharding post-pass skips the ZeRO stages that cannot win (`sharding.best_sharding`) and
prices the rest on a shared layout (`estimate.sharding_estimator`). Both are checked here
against the plain way on every plan the search considers on small instances (every ZeRO stage
fitting, only ZeRO-3 fitting, heterogeneous replicas with Cephalo's split, expert
parallelism, a ZeRO-1-only framework): the same variant wins, with the estimate `estimate`
itself gives it."""

from __future__ import annotations

from typing import Any

import pytest

import planner.search.api as api
from planner.cluster.load import cluster_from_dict
from planner.costing import estimate
from planner.costing.framework import DEFAULT_FRAMEWORK, FRAMEWORKS
from planner.graph import load_model
from planner.search import plan as search_plan
from planner.search.sharding import best_sharding
from tests.test_search_exact import make_cluster, scale_memory, tiny_graph
from tests.test_search_sharding import _A10S, _wide

_FOUR_A100 = {"name": "four", "nodes": [
    {"name": "n", "count": 1, "gpu": "A100-SXM4-80GB", "gpus_per_node": 4,
     "intra_node": "nvlink", "inter_node_gbps": 100}]}


def _hetero() -> tuple[Any, Any]:
    graph = tiny_graph(6)
    cluster = make_cluster([("A100-SXM4-80GB", 2, 0.0), ("V100-SXM2-16GB", 2, 0.0),
                            ("T4", 2, 0.0)])
    return graph, scale_memory(cluster, graph, [0.9, 0.45, 0.3])


_CASES = {
    "every stage fits": (lambda: (load_model("tiny-llama"), cluster_from_dict(_FOUR_A100)),
                         8, None, DEFAULT_FRAMEWORK),
    "only zero-3 fits": (lambda: (_wide(), cluster_from_dict(_A10S)), 16, (1,),
                         DEFAULT_FRAMEWORK),
    "heterogeneous": (_hetero, 8, None, DEFAULT_FRAMEWORK),
    "experts": (lambda: (load_model("tiny-moe"), cluster_from_dict(_FOUR_A100)), 8, None,
                DEFAULT_FRAMEWORK),
    "zero-1 framework": (lambda: (load_model("tiny-llama"), cluster_from_dict(_FOUR_A100)),
                         8, None, FRAMEWORKS["megatron"]),
    # torchtitan shards by its own rules: every stage over replicas of different shapes.
    "heterogeneous torchtitan": (_hetero, 8, None, FRAMEWORKS["torchtitan"]),
}


@pytest.mark.parametrize("case", list(_CASES))
def test_skipped_stages_never_hold_the_best_variant(case: str,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    make, gbs, sizes, framework = _CASES[case]
    model, cluster = make()
    priced = {"fast": 0, "all": 0}

    def both(plan: Any, cost: Any, max_zero: int = 3, fsdp_only: bool = True) -> Any:
        def counted(key: str) -> Any:
            def judge(q: Any) -> Any:
                priced[key] += 1
                return cost(q)
            return judge

        fast = best_sharding(plan, counted("fast"), max_zero, fsdp_only=fsdp_only)
        full = best_sharding(plan, counted("all"), max_zero, exhaustive=True,
                             fsdp_only=fsdp_only)
        assert (fast is None) == (full is None)
        if fast is not None and full is not None:
            assert fast[0] == full[0] and fast[1] == full[1]
            # The shared-layout pricing is `estimate` itself, float for float.
            assert fast[1] == estimate(model, cluster, fast[0], framework=framework)
        return fast

    monkeypatch.setattr(api, "best_sharding", both)
    search_plan(model, cluster, global_batch_size=gbs, micro_batch_sizes=sizes,
                framework=framework)
    assert priced["fast"] > 0
    if case in ("every stage fits", "heterogeneous"):
        assert priced["fast"] < priced["all"]  # the instance exercises a skip


def test_a_plan_of_another_layout_gets_a_full_estimate() -> None:
    from planner.costing.estimate import sharding_estimator

    model, cluster = load_model("tiny-llama"), cluster_from_dict(_FOUR_A100)
    result = search_plan(model, cluster, global_batch_size=8)
    a, b = result.candidates[0], result.candidates[-1]
    judge = sharding_estimator(model, cluster, a)
    assert judge(b) == estimate(model, cluster, b)
    assert judge(a) == estimate(model, cluster, a)


