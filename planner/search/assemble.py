"""Turn chosen pipelines into a Plan: split the micro-batches, place ranks on nodes.

Placement: every TP group needs `tp` GPUs of one node. TP degrees are powers of two that
divide the node, so first-fit in decreasing TP order packs any set of groups whose total fits
the group's GPUs (no fragment can strand a request). Two orders are offered and the estimate
picks: `pipeline` keeps a pipeline's consecutive stages together (p2p on the fast link, DP
rings across nodes), `replica` keeps one stage's DP replicas together (DP rings on the fast
link, p2p across nodes) — Megatron's order.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from planner.cluster.model import Cluster
from planner.schema import Pipeline, Plan, RankInfo, Stage
from planner.search.tables import RECOMPUTE
from planner.search.template import Template

__all__ = ["PLACEMENTS", "PipelineClass", "build_plan", "split_microbatches"]

PLACEMENTS = ("pipeline", "replica")


@dataclass(frozen=True, slots=True)
class PipelineClass:
    """`replicas` identical pipelines; option index -> (cluster group, tp, ep, cp)."""

    template: Template
    replicas: int
    devices: tuple[tuple[int, ...], ...]


def split_microbatches(total: int, pipelines: Sequence[tuple[float, float, int]],
                       ) -> list[int] | None:
    """Give each pipeline (a, b, min_m) a count m ≥ min_m, Σ m = total, minimising max a + m·b.

    Greedy on the next finishing time is optimal for a min-max of increasing functions (each
    unit goes where it raises the maximum least; an exchange argument shows no other split
    does better). Ties go to the lower index, so the split is deterministic. None when the
    minimums alone exceed `total`.
    """
    counts = [p[2] for p in pipelines]
    left = total - sum(counts)
    if left < 0:
        return None
    # Start from just below the continuous optimum (all pipelines ending at the same tau):
    # greedy from any start below the optimum's level ends where greedy from the minimums does.
    rate = sum(1.0 / b for a, b, _ in pipelines if b > 0)
    if rate > 0 and all(b > 0 for _, b, _ in pipelines):
        tau = (total + sum(a / b for a, b, _ in pipelines)) / rate
        start = [max(m0, int((tau - a) / b) - 1) for (a, b, m0) in pipelines]
        if sum(start) <= total:
            counts, left = start, total - sum(start)
    heap = [(a + (m + 1) * b, k) for k, ((a, b, _), m) in enumerate(zip(pipelines, counts,
                                                                          strict=True))]
    heapq.heapify(heap)
    for _ in range(left):
        _, k = heapq.heappop(heap)
        counts[k] += 1
        a, b, _ = pipelines[k]
        heapq.heappush(heap, (a + (counts[k] + 1) * b, k))
    return counts


def _place(cluster: Cluster, requests: list[tuple[int, int, tuple[int, int, int]]],
           ) -> dict[tuple[int, int, int], tuple[str, tuple[int, ...]]] | None:
    """requests: (group, tp, key) in preference order -> key: (node name, local ranks).

    First fit over the group's nodes in order. Nodes that cannot hold the request are passed
    over without a look at their slots (first fit places nothing there either): the full
    nodes at the front of the group, and any node with fewer free GPUs than the request's
    (1024 GPUs: the scan otherwise dominates the plan's assembly)."""
    free: dict[int, list[tuple[str, list[bool]]]] = {}
    left: dict[int, list[int]] = {}  # free GPUs per node
    first: dict[int, int] = {}  # nodes before it are full
    for g_idx, group in enumerate(cluster.groups):
        free[g_idx] = [(name, [True] * group.gpus_per_node) for name in group.node_names()]
        left[g_idx] = [group.gpus_per_node] * len(free[g_idx])
        first[g_idx] = 0
    out: dict[tuple[int, int, int], tuple[str, tuple[int, ...]]] = {}
    order = sorted(range(len(requests)), key=lambda r: (-requests[r][1], r))
    for r in order:
        g_idx, tp, key = requests[r]
        nodes, counts = free[g_idx], left[g_idx]
        k = first[g_idx]
        while k < len(nodes) and counts[k] == 0:
            k += 1
        first[g_idx] = k
        placed = False
        for at in range(k, len(nodes)):
            if counts[at] < tp:
                continue
            name, slots = nodes[at]
            for start in range(0, len(slots), tp):
                if all(slots[start:start + tp]):
                    for x in range(start, start + tp):
                        slots[x] = False
                    counts[at] -= tp
                    out[key] = (name, tuple(range(start, start + tp)))
                    placed = True
                    break
            if placed:
                break
        if not placed:
            return None
    return out


def _trusted(cls: type[Any], values: dict[str, Any]) -> Any:
    """`cls.model_construct(**values)` for models without aliases, defaults left out or
    post-init hooks, given every field in declaration order: the same four attributes set,
    without model_construct's per-field alias and default lookups (thousands per search;
    `_agrees` checks the two agree at import)."""
    m = cls.__new__(cls)
    _set(m, "__dict__", values)
    _set(m, "__pydantic_fields_set__", set(values))
    _set(m, "__pydantic_extra__", None)
    _set(m, "__pydantic_private__", None)
    return m


_set = object.__setattr__


def _constructed(cls: type[Any], values: dict[str, Any]) -> Any:
    return cls.model_construct(**values)


_STAGE = {"layers": (0, 3), "gpu": "A100-SXM4-40GB", "tp": 2, "ranks": (4, 5),
          "recompute": "selective", "ep": None, "cp": 2}
_SAMPLES: tuple[tuple[type[Any], dict[str, Any]], ...] = (
    (Stage, _STAGE), (RankInfo, {"rank": 3, "node": "n1", "local_rank": 1}),
    (Pipeline, {"microbatches": 4, "stages": (Stage.model_validate(_STAGE),),
                "shard_fraction": None}))


def _agrees(build: Any) -> bool:
    """Whether `build` makes what `model_construct` makes on a sample of each model (every
    slot pydantic's BaseModel declares, equality, repr, JSON); False on any error."""
    from pydantic import BaseModel

    missing = object()
    try:
        for cls, values in _SAMPLES:
            if list(values) != list(cls.model_fields) or any(
                    f.alias or f.validation_alias for f in cls.model_fields.values()):
                return False  # _trusted's preconditions: every field, in order, no alias
            ours, theirs = build(cls, dict(values)), cls.model_construct(**values)
            for slot in BaseModel.__slots__:
                a, b = getattr(ours, slot, missing), getattr(theirs, slot, missing)
                if a is missing or b is missing or (
                        list(a.items()) != list(b.items()) if slot == "__dict__" else a != b):
                    return False
            if (ours != theirs or repr(ours) != repr(theirs)
                    or ours.model_dump_json() != theirs.model_dump_json()):
                return False
    except Exception:  # another pydantic's internals: fall back rather than fail the import
        return False
    return True


# `_trusted` leans on pydantic internals: checked once here, model_construct otherwise.
_build = _trusted if _agrees(_trusted) else _constructed


def build_plan(cluster: Cluster, classes: Sequence[PipelineClass], microbatches: Sequence[int],
               *, model_spec: dict[str, Any] | None, global_batch_size: int, micro_batch: int,
               schedule: str, sequence_parallel: bool, placement: str) -> Plan | None:
    """The Plan for these pipelines (class by class, replicas in order); None if unplaceable."""
    pipes: list[tuple[int, int]] = []  # (class, replica)
    for c_idx, cls in enumerate(classes):
        pipes.extend((c_idx, r) for r in range(cls.replicas))
    requests: list[tuple[int, int, tuple[int, int, int]]] = []
    for p_idx, (c_idx, _) in enumerate(pipes):
        for s_idx, st in enumerate(classes[c_idx].template.stages):
            g_idx, tp = classes[c_idx].devices[st.option][:2]
            requests.append((g_idx, tp, (p_idx, s_idx, g_idx)))
    if placement == "replica":
        requests.sort(key=lambda q: (q[2][1], q[2][0]))
    where = _place(cluster, requests)
    if where is None:
        return None
    node_order = {n.name: i for i, n in enumerate(cluster.nodes)}
    slots = sorted(((node_order[name], local) for name, locs in where.values() for local in locs))
    rank_of = {slot: r for r, slot in enumerate(slots)}
    names = [n.name for n in cluster.nodes]
    pipelines = []
    for p_idx, (c_idx, _) in enumerate(pipes):
        cls = classes[c_idx]
        stages = []
        for s_idx, st in enumerate(cls.template.stages):
            g_idx, tp, *more = cls.devices[st.option]
            # (group, tp, ep, cp): expert and context parallelism over the replicas
            ep, cp = (*more, 1, 1)[:2]
            name, locs = where[(p_idx, s_idx, g_idx)]
            ranks = tuple(rank_of[(node_order[name], x)] for x in locs)
            # Built unvalidated (thousands per search): the values are plain ints and strings
            # of the types the fields hold, a stage's tp ranks come from `_place`, and the
            # Plan below still runs its own checks over the whole structure.
            stages.append(_build(Stage, {
                "layers": (int(st.start), int(st.end)), "gpu": cluster.groups[g_idx].gpu.name,
                "tp": int(tp), "ranks": ranks, "recompute": RECOMPUTE[st.recompute],
                "ep": int(ep) if ep > 1 else None, "cp": int(cp) if cp > 1 else None}))
        pipelines.append(_build(Pipeline, {"microbatches": int(microbatches[p_idx]),
                                             "stages": tuple(stages), "shard_fraction": None}))
    ranks = tuple(_build(RankInfo, {"rank": r, "node": names[n], "local_rank": int(loc)})
                  for (n, loc), r in sorted(rank_of.items(), key=lambda kv: kv[1]))
    return Plan(model=model_spec, cluster=cluster.spec, global_batch_size=global_batch_size,
                micro_batch_size=micro_batch, schedule=schedule,
                sequence_parallel=sequence_parallel, zero=int(len(pipes) > 1),
                pipelines=tuple(pipelines), ranks=ranks)
