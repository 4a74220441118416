"""The one line `estimate` and `plan` print for a mixture-of-experts plan: the load imbalance
the cost model assumes for routed tokens and where it charges it (planner/costing/moe_a2a.py)."""

from __future__ import annotations

from planner.costing.framework import Framework
from planner.schema import Plan

__all__ = ["moe_line"]


def moe_line(plan: Plan, capacity_factor: float, fw: Framework) -> str | None:
    """None for a dense plan."""
    if not (plan.model or {}).get("num_experts"):
        return None
    eps = sorted({st.ep or 1 for pipe in plan.pipelines for st in pipe.stages})
    per_tp = ("all its routed tokens" if fw.moe_dispatch_whole_per_tp_rank
              else "1/tp of the routed tokens")
    # At ep 1 every GPU runs all routed tokens, however they are routed: no imbalance.
    return (f"mixture of experts: ep {', '.join(map(str, eps))}; busiest expert at "
            f"{capacity_factor:g}× the mean load (capacity factor), the rest even; at ep > 1 its "
            f"GPU's expert GEMMs and all-to-alls carry that load; each TP rank dispatches "
            f"{per_tp}")
