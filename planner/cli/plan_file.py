"""Reading a plan file in a command: load, check against its model and cluster, and (for the
commands that run it) refuse one that does not fit, before anything runs or is written."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from planner.errors import InfeasibleError

if TYPE_CHECKING:
    from planner.costing.plan_check import CheckedPlan
    from planner.costing.result import Estimate

__all__ = ["is_plan_file", "load_checked", "refuse_infeasible"]


def is_plan_file(path: str) -> bool:
    """Whether `path` is a JSON file holding a plan (not, say, a HuggingFace config.json)."""
    from planner.errors import SpecError
    from planner.input_files import load_json

    if not path.endswith(".json"):
        return False
    try:
        data = load_json(path, path, what="plan", finite=False)
    except SpecError:
        return False
    return isinstance(data, dict) and "pipelines" in data


def load_checked(path: str | Path, cluster: Any = None) -> CheckedPlan:
    """The plan in `path`, checked by the one plan validator against the model it embeds and
    `cluster` (a name or file; default: the cluster it embeds). One SpecError line if not."""
    from planner.cluster import load_cluster
    from planner.costing.plan_check import check_plan
    from planner.schema import Plan

    plan = Plan.load(path)
    given = load_cluster(cluster) if cluster is not None else None
    return check_plan(plan, None, given, where=str(path))


def refuse_infeasible(checked: CheckedPlan, command: str) -> Estimate:
    """The plan's estimate under hetplan's runtime (what dryrun and launch run);
    InfeasibleError (exit 3) with the numbers when it does not fit its GPUs."""
    from planner.costing import estimate

    est = estimate(checked.graph, checked.cluster, checked.plan)
    if not est.feasible:
        more = f" (and {len(est.problems) - 1} more)" if len(est.problems) > 1 else ""
        raise InfeasibleError(f"{command} refuses an infeasible plan: {est.problems[0]}{more}; "
                              "re-plan with `hetplan plan`, or check it with `hetplan estimate`")
    return est
