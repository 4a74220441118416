"""`plan(model, cluster, ...)`: the public entry point of the search.

Checks the request, runs the shape search (`engine.Search`), re-costs the candidates (and
their interleaved variants) with `estimate`, and ranks them by it: least iteration time, or
least $ per million tokens, within an optional $/h budget. Ties fall to a total order on the
plans' contents, so the same inputs give the same bytes.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

from cost_models.profiles import ProfileSet
from planner.costing.estimate import estimate, with_prediction
from planner.costing.framework import DEFAULT_FRAMEWORK, FRAMEWORKS, Framework
from planner.costing.resolve import resolve_cluster, resolve_model
from planner.costing.result import Estimate
from planner.errors import HetplanError
from planner.limits import MAX_MICROBATCHES, limit_text
from planner.schema import Plan
from planner.search.engine import (
    _COST_ALL_BELOW,
    _COST_TOP,
    _INTERLEAVE_TOP,
    _LARGE_CLUSTER,
    _MAX_WORK,
    OBJECTIVES,
    Search,
    default_batch,
    model_spec,
    plan_key,
)
from planner.search.explain import explain_infeasible
from planner.search.interleave import interleaved_variant
from planner.search.result import SearchResult, SearchStats
from planner.search.seeds import megatron_layouts
from planner.search.sharding import best_sharding

__all__ = ["plan"]


def _reduced_notes(search: Search) -> tuple[str, ...]:
    out = []
    if search.coarse:
        out.append(f"{search.coarse} programs limited stages to whole TP units (TP ≥ 2) to "
                   f"bound their GPU-budget grid")
    if search.skipped_mixed:
        out.append(f"over {_LARGE_CLUSTER} GPUs: each pipeline uses one GPU group "
                   "(pipelines of different groups still run side by side)")
    if search.skipped_work:
        out.append(f"{search.skipped_work} shapes skipped: their program would exceed "
                   f"{_MAX_WORK:.0e} steps even at the largest TP unit")
    if search.skipped_same_budget:
        out.append(f"{search.skipped_same_budget} shapes skipped: fewer replicas of the same "
                   "per-pipeline budget than a shape searched")
    return tuple(out)


def _at_seq_len(model: Any, seq_len: int) -> Any:
    from planner.graph import LayerGraph, load_model

    if isinstance(model, LayerGraph):
        if model.seq_len != seq_len:
            raise HetplanError(f"graph {model.name} was measured at seq_len {model.seq_len}, not "
                               f"{seq_len}; pass a Model or ModelSpec to change the length")
        return model
    return load_model(model, seq_len=seq_len)


def plan(model: Any, cluster: Any, *, global_batch_size: int | None = None,
         objective: str = "throughput", budget_usd_per_hour: float | None = None,
         top_k: int = 5, micro_batch_sizes: Sequence[int] | None = None,
         schedules: Sequence[str] | None = None, sequence_parallel: bool = False,
         profiles: ProfileSet | None = None,
         progress: Callable[[float, str], None] | None = None,
         framework: Framework = DEFAULT_FRAMEWORK, seq_len: int | None = None) -> SearchResult:
    """The best plan for `model` on `cluster` (and the top-k), as `estimate` ranks them.

    `objective`: "throughput" (least iteration time) or "cost" (least $ per million tokens);
    `budget_usd_per_hour` keeps only plans whose GPUs cost at most that. Raises
    InfeasibleError, with the numbers, when nothing fits. `framework` is the runtime that
    will run the plan (default: hetplan's; `planner.costing.framework`), so that the search
    prices what that runtime does. `seq_len` plans another training sequence length than the
    model's (a Model, ModelSpec, name or file; see `planner.load_model`).
    """
    start = time.perf_counter()
    if seq_len is not None:
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
    wanted = tuple(schedules or ("1f1b", "interleaved"))
    for s in wanted:
        if s not in ("1f1b", "gpipe", "interleaved"):
            raise HetplanError(f"schedule {s!r} is not one of 1f1b, gpipe, interleaved")
    # Interleaved plans are derived from 1F1B ones (same devices, V chunks per device).
    scheds = tuple(dict.fromkeys("1f1b" if s == "interleaved" else s for s in wanted))
    search = Search(graph, precision, cluster, spec, gbs, objective_name=objective,
                     budget=budget_usd_per_hour, sequence_parallel=sequence_parallel,
                     profiles=profiles, progress=progress, framework=framework)
    raw = search.run(sizes, scheds)
    raw.sort(key=lambda r: (r[0], repr(r[1])))
    small = len(raw) <= _COST_ALL_BELOW and search.small
    chosen = raw if small else raw[:max(_COST_TOP, 2 * top_k)]
    costed: list[tuple[tuple, Plan, Estimate]] = []
    seen: set[tuple] = set()

    def consider(p: Plan) -> None:
        """Re-cost `p` once; keep it when feasible and within the budget."""
        key = plan_key(p)
        if key in seen:
            return
        seen.add(key)
        if p.sequence_parallel and any(graph.seq_len % (st.tp * 2 * (st.cp or 1))
                                       for pipe in p.pipelines for st in pipe.stages):
            return  # the runtime cannot slice this sequence over that TP (plan_check refuses)
        # The ZeRO stage (and uneven shard fractions) chosen by estimate (sharding.py).
        found = best_sharding(p, lambda q: estimate(graph, cluster, q, profiles=profiles,
                                                    framework=framework), framework.max_zero)
        if found is None:
            return
        p, est = found
        if est.feasible and (budget_usd_per_hour is None or (
                est.usd_per_hour is not None
                and est.usd_per_hour <= budget_usd_per_hour + 1e-9)):
            costed.append((search.rank_key(est, p), p, est))

    for rank, entry in enumerate(chosen):
        variants = search.plans(entry)
        if "interleaved" in wanted and rank < _INTERLEAVE_TOP:
            variants += [q for q in (interleaved_variant(p) for p in variants) if q is not None]
        if "1f1b" not in wanted:
            variants = [q for q in variants if q.schedule != "1f1b"]
        for p in variants:
            consider(p)
    for seed in megatron_layouts(graph, cluster, gbs, sizes, len(graph.layers)):
        # Embed the same specs as the search's own plans (self-contained plan files).
        consider(Plan.model_validate({**seed.to_dict(), "model": spec, "cluster": cluster.spec}))
    if not costed:
        raise explain_infeasible(graph, cluster, search, sizes, budget_usd_per_hour)
    costed.sort(key=lambda c: c[0])
    top = costed[:top_k]
    name = next((k for k, f in FRAMEWORKS.items() if f == framework), None)
    plans = tuple(with_prediction(p, e, name) for _, p, e in top)
    stats = SearchStats(shapes=search.shapes, shapes_pruned=search.pruned,
                        programs=search.programs, candidates=len(raw), costed=len(seen),
                        seconds=time.perf_counter() - start,
                        exact=(search.exact and not search.skipped_same_budget
                               and not search.skipped_mixed),
                        notes=_reduced_notes(search))
    return SearchResult(best=plans[0], candidates=plans, estimates=tuple(e for _, _, e in top),
                        stats=stats)
