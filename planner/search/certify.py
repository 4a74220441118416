"""A certified lower bound on the objective of every plan in the search space, and the gap.

The search's answer is an upper bound (a plan, re-costed by `estimate`). The lower bound is
what no plan can beat, whatever the search skipped: for throughput, the layer-work bound of
`bounds.py` with every GPU the plan may use (all of them, or the budget's best fractional
pick); for cost, the least $ of GPU time the layers' compute alone is paid for. Both are the
minimum over the micro-batch sizes searched. `exact` is claimed only when the plan meets the
bound; otherwise `gap_pct` says how much faster (or cheaper) a better plan could at most be.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from planner.search.bounds import budget_gpus, cost_floor_usd, layer_bound

__all__ = ["Certificate", "certify"]

_EXACT_REL = 1e-9


@dataclass(frozen=True, slots=True)
class Certificate:
    lower_bound: float | None
    """Seconds per iteration (throughput) or $ per million tokens (cost); None when unknown
    (a cost objective on a cluster without prices)."""
    gap_pct: float | None
    """100 · (found − bound) / found: at most this much better a plan can be."""
    exact: bool


def bounds(search, sizes: Sequence[int]) -> tuple[float, float | None]:
    """(seconds, $ per million tokens or None): floors over every plan of the space."""
    time_lb, usd_lb = math.inf, math.inf
    tokens = search.gbs * search.graph.seq_len
    for b in sizes:
        opts = search.options(b)
        bound = layer_bound(opts)
        gpus = budget_gpus(bound, search.gpus, search.prices, search.budget)
        time_lb = min(time_lb, bound.iteration_s(search.gbs // b, gpus))
        usd = cost_floor_usd(opts, search.prices, search.gbs // b)
        usd_lb = min(usd_lb, math.inf if usd is None else usd * 1e6 / tokens)
    return time_lb, (None if usd_lb == math.inf else usd_lb)


def certify(found: float, lower_bound: float | None) -> Certificate:
    if lower_bound is None or not math.isfinite(lower_bound) or found <= 0:
        return Certificate(lower_bound=lower_bound, gap_pct=None, exact=False)
    gap = max(0.0, (found - lower_bound) / found)
    return Certificate(lower_bound=lower_bound, gap_pct=100.0 * gap,
                       exact=found <= lower_bound * (1 + _EXACT_REL))
