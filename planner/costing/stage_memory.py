"""Memory of one GPU of a stage at its peak, by part: weights, gradients, optimizer state
(ZeRO 0-3, uneven shard fractions, routed experts' own sharding), activations in flight,
workspace, context parallelism's gathered K/V. The peak is the sum of the parts, one
arithmetic."""

from __future__ import annotations

from cost_models.memory import FRAMEWORK_OVERHEAD_GIB, GIB
from planner.costing.result import StageMemory
from planner.costing.stage_cost import StageCost

__all__ = ["on_fsdp2", "shardable_gib", "stage_memory", "stage_peak_memory_gib"]


def stage_peak_memory_gib(cost: StageCost, inflight_microbatches: float,
                          zero1_dp: int = 1, zero: int = 1,
                          gathered_params: float = 0.0, ep: int = 1,
                          fraction: float | None = None) -> float:
    """Peak memory of one GPU of the stage: model state sharded over `zero1_dp` at ZeRO stage
    `zero` (1: optimizer state, 2: and gradients, 3: and weights, plus `gathered_params` held
    whole at once; routed experts' optimizer state over zero1_dp / ep), activations of the
    in-flight micro-batches, recompute transient, framework overhead. `fraction`: the share of
    the sharded state this GPU keeps (a plan's `shard_fraction`; default 1 / zero1_dp).

    Under fp32 parameters (`StageCost.gathered_bytes_per_param` > 0, hetplan's runtime) ZeRO
    2-3 over more than one replica is FSDP2 (`zero_runs` prices stages on the runtime's own
    slices at ZeRO-1): `gathered_params` are then the gathered layers' parameters at ZeRO-3
    (the running and the prefetched one) and one layer's at ZeRO-2, whose gradients are whole
    at once while every weight of the stage stays gathered."""
    # One arithmetic, kept in `stage_memory`: the peak is the sum of its parts.
    return stage_memory(cost, inflight_microbatches, zero1_dp, zero, gathered_params, ep=ep,
                        fraction=fraction).total_gib


def on_fsdp2(cost: StageCost, zero1_dp: int, zero: int) -> bool:
    """The stage's state is FSDP2's fp32 shards with gathered 16-bit weights (hetplan's
    runtime at ZeRO-2/3 over more than one replica), not whole weights beside slices."""
    return cost.gathered_bytes_per_param > 0 and zero >= 2 and zero1_dp > 1


def stage_memory(cost: StageCost, inflight_microbatches: float, zero1_dp: int = 1,
                 zero: int = 1, gathered_params: float = 0.0, ep: int = 1,
                 fraction: float | None = None,
                 gathered_grad_bytes: float | None = None) -> StageMemory:
    """What one GPU of the stage holds at its peak, by part (arguments as in
    `stage_peak_memory_gib`, which is their sum). `gathered_grad_bytes`: bytes per parameter
    of the gathered layers' whole gradients where they differ from their weights' (a stack
    that accumulates them in fp32 across micro-batches, `Framework.fsdp_whole_stage_under_pp`);
    None: the weights' bytes."""
    keep = fraction if fraction is not None and zero1_dp > 1 else 1 / max(zero1_dp, 1)
    shed = 1 - keep
    fsdp = on_fsdp2(cost, zero1_dp, zero)
    opt, expert_opt = _optimizer_bytes(cost, zero, fsdp)
    expert_dp = max(zero1_dp // max(ep, 1), 1)
    if fraction is not None and zero1_dp > 1:
        expert_dp = 1 / min(1.0, keep * max(ep, 1))  # the expert group's share, scaled alike
    # Weights and gradients are the rest of a slice's state, one half each (2 + 2 B, or
    # 4 + 4 B in fp32).
    half = (cost.static_bytes_per_gpu - cost.optimizer_bytes_per_gpu) / 2
    per_param = half / cost.params_per_gpu if cost.params_per_gpu else 0.0
    # Routed experts' weights and gradients shard like their optimizer state, over the
    # expert-data-parallel group zero1_dp / ep only (the other ep ranks hold other experts).
    dense_half, expert_half = _split_half(half, cost.optimizer_bytes_per_gpu,
                                          cost.expert_optimizer_bytes_per_gpu)
    half_shed = dense_half * shed + expert_half * (1 - 1 / expert_dp)
    # Whole weights gathered: the training dtype's, or under fp32 parameters FSDP2's 16-bit
    # param_dtype; an autocast region's 16-bit copies where the weights stay fp32 and whole.
    gathered = cost.gathered_bytes_per_param if fsdp else per_param
    weights = half + (0.0 if fsdp else cost.autocast_bytes_per_gpu)
    grads = half
    if zero >= 2:
        grads -= half_shed
    if zero >= 3 or fsdp:  # FSDP2 shards the fp32 parameters at ZeRO-2 too
        weights -= half_shed
    if zero >= 3:
        # The gathered layers' weights and gradients. Under hetplan's FSDP2 (one root per
        # chunk, runtime/fsdp.py) a backward holds one layer's 16-bit gradient and its fp32
        # reduce-scatter input (6 B per parameter; tests/test_runtime_fsdp_root.py); the two
        # layers' 2 B here price 4 of them, or all 8 where the largest is an fp32 token table.
        weights += gathered_params * gathered
        grads += gathered_params * (gathered if gathered_grad_bytes is None
                                    else gathered_grad_bytes)
    elif fsdp:  # ZeRO-2 on FSDP2: resharded only after the step's last backward
        # GEMM weights at the 16-bit param_dtype; norms and token tables stay fp32
        # (runtime/fsdp.py), at the fp32 parameters' own bytes.
        gemm = cost.autocast_bytes_per_gpu / gathered if gathered else 0.0
        weights += gemm * gathered + (cost.params_per_gpu - gemm) * per_param
        grads += gathered_params * gathered
    optimizer = opt - (opt - expert_opt) * shed - expert_opt * (1 - 1 / expert_dp)
    # The gathered K/V of context parallelism is inside the activations and the transient
    # (so the search's tables count it too); shown apart here.
    ctx_act = cost.context_activation_bytes_per_microbatch
    ctx_transient = cost.context_transient_bytes
    return StageMemory(
        weights_gib=weights / GIB, gradients_gib=grads / GIB, optimizer_gib=optimizer / GIB,
        activations_gib=(cost.activation_bytes_per_microbatch - ctx_act)
        * inflight_microbatches / GIB,
        other_gib=(cost.recompute_transient_bytes - ctx_transient) / GIB
        + FRAMEWORK_OVERHEAD_GIB,
        context_gib=(ctx_act * inflight_microbatches + ctx_transient) / GIB)


def _optimizer_bytes(cost: StageCost, zero: int, fsdp: bool) -> tuple[float, float]:
    """(all, routed experts') optimizer bytes before sharding: a slice's master copy only
    where ZeRO slices exist and are not FSDP2's (at ZeRO-0 and under FSDP2 the fp32
    parameters are the masters; `StageCost.master_bytes_per_gpu`)."""
    opt = cost.optimizer_bytes_per_gpu
    expert_opt = cost.expert_optimizer_bytes_per_gpu
    if (zero < 1 or fsdp) and cost.master_bytes_per_gpu and opt > 0:
        moments = 1 - cost.master_bytes_per_gpu / opt  # the same share of every parameter's
        return opt * moments, expert_opt * moments
    return opt, expert_opt


def shardable_gib(cost: StageCost, zero: int, ep: int = 1) -> float:
    """GiB of one GPU's state that ZeRO stage `zero` shards, before sharding: the slope of its
    peak in its shard fraction f (peak = the rest + f × this), read from the parts
    `stage_memory` sums. Optimizer state always (the routed experts' part counted ep times:
    their state is split over the DP / ep expert-data-parallel group, so an f share holds
    f × ep of this GPU's expert state, up to all of it at f = 1 / ep), gradients from ZeRO-2,
    weights from ZeRO-3 (from ZeRO-2 on FSDP2, whose fp32 parameters are sharded). 0 without
    ZeRO. For more than one replica (the only case with a slope)."""
    if zero < 1:
        return 0.0
    fsdp = on_fsdp2(cost, 2, zero)
    opt, expert_opt = _optimizer_bytes(cost, zero, fsdp)
    half = (cost.static_bytes_per_gpu - cost.optimizer_bytes_per_gpu) / 2  # (stage_memory)
    dense_half, expert_half = _split_half(half, cost.optimizer_bytes_per_gpu,
                                          cost.expert_optimizer_bytes_per_gpu)
    state = (opt - expert_opt) + expert_opt * max(ep, 1)
    if zero >= 2:
        state += dense_half + expert_half * max(ep, 1)
    if zero >= 3 or fsdp:
        state += dense_half + expert_half * max(ep, 1)
    return state / GIB


def _split_half(half: float, opt: float, expert_opt: float) -> tuple[float, float]:
    """(dense, routed-expert) parts of `half` (the weights' or the gradients' bytes): Adam's
    bytes per parameter are the same for every parameter, so the experts' share of the
    optimizer state is their share of the parameters."""
    expert = half * expert_opt / opt if opt > 0 else 0.0
    return half - expert, expert
