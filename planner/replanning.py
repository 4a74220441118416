"""Re-plan after the cluster changes: lose nodes or groups, gain GPUs, move the least state.

    new = replan(plan, remove=["a100-1"], add=["8 H100-SXM5-80GB"], tolerance=0.05)
    new.plan, new.moves, new.tokens_per_s_before, new.tokens_per_s_after

The search runs on the edited cluster (`planner.plan`, top candidates); among the plans within
`tolerance` of the fastest one, the one that moves the fewest bytes of training state wins
(ties: the faster). A layer's state must move to a node when the new plan puts the layer there
and the old plan held no copy of it on that node; what is on a removed node is lost and comes
from a surviving copy (a DP replica). The state of a parameter is its fp32 weight and Adam
moments, 12 B (`cost_models.memory`: 16 B less the 4 B gradient, which is recomputed); the
bytes are counted once per node and layer (TP ranks of one node share the copy over NVLink).
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from cost_models.memory import GRAD_REDUCE_BYTES, state_bytes_per_param
from cost_models.profiles import ProfileSet
from planner.cluster import Cluster, cluster_from_dict
from planner.costing import estimate
from planner.costing.framework import framework_named
from planner.costing.resolve import resolve_cluster, resolve_model
from planner.errors import HetplanError
from planner.graph.layers import LayerGraph
from planner.report.scenario import edit_cluster
from planner.schema import Plan

__all__ = ["Move", "Replan", "replan"]

_TOP_K = 10


@dataclass(frozen=True, slots=True, kw_only=True)
class Move:
    """Layers [start, end) whose state a node needs and did not hold."""

    node: str
    """Node in the new cluster that receives the state."""
    old_node: str | None
    """The same machine's name in the old plan (None: a node that was added)."""
    layers: tuple[int, int]
    bytes: float
    sources: tuple[str, ...]
    """Old nodes that held these layers and survive (empty: nowhere: fresh initialisation or a
    checkpoint)."""

    def to_dict(self) -> dict[str, Any]:
        return {"node": self.node, "old_node": self.old_node, "layers": list(self.layers),
                "bytes": self.bytes, "sources": list(self.sources)}


@dataclass(frozen=True, slots=True, kw_only=True)
class Replan:
    plan: Plan
    """The new plan (with `predicted`)."""
    edits: tuple[str, ...]
    moves: tuple[Move, ...]
    moved_bytes: float
    tokens_per_s_before: float
    tokens_per_s_after: float
    iteration_time_s_before: float
    iteration_time_s_after: float
    fastest_iteration_time_s: float
    """The fastest candidate's time on the new cluster (the chosen plan is within tolerance)."""

    def to_dict(self) -> dict[str, Any]:
        return {"edits": list(self.edits), "moved_bytes": self.moved_bytes,
                "tokens_per_s_before": self.tokens_per_s_before,
                "tokens_per_s_after": self.tokens_per_s_after,
                "iteration_time_s_before": self.iteration_time_s_before,
                "iteration_time_s_after": self.iteration_time_s_after,
                "fastest_iteration_time_s": self.fastest_iteration_time_s,
                "moves": [m.to_dict() for m in self.moves]}


def _remove_nodes(spec: dict[str, Any], names: Sequence[str],
                  old: Cluster) -> tuple[dict[str, Any], list[str], list[str]]:
    """Drop single nodes (`a100-1`) by shrinking their group; other names pass through as
    group/type removals. Returns (spec, the removals left for edit_cluster, notes)."""
    new = copy.deepcopy(spec)
    node_names = {n.name: n for n in old.nodes}
    rest, notes = [], []
    for name in names:
        node = node_names.get(name)
        group_names = {g["name"] for g in new["nodes"]}
        if node is None or name in group_names:
            rest.append(name)
            continue
        g = next((g for g in new["nodes"] if g["name"] == node.group.name), None)
        if g is None:
            raise HetplanError(f"--remove {name!r}: its group {node.group.name!r} is already "
                               "removed")
        g.setdefault("_gone", []).append(node.index)
        notes.append(f"removed node {name} ({g['gpus_per_node']} {g['gpu']})")
    for g in list(new["nodes"]):
        gone = g.get("_gone", [])
        if len(set(gone)) < len(gone):
            raise HetplanError(f"--remove: a node of group {g['name']!r} is named twice")
        g["count"] -= len(gone)
        if g["count"] <= 0:
            new["nodes"].remove(g)
    return new, rest, notes


def _node_map(old: Cluster, new: Cluster, spec: dict[str, Any]) -> dict[str, str]:
    """New node name -> old node name, for the machines that stay."""
    out: dict[str, str] = {}
    gone = {g["name"]: sorted(g.get("_gone", [])) for g in spec["nodes"]}
    for g in new.groups:
        if g.name not in gone:
            continue  # a group that was added
        try:
            before = old.group(g.name)
        except KeyError:
            continue
        kept = [i for i in range(before.count) if i not in gone[g.name]]
        for new_name, i in zip(g.node_names(), kept, strict=False):
            out[new_name] = before.node_names()[i]
    return out


def _holdings(plan: Plan) -> dict[str, set[int]]:
    """Node -> the layers whose state it holds."""
    node_of = {r.rank: r.node for r in plan.ranks}
    held: dict[str, set[int]] = {}
    for pipe in plan.pipelines:
        for st in pipe.stages:
            for r in st.ranks:
                held.setdefault(node_of[r], set()).update(range(*st.layers))
    return held


def _moves(old: Plan, new: Plan, graph: LayerGraph, precision: str,
           names: dict[str, str]) -> list[Move]:
    per_param = state_bytes_per_param(precision) - GRAD_REDUCE_BYTES
    before = _holdings(old)
    survivors = {names[n] for n in names}
    after = _holdings(new)
    moves: list[Move] = []
    for node in sorted(after):
        old_name = names.get(node)
        had = before.get(old_name, set()) if old_name else set()
        need = sorted(after[node] - had)
        start = 0
        while start < len(need):  # contiguous runs of layers
            end = start
            while end + 1 < len(need) and need[end + 1] == need[end] + 1:
                end += 1
            lo, hi = need[start], need[end] + 1
            size = sum(graph.layers[i].params for i in range(lo, hi)) * per_param
            src = tuple(sorted(n for n in survivors
                               if set(range(lo, hi)) <= before.get(n, set())))
            moves.append(Move(node=node, old_node=old_name, layers=(lo, hi), bytes=size,
                              sources=src))
            start = end + 1
    return moves


def replan(plan: Plan, *, remove: Sequence[str] = (), add: Sequence[str] = (),
           tolerance: float = 0.05, framework: str | None = None,
           profiles: ProfileSet | None = None) -> Replan:
    """The best plan on the changed cluster that moves the least state within `tolerance`."""
    import planner

    if not remove and not add:
        raise HetplanError("replan: nothing changed; give --remove NODE|GROUP or --add \"N GPU\"")
    if not 0 <= tolerance < 1:
        raise HetplanError(f"--tolerance {tolerance}: give a fraction in [0, 1), e.g. 0.05")
    fw = framework_named(framework, plan.predicted)
    model = _model_for(plan)
    graph, precision = resolve_model(model, plan)
    old = resolve_cluster(None, plan)
    spec, rest, notes = _remove_nodes(old.spec, remove, old)
    clean = {**spec, "nodes": [{k: v for k, v in g.items() if k != "_gone"}
                               for g in spec["nodes"]]}
    if not clean["nodes"] and not add:
        raise HetplanError("replan: the removals leave no GPUs; add some with --add")
    edited, more = edit_cluster(clean, remove=rest, add=add)
    new_cluster = cluster_from_dict(edited, "replan")
    names = _node_map(old, new_cluster, spec)
    before = estimate(graph, old, plan, profiles=profiles, framework=fw)
    result = planner.plan(model, new_cluster, global_batch_size=plan.global_batch_size,
                          top_k=_TOP_K, profiles=profiles, framework=fw)
    fastest = result.estimates[0].iteration_time_s
    scored = []
    for cand, est in zip(result.candidates, result.estimates, strict=True):
        if est.iteration_time_s > fastest * (1 + tolerance):
            continue
        mv = _moves(plan, cand, graph, precision, names)
        scored.append((sum(m.bytes for m in mv), est.iteration_time_s, cand, est, mv))
    scored.sort(key=lambda s: (s[0], s[1]))
    moved, _, chosen, est, mv = scored[0]
    return Replan(plan=chosen, edits=tuple(notes + more), moves=tuple(mv), moved_bytes=moved,
                  tokens_per_s_before=before.tokens_per_s, tokens_per_s_after=est.tokens_per_s,
                  iteration_time_s_before=before.iteration_time_s,
                  iteration_time_s_after=est.iteration_time_s,
                  fastest_iteration_time_s=fastest)


def _model_for(plan: Plan) -> Any:
    from planner.graph import ModelSpec, load_model

    return load_model(ModelSpec.from_dict(plan.model, where="plan: model"))
