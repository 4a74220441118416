"""What `planner.plan` returns: the best plan, the runners-up, and how the search went."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from planner.costing.result import Estimate
from planner.schema import Plan

__all__ = ["SearchResult", "SearchStats"]


@dataclass(frozen=True, slots=True, kw_only=True)
class SearchStats:
    shapes: int
    """Pipeline shapes (micro-batch, schedule, GPU groups, replicas) the search considered."""
    shapes_pruned: int
    """Shapes skipped because their lower bound could not beat the best plan found."""
    programs: int
    """Dynamic programs run (one per shape and bottleneck cap)."""
    candidates: int
    """Distinct candidate plans the programs produced."""
    costed: int
    """Candidates re-costed with `estimate` (the judge of the final ranking)."""
    seconds: float
    """Wall-clock time of the search: differs run to run, so `to_dict` leaves it out unless
    asked (`hetplan plan --json --timing`)."""
    exact: bool
    """True only when proven: the plan meets the certified lower bound. Otherwise the true
    optimum lies between `lower_bound` and the plan, and `notes` name the reductions that may
    have lost a better plan."""
    notes: tuple[str, ...] = ()
    objective: str = "throughput"
    lower_bound: float | None = None
    """No plan of the space does better: seconds per iteration (objective throughput) or $
    per million tokens (objective cost); None when it cannot be stated (cost without prices)."""
    gap_pct: float | None = None
    """100 · (best − lower_bound) / best: a better plan, if one exists, is at most this much
    faster (or cheaper)."""

    @property
    def bound_unit(self) -> str:
        return "s" if self.objective == "throughput" else "$/1M tokens"

    def to_dict(self, *, timing: bool = False) -> dict[str, Any]:
        """The stats as JSON; the same inputs give the same dict, except `seconds` (the wall
        time), present only with `timing`."""
        out: dict[str, Any] = {
            "shapes": self.shapes, "shapes_pruned": self.shapes_pruned,
            "programs": self.programs, "candidates": self.candidates, "costed": self.costed}
        if timing:
            out["seconds"] = round(self.seconds, 3)
        return out | {
            "exact": self.exact, "objective": self.objective,
            "lower_bound": self.lower_bound, "lower_bound_unit": self.bound_unit,
            "gap_pct": None if self.gap_pct is None else round(self.gap_pct, 4),
            "notes": list(self.notes)}


@dataclass(frozen=True, slots=True, kw_only=True)
class SearchResult:
    best: Plan
    """The winner, `predicted` filled from `estimate`."""
    candidates: tuple[Plan, ...]
    """The top-k plans, best first (`candidates[0]` is `best`), each with `predicted`."""
    estimates: tuple[Estimate, ...]
    """`estimate` of each candidate, same order."""
    stats: SearchStats
