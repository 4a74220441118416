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
    exact: bool
    """False when some shape was searched in a reduced space (see `notes`)."""
    notes: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {"shapes": self.shapes, "shapes_pruned": self.shapes_pruned,
                "programs": self.programs, "candidates": self.candidates,
                "costed": self.costed, "seconds": round(self.seconds, 3),
                "exact": self.exact, "notes": list(self.notes)}


@dataclass(frozen=True, slots=True, kw_only=True)
class SearchResult:
    best: Plan
    """The winner, `predicted` filled from `estimate`."""
    candidates: tuple[Plan, ...]
    """The top-k plans, best first (`candidates[0]` is `best`), each with `predicted`."""
    estimates: tuple[Estimate, ...]
    """`estimate` of each candidate, same order."""
    stats: SearchStats
