"""Hand-written plans for the runtime tests (one CPU node unless a test says otherwise)."""

from __future__ import annotations

from typing import Any

from planner.schema import Plan

__all__ = ["make_plan", "stage"]


def stage(start: int, end: int, ranks: list[int], recompute: str = "none") -> dict[str, Any]:
    return {"layers": [start, end], "gpu": "cpu", "tp": len(ranks), "ranks": ranks,
            "recompute": recompute}


def make_plan(pipelines: list[dict[str, Any]], *, mbs: int = 1, schedule: str = "1f1b",
              virtual: int = 1, model: dict[str, Any] | None = None,
              sequence_parallel: bool = False, zero1: bool = False,
              nodes: dict[int, tuple[str, int]] | None = None) -> Plan:
    """A plan over the given pipelines; ranks on node `cpu` at local rank = rank unless
    `nodes` maps rank → (node, local rank)."""
    ranks = sorted({r for p in pipelines for s in p["stages"] for r in s["ranks"]})
    table = [{"rank": r, "node": (nodes or {}).get(r, ("cpu", r))[0],
              "local_rank": (nodes or {}).get(r, ("cpu", r))[1]} for r in ranks]
    data: dict[str, Any] = {
        "global_batch_size": sum(p["microbatches"] for p in pipelines) * mbs,
        "micro_batch_size": mbs, "schedule": schedule, "virtual_stages": virtual,
        "sequence_parallel": sequence_parallel, "zero1": zero1,
        "pipelines": pipelines, "ranks": table}
    if model is not None:
        data["model"] = model
        data["cluster"] = {"name": "local-cpu"}
    return Plan.from_dict(data)


def priced_on_one_node(plan: Plan, gpu: str = "A100-SXM4-80GB") -> tuple[dict[str, Any], Any]:
    """(the plan's data with every stage on `gpu`, its bf16 `estimate` on one 8-GPU node): how
    a runtime test prices the plan it runs on CPU ranks."""
    from planner.cluster.load import cluster_from_dict
    from planner.costing import estimate

    data = plan.to_dict()
    for pipe in data["pipelines"]:
        for st in pipe["stages"]:
            st["gpu"] = gpu
    cluster = cluster_from_dict({"name": "one-node", "nodes": [
        {"name": "cpu", "count": 1, "gpu": gpu, "gpus_per_node": 8, "intra_node": "nvlink",
         "inter_node_gbps": 100}]})
    return data, estimate(None, cluster, Plan.from_dict(data), precision="bf16")
