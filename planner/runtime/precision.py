"""Which dtype each rank computes in, and whether the plan scales its loss.

The rule is the cost model's (`cost_models.compute.training_dtype`), applied to each stage's
GPU type as the plan names it: bf16 on GPUs with bf16 tensor cores, fp16 with dynamic loss
scaling on V100/T4 and the like. Loss scaling is one decision for the whole plan: the loss is
scaled at each pipeline's last stage and every gradient behind it carries the scale, so one
fp16 stage anywhere turns it on for every rank (bf16 ranks lose nothing by it), and every rank
then takes part in the scaler's overflow all-reduce.
"""

from __future__ import annotations

from cost_models.catalog import get_gpu
from cost_models.compute import training_dtype
from planner.schema import Plan

__all__ = ["plan_precision", "stage_dtypes", "uses_loss_scaling"]


def plan_precision(plan: Plan) -> str:
    """The training precision the plan's model spec asks for (fp32 when it says nothing)."""
    return ((plan.model or {}).get("training") or {}).get("precision", "fp32")


def stage_dtypes(plan: Plan) -> dict[int, str]:
    """Plan rank -> the dtype it computes in on its stage's GPU type ("bf16", "fp16", "fp32").
    A GPU name the catalog does not know keeps the plan's precision as asked."""
    precision = plan_precision(plan)
    out: dict[int, str] = {}
    for pipe in plan.pipelines:
        for st in pipe.stages:
            try:
                dtype = training_dtype(get_gpu(st.gpu), precision)
            except LookupError:
                dtype = precision if precision in ("fp16", "fp32") else "bf16"
            for r in st.ranks:
                out[r] = dtype
    return out


def uses_loss_scaling(plan: Plan) -> bool:
    """Whether any rank computes in fp16 (then every rank scales and unscales)."""
    return "fp16" in stage_dtypes(plan).values()
