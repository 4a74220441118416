"""Gradient synchronisation per device: each layer's data-parallel all-reduce across pipelines,
and a tied weight's all-reduce across its copies.

A tied weight (a GPT head that reuses the embedding matrix) held on two devices of a pipeline
has two copies whose gradients must be summed. hetplan's runtime sums every copy of every
pipeline in one all-reduce (`planner/runtime/grads.py`); Megatron (the embedding group) and
DeepSpeed (`PipelineModule` tied_comms) all-reduce the two copies of each pipeline, and the
copy on the last stage then joins that stage's data-parallel all-reduce
(`Framework.tied_grad_pairs`). Rings run after the pipeline flush; the tied all-reduce is
issued apart from the data-parallel ones, so the GPUs holding a copy are the only ones then
sharing their node's NIC.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from cost_models.comm import Link, ring_allreduce_s
from cost_models.memory import dp_sync_bytes_per_param
from planner.cluster.model import Node
from planner.costing.framework import Framework
from planner.costing.links import ring_link, ring_time_s
from planner.costing.stage_cost import tp_split
from planner.graph.layers import Layer, LayerGraph
from planner.schema import Plan

__all__ = ["grad_sync_s"]


class SyncDevice(Protocol):
    pipeline: int
    index: int
    node: Node
    tp: int


def _holders(plan: Plan, devices: Sequence[Sequence[SyncDevice]], n_layers: int) -> list[list[int]]:
    """Per pipeline: layer -> index of the device holding it."""
    out = []
    for p, pipe in enumerate(plan.pipelines):
        s_count = len(devices[p])
        row = [0] * n_layers
        for j, st in enumerate(pipe.stages):
            for layer in range(st.layers[0], st.layers[1]):
                row[layer] = j % s_count
        out.append(row)
    return out


def grad_sync_s(graph: LayerGraph, plan: Plan, devices: Sequence[Sequence[SyncDevice]],
                used_gpus: dict[str, int], latency_s: float,
                framework: Framework) -> tuple[list[list[float]], list[list[float]]]:
    """Per pipeline, per device: seconds of (data-parallel, tied-weight) gradient all-reduce
    after its last backward."""
    n_pipes = len(plan.pipelines)
    dp_out = [[0.0] * len(devs) for devs in devices]
    tied_out = [[0.0] * len(devs) for devs in devices]
    grad_bytes = dp_sync_bytes_per_param(graph.dtype_bytes, plan.zero_stage,
                                         max(p.microbatches for p in plan.pipelines))
    holder = _holders(plan, devices, len(graph.layers))

    # Every layer a stage holds is reduced over the same GPUs: the ring's link, a function of
    # the nodes visited, is computed once per member list (1024 GPUs: ~100 rings, 16 lists).
    dp_links: dict[tuple[str, ...], Link] = {}

    def ring(nbytes: float, members: list[SyncDevice], sharing: dict[str, int],
             out: list[list[float]]) -> None:
        nodes = [d.node for d in members]
        if sharing is not used_gpus or len(nodes) <= 1 or nbytes <= 0:
            t = ring_time_s(nbytes, nodes, sharing, latency_s)
        else:
            key = tuple(node.name for node in nodes)
            link = dp_links.get(key)
            if link is None:
                link = dp_links[key] = ring_link(nodes, used_gpus, latency_s)
            t = ring_allreduce_s(nbytes, len(nodes), link)
        for d in members:
            out[d.pipeline][d.index] += t

    def shard(layer: Layer, members: list[SyncDevice]) -> int:
        # The largest shard governs: the smallest TP, or the whole tensor where a TP group
        # holds all of it on every rank (an embedding or head its TP degree does not split).
        return min(d.tp if tp_split(layer, framework, d.tp) else 1 for d in members)

    moved = [0] * len(graph.layers)  # tied parameters reduced apart from their owner's ring
    copies_dp: list[tuple[int, list[SyncDevice]]] = []
    for li, layer in enumerate(graph.layers):
        if layer.tied_params <= 0 or not 0 <= layer.tied_to < li:
            continue
        both = [(devices[p][holder[p][layer.tied_to]], devices[p][holder[p][li]])
                for p in range(n_pipes)]
        pairs = [(a, b) for a, b in both if a.index != b.index]
        if not pairs:  # every pipeline holds the weight and its user on one device
            continue
        members = list({(d.pipeline, d.index): d for pair in both for d in pair}.values())
        sharing: dict[str, int] = {}
        for d in members:
            sharing[d.node.name] = sharing.get(d.node.name, 0) + d.tp
        if framework.tied_grad_pairs:
            nbytes = layer.tied_params * (framework.tied_grad_bytes or grad_bytes)
            for a, b in pairs:
                ring(nbytes / shard(layer, [a, b]), [a, b], sharing, tied_out)
            copies_dp.append((li, [b for _, b in pairs]))
        else:
            moved[layer.tied_to] += layer.tied_params
            ring(layer.tied_params * grad_bytes / shard(layer, members), members, sharing,
                 tied_out)
    if n_pipes == 1:
        return dp_out, tied_out
    # Uneven ZeRO shards (`shard_fraction`): every ring step moves the largest piece, so the
    # data-parallel traffic grows by max(fraction) × pipelines over even pieces.
    given = plan.pipelines[0].shard_fraction is not None and plan.zero_stage
    uneven = max(plan.shard_fractions) * n_pipes if given else 1.0
    for li, layer in enumerate(graph.layers):
        ds = [devices[p][holder[p][li]] for p in range(n_pipes)]
        ep = max(getattr(d, "ep", 1) for d in ds)
        experts = layer.expert_params if ep > 1 else 0
        own = layer.params - moved[li] - experts
        if own > 0:
            ring(own * grad_bytes * uneven / shard(layer, ds), ds, used_gpus, dp_out)
        # Expert parallelism: expert shard k lives on the k-th pipeline of every ep-block, so
        # each shard's gradient all-reduce runs over those pipelines only (expert-data-parallel).
        for k in range(ep if experts else 0):
            members = [d for p, d in enumerate(ds) if p % ep == k]
            ring(experts / ep * grad_bytes / shard(layer, members), members, used_gpus, dp_out)
    for li, copies in copies_dp:  # the copies' own data-parallel all-reduce
        if len(copies) > 1:
            layer = graph.layers[li]
            ring(layer.tied_params * grad_bytes / shard(layer, copies), copies, used_gpus,
                 dp_out)
    return dp_out, tied_out
