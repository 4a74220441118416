"""Plan one model on several clusters and rank them: throughput, cost, time to train.

Each row's numbers are `planner.estimate` of the plan `planner.search.plan` picks, so they are
the same figures `hetplan plan` / `hetplan estimate` print for those inputs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from cost_models.profiles import ProfileSet
from planner.cluster.model import Cluster
from planner.costing.framework import DEFAULT_FRAMEWORK, Framework
from planner.errors import HetplanError, InfeasibleError
from planner.report.plan_view import plan_seq_len
from planner.schema import Plan

__all__ = ["CompareRow", "best_row", "compare", "gpus_used", "parse_tokens", "plan_row",
           "rank_rows"]

_SUFFIX = {"k": 1e3, "m": 1e6, "b": 1e9, "g": 1e9, "t": 1e12}


@dataclass(frozen=True, slots=True, kw_only=True)
class CompareRow:
    """One cluster's best plan, or why there is none."""

    cluster: str
    feasible: bool
    problem: str = ""
    """Why no plan fits (with numbers), when infeasible."""
    tokens_per_s: float | None = None
    iteration_time_s: float | None = None
    mfu: float | None = None
    usd_per_hour: float | None = None
    """What `estimate` charges for the plan (None when a used GPU has no price)."""
    usd_per_million_tokens: float | None = None
    cluster_usd_per_hour: float | None = None
    """Every GPU of the cluster at its price: what renting all of it costs."""
    train_tokens: float | None = None
    train_time_s: float | None = None
    """Time to train `train_tokens` at this throughput."""
    train_cost_usd: float | None = None
    gpus_used: dict[str, int] = field(default_factory=dict)
    gpus_available: dict[str, int] = field(default_factory=dict)
    stages: int = 0
    """Pipeline stages (device groups) of the first pipeline."""
    pipelines: int = 0
    micro_batch_size: int = 0
    global_batch_size: int = 0
    seq_len: int = 0
    """Tokens per sequence the plan is priced at (0 for an infeasible row)."""
    schedule: str = ""
    plan: Plan | None = field(default=None, compare=False, repr=False)

    def to_dict(self) -> dict[str, Any]:
        def r(x: float | None) -> float | None:
            return None if x is None else round(x, 9)

        return {
            "cluster": self.cluster,
            "feasible": self.feasible,
            "problem": self.problem,
            "tokens_per_s": r(self.tokens_per_s),
            "iteration_time_s": r(self.iteration_time_s),
            "mfu": r(self.mfu),
            "usd_per_hour": r(self.usd_per_hour),
            "usd_per_million_tokens": r(self.usd_per_million_tokens),
            "cluster_usd_per_hour": r(self.cluster_usd_per_hour),
            "train_tokens": self.train_tokens,
            "train_time_s": r(self.train_time_s),
            "train_cost_usd": r(self.train_cost_usd),
            "gpus_used": dict(self.gpus_used),
            "gpus_available": dict(self.gpus_available),
            "stages": self.stages,
            "pipelines": self.pipelines,
            "micro_batch_size": self.micro_batch_size,
            "global_batch_size": self.global_batch_size,
            "seq_len": self.seq_len,
            "schedule": self.schedule,
        }


def gpus_used(plan: Plan, cluster: Cluster) -> dict[str, int]:
    """GPU type -> GPUs the plan uses, in the cluster file's order (types it leaves idle: 0)."""
    used = dict.fromkeys(cluster.gpu_counts(), 0)
    for p in range(len(plan.pipelines)):
        for st in plan.device_groups(p):
            used[st.gpu] = used.get(st.gpu, 0) + len(st.ranks)
    return used


def _cluster_price(cluster: Cluster) -> float | None:
    prices = [g.price_per_gpu_hour for g in cluster.groups]
    if any(p is None for p in prices):
        return None
    return sum(g.gpus * g.price_per_gpu_hour for g in cluster.groups)  # type: ignore[operator]


def plan_row(name: str, cluster: Cluster, plan: Plan, est: Any,
             tokens: float | None = None) -> CompareRow:
    """The row for a plan and its Estimate (`planner.costing.Estimate`)."""
    tps = est.tokens_per_s
    time_s = tokens / tps if tokens and tps > 0 else None
    cost = (time_s / 3600.0 * est.usd_per_hour
            if time_s is not None and est.usd_per_hour is not None else None)
    return CompareRow(
        cluster=name,
        feasible=bool(est.feasible),
        problem="; ".join(est.problems),
        tokens_per_s=tps,
        iteration_time_s=est.iteration_time_s,
        mfu=est.mfu,
        usd_per_hour=est.usd_per_hour,
        usd_per_million_tokens=est.usd_per_million_tokens,
        cluster_usd_per_hour=_cluster_price(cluster),
        train_tokens=tokens,
        train_time_s=time_s,
        train_cost_usd=cost,
        gpus_used=gpus_used(plan, cluster),
        gpus_available=cluster.gpu_counts(),
        stages=len(plan.device_groups(0)),
        pipelines=len(plan.pipelines),
        micro_batch_size=plan.micro_batch_size,
        global_batch_size=plan.global_batch_size,
        seq_len=plan_seq_len(plan) or 0,
        schedule=plan.schedule,
        plan=plan,
    )


def best_row(model: Any, name: str, cluster: Cluster, *, global_batch_size: int | None = None,
             tokens: float | None = None, objective: str = "throughput",
             framework: Framework = DEFAULT_FRAMEWORK,
             profiles: ProfileSet | None = None,
             search_options: dict[str, Any] | None = None) -> CompareRow:
    """Search the best plan on one cluster and estimate it; infeasible becomes a row too.
    `framework`: the runtime both price (default: hetplan's); `profiles`: measured layer
    times (default: the shipped profile files); `search_options`: more keyword arguments
    for `planner.search.plan` (schedules, micro_batch_sizes, budget_usd_per_hour; None
    values are left out)."""
    from planner.costing import estimate
    from planner.search import plan as search_plan

    kwargs: dict[str, Any] = {"objective": objective, "top_k": 1, "framework": framework,
                              "profiles": profiles}
    if global_batch_size is not None:
        kwargs["global_batch_size"] = global_batch_size
    kwargs.update({k: v for k, v in (search_options or {}).items() if v is not None})
    try:
        best = search_plan(model, cluster, **kwargs).best
    except InfeasibleError as exc:
        return CompareRow(cluster=name, feasible=False, problem=str(exc),
                          cluster_usd_per_hour=_cluster_price(cluster),
                          gpus_available=cluster.gpu_counts(), train_tokens=tokens)
    return plan_row(name, cluster, best, estimate(model, cluster, best, framework=framework,
                                                  profiles=profiles), tokens)


def rank_rows(rows: Sequence[CompareRow]) -> list[CompareRow]:
    """Fastest first; infeasible rows last; ties keep the given order."""
    return sorted(rows, key=lambda r: (not r.feasible or r.tokens_per_s is None,
                                       -(r.tokens_per_s or 0.0)))


def compare(model: Any, clusters: Sequence[tuple[str, Cluster]], *,
            global_batch_size: int | None = None, tokens: float | None = None,
            objective: str = "throughput", framework: Framework = DEFAULT_FRAMEWORK,
            profiles: ProfileSet | None = None,
            search_options: dict[str, Any] | None = None) -> list[CompareRow]:
    """Best plan per cluster, ranked by tokens/s."""
    return rank_rows([best_row(model, name, c, global_batch_size=global_batch_size,
                               tokens=tokens, objective=objective, framework=framework,
                               profiles=profiles, search_options=search_options)
                      for name, c in clusters])


def parse_tokens(text: str) -> float:
    """`2e12`, `300B`, `1.5T`, `800M` -> tokens; HetplanError for anything else."""
    raw = text.strip().replace("_", "").replace(",", "")
    scale = _SUFFIX.get(raw[-1:].lower(), 1.0) if raw else 1.0
    try:
        value = float(raw[:-1] if scale != 1.0 else raw) * scale
    except ValueError:
        value = -1.0
    if not value > 0 or value == float("inf"):
        raise HetplanError(f"--tokens {text!r}: give a positive token count, e.g. 2e12, 300B "
                           "or 1.5T")
    return value
