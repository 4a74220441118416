"""What `planner.estimate` returns: predicted time, throughput, cost and memory of a plan."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["Estimate", "StageEstimate", "StageMemory"]


@dataclass(frozen=True, slots=True, kw_only=True)
class StageMemory:
    """What one GPU of a stage holds at its peak, GiB; the parts add up to the peak."""

    weights_gib: float
    """Parameters (after ZeRO-3 sharding, plus the layers it gathers): in the training dtype,
    or fp32 under hetplan's runtime plus its 16-bit copies (a 16-bit plan's autocast copy of
    each GEMM weight; under FSDP2 the gathered 16-bit weights); `stage_memory`."""
    gradients_gib: float
    """Their gradients (after ZeRO-2 sharding, plus the gathered layers' under FSDP2)."""
    optimizer_gib: float
    """fp32 master weights and Adam moments (after ZeRO-1 sharding); hetplan's runtime keeps
    a master copy only of a ZeRO slice (none at ZeRO-0 or under FSDP2)."""
    activations_gib: float
    """Saved activations of the micro-batches in flight at the peak."""
    other_gib: float
    """Workspace: the stage's largest transient (a block's recompute, or on the last stage
    the loss's buffers) plus the fixed framework overhead (CUDA context, NCCL buffers,
    allocator fragmentation)."""
    context_gib: float = 0.0
    """Context parallelism's all-gathered K/V (hetplan's runtime): other cp ranks' K/V saved
    for the backward by the in-flight micro-batches, and one block's backward transient (the
    gathered K/V gradients, the all-reduce's copy)."""

    @property
    def total_gib(self) -> float:
        return (self.weights_gib + self.gradients_gib + self.optimizer_gib
                + self.activations_gib + self.other_gib + self.context_gib)

    def to_dict(self) -> dict[str, float]:
        return {"weights": round(self.weights_gib, 6), "gradients": round(self.gradients_gib, 6),
                "optimizer": round(self.optimizer_gib, 6),
                "activations": round(self.activations_gib, 6),
                "other": round(self.other_gib, 6),
                **({"context": round(self.context_gib, 6)} if self.context_gib else {})}


@dataclass(frozen=True, slots=True, kw_only=True)
class StageEstimate:
    """One device group of one pipeline (all its chunks under interleaving)."""

    pipeline: int
    stage: int
    gpu: str
    tp: int
    layers: tuple[int, int]
    """[start, end) of the group's layers (under interleaving: first chunk's start, last
    chunk's end; the chunks in between belong to other groups: see `chunks`)."""
    fwd_ms: float
    """Forward time of one micro-batch on this stage (compute + TP communication)."""
    bwd_ms: float
    """Backward time of one micro-batch (incl. recomputation)."""
    peak_memory_gib: float
    memory_capacity_gib: float
    optimizer_gib: float = 0.0
    """Optimizer state per GPU (fp32 master weights and Adam moments) after ZeRO sharding:
    part of `peak_memory_gib`."""
    chunks: tuple[tuple[int, int], ...] = ()
    """[start, end) of each model chunk the group holds (one, or V under interleaving)."""
    memory: StageMemory | None = None
    """`peak_memory_gib` by part."""
    cp: int = 1
    """Context-parallel degree (the sequence split over cp GPUs)."""
    sharded_gib: float = 0.0
    """The ZeRO-shardable state of one GPU of this stage at its plan's ZeRO stage, before
    sharding: its memory is `peak_memory_gib` - (its shard fraction) × this + this × (its new
    fraction) under another `shard_fraction` (the search's Cephalo-style split)."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "pipeline": self.pipeline,
            "stage": self.stage,
            "gpu": self.gpu,
            "tp": self.tp,
            "layers": list(self.layers),
            "chunks": [list(c) for c in self.chunks or (self.layers,)],
            "fwd_ms": round(self.fwd_ms, 6),
            "bwd_ms": round(self.bwd_ms, 6),
            "peak_memory_gib": round(self.peak_memory_gib, 6),
            "memory_capacity_gib": round(self.memory_capacity_gib, 6),
            **({"memory_gib": self.memory.to_dict()} if self.memory is not None else {}),
            **({"cp": self.cp} if self.cp > 1 else {}),
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class Estimate:
    iteration_time_s: float
    tokens_per_s: float
    mfu: float
    """Model FLOPs (no recompute) per second over the sum of the used GPUs' dense peaks at the
    precision's tensor dtype (fp16's peak where a GPU lacks bf16, TF32's for fp32 training)."""
    usd_per_hour: float | None
    usd_per_million_tokens: float | None
    stages: tuple[StageEstimate, ...]
    bubble_fraction: float
    feasible: bool
    problems: tuple[str, ...] = ()
    """Why the plan is infeasible, with numbers (empty when feasible)."""
    timeline: Any = field(default=None, compare=False, repr=False)
    """The simulator's per-stage busy intervals (for Gantt charts): one Timeline per pipeline."""
    dp_sync_s: float = 0.0
    """The slowest device's exposed gradient all-reduce (after the pipeline flush): the
    data-parallel one plus a tied weight's (`tied_sync_s`)."""
    tied_sync_s: float = 0.0
    """The slowest device's all-reduce of a tied weight's copies (e.g. a GPT head's embedding
    matrix held on the first and last stage), part of `dp_sync_s`."""
    optimizer_s: float = 0.0
    """The slowest device's optimizer step."""

    def to_dict(self) -> dict[str, Any]:
        def r(x: float | None) -> float | None:
            return None if x is None else round(x, 9)

        return {
            "iteration_time_s": r(self.iteration_time_s),
            "tokens_per_s": r(self.tokens_per_s),
            "mfu": r(self.mfu),
            "usd_per_hour": r(self.usd_per_hour),
            "usd_per_million_tokens": r(self.usd_per_million_tokens),
            "bubble_fraction": r(self.bubble_fraction),
            "dp_sync_s": r(self.dp_sync_s),
            "tied_sync_s": r(self.tied_sync_s),
            "optimizer_s": r(self.optimizer_s),
            "feasible": self.feasible,
            "problems": list(self.problems),
            "stages": [s.to_dict() for s in self.stages],
        }
