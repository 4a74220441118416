"""Exact search over heterogeneous parallel plans (`plan`), ranked by `estimate`."""

from planner.search.result import SearchResult, SearchStats
from planner.search.search import plan

__all__ = ["SearchResult", "SearchStats", "plan"]
