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
    # A copy, not a re-validation: only the ZeRO stage and the fractions change, and both are
    # valid by construction (0-3; on every pipeline, each in (0, 1], summing to 1).
    pipes = tuple(pipe.model_copy(update={
        "shard_fraction": None if fractions is None else fractions[i]})
        for i, pipe in enumerate(plan.pipelines))
    return plan.model_copy(update={"zero": zero, "predicted": None,
                                   "pipelines": pipes})


def sharding_variants(plan: Plan, max_zero: int = 3, fsdp_only: bool = True) -> list[Plan]:
    """The plan at every ZeRO stage up to `max_zero` that the runtime runs as priced (the plan
    itself first). `fsdp_only` (hetplan's runtime, `Framework.zero_beyond_fsdp_runs_as_zero1`):
    ZeRO-2/3 only where FSDP2 runs them; elsewhere `estimate` prices them as ZeRO-1, so they
    could only tie. A stack that shards by its own rules gets every stage."""
    if len(plan.pipelines) < 2:
        return [plan]
    every = not fsdp_only or _fsdp_runs(plan)
    levels = tuple(z for z in ((0, 1, 2, 3) if every else (0, 1)) if z <= max_zero)
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


def _step_matters(est: Estimate) -> bool:
    """Every device's optimizer step is far above the float resolution of the iteration time,
    so a device whose step shrinks finishes strictly earlier (see `best_sharding`)."""
    steps = [s for tl in est.timeline for s in tl.optimizer_s]
    return bool(steps) and min(steps) > 1e-9 * est.iteration_time_s


def best_sharding(plan: Plan, cost: Callable[[Plan], Estimate], max_zero: int = 3,
                  exhaustive: bool = False, fsdp_only: bool = True
                  ) -> tuple[Plan, Estimate] | None:
    """The estimate-best feasible variant of `plan` (`cost` is `estimate` bound to the model
    and cluster; ZeRO stages up to `max_zero`; `fsdp_only` as in `sharding_variants`), or None
    when no variant fits.

    Two variants are skipped, never the best one (`exhaustive` prices them anyway; the tests
    check both ways agree). Same layout and fractions, the estimate's iteration time is
    monotone in each device's exposed DP traffic and optimizer step (the simulator adds them
    after the device's last backward), and memory falls from ZeRO-0 to -1 to -2:
    - ZeRO-0 against ZeRO-1 (even): more DP bytes per parameter (4 against 3), the whole
      optimizer step instead of 1 / pipelines of it, more memory. With every step well above
      float resolution ZeRO-0 is strictly slower, so it cannot win once ZeRO-1 fits.
    - ZeRO-3 against ZeRO-2: more DP bytes (m · (4 + 2w) / 2 against (4m + w) / 2 for m
      micro-batches and w-byte weights), both hidden behind the same compute, the same step;
      never faster, and a tie goes to the lower stage, so it can win only when ZeRO-2 does not
      fit."""
    best: tuple[tuple, Plan, Estimate] | None = None
    fitting: dict[tuple[int, tuple | None], Estimate] = {}  # (zero, fractions) -> estimate

    def offer(p: Plan, est: Estimate) -> None:
        nonlocal best
        if not est.feasible:
            return
        fitting[(p.zero_stage, p.shard_fractions if p.pipelines[0].shard_fraction is not None
                 else None)] = est
        key = (est.iteration_time_s, p.zero_stage, p.pipelines[0].shard_fraction is not None)
        if best is None or key < best[0]:
            best = (key, p, est)

    def dominated(p: Plan) -> bool:
        if exhaustive or p.pipelines[0].shard_fraction is not None:
            return False
        if p.zero_stage == 0:
            z1 = fitting.get((1, None))
            return z1 is not None and _step_matters(z1)
        return p.zero_stage == 3 and (2, None) in fitting

    variants = sharding_variants(plan, max_zero, fsdp_only)
    # The plan itself first (its estimate also serves a caller's validation), then the stages
    # the skips above are judged against (1, 2) before those they skip (0, 3).
    order = variants[:1] + sorted(variants[1:], key=lambda q: q.zero_stage in (0, 3))
    for p in order:
        if p is not order[0] and dominated(p):
            continue
        est = cost(p)
        offer(p, est)
        if p.zero_stage >= 1 and not _identical(p):
            fractions = cephalo_fractions(p, est)
            if fractions is not None:
                q = _with(p, p.zero_stage, fractions)
                offer(q, cost(q))
    return None if best is None else (best[1], best[2])
