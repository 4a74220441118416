"""The launch plan schema (see schema.py)."""

from planner.plan.schema import SCHEMA, Pipeline, Plan, RankInfo, Stage

__all__ = ["SCHEMA", "Pipeline", "Plan", "RankInfo", "Stage"]
