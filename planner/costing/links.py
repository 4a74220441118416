"""Which link a message between ranks crosses: p2p between stages, DP gradient rings.

Inside a node a GPU has its own intra-node link (NVLink or PCIe). Between nodes, the node's
NIC (`inter_node_gbps`) is shared by the GPUs on it that talk at the same time; the slower
end governs. Achievable fractions and latencies are in `cost_models.efficiency`.
"""

from __future__ import annotations

from collections.abc import Sequence

from cost_models.comm import Link, p2p_s, ring_allreduce_s
from cost_models.efficiency import LINK_EFFICIENCY, LINK_LATENCY_S
from planner.cluster.model import Node

__all__ = ["a2a_link", "cp_ring_link", "intra_link", "link_of_kind", "nic_link", "p2p_time_s",
           "ring_link", "ring_time_s"]


def link_of_kind(kind: str | None, gb_per_s: float) -> Link:
    """An intra-node link of `kind` (nvlink, pcie, ...; unknown kinds count as PCIe) with a
    datasheet bandwidth of `gb_per_s`, as one participant achieves it."""
    kind = kind if kind in LINK_EFFICIENCY else "pcie"
    return Link(gb_per_s * LINK_EFFICIENCY[kind], LINK_LATENCY_S[kind])


def intra_link(node: Node) -> Link:
    return link_of_kind(node.group.intra_node, node.group.intra_node_gb_per_s)


def nic_link(node: Node, share: float, latency_s: float) -> Link:
    """`share` of the node's NIC (0 < share <= 1), as GB/s one stream achieves."""
    gb_per_s = node.group.inter_node_gbps / 8 * LINK_EFFICIENCY["network"] * share
    return Link(gb_per_s, latency_s)


def p2p_time_s(nbytes: float, src: Node, src_tp: int, dst: Node, latency_s: float,
               used_gpus: dict[str, int] | None = None, *, dst_tp: int | None = None,
               scatter_gather: bool = True) -> float:
    """One micro-batch's activation from a stage on `src` to the next on `dst` (`nbytes`: the
    whole boundary tensor), one direction; the gradient flows back at the same price.

    `scatter_gather` (Megatron's `scatter_gather_tensors_in_pipeline`, DeepSpeed's
    `is_pipe_partitioned`, a sequence-parallel boundary): each of the sender's TP ranks sends
    1/tp of the tensor. Otherwise (hetplan's runtime, `planner/runtime/topology.py`) every
    receiving TP rank j gets the whole tensor from sender rank j % tp_src, and each sending
    TP rank i the whole gradient from receiver rank i % tp_dst, one after another: the
    busiest GPU sends ceil(tp_dst/tp_src) whole tensors forward and ceil(tp_src/tp_dst)
    backward; `send_s` stands for both directions, so this prices their mean (their sum,
    which the schedule pays per micro-batch, is exact).

    Each GPU has its own intra-node link. Between nodes every GPU the plan uses on a node
    sends at once (data parallelism, the other stages, the other TP ranks' pairs), so each
    gets 1/(GPUs in use there) of its NIC: `used_gpus` per node name, or every GPU of the
    node when not given.
    """
    if nbytes <= 0:
        return 0.0
    if scatter_gather:
        part = nbytes / src_tp
    else:
        to = src_tp if dst_tp is None else dst_tp
        part = nbytes * (-(-to // src_tp) + -(-src_tp // to)) / 2
    if src.name == dst.name:
        return p2p_s(part, intra_link(src))

    def share(node: Node) -> float:
        in_use = (used_gpus or {}).get(node.name, node.group.gpus_per_node)
        return 1 / max(1, min(in_use, node.group.gpus_per_node))

    a = nic_link(src, share(src), latency_s)
    b = nic_link(dst, share(dst), latency_s)
    return p2p_s(part, a.slower(b))


def ring_time_s(nbytes: float, members: Sequence[Node], used_gpus: dict[str, int],
                latency_s: float) -> float:
    """Ring all-reduce of `nbytes` over one GPU on each of `members` (a node may repeat).

    On one node: the intra-node link. Across nodes the ring leaves and enters each node once,
    so a node's NIC carries the whole ring's traffic; the NIC is split between the concurrent
    rings of that node: (this ring's GPUs on the node) / (GPUs in use on the node).
    """
    n = len(members)
    if n <= 1 or nbytes <= 0:
        return 0.0
    return ring_allreduce_s(nbytes, n, ring_link(members, used_gpus, latency_s))


def ring_link(members: Sequence[Node], used_gpus: dict[str, int], latency_s: float) -> Link:
    """The link `ring_time_s` prices a ring over `members` (at least one) on: it depends only
    on the nodes visited and `used_gpus`, so callers pricing many rings over the same GPUs
    (every layer of a stage) compute it once."""
    names = [m.name for m in members]
    if len(set(names)) == 1:
        return intra_link(members[0])
    counts: dict[str, int] = {}
    for name in names:
        counts[name] = counts.get(name, 0) + 1
    seen: dict[str, Node] = {m.name: m for m in members}
    link: Link | None = None
    for name, node in seen.items():
        share = counts[name] / max(used_gpus.get(name, counts[name]), counts[name])
        nl = nic_link(node, share, latency_s)
        link = nl if link is None else link.slower(nl)
    assert link is not None
    return link


def a2a_link(members: Sequence[Node], used_gpus: dict[str, int], latency_s: float) -> Link:
    """The link an expert-parallel all-to-all over one GPU on each of `members` sees, as one
    `Link` for `alltoall_s`. On one node: the intra-node link. Across nodes a GPU's traffic
    to peers on other nodes (the larger part) leaves through its node's NIC, which every GPU
    in use there drives at once; the link's bandwidth is scaled so that alltoall_s charges
    exactly those off-node bytes at that NIC share (the on-node part overlaps on NVLink)."""
    names = [m.name for m in members]
    if len(set(names)) == 1:
        return intra_link(members[0])
    n = len(members)
    link: Link | None = None
    for node in {m.name: m for m in members}.values():
        on_node = names.count(node.name)
        off = n - on_node  # peers a GPU here reaches through the NIC
        in_use = max(used_gpus.get(node.name, on_node), on_node)
        nic = nic_link(node, 1 / in_use, latency_s)
        scaled = Link(nic.gb_per_s * (n - 1) / off, nic.latency_s)
        link = scaled if link is None else link.slower(scaled)
    assert link is not None
    return link


def cp_ring_link(members: Sequence[Node], used_gpus: dict[str, int], latency_s: float) -> Link:
    """The link a context-parallel K/V ring over one GPU on each of `members` sees per step.

    On one node: the intra-node link. Across nodes some step crosses a NIC, and every step
    waits for the slowest hop; the NIC is shared by all the GPUs in use on its node (their
    rings and DP traffic run at the same time), as for p2p between stages."""
    names = {m.name for m in members}
    if len(names) == 1:
        return intra_link(members[0])
    link: Link | None = None
    for node in {m.name: m for m in members}.values():
        in_use = max(used_gpus.get(node.name, 1), 1)
        nl = nic_link(node, 1 / min(in_use, node.group.gpus_per_node), latency_s)
        link = nl if link is None else link.slower(nl)
    assert link is not None
    return link
