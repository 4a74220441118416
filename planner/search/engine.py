"""The shape search behind `plan`: enumerate shapes, solve each exactly, collect candidates.

Shapes: micro-batch size b (divides the global batch), schedule, an *island* (a set of the
cluster's GPU groups) and a replica count d. An island with d replicas runs d identical
pipelines, each drawing at most ⌊N_g / d⌋ GPUs of every group g in it; `partition.solve` finds
its best pipeline. A plan is one island's pipelines (homogeneous data parallelism, stages
possibly on different GPU types) or several islands' side by side (heterogeneous data
parallelism: pipelines of different shapes, micro-batches split in proportion to speed).
Groups in no island stay idle. Shapes are visited in order of a lower bound and skipped once
the bound exceeds the best estimate found. The candidates with the best objective terms are
re-costed with `estimate`, which alone ranks them.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from cost_models.memory import (
    master_bytes_per_param,
    optimizer_bytes_per_param,
    state_bytes_per_param,
)
from cost_models.profiles import ProfileSet
from planner.cluster.model import Cluster
from planner.costing.estimate import sharding_estimator
from planner.costing.framework import DEFAULT_FRAMEWORK, Framework
from planner.costing.result import Estimate
from planner.errors import HetplanError
from planner.limits import MAX_MICROBATCHES
from planner.schema import Plan
from planner.search.assemble import PLACEMENTS, PipelineClass, build_plan
from planner.search.hetero import heterogeneous_plans, shortlist
from planner.search.order import by_score, plan_key
from planner.search.partition import solve
from planner.search.shapes import islands, shapes_for
from planner.search.tables import (
    OptionCosts,
    cp_degrees,
    ep_degrees,
    option_costs,
    tp_degrees,
)
from planner.search.template import Option, objective

__all__ = ["OBJECTIVES", "Search", "by_score", "default_batch", "model_spec", "plan_key"]

OBJECTIVES = ("throughput", "cost")
_MAX_USAGE_STATES = 1024
"""Largest per-pipeline GPU-budget grid Π(budget_g + 1) a mixed island is solved over exactly."""
_COST_ALL_BELOW = 3000
"""Re-cost every candidate when there are at most this many; else the best by the program."""
_COST_TOP = 16
_COMBINE_EVERY = 16
_INTERLEAVE_TOP = 8
"""Interleaved variants are built from this many of the best 1F1B candidates."""
_MAX_WORK = 2e7
"""Largest n² · stages · budget states · options a program may take outside exhaustive mode."""
_NEAR = 0.5
"""Small clusters: also re-cost every pipeline within 50 % of the program's best objective."""
_SMALL_CLUSTER = 8
"""Up to this many GPUs every bottleneck cap is tried and every candidate re-costed."""

Candidate = tuple[float, tuple, int, str, tuple[PipelineClass, ...], tuple[int, ...]]
"""A search candidate before its plan is built: (score, key, micro-batch size, schedule,
pipeline classes, micro-batches of each pipeline)."""


def model_spec(model: Any) -> dict[str, Any] | None:
    """What plans embed as `model`: a spec dict, or a user's module's layer table."""
    plan_model = getattr(model, "plan_model", None)
    if callable(plan_model):
        return plan_model()
    spec = model if isinstance(model, dict) else getattr(model, "spec", None)
    if spec is None or isinstance(spec, dict):
        return spec
    to_dict = getattr(spec, "to_dict", None)
    return to_dict() if callable(to_dict) else None


def default_batch(spec: dict[str, Any] | None) -> int:
    gbs = ((spec or {}).get("training") or {}).get("global_batch_size")
    if not gbs:
        raise HetplanError("no global batch size: pass --global-batch N (or global_batch_size=) "
                           "or set training.global_batch_size in the model spec")
    return int(gbs)


class Search:
    def __init__(self, graph, precision: str, cluster: Cluster, spec, gbs: int, *,
                 objective_name: str, budget: float | None, sequence_parallel: bool,
                 profiles: ProfileSet | None, progress: Callable[[float, str], None] | None,
                 framework: Framework = DEFAULT_FRAMEWORK):
        self.graph, self.precision, self.cluster, self.spec = graph, precision, cluster, spec
        self.gbs, self.objective, self.budget = gbs, objective_name, budget
        self.sp, self.profiles, self.progress = sequence_parallel, profiles, progress
        self.framework = framework
        self.allowed: tuple[str, ...] = ("1f1b", "gpipe", "interleaved")
        self.n = len(graph.layers)
        self.latency_s = cluster.latency_us * 1e-6
        self.gpus = [g.gpus for g in cluster.groups]
        self.prices = [g.price_per_gpu_hour for g in cluster.groups]
        self.costs: dict[tuple[int, ...], OptionCosts] = {}
        self.cps = cp_degrees(graph)
        self.shapes = self.pruned = self.programs = 0
        self.exact = True
        self.incumbent = math.inf
        self.state_bytes = state_bytes_per_param(precision, framework.fp32_params)
        self.opt_bytes = optimizer_bytes_per_param(precision, framework.fp32_params)
        self.master_bytes = master_bytes_per_param(precision, framework.fp32_params)
        self.memo: dict[tuple, list[PipelineClass]] = {}
        self.experts = sum(layer.expert_params for layer in graph.layers)
        self.fits: dict[tuple, tuple] = {}
        self.tails: dict[tuple, np.ndarray] = {}
        # plan_key -> (plan, its sharding judge, its estimate): plans `refresh_incumbent`
        # priced, which the re-costing meets again.
        self.judged: dict[tuple, tuple[Plan, Callable[[Plan], Estimate], Estimate]] = {}
        self.steps: list[tuple[int, str]] = []
        # plans(): entry contents -> placement -> its Plan (None: unplaceable).
        self.built: dict[tuple, dict[str, Plan | None]] = {}
        self.splits: dict[tuple, tuple] = {}  # heterogeneous_plans' splits, kept
        self.raw_keys: set[tuple] = set()  # combine(): keys of the candidates so far
        self.raw_keyed = 0
        small = sum(self.gpus) <= _SMALL_CLUSTER
        self.small = small
        self.skipped_same_budget = 0
        self.skipped_work = 0
        self.skipped_mixed = 0
        self.coarse = 0
        self.max_caps = 48 if small else 1
        # Cost and budgets pay per GPU used: every GPU count is a candidate, not only the
        # fastest pipeline's, and fewer replicas of the same pipeline are kept.
        self.pays_per_gpu = objective_name == "cost" or budget is not None
        self.near = _NEAR if small else 0.0

    def options(self, b: int) -> list[OptionCosts]:
        out = []
        for g_idx, group in enumerate(self.cluster.groups):
            for tp, ep, cp in itertools.product(tp_degrees(group, self.graph),
                                                ep_degrees(self.graph), self.cps):
                if self.sp and cp > 1 and self.graph.seq_len % (2 * cp * tp):
                    continue  # SP slices each of the 2·cp chunks over TP (plan_check.py)
                key = (g_idx, tp, b, ep, cp)
                if key not in self.costs:
                    self.costs[key] = option_costs(
                        self.graph, self.cluster, g_idx, tp, b, precision=self.precision,
                        sequence_parallel=self.sp, profiles=self.profiles,
                        framework=self.framework, ep=ep, cp=cp)
                out.append(self.costs[key])
        return out

    def island_options(self, opts: list[OptionCosts], island: tuple[int, ...], d: int,
                       zero_dp: int, unit: int, ep_replicas: int = 1, cp: int = 1,
                       ) -> tuple[list[Option], list[tuple[int, int, int, int]]]:
        """Options of `island`; expert parallelism only where its degree divides
        `ep_replicas` (a class alone, its replicas sharing the micro-batches evenly); context
        parallelism `cp` alone (every stage of a pipeline splits the sequence alike)."""
        chosen, devices = [], []
        for c in opts:
            if c.group not in island or c.tp < unit or ep_replicas % c.ep or c.cp != cp:
                continue
            key = (c.group, c.tp, c.micro_batch, zero_dp, d, c.ep, c.cp)
            if key not in self.tails:
                # Shared by every shape with this option and replica count.
                group = self.cluster.groups[c.group]
                self.tails[key] = (c.update_s / max(zero_dp, 1)
                                   + c.dp_sync_s(d, self.latency_s, group))
            tail = self.tails[key]
            chosen.append(Option(slot=island.index(c.group), units=c.tp // unit, costs=c,
                                 tail_s=tail))
            devices.append((c.group, c.tp, c.ep, c.cp))
        return chosen, devices

    def score(self, time_s: float, gpus: dict[int, int]) -> float:
        """What candidates are ordered by before the estimate judges: the program's time, or
        for the cost objective time × $/h of the GPUs used (∝ $ per token)."""
        if self.objective != "cost":
            return time_s
        if any(self.prices[g] is None for g, k in gpus.items() if k):
            return math.inf
        return time_s * sum(self.prices[g] * k for g, k in gpus.items())

    def price_ok(self, gpus: dict[int, int]) -> bool:
        if self.budget is None:
            return True
        if any(self.prices[g] is None for g in gpus if gpus[g]):
            return False
        return sum(self.prices[g] * k for g, k in gpus.items()) <= self.budget + 1e-9

    def solve_shape(self, b: int, schedule: str, island: tuple[int, ...], d: int,
                    pipelines: int | None = None, microbatches: int | None = None,
                    cp: int = 1) -> list[PipelineClass]:
        """Best classes of d pipelines on `island`; alone (the default) or as part of a plan
        with `pipelines` pipelines in all, each of these getting `microbatches`. With `cp` > 1
        (alone only) the d pipelines are d / cp context-parallel blocks sharing the batch."""
        opts = self.options(b)
        total_mb = self.gbs // b
        budgets = tuple(self.gpus[g] // d for g in island)
        if self.budget is not None:
            # A class of d pipelines can afford at most budget / (d · price) GPUs of a group.
            budgets = tuple(k if self.prices[g] is None or self.prices[g] <= 0
                            else min(k, int(self.budget / (d * self.prices[g]) + 1e-9))
                            for g, k in zip(island, budgets, strict=True))
            if not any(budgets):
                return []
        if microbatches is None:
            blocks = d // cp
            m_hi, m_lo = -(-total_mb // blocks), total_mb // blocks
        else:
            m_hi = m_lo = microbatches
        if m_hi > MAX_MICROBATCHES:  # more than a plan may hold (planner.limits)
            return []
        p_all = d if pipelines is None else pipelines
        top_unit = max(self.cluster.groups[g].gpus_per_node for g in island)
        unit = 1
        while True:
            # ep-groups run in lockstep: every block (a pipeline, or a cp-block) the same
            # micro-batch count.
            even = pipelines is None and total_mb % (d // cp) == 0
            options, devices = self.island_options(opts, island, p_all, p_all, unit,
                                                   d if even else 1, cp)
            states = math.prod(k // unit + 1 for k in budgets)
            depth = min(self.n, sum(k // unit for k in budgets))
            work = self.n * self.n * depth * states * max(len(options), 1)
            too_big = (states > _MAX_USAGE_STATES and len(island) > 1) or (
                not self.small and work > _MAX_WORK)
            if not too_big or unit >= top_unit:
                break
            unit *= 2
        if not options or (not self.small and work > _MAX_WORK):
            self.exact = False
            self.skipped_work += 1
            return []
        if unit > 1:
            self.exact = False
            self.coarse += 1
        temps = solve(options, tuple(k // unit for k in budgets), self.n, m_hi, schedule, p_all,
                      min_m=m_lo, max_caps=self.max_caps, near=self.near,
                      fits=self.fits, per_usage=self.pays_per_gpu)
        self.programs += 1
        out = []
        for t in temps:
            gpus = {island[s]: d * u for s, u in enumerate(t.usage)}
            if self.price_ok(gpus):
                out.append(PipelineClass(t, d, tuple(devices)))
        return out

    def run(self, micro_batch_sizes: Sequence[int], schedules: Sequence[str]):
        """Solve shapes by increasing lower bound until the bound passes the best estimate
        found so far; every few shapes, combine islands into heterogeneous plans."""
        self.steps = [(b, sched) for b in micro_batch_sizes for sched in schedules]
        shapes = [sh for b, sched in self.steps for sh in shapes_for(self, b, sched)]
        shapes.sort(key=lambda sh: (sh[0], sh[1], sh[2], len(sh[3]), sh[3], sh[4], sh[5]))
        self.shapes = len(shapes)
        found: dict[tuple[int, str], dict[tuple[int, ...], list[PipelineClass]]] = {}
        raw: list = []
        self.raw_keys, self.raw_keyed = set(), 0
        best_score = math.inf
        for idx, (lb, b, schedule, island, d, cp) in enumerate(shapes):
            if self.progress:
                self.progress(idx / len(shapes), f"micro-batch {b}, {schedule}, "
                              f"groups {list(island)} × {d}" + (f", cp {cp}" if cp > 1 else ""))
            if lb >= self.incumbent:
                self.pruned += len(shapes) - idx
                break
            classes = self.solve_shape(b, schedule, island, d, cp=cp)
            found.setdefault((b, schedule), {}).setdefault(island, []).extend(classes)
            total_mb = self.gbs // b
            blocks = d // cp  # a cp-block's pipelines all run its block's micro-batches
            counts = tuple(total_mb // blocks + (1 if r // cp < total_mb % blocks else 0)
                           for r in range(d))
            fresh = [(self.score(objective(cls.template, -(-total_mb // blocks)),
                                 {island[s]: d * u for s, u in enumerate(cls.template.usage)}),
                      (b, schedule, island, d, cp, cls.template.key()), b, schedule, (cls,),
                      counts)
                     for cls in classes]
            raw.extend(fresh)
            if fresh and min(f[0] for f in fresh) < best_score:
                best_score = min(f[0] for f in fresh)
                self.refresh_incumbent(fresh)
            if idx % _COMBINE_EVERY == _COMBINE_EVERY - 1:
                self.refresh_incumbent(self.combine(found, raw))
        self.combine(found, raw)
        if self.progress:
            self.progress(1.0, "re-costing")
        return raw

    def combine(self, found, raw: list) -> list:
        """Add heterogeneous plans (classes on disjoint islands) to `raw`; returns the new."""
        # Keys of every entry in `raw`, kept across calls (raw only grows).
        seen = self.raw_keys
        seen.update(r[1] for r in raw[self.raw_keyed:])
        new = []
        exhaustive = self.small
        for b, schedule in self.steps:
            total_mb = self.gbs // b
            if exhaustive:
                choices = {isl: list(range(1, min(self.gpus[g] for g in isl) + 1))
                           for isl in islands(len(self.gpus))}
            else:
                # Large clusters: each GPU group's own pipelines side by side (the common
                # heterogeneous-DP shape); mixed islands join only in exhaustive mode.
                choices = {isl: shortlist(lst, total_mb)
                           for isl, lst in found.get((b, schedule), {}).items()
                           if lst and len(isl) == 1}

            alone = found.get((b, schedule), {})

            def solver(isl, d, p, m, b=b, schedule=schedule, alone=alone):
                if not exhaustive:
                    # Large clusters: the classes solved alone (memory only gets looser with
                    # more pipelines sharing ZeRO-1); the estimate re-costs the pair exactly.
                    # Expert- and context-parallel classes stay alone (their blocks need
                    # equal shares).
                    return [c for c in alone.get(isl, []) if c.replicas == d and all(
                        c.devices[st.option][2:] == (1, 1) for st in c.template.stages)]
                key = (b, schedule, isl, d, p, m)
                if key not in self.memo:
                    self.memo[key] = self.solve_shape(b, schedule, isl, d, pipelines=p,
                                                      microbatches=m)
                return self.memo[key]

            for score, key, combo, counts in heterogeneous_plans(
                    solver, choices, total_mb, per_island=16 if exhaustive else 1,
                    splits=self.splits):
                full = (b, schedule, key)
                if full in seen:
                    continue  # an earlier pass's entry
                gpus: dict[int, int] = {}
                for isl, cls in zip((k[0] for k in key), combo, strict=True):
                    for slot, u in enumerate(cls.template.usage):
                        gpus[isl[slot]] = gpus.get(isl[slot], 0) + cls.replicas * u
                if self.price_ok(gpus):
                    seen.add(full)
                    new.append((self.score(score, gpus), full, b, schedule, combo, counts))
        raw.extend(new)
        self.raw_keyed = len(raw)  # the new entries' keys are in `seen` already
        return new

    def refresh_incumbent(self, entries: list) -> None:
        """Estimate the best candidates so the lower-bound pruning has a target."""
        if not entries or self.objective != "throughput" or self.budget is not None:
            return
        for entry in by_score(entries)[:2]:
            for plan in self.plans(entry, first=True):
                if plan.schedule not in self.allowed:
                    continue  # only a plan of the space asked for may prune it
                # `estimate` itself, through the judge the sharding post-pass will want for
                # this very plan (kept: its layout is the costly part).
                judge = sharding_estimator(self.graph, self.cluster, plan,
                                           profiles=self.profiles, framework=self.framework)
                est = judge(plan)
                self.judged[plan_key(plan)] = (plan, judge, est)
                if est.feasible:
                    self.incumbent = min(self.incumbent, est.iteration_time_s)

    def plans(self, entry: Candidate, first: bool = False) -> list[Plan]:
        """The entry's plan under each placement (distinct ones); with `first`, only the first
        placement that places. Built once per entry: the incumbent's refresh and the
        re-costing meet the same entries (plans are immutable, so sharing them is safe)."""
        _, _, b, schedule, classes, counts = entry
        # Everything build_plan reads of the entry.
        key = (b, schedule, tuple(counts),
               tuple((c.template.key(), c.replicas, c.devices) for c in classes))
        built = self.built.setdefault(key, {})
        out: list[Plan] = []
        for placement in PLACEMENTS:
            if placement not in built:
                built[placement] = build_plan(
                    self.cluster, classes, counts, model_spec=self.spec,
                    global_batch_size=self.gbs, micro_batch=b, schedule=schedule,
                    sequence_parallel=self.sp, placement=placement)
            p = built[placement]
            if p is not None and all(p != q for q in out):
                out.append(p)
                if first:
                    break
        return out

    def rank_key(self, est: Estimate, plan: Plan) -> tuple:
        if self.objective == "cost":
            usd = est.usd_per_million_tokens
            return (math.inf if usd is None else usd, est.iteration_time_s, plan_key(plan))
        return (est.iteration_time_s, len(plan.ranks), plan_key(plan))
