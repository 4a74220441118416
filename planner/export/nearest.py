"""The nearest plan a uniform framework can express: the best Megatron-style layout.

For each GPU type of the plan's cluster, every layout over all GPUs of that type is costed by
`estimate` — TP a power of two within a node, PP dividing the rest, even layer splits, each
micro-batch size of 1, 2, 4, 8 that divides the batch, each recompute mode, the distributed
optimizer when DP > 1 — and the fastest feasible one is returned. It is the best of that grid
under the cost model, not a proof that no uniform plan is faster.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from planner.cluster import Cluster, cluster_from_dict
from planner.costing import Estimate, Framework, estimate, megatron_plan
from planner.costing.resolve import resolve_cluster, resolve_model
from planner.errors import HetplanError
from planner.graph.layers import LayerGraph
from planner.schema import Plan

__all__ = ["nearest_uniform"]

_MICRO_BATCHES = (1, 2, 4, 8)
_RECOMPUTE = ("none", "selective", "full")


def _sub_clusters(cluster: Cluster) -> Iterator[Cluster]:
    """One cluster per GPU type: the groups of that type, in file order."""
    for gpu in cluster.gpu_counts():
        nodes = [n for n, g in zip(cluster.spec["nodes"], cluster.groups, strict=True)
                 if g.gpu.name == gpu]
        yield cluster_from_dict({**cluster.spec, "nodes": nodes}, f"{cluster.name} ({gpu})")


def _layouts(graph: LayerGraph, cluster: Cluster, gbs: int) -> Iterator[Plan]:
    world = cluster.world_size
    per_node = min(g.gpus_per_node for g in cluster.groups)
    blocks = len(graph.layers) - 2
    tp = 1
    while tp <= per_node and per_node % tp == 0:
        rest = world // tp
        for pp in (p for p in range(1, min(rest, blocks) + 1) if rest % p == 0):
            dp = rest // pp
            for b in _MICRO_BATCHES:
                if gbs % (dp * b) or gbs // (dp * b) < pp:
                    continue
                for rc in _RECOMPUTE:
                    try:
                        yield megatron_plan(graph, cluster, tp=tp, pp=pp, dp=dp, micro_batch=b,
                                            global_batch=gbs, recompute=rc, zero1=dp > 1)
                    except HetplanError:
                        break
        tp *= 2


def nearest_uniform(plan: Plan, framework: Framework) -> tuple[Plan, Estimate] | None:
    """The fastest feasible uniform layout on one GPU type of the plan's cluster (None: none
    fits), priced for `framework`; the returned plan embeds the model and the sub-cluster."""
    graph, _ = resolve_model(None, plan)
    cluster = resolve_cluster(None, plan)
    best: tuple[tuple[Any, ...], Plan, Estimate] | None = None
    for sub in _sub_clusters(cluster):
        for p in _layouts(graph, sub, plan.global_batch_size):
            est = estimate(graph, sub, p, framework=framework)
            if not est.feasible:
                continue
            key = (est.iteration_time_s, repr(p.to_dict()))
            if best is None or key < best[0]:
                full = Plan.model_validate({**p.to_dict(), "model": plan.model,
                                            "cluster": sub.spec})
                best = (key, full, est)
    return None if best is None else (best[1], best[2])
