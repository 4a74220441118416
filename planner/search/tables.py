"""Cost arrays over every layer range [i, j) for one stage option (GPU group, TP, micro-batch).

The estimate's `layer_cost_table` already keeps per-layer prefix sums; here they become
(n+1) × (n+1) numpy arrays so that the dynamic program looks up any stage in O(1) and works on
whole rows at once. Every figure is the estimate's own (same function, same arguments), so a
stage the search prices is priced identically when the plan is re-costed.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from cost_models.comm import Link
from cost_models.memory import FRAMEWORK_OVERHEAD_GIB, GIB, dp_sync_bytes_per_param
from cost_models.profiles import ProfileSet
from planner.cluster.model import Cluster, Node, NodeGroup
from planner.costing.framework import DEFAULT_FRAMEWORK, Framework
from planner.costing.links import a2a_link, cp_ring_link, intra_link, nic_link, p2p_time_s
from planner.costing.stage_cost import LayerCostTable, layer_cost_table
from planner.graph.layers import LayerGraph

__all__ = ["CP_MIN_SEQ_LEN", "RECOMPUTE", "OptionCosts", "cp_degrees", "cp_link", "ep_degrees",
           "ep_link", "option_costs", "tp_degrees"]

CP_MIN_SEQ_LEN = 32768
"""Sequences at least this long also try context parallelism (cp 2, 4, 8): below it a
sequence's activations are small beside the weights, and the search space stays small."""

RECOMPUTE = ("none", "selective", "full")
"""Recompute modes, fastest first: the search takes the first one whose memory fits."""


@dataclass(frozen=True, slots=True, eq=False)
class OptionCosts:
    """Stage [i, j) on a TP group of `tp` GPUs of `group`, one micro-batch of `micro_batch`."""

    group: int
    """Index into `cluster.groups`."""
    tp: int
    micro_batch: int
    capacity_gib: float
    time_s: np.ndarray
    """(3, n+1, n+1): forward + backward per micro-batch for each recompute mode; +inf where
    j <= i or the TP degree exceeds a layer's `max_tp`."""
    fixed_gib: np.ndarray
    """(3, n+1, n+1): weights, gradients, unsharded non-optimizer state (an autocast region's
    16-bit weight copies included), recompute transient and framework overhead (everything
    but activations and the ZeRO-shardable optimizer state)."""
    optimizer_gib: np.ndarray
    """(n+1, n+1): optimizer state ZeRO-1 can shard."""
    act_gib: np.ndarray
    """(3, n+1, n+1): activations one in-flight micro-batch holds per GPU."""
    update_s: np.ndarray
    """(n+1, n+1): the Adam step, unsharded."""
    grad_bytes: np.ndarray
    """(n+1, n+1): bytes per GPU the DP all-reduce moves (parameters per GPU × the estimate's
    `dp_sync_bytes_per_param`, ZeRO-1 as the search's multi-pipeline plans use it)."""
    ring_layers: np.ndarray
    """(n+1, n+1): layers with parameters (each costs the ring its latency terms)."""
    send_s: np.ndarray
    """(n+1,): p2p of one micro-batch from a stage ending at j to a stage on another node."""
    expert_optimizer_gib: np.ndarray | float = 0.0
    """(n+1, n+1): the routed experts' part of `optimizer_gib`."""
    ep: int = 1
    """Expert parallelism over the class's replicas (mixture-of-experts models)."""
    cp: int = 1
    """Context parallelism over the class's replicas: blocks of cp consecutive pipelines
    share their samples, each with 1/cp of every sequence (times and memory are per GPU)."""
    master_gib: np.ndarray | float = 0.0
    """(n+1, n+1): the part of `optimizer_gib` that is a ZeRO slice's master copy, absent
    from a plan of one pipeline (ZeRO-0; `StageCost.master_bytes_per_gpu`)."""

    def memory_gib(self, rc: int, inflight: float, zero_dp: int) -> np.ndarray:
        """Peak memory per GPU of every stage (same formula as `stage_peak_memory_gib`)."""
        return (self.fixed_gib[rc] + self.sharded_optimizer_gib(zero_dp)
                + self.act_gib[rc] * inflight)

    def sharded_optimizer_gib(self, zero_dp: int) -> np.ndarray:
        """Optimizer state per GPU under ZeRO-1 over `zero_dp` pipelines: routed experts'
        over the expert-data-parallel group zero_dp / ep. One pipeline is ZeRO-0 (the
        search's plans: `assemble`), which keeps no slice master copy."""
        if zero_dp <= 1:
            return self.optimizer_gib - self.master_gib
        dense = (self.optimizer_gib - self.expert_optimizer_gib) / max(zero_dp, 1)
        return dense + self.expert_optimizer_gib / max(zero_dp // self.ep, 1)

    def dp_sync_s(self, replicas: int, latency_s: float, group: NodeGroup) -> np.ndarray:
        """Ring all-reduce of every stage's gradients over `replicas` pipelines.

        As the estimate prices it with DP replicas packed onto nodes (the `replica`
        placement): on one node the ring runs over the intra-node link; across nodes each
        node's NIC is shared by its GPUs, gpus_per_node / tp of which are in this ring.
        """
        if replicas <= 1:
            return np.zeros_like(self.update_s)
        gpn = group.gpus_per_node
        node = Node(name="_", group=group, index=0)
        if replicas * self.tp <= gpn:
            link = intra_link(node)
        else:
            link = nic_link(node, 1.0 / self.tp, latency_s)
        per_byte_s = 2 * (replicas - 1) / replicas / link.bytes_per_s
        return (self.grad_bytes * per_byte_s
                + self.ring_layers * (2 * (replicas - 1) * link.latency_s))


def tp_degrees(group: NodeGroup, graph: LayerGraph) -> tuple[int, ...]:
    """TP degrees a stage may use on `group`: powers of two dividing the node, up to the
    largest any layer allows (so TP groups pack into nodes without fragments)."""
    top = max(layer.max_tp for layer in graph.layers)
    out = []
    t = 1
    while t <= group.gpus_per_node and t <= top:
        if group.gpus_per_node % t == 0:
            out.append(t)
        t *= 2
    return tuple(out)


def ep_degrees(graph: LayerGraph) -> tuple[int, ...]:
    """Expert-parallel degrees the search tries: powers of two dividing every MoE layer's
    expert count (1 alone for a dense model)."""
    experts = {layer.num_experts for layer in graph.layers if layer.num_experts}
    out = [1]
    while experts and all(e % (2 * out[-1]) == 0 for e in experts):
        out.append(2 * out[-1])
    return tuple(out)


def _block_nodes(cluster: Cluster, group_index: int, tp: int, size: int) -> list[Node]:
    """The nodes of a block of `size` TP groups packed onto nodes in order (the `replica`
    placement): one node when size × tp GPUs fit in it."""
    group = cluster.groups[group_index]
    gpn = group.gpus_per_node
    return [Node(name=f"_{k * tp // gpn}", group=group, index=k * tp // gpn)
            for k in range(size)]


def ep_link(cluster: Cluster, group_index: int, tp: int, ep: int) -> Link | None:
    """The all-to-all link of an ep-block (inside one node when ep × tp GPUs fit in it)."""
    if ep <= 1:
        return None
    nodes = _block_nodes(cluster, group_index, tp, ep)
    gpn = cluster.groups[group_index].gpus_per_node
    return a2a_link(nodes, {n.name: gpn for n in nodes}, cluster.latency_us * 1e-6)


def cp_degrees(graph: LayerGraph) -> tuple[int, ...]:
    """Context-parallel degrees the search tries: 1, and for sequences of at least
    CP_MIN_SEQ_LEN tokens 2, 4 and 8 where 2·cp equal zig-zag chunks divide the sequence."""
    if graph.seq_len < CP_MIN_SEQ_LEN:
        return (1,)
    return (1, *(c for c in (2, 4, 8) if graph.seq_len % (2 * c) == 0))


def cp_link(cluster: Cluster, group_index: int, tp: int, cp: int) -> Link | None:
    """The K/V ring's link of a cp-block (inside one node when cp × tp GPUs fit in it)."""
    if cp <= 1:
        return None
    nodes = _block_nodes(cluster, group_index, tp, cp)
    gpn = cluster.groups[group_index].gpus_per_node
    return cp_ring_link(nodes, {n.name: gpn for n in nodes}, cluster.latency_us * 1e-6)


def _ranges(prefix: tuple[float, ...] | np.ndarray) -> np.ndarray:
    p = np.asarray(prefix, dtype=float)
    return p[None, :] - p[:, None]


def _tie_copies(table: LayerCostTable, n: int) -> tuple[np.ndarray, np.ndarray]:
    """(parameters per GPU, Adam step s) of the tied copies every range [i, j) holds, as
    `LayerCostTable.tied_copy` gives them: ranges holding the layer but not its owner."""
    params, update = np.zeros((n + 1, n + 1)), np.zeros((n + 1, n + 1))
    for layer, owner, p, u in table.ties:  # the owner always comes first (extract.py)
        params[owner + 1:layer + 1, layer + 1:] += p
        update[owner + 1:layer + 1, layer + 1:] += u
    return params, update


def _range_max(values: np.ndarray) -> np.ndarray:
    """out[i, j] = max(values[i:j]) for i < j (0 elsewhere)."""
    n = len(values)
    out = np.zeros((n + 1, n + 1))
    for i in range(n):
        out[i, i + 1:] = np.maximum.accumulate(values[i:])
    return out


def option_costs(graph: LayerGraph, cluster: Cluster, group_index: int, tp: int,
                 micro_batch: int, *, precision: str, sequence_parallel: bool,
                 profiles: ProfileSet | None,
                 framework: Framework = DEFAULT_FRAMEWORK, ep: int = 1,
                 cp: int = 1) -> OptionCosts:
    group = cluster.groups[group_index]
    n = len(graph.layers)
    upper = np.triu(np.ones((n + 1, n + 1), dtype=bool), k=1)
    max_tp = np.array([layer.max_tp for layer in graph.layers], dtype=float)
    tp_ok = np.zeros((n + 1, n + 1), dtype=bool)
    for i in range(n):
        tp_ok[i, i + 1:] = np.minimum.accumulate(max_tp[i:]) >= tp
    valid = upper & tp_ok
    times, fixed, acts = [], [], []
    table = None
    for rc in RECOMPUTE:
        table = layer_cost_table(
            graph, group.gpu, tp, micro_batch, rc, precision=precision,
            sequence_parallel=sequence_parallel, intra_node_gb_per_s=group.intra_node_gb_per_s,
            intra_node_link=group.intra_node, profiles=profiles, framework=framework, ep=ep,
            ep_link=ep_link(cluster, group_index, tp, ep), cp=cp,
            cp_link=cp_link(cluster, group_index, tp, cp))
        t = _ranges(table.fwd_s) + _ranges(table.bwd_s)
        if table.blocks:  # SP edge all-gathers, once per pass where a range holds a block
            t = t + 2 * table.sp_edge_s * (_ranges(table.blocks) > 0)
        times.append(np.where(valid, t, np.inf))
        params = _ranges(table.params) + _tie_copies(table, n)[0]
        state = (params * (table.state_bytes_per_param - table.optimizer_bytes_per_param)
                 + _ranges(table.gemm_params) * table.autocast_bytes_per_param)
        transient = _range_max(np.asarray(table.transient_bytes, dtype=float))
        fixed.append((state + transient) / GIB + FRAMEWORK_OVERHEAD_GIB)
        acts.append(_ranges(table.activation_bytes) / GIB)
    assert table is not None
    copy_params, copy_update = _tie_copies(table, n)
    params = _ranges(table.params) + copy_params
    sync_bytes = dp_sync_bytes_per_param(graph.dtype_bytes, zero=1)
    has_params = _ranges(np.concatenate(
        [[0.0], np.cumsum([1.0 if layer.params > 0 else 0.0 for layer in graph.layers])]))
    node_a = Node(name="_a", group=group, index=0)
    node_b = Node(name="_b", group=group, index=1)
    latency_s = cluster.latency_us * 1e-6
    send = np.zeros(n + 1)
    for j in range(1, n):
        send[j] = p2p_time_s(table.output_bytes[j - 1], node_a, tp, node_b, latency_s,
                             scatter_gather=framework.p2p_scatter_gather)
    return OptionCosts(
        group=group_index, tp=tp, micro_batch=micro_batch, capacity_gib=group.gpu.memory_gib,
        ep=ep, cp=cp,
        time_s=np.stack(times), fixed_gib=np.stack(fixed),
        optimizer_gib=params * table.optimizer_bytes_per_param / GIB,
        master_gib=params * table.master_bytes_per_param / GIB,
        expert_optimizer_gib=(_ranges(table.expert_params) * table.optimizer_bytes_per_param
                              / GIB if table.expert_params else 0.0),
        act_gib=np.stack(acts), update_s=_ranges(table.update_s) + copy_update,
        grad_bytes=params * sync_bytes,
        ring_layers=has_params, send_s=send)
