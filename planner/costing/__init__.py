"""Cost of a given plan: `estimate(model, cluster, plan) -> Estimate`.

`stage_cost` (one TP group over a layer range, one micro-batch) is what the search calls;
`megatron_plan` builds the plan a Megatron-style config describes.
"""

from planner.costing.estimate import estimate, with_prediction
from planner.costing.framework import DEFAULT_FRAMEWORK, Framework
from planner.costing.megatron import megatron_plan
from planner.costing.result import Estimate, StageEstimate
from planner.costing.stage_cost import (
    LayerCostTable,
    StageCost,
    layer_cost_table,
    stage_cost,
)
from planner.costing.stage_memory import stage_peak_memory_gib

__all__ = [
    "DEFAULT_FRAMEWORK",
    "Estimate",
    "Framework",
    "LayerCostTable",
    "StageCost",
    "StageEstimate",
    "estimate",
    "layer_cost_table",
    "megatron_plan",
    "stage_cost",
    "stage_peak_memory_gib",
    "with_prediction",
]
