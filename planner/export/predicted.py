"""The figures an exported config's comments state: estimated from the plan as it stands.

A plan file's `predicted` block is what `hetplan plan` computed when it wrote the file; a
plan edited by hand afterwards (another micro-batch size, ZeRO stage, layer split) still
carries it. Export comments quote a fresh `estimate` instead, and say when the stored block
disagrees, so they never state a stale figure.
"""

from __future__ import annotations

import math

from planner.costing.framework import Framework
from planner.errors import HetplanError
from planner.schema import Plan

__all__ = ["prediction_notes"]

_SAME = 1e-6
"""Relative tolerance for "the stored figure is this estimate" (both are full floats)."""


def prediction_notes(plan: Plan, target: Framework) -> list[str]:
    """Comment lines with the plan's predicted iteration time and throughput, priced now for
    the framework it was priced for (`predicted.framework`); a plan that names none is priced
    for `target`, the framework the export is for (as the nearest uniform plan is), and the
    comment says so."""
    from planner.costing import estimate
    from planner.costing.framework import framework_named

    named = (plan.predicted or {}).get("framework")
    framework = framework_named(str(named)) if named is not None else target
    why = "" if named is not None else "; the plan file names no framework: the export's"
    try:
        est = estimate(None, None, plan, framework=framework)
    except HetplanError as exc:
        return [f"no prediction: hetplan cannot price this plan as it stands ({exc})"]
    notes = [f"hetplan predicts {est.iteration_time_s:.4f} s per iteration, "
             f"{est.tokens_per_s:,.0f} tokens/s (priced for {framework.name}{why}, from the "
             "plan as it stands)"]
    if not est.feasible:
        notes.append(f"the plan does not fit its GPUs: {est.problems[0] if est.problems else ''}")
    stored = (plan.predicted or {}).get("iteration_time_s")
    if (isinstance(stored, int | float) and not isinstance(stored, bool)
            and not math.isclose(stored, est.iteration_time_s, rel_tol=_SAME)):
        unnamed = "priced for another framework (the file names none), " if why else ""
        notes.append(f"the plan file's stored prediction ({stored:.4f} s per iteration) "
                     f"differs: the plan was {unnamed}edited after it was priced, or priced "
                     "with --calibration / --profiles, which export does not apply")
    return notes
