"""One validator for a plan against its model and cluster, run before anything is priced,
simulated, dry-run, launched or written.

`planner.schema` checks what a plan says about itself (layers covered in order, every rank
once, TP groups inside one node, micro-batches adding up). This module checks what needs the
model and the cluster: the layer count, that every rank's node exists and has the GPUs the
plan puts on it, that each stage names a known GPU and the one its node has, and that each
TP degree splits every layer of its stage evenly (heads, KV heads, FFN width), and that each
context-parallel degree cuts the sequence into equal zig-zag chunks. A TP group
need not divide its node (TP 2 and TP 1 side by side on a 3-GPU node run fine).
`estimate` calls `check_against` first, so the search's outputs, `estimate`, `simulate`,
`dryrun` and `launch` all pass through the same rules; each failure is one SpecError line
naming the stage or field and how to fix it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from cost_models.catalog import get_gpu
from planner.cluster.model import Cluster, Node
from planner.costing.framework import FRAMEWORKS, framework_of
from planner.costing.resolve import resolve_cluster, resolve_model
from planner.errors import SpecError
from planner.graph.layers import Layer, LayerGraph
from planner.schema import Plan

__all__ = ["CheckedPlan", "check_against", "check_plan"]


@dataclass(frozen=True, slots=True)
class CheckedPlan:
    """A plan that passed every check, with what the checks resolved."""

    plan: Plan
    graph: LayerGraph
    precision: str
    cluster: Cluster
    rank_node: dict[int, Node]


def check_plan(plan: Plan, model: Any = None, cluster: Any = None, *,
               where: str = "plan") -> CheckedPlan:
    """Resolve the plan's model and cluster (the ones given, else those it embeds) and check
    the plan against them; `where` names the plan in messages (its file)."""
    if model is None and isinstance(plan.model, dict):
        model = _model_of(plan.model, f"{where}: model")
    if cluster is None and isinstance(plan.cluster, dict):
        from planner.cluster import cluster_from_dict

        cluster = cluster_from_dict(plan.cluster, f"{where}: cluster")
    priced = framework_of(plan.predicted)
    if priced not in FRAMEWORKS:
        raise SpecError(where, "predicted.framework", f"{priced!r:.40} is not a runtime hetplan "
                        f"prices ({', '.join(FRAMEWORKS)}); fix it or drop `predicted`")
    graph, precision = resolve_model(model, plan)
    cl = resolve_cluster(cluster, plan)
    rank_node = check_against(plan, graph, cl, where=where)
    return CheckedPlan(plan, graph, precision, cl, rank_node)


def _model_of(spec: dict[str, Any], where: str) -> Any:
    from planner.graph.embedded import graph_of, is_module_model

    if is_module_model(spec):
        return graph_of(spec, where)[0]  # precision: resolve_model reads the plan's
    from planner.graph import ModelSpec, load_model  # imports torch: load lazily

    model_spec = ModelSpec.from_dict(spec, where=where)
    try:
        return load_model(model_spec)
    except (RuntimeError, OverflowError, MemoryError) as exc:
        # torch refuses tensor shapes past its limits even on the meta device.
        first = str(exc).splitlines()[0][:120] if str(exc) else type(exc).__name__
        raise SpecError(where, None, f"cannot measure this model ({first}); check hidden_size, "
                        f"seq_len and num_layers ({model_spec.hidden_size}, "
                        f"{model_spec.seq_len}, {model_spec.num_layers})") from None


def check_against(plan: Plan, graph: LayerGraph, cluster: Cluster, *,
                  where: str = "plan") -> dict[int, Node]:
    """Every model- and cluster-dependent rule; returns rank → the node it runs on."""
    n = len(graph.layers)
    if plan.num_layers != n:
        raise SpecError(where, "pipelines", f"stages cover layers [0, {plan.num_layers}) but "
                        f"model {graph.name} has {n} (embedding + {n - 2} blocks + head); "
                        f"end every pipeline's last stage at layer {n}")
    rank_node = _rank_nodes(plan, cluster, where)
    for p, pipe in enumerate(plan.pipelines):
        for s, st in enumerate(pipe.stages):
            field = f"pipelines.{p}.stages.{s}"
            _check_stage(st, rank_node[st.ranks[0]], graph, field, where)
            if plan.sequence_parallel and graph.seq_len % st.tp:
                # Megatron-SP slices the sequence over the TP ranks (runtime/seqpar.py).
                raise SpecError(where, f"{field}.tp", f"TP {st.tp} with sequence_parallel "
                                f"needs the sequence length {graph.seq_len} to divide by it; "
                                "pick a TP degree that divides it or turn sequence_parallel off")
            _check_context(st, plan.sequence_parallel, graph, field, where)
            _check_experts(st, graph, field, where)
    return rank_node


def _check_experts(st: Any, graph: LayerGraph, field: str, where: str) -> None:
    """Expert parallelism splits each routed-expert layer's experts evenly over ep GPUs, so
    ep must divide the expert count of every expert layer in its stage (a stage of dense
    layers only may carry the plan's ep: Megatron-style plans set it on every stage); a
    model without experts has nothing to split."""
    ep = st.ep or 1
    if ep == 1:
        return
    start, end = st.layers
    for layer in graph.layers[start:end]:
        if layer.num_experts and layer.num_experts % ep:
            raise SpecError(where, f"{field}.ep", f"ep {ep} does not divide the "
                            f"{layer.num_experts} experts of layer {layer.name}; use a divisor "
                            f"of {layer.num_experts}")
    if not any(layer.num_experts for layer in graph.layers):
        raise SpecError(where, f"{field}.ep", f"ep {ep} but model {graph.name} has no routed "
                        "experts; drop ep (or set it to 1)")


def _check_context(st: Any, sequence_parallel: bool, graph: LayerGraph, field: str,
                   where: str) -> None:
    """Context parallelism cuts each sequence into 2·cp equal zig-zag chunks (schema.py), and
    sequence parallelism then slices a GPU's seq/cp tokens over its TP ranks."""
    cp = st.cp or 1
    if cp == 1:
        return
    need = 2 * cp * (st.tp if sequence_parallel else 1)
    if graph.seq_len % need:
        how = f"2 × cp {cp}" + (f" × TP {st.tp} (sequence_parallel)" if sequence_parallel
                                else "")
        raise SpecError(where, f"{field}.cp", f"cp {cp} needs the sequence length "
                        f"{graph.seq_len} to divide by {how} = {need}; pick a cp whose "
                        "zig-zag chunks divide the sequence")


_NODES: dict[int, tuple[Cluster, dict[str, Node]]] = {}


def _node_map(cluster: Cluster) -> dict[str, Node]:
    """Node name → node, built once per cluster object (`Cluster.nodes` builds every node on
    each call; the search checks thousands of plans against one cluster)."""
    hit = _NODES.get(id(cluster))
    if hit is None or hit[0] is not cluster:
        if len(_NODES) >= 64:
            _NODES.clear()
        hit = _NODES[id(cluster)] = (cluster, {node.name: node for node in cluster.nodes})
    return hit[1]


_RANK_NODES: dict[int, tuple[tuple, Cluster, dict[int, Node]]] = {}


def _rank_nodes(plan: Plan, cluster: Cluster, where: str) -> dict[int, Node]:
    """Rank → node, once per (ranks tuple, cluster) object pair: both are immutable, and
    the plans the search derives from one another (ZeRO stage, shard fractions) share their
    ranks tuple. Callers only read the map."""
    hit = _RANK_NODES.get(id(plan.ranks))
    if hit is not None and hit[0] is plan.ranks and hit[1] is cluster:
        return hit[2]
    out = _rank_nodes_of(plan, cluster, where)
    if len(_RANK_NODES) >= 64:
        _RANK_NODES.clear()
    _RANK_NODES[id(plan.ranks)] = (plan.ranks, cluster, out)
    return out


def _rank_nodes_of(plan: Plan, cluster: Cluster, where: str) -> dict[int, Node]:
    # One pass over the ranks (1024 at 1024 GPUs, on every estimate); the errors are still
    # raised in rule order: unknown node, too many ranks on a node, a local rank out of range.
    nodes = _node_map(cluster)
    per_node: dict[str, int] = {}
    out: dict[int, Node] = {}
    first_bad_local: int | None = None
    for i, r in enumerate(plan.ranks):
        node = nodes.get(r.node)
        if node is None:
            names = list(nodes)
            shown = ", ".join(names[:8]) + (", ..." if len(names) > 8 else "")
            raise SpecError(where, f"ranks.{i}.node", f"rank {r.rank} is on node {r.node!r}, "
                            f"which cluster {cluster.name} lacks; use one of its nodes "
                            f"({shown}) or give the cluster that has it")
        per_node[r.node] = per_node.get(r.node, 0) + 1
        if first_bad_local is None and r.local_rank >= node.group.gpus_per_node:
            first_bad_local = i
        out[r.rank] = node
    for name, count in per_node.items():
        gpus = nodes[name].group.gpus_per_node
        if count > gpus:
            raise SpecError(where, "ranks", f"node {name} has {count} ranks but {gpus} GPUs; "
                            "move ranks to another node or use fewer")
    if first_bad_local is not None:
        r = plan.ranks[first_bad_local]
        gpus = nodes[r.node].group.gpus_per_node
        raise SpecError(where, f"ranks.{first_bad_local}.local_rank", f"rank {r.rank}: "
                        f"local_rank {r.local_rank} but node {r.node} has {gpus} GPUs (local "
                        f"ranks 0..{gpus - 1})")
    return out


def _check_stage(st: Any, node: Node, graph: LayerGraph, field: str, where: str) -> None:
    if st.gpu != node.group.gpu.name:
        _check_gpu_name(st.gpu, node, field, where)
    tp = st.tp
    start, end = st.layers
    bad = _tp_misfits(graph, tp)
    if bad[end] == bad[start]:
        return  # every layer of the range splits evenly
    for layer in graph.layers[start:end]:
        if not layer.allows_tp(tp):
            raise SpecError(where, f"{field}.tp", f"TP {tp} does not split layer {layer.name} "
                            f"evenly ({_what(layer)}); use one of {_list(_fitting(layer))}")


_MISFITS: dict[tuple[int, int], tuple[LayerGraph, tuple[int, ...]]] = {}


def _tp_misfits(graph: LayerGraph, tp: int) -> tuple[int, ...]:
    """Prefix counts of the layers TP `tp` does not split evenly, once per (graph, tp): a
    stage's range is then checked in O(1) instead of layer by layer."""
    hit = _MISFITS.get((id(graph), tp))
    if hit is None or hit[0] is not graph:
        if len(_MISFITS) >= 1024:
            _MISFITS.clear()
        counts = [0]
        for layer in graph.layers:
            counts.append(counts[-1] + (not layer.allows_tp(tp)))
        hit = _MISFITS[(id(graph), tp)] = (graph, tuple(counts))
    return hit[1]


def _check_gpu_name(name: str, node: Node, field: str, where: str) -> None:
    """A stage's GPU may be written as a catalog alias of its node's GPU; anything else (an
    unknown name, another GPU) is an error."""
    have = node.group.gpu.name
    try:
        named = get_gpu(name)
    except LookupError as exc:
        raise SpecError(where, f"{field}.gpu", f"{exc}; its node {node.name} has {have}") from None
    if named.name != have:
        raise SpecError(where, f"{field}.gpu", f"says {name} but its ranks are on node "
                        f"{node.name}, which has {have}; write {have} or move the stage to a "
                        "node with that GPU")


def _what(layer: Layer) -> str:
    if layer.tp_dims:
        return "heads, KV heads, FFN width " + " / ".join(str(d) for d in layer.tp_dims)
    return f"its largest TP degree is {layer.max_tp}"


def _fitting(layer: Layer) -> list[int]:
    return [d for d in range(1, layer.max_tp + 1)
            if layer.max_tp % d == 0 and layer.allows_tp(d)][:12]


def _list(values: list[int]) -> str:
    return ", ".join(str(v) for v in values)
