"""Why no plan fits: the numbers behind an InfeasibleError.

Two lower bounds on the memory every plan needs on some GPU: (1) the heaviest single layer,
alone on a stage, on the most generous GPU option (largest TP, full recompute, the smallest
micro-batch, one micro-batch in flight, optimizer state sharded over as many replicas as the
cluster could hold); (2) the model state (weights, gradients, optimizer) spread evenly over all
GPUs. Whichever is larger is what the smallest split reaches, at best.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from cost_models.memory import FRAMEWORK_OVERHEAD_GIB, GIB, state_bytes_per_param
from planner.cluster.model import Cluster
from planner.errors import InfeasibleError
from planner.graph.layers import LayerGraph

__all__ = ["explain_infeasible"]


def explain_infeasible(graph: LayerGraph, cluster: Cluster, search: Any, sizes: Sequence[int],
                       budget: float | None) -> InfeasibleError:
    b = min(sizes)
    opts = search.options(b)
    biggest = max(g.gpu.memory_gib for g in cluster.groups)
    best_layer = 0.0
    worst_name = graph.layers[0].name
    for idx, layer in enumerate(graph.layers):
        need = min(float(c.memory_gib(2, 1, cluster.world_size)[idx, idx + 1]) for c in opts)
        if need > best_layer:
            best_layer, worst_name = need, layer.name
    per_param = state_bytes_per_param(search.precision)
    state = graph.params * per_param / cluster.world_size / GIB + FRAMEWORK_OVERHEAD_GIB
    floor_gib = max(best_layer, state)
    if floor_gib > biggest:
        why = (f"layer {worst_name} alone needs {best_layer:.1f} GiB" if best_layer >= state
               else f"the model state ({graph.params / 1e9:.2f} B parameters × {per_param:.0f} B) "
                    f"over all {cluster.world_size} GPUs needs {state:.1f} GiB each")
        return InfeasibleError(
            f"no plan fits in memory: the smallest memory per GPU any split reaches is "
            f"{floor_gib:.1f} GiB ({why}); the largest GPU has {biggest:.1f} GiB; "
            "add GPUs, use larger-memory GPUs, or a smaller model")
    if budget is not None:
        prices = [g.price_per_gpu_hour for g in cluster.groups if g.price_per_gpu_hour]
        cheapest = min(prices) if prices else None
        extra = (f" (the cheapest GPU costs ${cheapest:.2f}/h)" if cheapest is not None
                 else " (the cluster file gives no prices)")
        return InfeasibleError(
            f"no plan that fits in memory costs at most ${budget:.2f}/h{extra}; raise "
            "--budget-usd-per-hour or use cheaper GPUs")
    return InfeasibleError(
        f"no plan fits: every split needs more memory than its GPUs have or more pipeline "
        f"stages than the {search.gbs // b} micro-batches of {b} sequences (global batch "
        f"{search.gbs}) allow; the smallest memory per GPU any split reaches is at least "
        f"{floor_gib:.1f} GiB against {biggest:.1f} GiB on the largest GPU; add GPUs, raise "
        "the global batch, or use a smaller model")
