"""The ZeRO stage each stage of a plan is priced at: the stage hetplan's runtime really runs.

hetplan's runtime runs ZeRO-2/3 with FSDP2 only on the chain elements it can shard evenly
(`planner/runtime/fsdp_layout.py`: identical replicas on one GPU type, even shards, no expert- or
context-parallel stage, no weight tied across elements). Every other element stays on the
runtime's own slices (`runtime/zero.py`), which reduce-scatter gradients once, after the step's
last backward: weights and gradients are whole through the backward and the reduction is not
hidden behind it, which is ZeRO-1's peak and exposure (`runtime/engine.py` notes it at run
time). A stage priced below the plan's ZeRO stage is therefore priced at ZeRO-1, so `estimate`
never calls a plan fitting that the runtime would hold more memory for. Stacks that shard by
their own rules (`Framework.zero_beyond_fsdp_runs_as_zero1` False) keep the plan's stage, up
to the highest they run alongside pipeline parallelism (`Framework.max_zero`: with pp > 1
Megatron-LM's distributed optimizer and DeepSpeed's pipeline engine shard optimizer state
only, so such a plan is priced at ZeRO-1; at pp 1 Megatron-FSDP and DeepSpeed stage 3 run
ZeRO-3).
"""

from __future__ import annotations

from planner.costing.framework import Framework
from planner.errors import HetplanError
from planner.graph.layers import LayerGraph
from planner.runtime.fsdp_layout import fsdp_layout
from planner.runtime.topology import torch_rank_map
from planner.schema import Plan

__all__ = ["priced_zero_stages", "zero_downgrade_note"]


def _tied_elements(graph: LayerGraph) -> dict[int, tuple[int, int]]:
    """Each tied weight (keyed by its user layer) → the two layers holding a copy."""
    return {li: (layer.tied_to, li) for li, layer in enumerate(graph.layers)
            if layer.tied_params > 0 and 0 <= layer.tied_to < li}


def priced_zero_stages(plan: Plan, graph: LayerGraph,
                       framework: Framework) -> tuple[tuple[int, ...], ...]:
    """Per pipeline, per stage: the ZeRO stage its memory and gradient exposure are priced at."""
    zero = plan.zero_stage
    if zero > framework.max_zero and _pipelined(plan):
        # Alongside a pipeline schedule Megatron-LM (distributed optimizer) and DeepSpeed
        # (pipeline engine) shard optimizer state only, whatever stage is asked for.
        return tuple(tuple(framework.max_zero for _ in pipe.stages) for pipe in plan.pipelines)
    levels = tuple(tuple(zero for _ in pipe.stages) for pipe in plan.pipelines)
    if zero < 2 or len(plan.pipelines) < 2 or not framework.zero_beyond_fsdp_runs_as_zero1:
        return levels
    # Ranks as torchrun numbers them at launch (`hetplan launch`): a group out of that order
    # stays off FSDP2 at run time.
    try:
        to_torch: dict[int, int] | None = torch_rank_map(plan)
    except HetplanError:  # local ranks torchrun cannot number: launch refuses the plan, and
        to_torch = None   # dryrun numbers ranks as the plan does, so no order to check
    on_fsdp = fsdp_layout(plan, _tied_elements(graph), to_torch)
    return tuple(tuple(zero if all(e in on_fsdp for e in range(*st.layers)) else 1
                       for st in pipe.stages) for pipe in plan.pipelines)


def _pipelined(plan: Plan) -> bool:
    return any(len(plan.device_groups(p)) > 1 for p in range(len(plan.pipelines)))


def zero_downgrade_note(plan: Plan, levels: tuple[tuple[int, ...], ...],
                        framework: Framework | None = None) -> str | None:
    """One line for `estimate` when some of `levels` (`priced_zero_stages`) are below the
    plan's ZeRO stage."""
    flat = [z for row in levels for z in row]
    low = sum(z < plan.zero_stage for z in flat)
    if not low:
        return None
    if framework is not None and plan.zero_stage > framework.max_zero and _pipelined(plan):
        return (f"zero {plan.zero_stage}: priced at ZeRO-{framework.max_zero}: "
                f"{framework.name} shards optimizer state only alongside pipeline parallelism "
                "(`hetplan frameworks`); without it (pp 1), or with --framework torchtitan or "
                "hetplan (FSDP2), ZeRO-2/3 is priced as asked")
    return (f"zero {plan.zero_stage}: {low} of {len(flat)} stages priced at ZeRO-1's memory: "
            "hetplan's runtime shards them on its own slices, which hold gradients and weights "
            "whole through the backward (FSDP2 needs identical replicas on one GPU type, even "
            "shards, no expert- or context-parallel stage, no tied weight and replicas "
            "numbered in node order)")
