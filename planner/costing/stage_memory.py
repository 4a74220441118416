"""Memory of one GPU of a stage at its peak, by part: weights, gradients, optimizer state
(ZeRO 0-3, uneven shard fractions, routed experts' own sharding), activations in flight,
workspace, context parallelism's gathered K/V. The peak is the sum of the parts, one
arithmetic."""

from __future__ import annotations

from cost_models.memory import FRAMEWORK_OVERHEAD_GIB, GIB
from planner.costing.result import StageMemory
from planner.costing.stage_cost import StageCost

__all__ = ["shardable_gib", "stage_memory", "stage_peak_memory_gib"]


def stage_peak_memory_gib(cost: StageCost, inflight_microbatches: float,
                          zero1_dp: int = 1, zero: int = 1,
                          gathered_params: float = 0.0, ep: int = 1,
                          fraction: float | None = None) -> float:
    """Peak memory of one GPU of the stage: model state sharded over `zero1_dp` at ZeRO stage
    `zero` (1: optimizer state, 2: and gradients, 3: and weights, plus `gathered_params` held
    whole at once; routed experts' optimizer state over zero1_dp / ep), activations of the
    in-flight micro-batches, recompute transient, framework overhead. `fraction`: the share of
    the sharded state this GPU keeps (a plan's `shard_fraction`; default 1 / zero1_dp)."""
    # One arithmetic, kept in `stage_memory`: the peak is the sum of its parts.
    return stage_memory(cost, inflight_microbatches, zero1_dp, zero, gathered_params, ep=ep,
                        fraction=fraction).total_gib


def stage_memory(cost: StageCost, inflight_microbatches: float, zero1_dp: int = 1,
                 zero: int = 1, gathered_params: float = 0.0, ep: int = 1,
                 fraction: float | None = None) -> StageMemory:
    """What one GPU of the stage holds at its peak, by part (arguments as in
    `stage_peak_memory_gib`, which is their sum)."""
    keep = fraction if fraction is not None and zero1_dp > 1 else 1 / max(zero1_dp, 1)
    shed = 1 - keep
    opt = cost.optimizer_bytes_per_gpu
    expert_opt = cost.expert_optimizer_bytes_per_gpu
    expert_dp = max(zero1_dp // max(ep, 1), 1)
    if fraction is not None and zero1_dp > 1:
        expert_dp = 1 / min(1.0, keep * max(ep, 1))  # the expert group's share, scaled alike
    # Weights and gradients are the rest of the state, one half each (2 + 2 B or 4 + 4 B).
    half = (cost.static_bytes_per_gpu - opt) / 2
    per_param = half / cost.params_per_gpu if cost.params_per_gpu else 0.0
    # Routed experts' weights and gradients shard like their optimizer state, over the
    # expert-data-parallel group zero1_dp / ep only (the other ep ranks hold other experts).
    dense_half, expert_half = _split_half(half, opt, expert_opt)
    half_shed = dense_half * shed + expert_half * (1 - 1 / expert_dp)
    weights = grads = half
    if zero >= 2:
        grads -= half_shed
    if zero >= 3:
        weights -= half_shed
        weights += gathered_params * per_param  # the gathered weights and their gradients
        grads += gathered_params * per_param
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


def shardable_gib(cost: StageCost, zero: int, ep: int = 1) -> float:
    """GiB of one GPU's state that ZeRO stage `zero` shards, before sharding: the slope of its
    peak in its shard fraction f (peak = the rest + f × this), read from the parts
    `stage_memory` sums. Optimizer state always (the routed experts' part counted ep times:
    their state is split over the DP / ep expert-data-parallel group, so an f share holds
    f × ep of this GPU's expert state, up to all of it at f = 1 / ep), gradients from ZeRO-2,
    weights from ZeRO-3. 0 without ZeRO."""
    if zero < 1:
        return 0.0
    opt = cost.optimizer_bytes_per_gpu
    expert_opt = cost.expert_optimizer_bytes_per_gpu
    half = (cost.static_bytes_per_gpu - opt) / 2  # weights, and gradients (stage_memory)
    dense_half, expert_half = _split_half(half, opt, expert_opt)
    state = (opt - expert_opt) + expert_opt * max(ep, 1)
    if zero >= 2:
        state += dense_half + expert_half * max(ep, 1)
    if zero >= 3:
        state += dense_half + expert_half * max(ep, 1)
    return state / GIB


def _split_half(half: float, opt: float, expert_opt: float) -> tuple[float, float]:
    """(dense, routed-expert) parts of `half` (the weights' or the gradients' bytes): Adam's
    bytes per parameter are the same for every parameter, so the experts' share of the
    optimizer state is their share of the parameters."""
    expert = half * expert_opt / opt if opt > 0 else 0.0
    return half - expert, expert
