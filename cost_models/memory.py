"""Memory per GPU: model state, activations held under a pipeline schedule, overhead.

Model state (Adam, mixed precision; Rajbhandari et al., "ZeRO", SC'20, §3.1): 2 B fp16/bf16
weights + 2 B gradients + 12 B fp32 optimizer state (master weights, momentum, variance) =
16 B per parameter; the 12 B part is what ZeRO-1 shards over data parallelism. Pure fp32
training: 4 B weights + 4 B gradients + 8 B Adam moments = 16 B, 8 B shardable.

fp32 parameters under autocast (hetplan's runtime, `Framework.fp32_params`; planner/runtime/
engine.py, zero.py, fsdp.py): 4 B weights + 4 B gradients + 8 B Adam moments, plus a 4 B fp32
master copy only of a ZeRO slice (12 B shardable, 20 B in all at ZeRO-1's f = 1; 16 B at
ZeRO-0, where the parameters are the masters); a 16-bit plan's autocast region adds one
2 B copy of each GEMM weight; FSDP2 gathers 16-bit weights (2 B; 4 B in an fp32 plan).

Activations per transformer block and micro-batch of b sequences (Korthikanti et al.,
"Reducing Activation Recomputation in Large Transformer Models", MLSys 2023, Table 2, 16-bit):
s·b·h·(34 + 5·a·s/h) bytes with no parallelism; with TP t and no sequence parallelism the
10·s·b·h bytes of norm inputs, dropout masks and residuals stay replicated:
s·b·h·(10 + 24/t + 5·a·s/(h·t)); sequence parallelism splits them too. The graph gives the
per-sequence totals; this module splits them across TP.
"""

from __future__ import annotations

__all__ = [
    "FRAMEWORK_OVERHEAD_GIB",
    "GIB",
    "GRAD_REDUCE_BYTES",
    "activation_bytes_per_gpu",
    "autocast_copy_bytes_per_param",
    "dp_sync_bytes_per_param",
    "gathered_bytes_per_param",
    "inflight_microbatches",
    "master_bytes_per_param",
    "optimizer_bytes_per_param",
    "state_bytes_per_param",
]

GIB = float(2**30)

FRAMEWORK_OVERHEAD_GIB = 1.5
"""CUDA context (~0.3-0.5 GiB on recent drivers), NCCL communicator buffers (~0.2-0.5 GiB per
communicator set) and caching-allocator fragmentation; one fixed figure per GPU. Sanity check
against sailor_measured_plans.csv peak memory (which excludes the CUDA context) in
docs/cost-model.md."""


GRAD_REDUCE_BYTES = 4
"""Bytes per parameter the data-parallel gradient reduction moves: fp32, Megatron's default for
bf16 (fp32 main grads), DeepSpeed's `fp32_allreduce` (AMP's config), FSDP's `reduce_dtype`
in torchtitan. With 2 instead, AMP T4 MAPE goes 5.0 -> 5.7 % and het 13.4 -> 19.0 % (Spearman
0.73 -> 0.65)."""


def dp_sync_bytes_per_param(dtype_bytes: int, zero: int, microbatches: int = 1) -> float:
    """Bytes per parameter the data-parallel ring all-reduce is priced at, per iteration.

    A ring all-reduce is a reduce-scatter plus an all-gather of the same bytes. Under ZeRO-1
    and -2 the all-gather carries the updated `dtype_bytes` weights instead of fp32 gradients.
    ZeRO-3 (FSDP, DeepSpeed stage 3) gathers the weights before each layer's forward and again
    before its backward, and reduce-scatters its gradients, for every micro-batch (Rajbhandari
    et al., SC'20, §7.2.2: 1.5× the all-reduce volume at one micro-batch). ZeRO-2 keeps only
    its gradient shard, so it reduce-scatters every micro-batch's gradients.
    """
    if zero >= 3:
        return microbatches * (GRAD_REDUCE_BYTES + 2 * dtype_bytes) / 2
    if zero == 2:
        # Only a shard of the gradients is kept, so each micro-batch's are reduce-scattered
        # as they are produced (DeepSpeed stage 2 reduces every micro-step; hetplan's runtime,
        # FSDP2 with weights kept gathered through the step, the same); weights once.
        return (microbatches * GRAD_REDUCE_BYTES + dtype_bytes) / 2
    return (GRAD_REDUCE_BYTES + dtype_bytes) / 2 if zero else GRAD_REDUCE_BYTES


def state_bytes_per_param(precision: str, fp32_params: bool = False) -> float:
    """Weights + gradients + Adam state per parameter as a ZeRO-1 slice holds it, before
    sharding. `fp32_params`: fp32 weights and gradients (4 + 4 B) beside the slice's fp32
    master and moments (12 B)."""
    return 20.0 if fp32_params else 16.0


def optimizer_bytes_per_param(precision: str, fp32_params: bool = False) -> float:
    """The part of `state_bytes_per_param` that ZeRO-1 shards over DP."""
    if fp32_params:
        return 12.0  # the slice's fp32 master copy + Adam's two moments
    return 8.0 if precision == "fp32" else 12.0


def master_bytes_per_param(precision: str, fp32_params: bool = False) -> float:
    """The part of `optimizer_bytes_per_param` that is a master copy kept only of a ZeRO
    slice: 4 B under `fp32_params` (planner/runtime/zero.py `ShardedOptimizer` clones its
    slice; at ZeRO-0 and under FSDP2 the fp32 parameters are the masters); 0 where the master
    is part of the state at every stage (Megatron's 12 B) or there is none (fp32 training)."""
    return 4.0 if fp32_params else 0.0


def autocast_copy_bytes_per_param(precision: str, fp32_params: bool = False) -> float:
    """Bytes per GEMM weight of the 16-bit copy an autocast region's cast cache keeps through
    the step (fp32 parameters in a 16-bit plan: 2; planner/runtime/engine.py runs the step in
    one region); 0 for fp32 plans and for stacks whose weights are 16-bit already."""
    return 2.0 if fp32_params and precision != "fp32" else 0.0


def gathered_bytes_per_param(precision: str, fp32_params: bool = False) -> float:
    """Bytes per parameter of the whole weights (and gradients) FSDP2 gathers over fp32
    shards: its `MixedPrecisionPolicy(param_dtype=)`, 2 in a 16-bit plan, 4 in an fp32 one
    (planner/runtime/fsdp.py); 0 without `fp32_params` (the weights' own bytes are gathered)."""
    if not fp32_params:
        return 0.0
    return 4.0 if precision == "fp32" else 2.0


def activation_bytes_per_gpu(saved_bytes: float, replicated_bytes: float, tp: int,
                             sequence_parallel: bool) -> float:
    """Split one micro-batch's saved activations across a TP group.

    `replicated_bytes` is the part Megatron TP leaves whole on every rank (norm inputs,
    dropout masks, residuals) unless sequence parallelism splits it too.
    """
    if sequence_parallel or tp == 1:
        return saved_bytes / tp
    rep = min(replicated_bytes, saved_bytes)
    return rep + (saved_bytes - rep) / tp


def inflight_microbatches(schedule: str, stages: int, stage: int, microbatches: int,
                          virtual_stages: int = 1) -> float:
    """Micro-batches whose activations a device holds at its peak, in units of one micro-batch
    through ALL of the device's layers.

    GPipe holds every micro-batch. 1F1B: stage s (0-based) of S holds S - s (Narayanan et al.,
    SC'21, §2.2). Interleaved 1F1B with V chunks: Megatron warms up 2·(S-s-1) + (V-1)·S chunk
    passes and holds one more in steady state, each 1/V of the device's layers
    (megatron/core/pipeline_parallel/schedules.py); for s = 0 that is S + (S-1)/V, Korthikanti §4.
    """
    if schedule == "gpipe":
        return float(microbatches)
    if schedule == "1f1b":
        return float(min(stages - stage, microbatches))
    if schedule == "interleaved":
        chunks = 2 * (stages - stage - 1) + (virtual_stages - 1) * stages + 1
        return min(chunks, microbatches * virtual_stages) / virtual_stages
    raise ValueError(f"unknown schedule {schedule!r}; use 1f1b, gpipe or interleaved")
