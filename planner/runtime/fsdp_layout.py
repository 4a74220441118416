"""Which chain elements hetplan's runtime shards with FSDP2 under a ZeRO-2/3 plan, torch-free
so that `estimate` prices exactly what `runtime/fsdp.py` runs (see that module for why).

A device group is *even* when every element it holds is held by the same set of device groups
(its replicas: the same stage of identical pipelines), all at one TP degree. Elements of even
groups go to FSDP2, except a weight tied across elements and expert-parallel stages; plans
with uneven `shard_fraction`s or a context-parallel stage keep every element off FSDP2.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping

from planner.runtime.topology import element_holders
from planner.schema import Plan

__all__ = ["FsdpLayout", "fsdp_layout", "mesh_in_rank_order", "uneven_fractions"]

FsdpLayout = dict[int, tuple[tuple[int, ...], ...]]
"""Chain element → its replicas' TP groups (plan ranks), for every element FSDP2 shards."""


def _group_elements(plan: Plan) -> dict[tuple[int, ...], set[int]]:
    out: dict[tuple[int, ...], set[int]] = {}
    for pipe in plan.pipelines:
        for st in pipe.stages:
            out.setdefault(tuple(sorted(st.ranks)), set()).update(range(*st.layers))
    return out


def _group_gpus(plan: Plan) -> dict[tuple[int, ...], str]:
    return {tuple(sorted(st.ranks)): st.gpu for pipe in plan.pipelines for st in pipe.stages}


def uneven_fractions(plan: Plan) -> bool:
    """Some replica keeps a share of the sharded state other than 1 / replicas."""
    fractions = [p.shard_fraction for p in plan.pipelines]
    return any(f is not None and abs(f - 1 / len(fractions)) > 1e-12 for f in fractions)


def mesh_in_rank_order(reps: tuple[tuple[int, ...], ...], to_torch: Mapping[int, int]) -> bool:
    """The (dp, tp) mesh of these replicas lines up with torch's rank order (each TP column
    ascending when the replicas are sorted by their first rank): DeviceMesh needs it, so
    `runtime/fsdp.py` keeps a group whose ranks are numbered out of node order off FSDP2."""
    grid = [[to_torch[r] for r in g] for g in sorted(reps, key=lambda g: to_torch[g[0]])]
    return all(list(col) == sorted(col) for col in zip(*grid, strict=True))


def fsdp_layout(plan: Plan, elements: Mapping[Hashable, tuple[int, ...]],
                to_torch: Mapping[int, int] | None = None) -> FsdpLayout:
    """The elements FSDP2 shards under this plan (the same answer on every rank). `elements`:
    each parameter → the chain elements holding it (more than one: a tied weight).
    `to_torch` (plan rank → torch rank): also drop groups whose mesh is out of rank order,
    which the runtime finds only when it builds the mesh (`fsdp_mesh` returns None)."""
    if (plan.zero_stage < 2 or len(plan.pipelines) < 2 or uneven_fractions(plan)
            or any((st.cp or 1) > 1 for pipe in plan.pipelines for st in pipe.stages)):
        # Context-parallel blocks reduce gradients over dp·cp with their own loss scaling
        # (context.py); FSDP2's mean over its group would not match it: ZeRO-1 there.
        return {}
    tied = {e for elems in elements.values() if len(elems) > 1 for e in elems}
    expert = {e for pipe in plan.pipelines for st in pipe.stages if (st.ep or 1) > 1
              for e in range(*st.layers)}
    held = _group_elements(plan)
    gpus = _group_gpus(plan)
    out: FsdpLayout = {}
    for elems in held.values():
        replicas = {element_holders(plan, e) for e in elems}
        if len(replicas) != 1:
            continue
        (reps,) = replicas
        # Replicas on different GPU types may train in different 16-bit dtypes (bf16 where
        # supported, else fp16: runtime/precision.py), and FSDP2 gathers in each rank's own
        # param_dtype: same-sized bytes read as the other dtype. One GPU type per group.
        if (len(reps) < 2 or len({len(g) for g in reps}) != 1
                or len({gpus[g] for g in reps}) != 1
                or any(held[g] != elems for g in reps)
                or (to_torch is not None and not mesh_in_rank_order(reps, to_torch))):
            continue
        for e in sorted(elems - tied - expert):
            out[e] = reps
    return out
