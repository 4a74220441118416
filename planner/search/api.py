"""`plan(model, cluster, ...)`: the public entry point of the search.

Checks the request, runs the shape search (`engine.Search`), re-costs the candidates (and
their interleaved variants) with `estimate`, and ranks them by it: least iteration time, or
least $ per million tokens, within an optional $/h budget. Ties fall to a total order on the
plans' contents, so the same inputs give the same bytes.
"""

from __future__ import annotations

import functools
import gc
import math
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from cost_models.profiles import ProfileSet
from planner.api_checks import (
    check_budget,
    check_count,
    check_flag,
    check_profiles,
    check_schedules,
    check_sizes,
    framework_arg,
)
from planner.costing.estimate import sharding_estimator, with_prediction
from planner.costing.framework import DEFAULT_FRAMEWORK, FRAMEWORKS, Framework
from planner.costing.resolve import resolve_cluster, resolve_model
from planner.costing.result import Estimate
from planner.errors import HetplanError
from planner.limits import MAX_MICROBATCHES, limit_text
from planner.schema import Plan
from planner.search.certify import bounds, certify
from planner.search.engine import (
    _COST_ALL_BELOW,
    _COST_TOP,
    _INTERLEAVE_TOP,
    _MAX_WORK,
    _SMALL_CLUSTER,
    OBJECTIVES,
    Search,
    by_score,
    default_batch,
    model_spec,
    plan_key,
)
from planner.search.explain import explain_infeasible
from planner.search.interleave import interleaved_variant
from planner.search.refine import refine
from planner.search.result import SearchResult, SearchStats
from planner.search.seeds import megatron_layouts
from planner.search.shapes import LARGE_CLUSTER
from planner.search.sharding import best_sharding

__all__ = ["SCHEDULES", "plan"]

_REFINE_KINDS = 3
"""Refinement also starts from the best plan of up to this many sets of GPU types."""
_REFINE_MAX = 240
_REFINE_MIN = 4
_REFINE_RANK_ESTIMATES = 1500
_GPIPE_TOP = 2
"""Fast mode: GPipe variants of this many of the best 1F1B candidates."""
"""Refinement allowance: this many estimate-ranks, between _REFINE_MIN and _REFINE_MAX
estimates (a count, not a time: the result is deterministic)."""
SCHEDULES = ("1f1b", "gpipe", "interleaved")
"""The default space: every schedule the estimate prices (interleaved as V = 2 variants)."""


def gpipe_variants(p: Plan) -> list[Plan]:
    """`p` under GPipe: its stages as they are, and all on full recompute (GPipe holds every
    micro-batch in flight, so a 1F1B plan's memory often needs it)."""
    out = [p.model_copy(update={"schedule": "gpipe", "predicted": None})]
    if any(st.recompute != "full" for pipe in p.pipelines for st in pipe.stages):
        pipes = tuple(pipe.model_copy(update={"stages": tuple(
            st.model_copy(update={"recompute": "full"}) for st in pipe.stages)})
            for pipe in p.pipelines)
        out.append(out[0].model_copy(update={"pipelines": pipes}))
    return out


def _refine(costed: list, consider: Callable, wanted: Sequence[str], sizes: Sequence[int],
            spent_before: int) -> int:
    """Hill-climb from the best plan and from the best of each other schedule (so that an
    interleaved plan gets its uneven chunk boundaries); returns the estimates spent, -1 when
    the plans are too large to refine."""
    starts, schedules_seen, kinds_seen = [], set(), set()
    for rank, p, _ in costed:  # sorted best first
        # Also the best plan of each set of GPU types used: moves keep GPUs or free them,
        # so a walk cannot reach another type's plans.
        kinds = frozenset(st.gpu for pipe in p.pipelines for st in pipe.stages)
        if p.schedule not in schedules_seen or (kinds not in kinds_seen
                                                 and len(kinds_seen) < _REFINE_KINDS):
            starts.append((rank, p))
        schedules_seen.add(p.schedule)
        kinds_seen.add(kinds)
    # Estimates cost about linearly in the plan's ranks: the walk's allowance is a count
    # scaled by them (deterministic, unlike a time limit), the best plan's walk gets half.
    ranks = max(len(costed[0][1].ranks), 1)
    total = min(_REFINE_MAX, _REFINE_RANK_ESTIMATES // ranks)
    if total < _REFINE_MIN:
        return -1  # plans this large: each estimate (with the sharding post-pass) costs too much
    spent = 0
    for k, (rank, p) in enumerate(starts):
        allowance = total // 2 if k == 0 else total // (2 * max(len(starts) - 1, 1))
        _, used = refine(p, rank, consider, wanted, sizes, allowance)
        spent += used
    return spent


def _reduced_notes(search: Search, wanted: Sequence[str], scheds: Sequence[str], raw: int,
                   recosted: int, small: bool, refined: int) -> tuple[str, ...]:
    """Every reduction of the space that may have lost a plan the estimate rates better."""
    out = [f"the program ranks pipelines by the 1F1B closed form; the estimate's event "
           f"simulation judged only the {recosted} plans re-costed"
           + ("" if small else f" (best of {raw} candidates by the closed form)")]
    if "gpipe" in wanted and "gpipe" not in scheds:
        out.append(f"GPipe: only the {_GPIPE_TOP} best 1F1B candidates' stages under GPipe "
                   "(as they are or on full recompute), no GPipe programs (fast mode; "
                   "--schedule gpipe runs them)")
    if "interleaved" in wanted:
        out.append(f"interleaved: V = 2 only, from the {_INTERLEAVE_TOP} best 1F1B candidates "
                   "(each device's layers, chunk boundaries then moved by the local "
                   "refinement only)")
    if refined < 0:
        out.append("no local refinement: the plan has more than "
                   f"{_REFINE_RANK_ESTIMATES // _REFINE_MIN} ranks")
    if search.max_caps <= 1:
        out.append("only the tightest bottleneck cap solved per shape (fast mode, over "
                   f"{_SMALL_CLUSTER} GPUs)")
    if not small:
        out.append("heterogeneous plans combine classes solved alone, from one-group islands "
                   "only, the best 2 replica counts each (fast mode)")
    if search.coarse:
        out.append(f"{search.coarse} programs limited stages to whole TP units (TP ≥ 2) to "
                   f"bound their GPU-budget grid")
    if search.skipped_mixed:
        out.append(f"over {LARGE_CLUSTER} GPUs: each pipeline uses one GPU group "
                   "(pipelines of different groups still run side by side)")
    if search.skipped_work:
        out.append(f"{search.skipped_work} shapes skipped: their program would exceed "
                   f"{_MAX_WORK:.0e} steps even at the largest TP unit")
    if search.skipped_same_budget:
        out.append(f"{search.skipped_same_budget} shapes skipped: fewer replicas of the same "
                   "per-pipeline budget than a shape searched")
    if search.pruned:
        out.append(f"{search.pruned} shapes pruned by the layer-work bound against the best "
                   "estimate (safe for the estimate, not for the closed form)")
    return tuple(out)


def _at_seq_len(model: Any, seq_len: int) -> Any:
    from planner.graph import LayerGraph, load_model

    if isinstance(model, LayerGraph):
        if model.seq_len != seq_len:
            raise HetplanError(f"graph {model.name} was measured at seq_len {model.seq_len}, not "
                               f"{seq_len}; pass a Model or ModelSpec to change the length")
        return model
    return load_model(model, seq_len=seq_len)


_F = TypeVar("_F", bound=Callable[..., Any])


def _frozen_heap(fn: _F) -> _F:
    """Run `fn` with the objects that exist when it starts kept out of the collector's scans.

    The search allocates many short-lived containers, so the cyclic collector runs often; a
    full collection walks every tracked object, and what a plan() call meets already (loaded
    modules, the model, the cluster, profile tables: about 300 k objects) cannot become garbage
    during it. Frozen (`gc.freeze`), they are skipped: the one full collection bench-64 makes
    cost 0.3-0.5 s of its ~2 s. Unfrozen after, unless the caller had frozen objects itself."""
    @functools.wraps(fn)
    def run(*args: Any, **kwargs: Any) -> Any:
        if gc.get_freeze_count() or not gc.isenabled():
            return fn(*args, **kwargs)
        gc.freeze()
        try:
            return fn(*args, **kwargs)
        finally:
            gc.unfreeze()
    return run  # type: ignore[return-value]


@_frozen_heap
def plan(model: Any, cluster: Any, *, global_batch_size: int | None = None,
         objective: str = "throughput", budget_usd_per_hour: float | None = None,
         top_k: int = 5, micro_batch_sizes: Sequence[int] | None = None,
         schedules: Sequence[str] | None = None, sequence_parallel: bool = False,
         profiles: ProfileSet | None = None,
         progress: Callable[[float, str], None] | None = None,
         framework: Framework | str = DEFAULT_FRAMEWORK, seq_len: int | None = None
         ) -> SearchResult:
    """The best plan for `model` on `cluster` (and the top-k), as `estimate` ranks them.

    `objective`: "throughput" (least iteration time) or "cost" (least $ per million tokens);
    `budget_usd_per_hour` keeps only plans whose GPUs cost at most that. Raises
    InfeasibleError, with the numbers, when nothing fits. `framework` is the runtime that
    will run the plan (a record or its CLI name, e.g. "megatron"; default: hetplan's;
    `planner.costing.framework`), so that the search prices what that runtime does.
    `seq_len` plans another training sequence length than the model's (a Model, ModelSpec,
    name or file; see `planner.load_model`). Bad arguments raise ArgumentError /
    ArgumentTypeError (ValueError / TypeError), one line.
    """
    start = time.perf_counter()
    framework = framework_arg(framework)
    if global_batch_size is not None:
        check_count("global_batch_size", global_batch_size)
    check_count("top_k", top_k)
    micro_batch_sizes = check_sizes("micro_batch_sizes", micro_batch_sizes)
    budget_usd_per_hour = check_budget(budget_usd_per_hour)
    schedules = check_schedules(schedules)
    check_flag("sequence_parallel", sequence_parallel)
    check_profiles(profiles)
    if seq_len is not None:
        check_count("seq_len", seq_len)
        model = _at_seq_len(model, seq_len)
    if objective not in OBJECTIVES:
        raise HetplanError(f"objective {objective!r} is not one of {', '.join(OBJECTIVES)}")
    graph, precision = resolve_model(model)
    cluster = resolve_cluster(cluster)
    spec = model_spec(model)
    gbs = global_batch_size if global_batch_size is not None else default_batch(spec)
    if gbs < 1:
        raise HetplanError(f"global batch size must be >= 1, got {gbs}")
    if top_k < 1:
        raise HetplanError(f"top_k must be >= 1, got {top_k}")
    sizes = sorted({b for b in (micro_batch_sizes or (1, 2, 4, 8)) if b >= 1 and gbs % b == 0})
    if not sizes:
        raise HetplanError(f"no micro-batch size in {list(micro_batch_sizes or ())} divides the "
                           f"global batch {gbs}")
    fewest = gbs // (sizes[-1] * max(1, cluster.world_size))
    if fewest > MAX_MICROBATCHES:
        raise HetplanError(f"global batch {gbs} needs at least {fewest:,} micro-batches per "
                           f"pipeline on {cluster.world_size} GPUs at micro-batch {sizes[-1]}, "
                           f"above hetplan's limit of {limit_text(MAX_MICROBATCHES)}; lower "
                           "--global-batch")
    wanted = tuple(dict.fromkeys(schedules or SCHEDULES))
    for s in wanted:
        if s not in ("1f1b", "gpipe", "interleaved"):
            raise HetplanError(f"schedule {s!r} is not one of 1f1b, gpipe, interleaved")
    # Interleaved plans are derived from 1F1B ones (same devices, V chunks per device).
    scheds = tuple(dict.fromkeys("1f1b" if s == "interleaved" else s for s in wanted))
    small_cluster = cluster.world_size <= _SMALL_CLUSTER
    if not small_cluster and "1f1b" in scheds and "gpipe" in scheds and schedules is None:
        # Fast mode, default space: GPipe plans come from the 1F1B candidates (same stages,
        # as they are or all full recompute); GPipe programs run when GPipe is asked for.
        scheds = tuple(s for s in scheds if s != "gpipe")
    search = Search(graph, precision, cluster, spec, gbs, objective_name=objective,
                     budget=budget_usd_per_hour, sequence_parallel=sequence_parallel,
                     profiles=profiles, progress=progress, framework=framework)
    search.allowed = wanted
    raw = search.run(sizes, scheds)
    raw = by_score(raw)  # the order of the key (score, repr(contents))
    small = len(raw) <= _COST_ALL_BELOW and search.small
    chosen = raw if small else raw[:max(_COST_TOP, 2 * top_k)]
    costed: list[tuple[tuple, Plan, Estimate]] = []
    seen: set[tuple] = set()
    tied = any(layer.tied_params for layer in graph.layers)

    def consider(p: Plan) -> tuple[tuple, Estimate] | None:
        """Re-cost `p` once; keep it when feasible and within the budget."""
        key = plan_key(p)
        if key in seen:
            return None
        seen.add(key)
        if p.schedule not in wanted:
            return None  # a schedule filter holds for every source of plans (seeds included)
        if p.sequence_parallel and any(
                graph.seq_len % (st.tp * (2 * st.cp if (st.cp or 1) > 1 else 1))
                for pipe in p.pipelines for st in pipe.stages):
            return None  # the runtime cannot slice this sequence over that TP (plan_check)
        # The ZeRO stage (and uneven shard fractions) chosen by estimate (sharding.py). Under
        # hetplan's runtime tied embedding/head weights stay on the slices (runtime/fsdp.py),
        # which estimate prices at ZeRO-1 (zero_runs.py): a tied model is searched up to
        # ZeRO-1 there. Stacks that shard by their own rules get every stage they run.
        fsdp_only = framework.zero_beyond_fsdp_runs_as_zero1
        max_zero = min(framework.max_zero, 1) if tied and fsdp_only else framework.max_zero
        try:
            hit = search.judged.get(key)
            if hit is not None and hit[0] == p:  # priced already to set the incumbent
                judge, first = hit[1], hit[2]

                def cost(q: Plan, p: Plan = p) -> Estimate:
                    return first if q is p else judge(q)
            else:
                cost = sharding_estimator(graph, cluster, p, profiles=profiles,
                                          framework=framework)
            found = best_sharding(p, cost, max_zero, fsdp_only=fsdp_only)
        except HetplanError:
            return None  # a refinement move the estimate's rules refuse (e.g. Megatron's)
        if found is None:
            return None
        p, est = found
        if est.feasible and (budget_usd_per_hour is None or (
                est.usd_per_hour is not None
                and est.usd_per_hour <= budget_usd_per_hour + 1e-9)):
            rank = search.rank_key(est, p)
            costed.append((rank, p, est))
            return rank, est
        return None

    for rank, entry in enumerate(chosen):
        variants = search.plans(entry)
        if "interleaved" in wanted and rank < _INTERLEAVE_TOP:
            variants += [q for q in (interleaved_variant(p) for p in variants) if q is not None]
        if "gpipe" in wanted and "gpipe" not in scheds and rank < _GPIPE_TOP:
            variants += [q for p in variants if p.schedule == "1f1b" for q in gpipe_variants(p)]
        for p in variants:
            consider(p)
    for seed in megatron_layouts(graph, cluster, gbs, sizes, len(graph.layers)):
        # Embed the same specs as the search's own plans (self-contained plan files), in
        # every schedule asked for: a Megatron layout runs under GPipe or interleaving too.
        base = Plan.model_validate({**seed.to_dict(), "model": spec, "cluster": cluster.spec})
        consider(base)
        if "gpipe" in wanted:
            for q in gpipe_variants(base):
                consider(q)
        if "interleaved" in wanted:
            variant = interleaved_variant(base)
            if variant is not None:
                consider(variant)
    if not costed:
        raise explain_infeasible(graph, cluster, search, sizes, budget_usd_per_hour)
    costed.sort(key=lambda c: c[0])
    refined = _refine(costed, consider, wanted, sizes, len(seen))
    costed.sort(key=lambda c: c[0])
    top = costed[:top_k]
    name = next((k for k, f in FRAMEWORKS.items() if f == framework), None)
    plans = tuple(with_prediction(p, e, name) for _, p, e in top)
    time_lb, usd_lb = bounds(search, sizes)
    best_est = top[0][2]
    if objective == "cost":
        usd = best_est.usd_per_million_tokens  # 0.0 is a real price (free GPUs), None is none
        cert = certify(math.inf if usd is None else usd, usd_lb)
    else:
        cert = certify(best_est.iteration_time_s, time_lb)
    notes = () if cert.exact else _reduced_notes(search, wanted, scheds, len(raw), len(seen), small,
                                             refined)
    stats = SearchStats(shapes=search.shapes, shapes_pruned=search.pruned,
                        programs=search.programs, candidates=len(raw), costed=len(seen),
                        seconds=time.perf_counter() - start, exact=cert.exact, notes=notes,
                        objective=objective, lower_bound=cert.lower_bound,
                        gap_pct=cert.gap_pct)
    return SearchResult(best=plans[0], candidates=plans, estimates=tuple(e for _, _, e in top),
                        stats=stats)
