"""Which shapes the search tries, and a lower bound on each.

A shape is (micro-batch size, schedule, island, replicas, cp): an island is a set of the
cluster's GPU groups, and its d replicas each draw at most ⌊N_g / d⌋ GPUs of every group g in
it. A shape is listed only when those GPUs can hold the model state at all; its bound
(`search.bounds.layer_bound`) holds for any plan that contains such a class, so the engine
visits shapes by increasing bound and stops once the bound passes the best estimate found.
"""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING

from cost_models.memory import GIB
from planner.search.bounds import layer_bound
from planner.search.tables import ep_degrees

if TYPE_CHECKING:
    from planner.search.engine import Search

__all__ = ["LARGE_CLUSTER", "islands", "shapes_for"]

LARGE_CLUSTER = 256
"""Above this many GPUs, pipelines stay on one GPU group (heterogeneous DP across groups)."""


def islands(n_groups: int) -> list[tuple[int, ...]]:
    """Every non-empty set of GPU groups, by size then index (a fixed order)."""
    return [c for r in range(1, n_groups + 1) for c in itertools.combinations(range(n_groups), r)]


def shapes_for(search: Search, b: int, schedule: str) -> list[tuple]:
    """(lower bound, b, schedule, island, replicas, cp) for every shape whose GPUs can hold
    the model state; the bound holds for any plan that contains such a class."""
    opts = search.options(b)
    bound = layer_bound(opts)
    total_mb = search.gbs // b
    state = search.graph.params * search.state_bytes
    out = []
    for island in islands(len(search.cluster.groups)):
        if len(island) > 1 and sum(search.gpus) > LARGE_CLUSTER:
            search.skipped_mixed += 1
            continue
        cap = max(search.cluster.groups[g].gpu.memory_gib for g in island) * GIB
        # cp-blocks of cp pipelines share their micro-batches: up to total_mb · cp replicas.
        top = min(min(search.gpus[g] for g in island), total_mb * max(search.cps))
        for d in range(1, top + 1):
            budgets = {g: search.gpus[g] // d for g in island}
            cps = tuple(cp for cp in search.cps if d % cp == 0 and d // cp <= total_mb)
            if not search.small and not search.pays_per_gpu and d < top and all(
                    search.gpus[g] // (d + 1) == k for g, k in budgets.items()):
                # More replicas of the same pipelines: kept only in exhaustive mode (a
                # cp > 1 shape has no such twin: d + 1 replicas make other blocks).
                search.skipped_same_budget += 1
                cps = tuple(cp for cp in cps if cp > 1)
            if not cps:
                continue
            need = state - search.graph.params * search.opt_bytes * (1 - 1 / d)
            if d == 1:  # ZeRO-0: no slice master copy (hetplan's runtime)
                need -= search.graph.params * search.master_bytes
            ep = max(e for e in ep_degrees(search.graph) if d % e == 0)
            need -= search.experts * search.state_bytes * (1 - 1 / ep)
            if sum(budgets.values()) * cap < need:
                continue  # the pipeline's GPUs cannot hold the model state at all
            # A class that may join a heterogeneous plan is bounded with the other
            # groups' GPUs added; outside exhaustive mode only one-group classes join.
            joins = search.small or len(island) == 1
            offered = {g: k for g, k in enumerate(search.gpus) if g not in island and joins}
            offered.update({g: d * k for g, k in budgets.items()})
            lb = bound.iteration_s(total_mb, offered)
            # Context parallelism: d pipelines in blocks of cp (each block's micro-batches
            # at least one), bounded like the rest (layer_bound counts its cp GPUs).
            out += [(lb, b, schedule, island, d, cp) for cp in cps]
    return out
