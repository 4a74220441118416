"""The search's sharding post-pass: for each candidate plan, the ZeRO stage (0-3) and, over
replicas of different shapes, the per-replica shard fractions, chosen by `estimate`.

Variants of a multi-pipeline plan, all priced by `estimate` (the one judge):
- ZeRO 0 and 1 always; 2 and 3 only over identical replicas without expert or context
  parallelism, where the runtime runs them with FSDP2's even shards, so what is priced is what
  runs.
- Over replicas of different shapes or GPUs, ZeRO-1 with Cephalo's split (Cephalo, 2024,
  heterogeneous FSDP): a replica's share of the sharded state follows the memory it has left
  after its activations and unsharded state, apart from its batch share (which follows its
  speed): f_p ∝ (free GiB of its tightest GPU) / (that GPU's shardable GiB). The runtime cuts
  the ZeRO-1 slices in these proportions.
The best is the feasible variant of least iteration time; ties go to the lower ZeRO stage,
then to even shards (less to go wrong at the same speed).
"""

from __future__ import annotations

from collections.abc import Callable

from planner.costing.result import Estimate
from planner.schema import Plan

__all__ = ["best_sharding", "cephalo_fractions", "sharding_variants"]


def _identical(plan: Plan) -> bool:
    shape = [tuple((st.layers, st.tp, st.ep or 1) for st in p.stages) for p in plan.pipelines]
    return all(s == shape[0] for s in shape)


def _fsdp_runs(plan: Plan) -> bool:
    """The runtime runs ZeRO-2/3 as priced (FSDP2, `runtime/fsdp.py`): identical replicas, no
    expert- or context-parallel stage (those stay on the ZeRO-1 slices)."""
    return _identical(plan) and all((st.ep or 1) == 1 and (st.cp or 1) == 1
                                    for p in plan.pipelines for st in p.stages)


def _with(plan: Plan, zero: int, fractions: tuple[float, ...] | None = None) -> Plan:
    data = plan.to_dict()
    data["zero"], data["zero1"] = zero, zero >= 1
    data.pop("predicted", None)
    for i, pipe in enumerate(data["pipelines"]):
        pipe.pop("shard_fraction", None)
        if fractions is not None:
            pipe["shard_fraction"] = fractions[i]
    return Plan.model_validate(data)


def sharding_variants(plan: Plan, max_zero: int = 3) -> list[Plan]:
    """The plan at every ZeRO stage up to `max_zero` that the runtime runs as priced (the plan
    itself first)."""
    if len(plan.pipelines) < 2:
        return [plan]
    levels = tuple(z for z in ((0, 1, 2, 3) if _fsdp_runs(plan) else (0, 1)) if z <= max_zero)
    return [plan] + [_with(plan, z) for z in levels if z != plan.zero_stage
                     or plan.pipelines[0].shard_fraction is not None]


def cephalo_fractions(plan: Plan, est: Estimate) -> tuple[float, ...] | None:
    """Shard fractions, from `est` of `plan` (a ZeRO plan), proportional to each replica's free
    memory per GiB of its shardable state; None for identical replicas (even is as good) or
    when some replica has no memory left for any share."""
    n = len(plan.pipelines)
    if n < 2 or not plan.zero_stage:
        return None
    keep = plan.shard_fractions
    room: list[float] = []  # per replica: the share its tightest GPU could hold alone
    for p in range(n):
        rows = [r for r in est.stages if r.pipeline == p]
        if any(r.sharded_gib <= 0 for r in rows):
            return None
        room.append(min((r.memory_capacity_gib - r.peak_memory_gib + keep[p] * r.sharded_gib)
                        / r.sharded_gib for r in rows))
    if min(room) <= 0:
        return None
    # f_p = room_p / Σ room: every replica then fills the same part of its free memory, and
    # all fit exactly when Σ room >= 1 (the whole state fits in the free memory of all).
    total = sum(room)
    rounded = [round(r / total, 6) for r in room[:-1]]
    rounded.append(round(1 - sum(rounded), 6))
    if min(rounded) <= 0 or all(abs(f - 1 / n) < 1e-6 for f in rounded):
        return None
    return tuple(rounded)


def best_sharding(plan: Plan, cost: Callable[[Plan], Estimate],
                  max_zero: int = 3) -> tuple[Plan, Estimate] | None:
    """The estimate-best feasible variant of `plan` (`cost` is `estimate` bound to the model
    and cluster; ZeRO stages up to `max_zero`), or None when no variant fits."""
    best: tuple[tuple, Plan, Estimate] | None = None

    def offer(p: Plan, est: Estimate) -> None:
        nonlocal best
        if not est.feasible:
            return
        key = (est.iteration_time_s, p.zero_stage, p.pipelines[0].shard_fraction is not None)
        if best is None or key < best[0]:
            best = (key, p, est)

    for p in sharding_variants(plan, max_zero):
        est = cost(p)
        offer(p, est)
        if p.zero_stage >= 1 and not _identical(p):
            fractions = cephalo_fractions(p, est)
            if fractions is not None:
                q = _with(p, p.zero_stage, fractions)
                offer(q, cost(q))
    return None if best is None else (best[1], best[2])
