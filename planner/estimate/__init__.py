"""Cost of a given plan: `estimate(model, cluster, plan) -> Estimate`."""

from planner.estimate.result import Estimate, StageEstimate

__all__ = ["Estimate", "StageEstimate"]
