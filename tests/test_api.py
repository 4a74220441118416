"""The Python API of DESIGN.md: `planner.plan` and `planner.estimate` stay the functions."""

from __future__ import annotations

import importlib

import planner


def test_api_functions_survive_submodule_imports() -> None:
    # Importing every subpackage must not shadow the API names (it once did: planner.plan
    # was both a subpackage and the search function).
    for mod in ("planner.schema", "planner.costing.estimate", "planner.search.api",
                "planner.graph", "planner.cluster"):
        importlib.import_module(mod)
    assert callable(planner.plan) and callable(planner.estimate)
    model = planner.load_model("tiny")
    cluster = planner.load_cluster("amp-t4")
    result = planner.plan(model, cluster, global_batch_size=8, top_k=2)
    est = planner.estimate(model, cluster, result.best)
    # The plan's recorded prediction is the estimate's answer for that plan.
    assert result.best.predicted["iteration_time_s"] == est.iteration_time_s
    again = planner.Plan.from_dict(result.best.to_dict())
    assert again.to_json() == result.best.to_json()
