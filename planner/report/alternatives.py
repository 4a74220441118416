"""The runners-up of a search as full plans, and which of them differ only in placement.

Two plans have the same *shape* when everything but the ranks agrees: pipelines, stages
(layers, GPU type, TP, EP, recompute), micro-batches, schedule, ZeRO. Such a pair puts the same
work on other GPUs of the same types (other nodes, or the same nodes in another order): the
search tries both a pipeline-major and a replica-major placement, and both may rank.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from planner.schema import Plan

__all__ = ["alternative_records", "nodes_used", "placement_note", "placement_twins", "shape_key"]


def shape_key(plan: Plan) -> str:
    """The plan without its placement (ranks) or predictions, as canonical JSON."""
    d = plan.to_dict()
    for key in ("ranks", "predicted", "model", "cluster"):
        d.pop(key, None)
    for pipe in d["pipelines"]:
        for st in pipe["stages"]:
            st.pop("ranks")
    return json.dumps(d, sort_keys=True)


def nodes_used(plan: Plan) -> list[str]:
    """Names of the nodes the plan's ranks live on, in rank order, each once."""
    return list(dict.fromkeys(r.node for r in sorted(plan.ranks, key=lambda r: r.rank)))


def placement_twins(plans: Sequence[Plan]) -> list[int | None]:
    """For each plan, the index of the first earlier plan of the same shape (it then differs
    only in placement), else None."""
    first: dict[str, int] = {}
    out: list[int | None] = []
    for k, p in enumerate(plans):
        key = shape_key(p)
        out.append(first.get(key))
        first.setdefault(key, k)
    return out


def placement_note(plans: Sequence[Plan], k: int, twin: int) -> str:
    """`same shape as #1, placed on other nodes (a100-1, v100-0)` (1-based, as tables count)."""
    mine, theirs = nodes_used(plans[k]), set(nodes_used(plans[twin]))
    other = [n for n in mine if n not in theirs]
    where = (f"on other nodes ({', '.join(other)})" if other
             else "same nodes, GPUs assigned in another order")
    return f"placement only: same shape as #{twin + 1}, {where}"


def alternative_records(plans: Sequence[Plan], shapes: Sequence[str]) -> list[dict[str, Any]]:
    """`plan --json`'s alternatives: plans[1:] as full plan dicts (savable as they are) with
    their one-line shape, and `placement_of` (1-based index of the same-shape plan, or None)."""
    twins = placement_twins(plans)
    out = []
    for k in range(1, len(plans)):
        twin = twins[k]
        out.append({"plan": plans[k].to_dict(), "shape": shapes[k],
                    "placement_of": None if twin is None else twin + 1,
                    "note": "" if twin is None else placement_note(plans, k, twin)})
    return out
