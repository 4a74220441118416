"""`estimate(model, cluster, plan) -> Estimate`: time, throughput, MFU, cost and memory of a plan.

Per pipeline: each chunk's forward/backward from `stage_cost` on its GPU type and TP degree,
p2p between consecutive chunks over the link their nodes share, the schedule simulated by
`planner.simulate`. Then the data-parallel gradient all-reduce: per layer, a ring over the GPUs
that hold the same shard of it in every pipeline (heterogeneous DP allowed), over the slowest
link of the ring, after the flush (DeepSpeed's pipeline engine, Megatron without overlap) or,
with `overlap_dp`, hidden behind each device's last micro-batch; then the Adam step (sharded
under ZeRO-1).
Iteration time = the slowest pipeline's drain + the longest tail (sync and step after a
device's last backward, as the simulator lays them out, beyond its pipeline's drain): the
shared all-reduce cannot start before the slowest pipeline has drained.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from cost_models.memory import GRAD_REDUCE_BYTES, inflight_microbatches
from cost_models.moe import DEFAULT_CAPACITY_FACTOR
from cost_models.profiles import ProfileSet
from planner.api_checks import check_capacity_factor, check_profiles, framework_arg
from planner.cluster.model import Cluster, Node
from planner.costing.estimate_share import (
    _device_chunks,
    _merged,
    _p2p,
    _peak_and_price,
    _renumbered,
    _timing,
    _used_gpus,
)
from planner.costing.framework import DEFAULT_FRAMEWORK, Framework
from planner.costing.grad_sync import grad_sync_s
from planner.costing.layer_cost import params_per_gpu
from planner.costing.links import a2a_link, cp_ring_link
from planner.costing.plan_check import check_against
from planner.costing.resolve import resolve_cluster, resolve_model
from planner.costing.result import Estimate, StageEstimate
from planner.costing.stage_cost import StageCost, gemm_params_per_gpu, stage_cost, tp_split
from planner.costing.stage_memory import shardable_gib, stage_memory
from planner.costing.zero_runs import priced_zero_stages
from planner.errors import ArgumentTypeError, SpecError
from planner.graph.layers import Layer, LayerGraph
from planner.schema import Plan
from planner.simulate import StageTiming, simulate

__all__ = ["estimate", "sharding_estimator", "with_prediction"]


@dataclass(slots=True)  # not frozen: built 1024 / TP times per estimate; nothing writes it
class _Device:
    pipeline: int
    index: int
    node: Node
    tp: int
    chunks: tuple[int, ...]
    costs: tuple[StageCost, ...]
    ep: int = 1
    cp: int = 1


def estimate(model: Any, cluster: Cluster | None, plan: Plan, *,
             profiles: ProfileSet | None = None, precision: str | None = None,
             overlap_dp: bool = False, framework: Framework | str = DEFAULT_FRAMEWORK,
             capacity_factor: float = DEFAULT_CAPACITY_FACTOR) -> Estimate:
    """Predict one training iteration of `plan`.

    `model`/`cluster` may be None when the plan embeds them; `profiles` defaults to the shipped
    profile files (`ProfileSet()`: the analytic model alone); `precision` overrides the model
    spec's; `overlap_dp` hides the data-parallel traffic behind each device's last micro-batch
    (forward and backward: FSDP and Megatron's distributed optimizer gather parameters during
    the forward and reduce gradients during the backward) instead of running it after the
    flush (a framework with `dp_overlap` always overlaps). `framework` describes the executing
    framework where it changes the cost (a record or its CLI name; default: hetplan's runtime;
    `planner.costing.framework`). `capacity_factor`: a mixture-of-experts
    layer's busiest expert carries this many times the balanced load (`cost_models/moe.py`).
    Bad arguments raise ArgumentError / ArgumentTypeError (ValueError / TypeError), one line.
    """
    framework = framework_arg(framework)
    capacity_factor = check_capacity_factor(capacity_factor)
    check_profiles(profiles)
    if not isinstance(plan, Plan):
        raise ArgumentTypeError(f"plan: expected a planner.Plan (Plan.load(path) or "
                                f"Plan.from_dict(data)), got {type(plan).__name__}")
    layout = _layout(model, cluster, plan, profiles, precision, framework, capacity_factor)
    check_capacity_factor(capacity_factor, layout.graph)
    return _priced(layout, plan, overlap_dp or framework.dp_overlap, framework)


def sharding_estimator(model: Any, cluster: Cluster | None, plan: Plan, *,
                       profiles: ProfileSet | None = None, precision: str | None = None,
                       overlap_dp: bool = False,
                       framework: Framework | str = DEFAULT_FRAMEWORK,
                       capacity_factor: float = DEFAULT_CAPACITY_FACTOR
                       ) -> Callable[[Plan], Estimate]:
    """`estimate` (same arguments) for `plan` and its copies at other ZeRO stages or shard
    fractions (the search's sharding post-pass prices several per plan). The validation,
    stage costs and p2p of a layout do not depend on `zero` or `shard_fraction`, so
    they are built once and each copy is priced by the same arithmetic as `estimate` (equal
    floats); a plan that differs in anything else gets a full `estimate`. Arguments are
    checked as `estimate` checks them."""
    framework = framework_arg(framework)
    capacity_factor = check_capacity_factor(capacity_factor)
    check_profiles(profiles)
    layout = _layout(model, cluster, plan, profiles, precision, framework, capacity_factor)
    check_capacity_factor(capacity_factor, layout.graph)
    overlap_dp = overlap_dp or framework.dp_overlap

    def judge(q: Plan) -> Estimate:
        if not _same_layout(plan, q):
            return estimate(model, cluster, q, profiles=profiles, precision=precision,
                            overlap_dp=overlap_dp, framework=framework,
                            capacity_factor=capacity_factor)
        return _priced(layout, q, overlap_dp, framework)
    return judge


_SHARDING_FIELDS = frozenset({"zero", "predicted", "pipelines"})


def _same_layout(a: Plan, b: Plan) -> bool:
    """`a` and `b` differ at most in their ZeRO stage and shard fractions."""
    if a is b:
        return True
    da, db = a.__dict__, b.__dict__
    if any(da[k] is not db[k] and da[k] != db[k] for k in da if k not in _SHARDING_FIELDS):
        return False
    return len(a.pipelines) == len(b.pipelines) and all(
        (x.stages is y.stages or x.stages == y.stages) and x.microbatches == y.microbatches
        for x, y in zip(a.pipelines, b.pipelines, strict=True))


@dataclass(frozen=True, slots=True)
class _Layout:
    """What `estimate` derives from a plan's layout alone (not from its ZeRO stage or shard
    fractions): the plan checked against model and cluster, each device's chunk costs, its
    merged stage cost and its chunks' timings."""

    graph: LayerGraph
    precision: str
    rank_node: dict[int, Node]
    used_gpus: dict[str, int]
    latency_s: float
    devices: list[list[_Device]]
    merged: list[list[StageCost]]  # per pipeline, per device: its chunks' costs summed
    chunks: list[tuple[StageTiming, ...]]  # per pipeline, per chunk in layer order


def _layout(model: Any, cluster: Cluster | None, plan: Plan, profiles: ProfileSet | None,
            precision: str | None, framework: Framework, capacity_factor: float) -> _Layout:
    graph, spec_precision = resolve_model(model, plan)
    precision = precision or spec_precision
    cluster = resolve_cluster(cluster, plan)
    # The one plan validator (model- and cluster-dependent rules); raises one SpecError line.
    rank_node = check_against(plan, graph, cluster)
    used_gpus = _used_gpus(rank_node)
    latency_s = cluster.latency_us * 1e-6
    v = plan.virtual_stages
    mb = plan.micro_batch_size

    devices: list[list[_Device]] = []
    timings: list[tuple[StageTiming, ...]] = []
    # Data-parallel replicas repeat their stages: a stage without ep or cp links costs the same
    # on every node of its group (stage_cost reads only the group's GPU and link).
    same: dict[tuple, StageCost] = {}
    hops: dict[tuple, float] = {}  # p2p times, shared alike (`_p2p`)
    same_timings: dict[tuple, tuple[StageTiming, ...]] = {}
    for p, pipe in enumerate(plan.pipelines):
        s_count = len(pipe.stages) // v
        costs: list[StageCost] = []
        chunk_nodes: list[Node] = []
        for j, st in enumerate(pipe.stages):
            node = rank_node[st.ranks[0]]
            gpu = node.group.gpu
            ep = st.ep or 1
            ep_link = None
            if ep > 1:  # one GPU per pipeline of the stage's ep-block (schema.py)
                block = range(p // ep * ep, p // ep * ep + ep)
                ep_link = a2a_link([rank_node[plan.pipelines[q].stages[j].ranks[0]]
                                    for q in block], used_gpus, latency_s)
            cp = st.cp or 1
            key = (st.layers, id(node.group), st.tp, st.recompute)
            if ep == 1 and cp == 1 and key in same:
                costs.append(same[key])
                chunk_nodes.append(node)
                continue
            cp_link = None
            if cp > 1:  # the same stage of the pipelines of its cp-block (schema.py)
                block = range(p // cp * cp, p // cp * cp + cp)
                cp_link = cp_ring_link([rank_node[plan.pipelines[q].stages[j].ranks[0]]
                                        for q in block], used_gpus, latency_s)
            costs.append(stage_cost(
                graph, st.layers[0], st.layers[1], gpu, st.tp, mb, st.recompute,
                precision=precision, sequence_parallel=plan.sequence_parallel,
                intra_node_gb_per_s=node.group.intra_node_gb_per_s,
                intra_node_link=node.group.intra_node, profiles=profiles, framework=framework,
                ep=ep, ep_link=ep_link, capacity_factor=capacity_factor, cp=cp,
                cp_link=cp_link))
            if ep == 1 and cp == 1:
                same[key] = costs[-1]
            chunk_nodes.append(node)
        sends = [_p2p(hops, costs[j].p2p_bytes, chunk_nodes[j], pipe.stages[j].tp,
                      chunk_nodes[j + 1], latency_s, used_gpus, pipe.stages[j + 1].tp,
                      framework.p2p_scatter_gather) if j + 1 < len(costs) else 0.0
                 for j in range(len(costs))]
        cp_p = plan.cp(p)
        devices.append([
            _Device(p, d, chunk_nodes[d], st.tp, ids,
                    (costs[d],) if v == 1 else tuple(costs[j] for j in ids), st.ep or 1, cp_p)
            for d, (st, ids) in enumerate(zip(pipe.stages, _device_chunks(len(costs), s_count),
                                              strict=False))])
        # Replicas of a pipeline (same chunk costs and p2p times) share one timing tuple, so
        # the simulation cache hashes it once.
        shape = (tuple(map(id, costs)), tuple(sends), s_count)
        chunk_timings = same_timings.get(shape)
        if chunk_timings is None:
            chunk_timings = same_timings[shape] = tuple(
                _timing(c, j, sends, s_count, framework.p2p_blocking)
                for j, c in enumerate(costs))
        timings.append(chunk_timings)
    # Replicas share their StageCost objects (above), so their sums are taken once.
    sums: dict[tuple[int, ...], StageCost] = {}
    merged: list[list[StageCost]] = []
    for devs in devices:
        row = []
        for d in devs:
            key = tuple(map(id, d.costs))
            if key not in sums:
                sums[key] = _merged(d.costs)
            row.append(sums[key])
        merged.append(row)
    return _Layout(graph, precision, rank_node, used_gpus, latency_s, devices, merged, timings)


def _priced(layout: _Layout, plan: Plan, overlap_dp: bool, framework: Framework) -> Estimate:
    """The iteration of `layout` at `plan`'s ZeRO stage and shard fractions."""
    graph, devices = layout.graph, layout.devices
    # The ZeRO stage each stage runs at (zero_runs.py): hetplan's runtime keeps ZeRO-1's
    # whole gradients and weights where FSDP2 cannot shard; a plan downgraded on every stage
    # also moves ZeRO-1's bytes.
    levels = priced_zero_stages(plan, graph, framework)
    flat = {z for row in levels for z in row}
    sync_plan = plan if plan.zero_stage in flat else plan.model_copy(update={"zero": 1})
    dp_sync, tied_sync = grad_sync_s(graph, sync_plan, devices, layout.used_gpus,
                                     layout.latency_s, framework)
    if len(flat) > 1:  # some stages on the slices: those move ZeRO-1's bytes, once a step
        # Tied weights are never on FSDP2 (fsdp_layout): their reduction is ZeRO-1's too.
        low, tied_sync = grad_sync_s(graph, plan.model_copy(update={"zero": 1}), devices,
                                     layout.used_gpus, layout.latency_s, framework)
        dp_sync = [[low[p][d.index] if min(levels[p][j] for j in d.chunks) < plan.zero_stage
                    else dp_sync[p][d.index] for d in devs] for p, devs in enumerate(devices)]
    sync = [[a + b for a, b in zip(x, y, strict=True)] for x, y in zip(dp_sync, tied_sync,
                                                                      strict=True)]
    n_pipes = len(plan.pipelines)
    zero = plan.zero_stage
    shard = n_pipes if zero else 1
    v = plan.virtual_stages
    timelines = []
    stage_rows: list[StageEstimate] = []
    problems: list[str] = []
    worst_sync = worst_opt = 0.0
    worst_tied = max((t for row in tied_sync for t in row), default=0.0)
    # Replicas repeat their rows but for the pipeline number: each distinct row is built once
    # (a device's merged cost object stands for its chunks, GPU and TP; see _layout).
    rows: dict[tuple, StageEstimate] = {}
    for p, pipe in enumerate(plan.pipelines):
        devs = devices[p]
        keep = (plan.shard_fractions[p] if plan.pipelines[p].shard_fraction is not None
                and shard > 1 else None)  # None: even shards, 1 / shard
        opt = [sum(c.optimizer_step_s for c in d.costs) / shard if keep is None
               else sum(c.optimizer_step_s for c in d.costs) * keep for d in devs]
        # ZeRO-3 prefetches each layer's gather during the previous layer's compute, and
        # ZeRO-2/3 reduce-scatter each micro-batch's gradients as its backward runs (FSDP2,
        # DeepSpeed): their traffic hides behind the device's whole compute.
        zd = [min(levels[p][j] for j in d.chunks) for d in devs]
        sharded = [z >= 2 and shard > 1 for z in zd]
        exposed = [max(0.0, sync[p][d.index] - sum(c.fwd_s + c.bwd_s for c in d.costs)
                       * (pipe.microbatches if sharded[d.index] else 1))
                   if overlap_dp or sharded[d.index] else sync[p][d.index]
                   for d in devs]
        try:
            tl = _simulate(layout.chunks[p], pipe.microbatches, plan.schedule, v,
                           tuple(exposed), tuple(opt))
        except ValueError as exc:
            raise SpecError("plan", f"pipelines.{p}", str(exc)) from None
        timelines.append(tl)
        for d in devs:
            worst_sync = max(worst_sync, exposed[d.index])
            worst_opt = max(worst_opt, opt[d.index])
            merged = layout.merged[p][d.index]
            gathered = _gathered_params(graph, plan, d, framework, zd[d.index], shard,
                                        merged.gathered_bytes_per_param == 2)
            whole_stage = (zd[d.index] >= 3 and shard > 1 and len(devs) > 1
                           and framework.fsdp_whole_stage_under_pp)
            if whole_stage:  # every weight gathered, every gradient accumulated in fp32
                gathered = float(merged.params_per_gpu)
            key = (id(merged), d.index, d.tp, d.ep, d.cp, len(devs), tl.max_inflight[d.index],
                   pipe.microbatches, shard, zd[d.index], gathered, keep)
            row = rows.get(key)
            if row is not None and row.peak_memory_gib <= row.memory_capacity_gib:
                stage_rows.append(_renumbered(row, p))
                continue
            row, problem = _stage_row(plan, d, merged, tl.max_inflight[d.index], len(devs),
                                      shard, zd[d.index], gathered, keep,
                                      GRAD_REDUCE_BYTES if whole_stage else None)
            rows[key] = row
            stage_rows.append(row)
            if problem:
                problems.append(problem)
    # Each device syncs right after its own last backward (the simulator's tail). The gradient
    # all-reduce is shared by all pipelines, so it starts when the slowest one has drained: the
    # slowest drain plus the longest tail beyond a pipeline's own drain.
    iteration_s = (max(t.pipeline_s for t in timelines)
                   + max(t.makespan_s - t.pipeline_s for t in timelines))
    return _summarise(graph, layout.precision, plan, layout.rank_node, iteration_s, stage_rows,
                      problems, timelines, worst_sync, worst_opt, worst_tied)


@lru_cache(maxsize=4096)
def _simulate(chunks: tuple[StageTiming, ...], microbatches: int, schedule: str, v: int,
              sync: tuple[float, ...], opt: tuple[float, ...]) -> Any:
    """Simulations are pure functions of their inputs: identical DP replicas, and the search's
    repeated pipelines, share one."""
    return simulate(chunks, microbatches, schedule, v, dp_sync_s=sync, optimizer_s=opt,
                    detail=False)


def _gathered_params(graph: LayerGraph, plan: Plan, d: _Device, framework: Framework,
                     zero: int, shard: int, sixteen_bit: bool = False) -> float:
    """Parameters per GPU held whole at once beyond the shards (`stage_memory`): ZeRO-3 the
    largest layer running and the next prefetched; FSDP2 at ZeRO-2 under fp32 parameters
    (hetplan's runtime, whose every weight stays gathered through the step) one layer's
    gradient, whole before its reduce-scatter."""
    if shard <= 1 or zero < 2 or (zero == 2 and not framework.fp32_params):
        return 0.0
    return _largest_layer_params(graph, plan, d, framework, sixteen_bit) * (2 if zero >= 3
                                                                             else 1)


def _largest_layer_params(graph: LayerGraph, plan: Plan, d: _Device,
                          framework: Framework, sixteen_bit: bool = False) -> float:
    """Parameters per GPU of the device's largest layer: ZeRO-3 holds it whole while it runs
    and the next one as it is prefetched. `sixteen_bit`: counted in 16-bit parameters of
    FSDP2's gathers over fp32 parameters (`_gathered_count`)."""
    stages = plan.pipelines[d.pipeline].stages
    return max((_gathered_count(layer, d.tp, d.ep, framework, sixteen_bit)
                for j in d.chunks
                for layer in graph.layers[stages[j].layers[0]:stages[j].layers[1]]),
               default=0.0)


def _gathered_count(layer: Layer, tp: int, ep: int, framework: Framework,
                    sixteen_bit: bool) -> float:
    """The layer's parameters per GPU, in 16-bit parameters of FSDP2's gathers where hetplan's
    runtime gathers GEMM weights in the plan's 16-bit dtype but norms and token tables in fp32
    (runtime/fsdp.py): those count twice (an embedding twice its parameters)."""
    ts = tp if tp_split(layer, framework, tp) else 1
    params = params_per_gpu(layer, ts, ep)
    if not (sixteen_bit and framework.fp32_params):
        return params
    return 2 * params - min(params, gemm_params_per_gpu(layer, tp, ep, framework))


def _stage_row(plan: Plan, d: _Device, merged: StageCost, max_inflight: int, s_count: int,
               shard: int, zero: int = 1, gathered: float = 0.0,
               keep: float | None = None,
               gathered_grad_bytes: float | None = None) -> tuple[StageEstimate, str | None]:
    v = plan.virtual_stages
    pipe = plan.pipelines[d.pipeline]
    inflight = (max_inflight / v if max_inflight else
                inflight_microbatches(plan.schedule, s_count, d.index, pipe.microbatches, v))
    memory = stage_memory(merged, inflight, shard, zero, gathered, ep=d.ep, fraction=keep,
                          gathered_grad_bytes=gathered_grad_bytes)
    peak = memory.total_gib
    sharded = shardable_gib(merged, zero, d.ep) if shard > 1 else 0.0
    gpu = d.node.group.gpu
    stages = pipe.stages
    first, last = stages[d.chunks[0]], stages[d.chunks[-1]]
    row = StageEstimate(pipeline=d.pipeline, stage=d.index, gpu=gpu.name, tp=d.tp,
                        layers=(first.layers[0], last.layers[1]), fwd_ms=merged.fwd_s * 1e3,
                        bwd_ms=merged.bwd_s * 1e3, peak_memory_gib=peak,
                        memory_capacity_gib=gpu.memory_gib, sharded_gib=sharded,
                        optimizer_gib=memory.optimizer_gib,  # experts' own sharding included
                        chunks=tuple(tuple(stages[j].layers) for j in d.chunks),
                        memory=memory,
                        cp=d.cp)
    problem = None
    if peak > gpu.memory_gib:
        problem = (f"pipeline {d.pipeline} stage {d.index} ({gpu.name}): needs {peak:.1f} GiB "
                   f"per GPU; {gpu.name} has {gpu.memory_gib:.1f} GiB")
    return row, problem


def _summarise(graph: LayerGraph, precision: str, plan: Plan, rank_node: dict[int, Node],
               iteration_s: float, stages: list[StageEstimate], problems: list[str],
               timelines: list, sync_s: float, opt_s: float, tied_s: float) -> Estimate:
    tokens = plan.global_batch_size * graph.seq_len
    tokens_per_s = tokens / iteration_s
    peak, price = _peak_and_price(rank_node, precision)
    model_flops = graph.train_flops * plan.global_batch_size
    mfu = model_flops / iteration_s / peak if peak > 0 else 0.0
    per_m = None if price is None else price / (tokens_per_s * 3600 / 1e6)
    busy = sum(sum(t.busy_s) for t in timelines)
    span = sum(t.pipeline_s * t.num_devices for t in timelines)
    return Estimate(
        iteration_time_s=iteration_s, tokens_per_s=tokens_per_s, mfu=mfu, usd_per_hour=price,
        usd_per_million_tokens=per_m, stages=tuple(stages),
        bubble_fraction=1.0 - busy / span if span > 0 else 0.0,
        feasible=not problems, problems=tuple(problems), timeline=tuple(timelines),
        dp_sync_s=sync_s, optimizer_s=opt_s, tied_sync_s=tied_s)


def with_prediction(plan: Plan, est: Estimate, framework: str | None = None) -> Plan:
    """A copy of `plan` with `predicted` filled from `est` (full float precision: equal inputs
    give equal floats, hence equal bytes on disk), naming the `framework` it was priced for
    when that is one `hetplan estimate --framework` knows."""
    predicted: dict[str, Any] = {
        "iteration_time_s": est.iteration_time_s,
        "tokens_per_s": est.tokens_per_s,
        "mfu": est.mfu,
        "usd_per_hour": est.usd_per_hour,
        "usd_per_million_tokens": est.usd_per_million_tokens,
        "feasible": est.feasible,
        "stages": [{"pipeline": s.pipeline, "stage": s.stage, "fwd_ms": s.fwd_ms,
                    "bwd_ms": s.bwd_ms, "peak_memory_gib": s.peak_memory_gib}
                   for s in est.stages],
    }
    if framework is not None:
        predicted["framework"] = framework
    return plan.model_copy(update={"predicted": predicted})
