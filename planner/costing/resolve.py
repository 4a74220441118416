"""Turn what a caller passed (LayerGraph, loaded model, spec dict, or nothing) into a graph,
a training precision and a Cluster; a plan file embeds both specs, so `None` is fine there."""

from __future__ import annotations

from typing import Any

from planner.cluster.model import Cluster
from planner.errors import SpecError
from planner.graph.layers import LayerGraph
from planner.schema import Plan

__all__ = ["resolve_cluster", "resolve_model"]

_PRECISIONS = ("bf16", "fp16", "fp32", "fp8")


def _precision_of(obj: Any) -> str | None:
    for path in (("precision",), ("spec", "training", "precision"),
                 ("training", "precision")):
        cur = obj
        for attr in path:
            cur = cur.get(attr) if isinstance(cur, dict) else getattr(cur, attr, None)
            if cur is None:
                break
        if isinstance(cur, str) and cur in _PRECISIONS:
            return cur
    return None


def resolve_model(model: Any, plan: Plan | None = None) -> tuple[LayerGraph, str]:
    """(graph, precision) from a LayerGraph, an object holding one, or a model spec dict."""
    source = model
    if model is None or isinstance(model, dict):
        spec = model if model is not None else (plan.model if plan is not None else None)
        if spec is None:
            raise SpecError("plan", "model", "no model given and the plan embeds none")
        from planner.graph.embedded import graph_of, is_module_model

        if is_module_model(spec):
            return graph_of(spec)  # a user's module: its measured layer table
        from planner.graph import ModelSpec, load_model  # imports torch: load lazily

        source = load_model(ModelSpec.from_dict(spec, where="plan: model"))
    graph = source if isinstance(source, LayerGraph) else getattr(source, "graph", None)
    if graph is None and isinstance(getattr(source, "layers", None), LayerGraph):
        graph = source.layers
    if not isinstance(graph, LayerGraph):
        raise SpecError("model", None, f"expected a LayerGraph or a loaded model, got "
                        f"{type(source).__name__}")
    precision = (_precision_of(source) or _precision_of(graph)
                 or (_precision_of(plan.model) if plan is not None and plan.model else None)
                 or ("fp32" if graph.dtype_bytes == 4 else "bf16"))
    return graph, precision


def resolve_cluster(cluster: Any, plan: Plan | None = None) -> Cluster:
    if isinstance(cluster, Cluster):
        return cluster
    spec = cluster if cluster is not None else (plan.cluster if plan is not None else None)
    if spec is None:
        raise SpecError("plan", "cluster", "no cluster given and the plan embeds none")
    from planner.cluster import cluster_from_dict, load_cluster

    if isinstance(spec, dict):
        return cluster_from_dict(spec, "plan: cluster")
    return load_cluster(spec)
