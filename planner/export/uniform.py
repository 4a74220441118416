"""Is a plan one that a framework with uniform parallel degrees can express?

Megatron-LM and torchtitan describe a run by a handful of global numbers: one TP degree, one
PP degree, one DP degree, one micro-batch size, one schedule, one recompute policy; every DP
replica is the same pipeline and holds the same share of the batch. A hetplan plan is more
general (per-stage TP, pipelines over different GPU types, heterogeneous DP with unequal
shares). `uniform_shape` returns the global numbers, or the first reason they do not exist.
"""

from __future__ import annotations

from dataclasses import dataclass

from planner.schema import Plan

__all__ = ["UniformShape", "megatron_rank_order", "uniform_shape"]


@dataclass(frozen=True, slots=True, kw_only=True)
class UniformShape:
    tp: int
    pp: int
    dp: int
    virtual_stages: int
    micro_batch_size: int
    global_batch_size: int
    microbatches_per_pipeline: int
    schedule: str
    recompute: str
    sequence_parallel: bool
    gpu: str
    chunk_layers: tuple[tuple[int, int], ...]
    """Layer range [start, end) of each model chunk over the chain (embedding = 0, head = last),
    in chunk order (chunk j on pipeline rank j mod pp)."""
    num_layers: int
    """Chain length: embedding + transformer blocks + head."""
    megatron_rank_order: bool
    """True when the plan's ranks follow Megatron's/torchtitan's order (TP fastest, then CP,
    then DP, then PP), so the launch order places every stage where the plan put it."""
    cp: int = 1
    """Context-parallel degree (pipelines per cp-block); `dp` counts the blocks."""
    zero: int = 0
    """The plan's ZeRO stage (>= 1: the optimizer state is sharded)."""
    ep: int = 1
    """Expert-parallel degree of the stages holding routed (mixture-of-experts) blocks."""

    @property
    def blocks(self) -> int:
        return self.num_layers - 2

    def blocks_per_chunk(self) -> list[int]:
        """Transformer blocks in each chunk (the embedding and the head are not blocks)."""
        last = self.num_layers - 1
        return [max(0, min(e, last) - max(s, 1)) for s, e in self.chunk_layers]


def megatron_rank_order(plan: Plan) -> bool:
    """Pipeline d's stage s on ranks [s·dp·tp + d·tp, … + tp) for every d and s (dp counting
    every pipeline: cp-blocks' pipelines are consecutive, CP just outside TP)."""
    dp = len(plan.pipelines)
    for d in range(dp):
        for s, st in enumerate(plan.device_groups(d)):
            base = s * dp * st.tp + d * st.tp
            if st.ranks != tuple(range(base, base + st.tp)):
                return False
    return True


def uniform_shape(plan: Plan) -> UniformShape | str:
    """The plan's global degrees, or a one-line reason why it has none."""
    first = plan.pipelines[0]
    for d, pipe in enumerate(plan.pipelines[1:], start=1):
        if pipe.microbatches != first.microbatches:
            return (f"heterogeneous data parallelism: pipeline 0 runs {first.microbatches} "
                    f"micro-batches, pipeline {d} runs {pipe.microbatches}; the framework gives "
                    "every DP replica the same share of the batch")
        if len(pipe.stages) != len(first.stages):
            return (f"heterogeneous data parallelism: pipeline 0 has {len(first.stages)} chunks, "
                    f"pipeline {d} has {len(pipe.stages)}; every DP replica must be the same "
                    "pipeline")
        for s, (a, b) in enumerate(zip(first.stages, pipe.stages, strict=True)):
            if a.layers != b.layers or a.tp != b.tp or a.gpu != b.gpu:
                return (f"heterogeneous data parallelism: stage {s} of pipeline 0 "
                        f"({a.gpu}, TP {a.tp}, layers {list(a.layers)}) differs from pipeline "
                        f"{d}'s ({b.gpu}, TP {b.tp}, layers {list(b.layers)})")
    stages = [st for pipe in plan.pipelines for st in pipe.stages]
    tps = sorted({st.tp for st in stages})
    if len(tps) > 1:
        return (f"per-stage tensor parallelism: stages use TP {', '.join(map(str, tps))}; the "
                "framework has one TP degree for the whole model")
    gpus = list(dict.fromkeys(st.gpu for st in stages))
    if len(gpus) > 1:
        return (f"mixed GPU pipelines: stages run on {', '.join(gpus)}; the framework places "
                "ranks by launch order only and balances nothing by GPU type")
    cp = plan.cp(0)
    if any(plan.cp(p) != cp for p in range(len(plan.pipelines))):
        return ("per-pipeline context parallelism: pipelines use different cp degrees; the "
                "framework has one CP degree for the whole run")
    eps = sorted({st.ep or 1 for st in stages if _routed(plan, st.layers)})
    if len(eps) > 1:
        return (f"per-stage expert parallelism: stages holding experts use ep "
                f"{', '.join(map(str, eps))}; the framework has one expert-parallel degree")
    fractions = plan.shard_fractions
    if max(fractions) - min(fractions) > 1e-9:
        shown = ", ".join(f"{f:g}" for f in fractions[:4]) + (", ..." if len(fractions) > 4
                                                               else "")
        return (f"uneven ZeRO shards: pipelines hold shard fractions {shown}; the framework "
                "shards the state evenly over DP")
    modes = sorted({st.recompute for st in stages})
    if len(modes) > 1:
        return (f"per-stage recompute: stages use {', '.join(modes)}; the framework applies "
                "one recompute policy to every stage")
    return UniformShape(
        tp=tps[0], pp=len(plan.device_groups(0)), dp=len(plan.pipelines) // cp, cp=cp,
        virtual_stages=plan.virtual_stages, micro_batch_size=plan.micro_batch_size,
        global_batch_size=plan.global_batch_size,
        microbatches_per_pipeline=first.microbatches, schedule=plan.schedule,
        recompute=modes[0], sequence_parallel=plan.sequence_parallel,
        zero=plan.zero_stage, ep=eps[0] if eps else 1,
        gpu=gpus[0], chunk_layers=tuple(st.layers for st in first.stages),
        num_layers=plan.num_layers, megatron_rank_order=megatron_rank_order(plan))


def _routed(plan: Plan, layers: tuple[int, int]) -> bool:
    """Whether chain layers [start, end) hold a mixture-of-experts block: blocks are chain
    layers 1..num_layers, routed from block `first_dense_layers` on."""
    model = plan.model or {}
    if not model.get("num_experts"):
        return False
    first = 1 + int(model.get("first_dense_layers") or 0)
    return max(layers[0], first) < min(layers[1], 1 + int(model["num_layers"]))
