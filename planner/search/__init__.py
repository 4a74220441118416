"""Exact search over heterogeneous parallel plans (`plan`), ranked by `estimate`."""

from planner.search.api import plan
from planner.search.result import SearchResult, SearchStats

__all__ = ["SearchResult", "SearchStats", "plan"]
