"""Reading a plan file in a command: load, check against its model and cluster, and (for the
commands that run it) refuse one that does not fit, before anything runs or is written."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from planner.errors import HetplanError, InfeasibleError

if TYPE_CHECKING:
    from planner.costing.plan_check import CheckedPlan
    from planner.costing.result import Estimate
    from planner.schema import Plan

__all__ = ["at_seq_len", "is_plan_file", "load_checked", "load_plan", "refuse_infeasible"]


def load_plan(path: str | Path) -> Plan:
    """`Plan.load`, with its note about an older spelling on stderr (stdout may be --json)."""
    import sys

    from planner.errors import SpecError
    from planner.graph.hf_config import looks_like_hf_config
    from planner.input_files import load_json
    from planner.schema import Plan

    data = load_json(path, str(path), what="plan", finite=False)
    if isinstance(data, dict) and "pipelines" not in data and (
            "architecture" in data or looks_like_hf_config(data)):
        # Its own fields would be reported missing one by one ("global_batch_size").
        raise SpecError(str(path), None, "is a model, not a plan; give a cluster too "
                        "(`hetplan estimate MODEL CLUSTER --tp ...`) or write a plan with "
                        "`hetplan plan MODEL CLUSTER -o plan.json`")
    return Plan.load(path, note=lambda line: print(line, file=sys.stderr))


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


def load_checked(path: str | Path, cluster: Any = None,
                 seq_len: int | None = None) -> CheckedPlan:
    """The plan in `path`, checked by the one plan validator against the model it embeds and
    `cluster` (a name or file; default: the cluster it embeds). One SpecError line if not.
    `seq_len` re-prices the plan's layout at another sequence length (`at_seq_len`)."""
    import sys

    from planner.cluster import load_cluster
    from planner.costing.plan_check import check_plan
    plan = load_plan(path)
    planned = plan.model.get("seq_len") if isinstance(plan.model, dict) else None
    if seq_len is not None:
        plan = at_seq_len(plan, seq_len, where=str(path))
    given = load_cluster(cluster) if cluster is not None else None
    checked = check_plan(plan, None, given, where=str(path))
    if seq_len is not None and planned is not None and planned != seq_len:
        # Only once the plan is valid at that length: an error stays the one line printed.
        print(f"notice: {path} was planned at seq_len {planned}; pricing its layout and batch "
              f"at --seq-len {seq_len} (`hetplan plan --seq-len {seq_len}` searches the best "
              "layout for that length)", file=sys.stderr)
    return checked


def at_seq_len(plan: Plan, seq_len: int, *, where: str) -> Plan:
    """`plan` with its model at `seq_len` tokens per sequence: same layout, batch and
    micro-batch, re-priced by whoever estimates it (`load_checked` prints a notice once the
    plan is valid at that length, since its recorded prediction was for the planned length).
    A user's module was measured at one length and cannot be re-priced at another: an error."""
    from planner.graph.embedded import is_module_model

    model = plan.model or {}
    if is_module_model(model):
        planned = (model.get("graph") or {}).get("seq_len")
        if planned != seq_len:
            raise HetplanError(f"{where}: the plan's model is a module measured at seq_len "
                               f"{planned}; --seq-len {seq_len} needs it measured again "
                               "(from_module with an example input that long, then re-plan)")
        return plan
    planned = model.get("seq_len")
    if planned == seq_len:
        return plan
    return plan.model_copy(update={"model": {**model, "seq_len": seq_len}})


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
