"""Pieces of `estimate` that repeat across a plan's identical replicas and across the search's
repeated layouts, each worked out once: sums over a plan's ranks (GPUs per node, peak FLOP/s,
price), p2p times per distinct hop, chunk timings, a device's merged stage cost, and a stage row
copied to a twin pipeline. Same arithmetic as working each out afresh (equal floats)."""

from __future__ import annotations

from dataclasses import fields
from functools import lru_cache

from cost_models.compute import peak_tflops
from planner.cluster.model import Node
from planner.costing.links import p2p_time_s
from planner.costing.result import StageEstimate
from planner.costing.stage_cost import StageCost
from planner.simulate import StageTiming

_PER_RANKS: dict[int, tuple[dict[int, Node], dict]] = {}


def _per_ranks(rank_node: dict[int, Node]) -> dict:
    """Sums over a plan's ranks, kept with `check_against`'s map (cached per ranks tuple and
    cluster, plan_check.py): the same map gives the same sums."""
    hit = _PER_RANKS.get(id(rank_node))
    if hit is None or hit[0] is not rank_node:
        if len(_PER_RANKS) >= 64:
            _PER_RANKS.clear()
        hit = _PER_RANKS[id(rank_node)] = (rank_node, {})
    return hit[1]


def _used_gpus(rank_node: dict[int, Node]) -> dict[str, int]:
    """GPUs the plan uses per node name."""
    memo = _per_ranks(rank_node)
    used = memo.get("used")
    if used is None:
        used = memo["used"] = {}
        for node in rank_node.values():
            used[node.name] = used.get(node.name, 0) + 1
    return used


def _peak_and_price(rank_node: dict[int, Node], precision: str) -> tuple[float, float | None]:
    """The plan's GPUs' summed peak FLOP/s at `precision` and summed price per hour (None
    when a node has no price), added rank by rank."""
    memo = _per_ranks(rank_node)
    hit = memo.get(precision)
    if hit is None:
        peak = 0.0
        price: float | None = 0.0
        per_group: dict[int, float] = {}  # a group's peak, worked out once
        for node in rank_node.values():
            group = node.group
            flops = per_group.get(id(group))
            if flops is None:
                flops = per_group[id(group)] = peak_tflops(group.gpu, precision) * 1e12
            peak += flops
            pg = group.price_per_gpu_hour
            price = None if price is None or pg is None else price + pg
        hit = memo[precision] = (peak, price)
    return hit


@lru_cache(maxsize=256)
def _device_chunks(n_chunks: int, s_count: int) -> tuple[tuple[int, ...], ...]:
    """Per device, its chunks' indices (chunk j on device j % S)."""
    return tuple(tuple(range(d, n_chunks, s_count)) for d in range(s_count))


def _p2p(hops: dict[tuple, float], nbytes: float, src: Node, src_tp: int, dst: Node,
         latency_s: float, used_gpus: dict[str, int], dst_tp: int,
         scatter_gather: bool) -> float:
    """`p2p_time_s`, once per distinct input: it reads only the two nodes' groups, whether
    they are one node, and the GPUs the plan uses on each (their NIC shares), so replicas on
    other nodes of the same groups reuse it."""
    key = (nbytes, src_tp, dst_tp, scatter_gather, src.name == dst.name, id(src.group),
           id(dst.group), used_gpus.get(src.name), used_gpus.get(dst.name))
    hit = hops.get(key)
    if hit is None:
        hit = hops[key] = p2p_time_s(nbytes, src, src_tp, dst, latency_s, used_gpus,
                                     dst_tp=dst_tp, scatter_gather=scatter_gather)
    return hit


def _timing(c: StageCost, j: int, sends: list[float], s_count: int,
            blocking: bool) -> StageTiming:
    """Chunk j's timing. Blocking p2p (DeepSpeed's pipeline engine: `p2p.send`/`recv` are
    synchronous inside the schedule) keeps both ends busy for the transfer, once per
    micro-batch per direction: the forward receives from the previous chunk and sends to the
    next, the backward the reverse; nothing is left in flight between them."""
    if not blocking:
        return StageTiming(fwd_s=c.fwd_s, bwd_s=c.bwd_s, send_s=sends[j], device=j % s_count,
                           recompute_s=min(c.recompute_s, c.bwd_s))
    comm = sends[j] + (sends[j - 1] if j > 0 else 0.0)
    return StageTiming(fwd_s=c.fwd_s + comm, bwd_s=c.bwd_s + comm, send_s=0.0,
                       device=j % s_count, recompute_s=min(c.recompute_s, c.bwd_s + comm))


def _merged(costs: tuple[StageCost, ...]) -> StageCost:
    """One device's chunks as one stage cost (sums; the largest recompute transient)."""
    worst = max(costs, key=lambda c: c.recompute_transient_bytes)  # its backward peaks
    return StageCost(
        fwd_s=sum(c.fwd_s for c in costs), bwd_s=sum(c.bwd_s for c in costs),
        bwd_weight_s=sum(c.bwd_weight_s for c in costs),
        params_per_gpu=sum(c.params_per_gpu for c in costs),
        static_bytes_per_gpu=sum(c.static_bytes_per_gpu for c in costs),
        optimizer_bytes_per_gpu=sum(c.optimizer_bytes_per_gpu for c in costs),
        activation_bytes_per_microbatch=sum(c.activation_bytes_per_microbatch for c in costs),
        p2p_bytes=costs[-1].p2p_bytes,
        optimizer_step_s=sum(c.optimizer_step_s for c in costs),
        recompute_transient_bytes=worst.recompute_transient_bytes,
        recompute_s=sum(c.recompute_s for c in costs),
        expert_optimizer_bytes_per_gpu=sum(c.expert_optimizer_bytes_per_gpu for c in costs),
        context_activation_bytes_per_microbatch=sum(
            c.context_activation_bytes_per_microbatch for c in costs),
        context_transient_bytes=worst.context_transient_bytes,
        master_bytes_per_gpu=sum(c.master_bytes_per_gpu for c in costs),
        autocast_bytes_per_gpu=sum(c.autocast_bytes_per_gpu for c in costs),
        gathered_bytes_per_param=costs[0].gathered_bytes_per_param)  # one framework and dtype


_ROW_FIELDS = tuple(f.name for f in fields(StageEstimate))


def _renumbered(row: StageEstimate, pipeline: int) -> StageEstimate:
    """`row` of another pipeline (`dataclasses.replace` without its per-call field walk)."""
    kw = {name: getattr(row, name) for name in _ROW_FIELDS}
    kw["pipeline"] = pipeline
    return StageEstimate(**kw)
