"""The throughput–cost Pareto front and its picture.

A point (cost, throughput) is on the front when no other point is at least as cheap and at least
as fast while strictly better in one of the two. Points without a known cost cannot be placed
and are never on the front.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter

from planner.report.figure import save_figure

__all__ = ["draw_pareto", "pareto_front", "pareto_figure"]


def pareto_front(costs: Sequence[float | None], throughputs: Sequence[float]) -> list[int]:
    """Indices of the non-dominated points (lower cost, higher throughput), cheapest first.

    Equal points are all kept (neither dominates the other). O(n log n): sort by cost, then by
    throughput descending, and keep each point that beats every cheaper-or-equal one's best.
    """
    if len(costs) != len(throughputs):
        raise ValueError(f"{len(costs)} costs for {len(throughputs)} throughputs")
    known = [i for i, c in enumerate(costs) if c is not None]
    order = sorted(known, key=lambda i: (costs[i], -throughputs[i], i))
    front: list[int] = []
    best = float("-inf")
    prev: int | None = None
    prev_kept = False
    for i in order:
        tied = prev is not None and costs[i] == costs[prev] and throughputs[i] == throughputs[prev]
        kept = throughputs[i] > best or (tied and prev_kept)
        if kept:
            front.append(i)
        if throughputs[i] > best:
            best = throughputs[i]
        prev, prev_kept = i, kept
    return front


def pareto_figure(labels: Sequence[str], usd_per_million_tokens: Sequence[float | None],
                  tokens_per_s: Sequence[float], title: str = "", *,
                  usd_per_hour: Sequence[float | None] | None = None,
                  infeasible: Sequence[str] = ()) -> Figure:
    """Throughput against $ per 1M tokens: every point labelled (with its $/h when given), the
    front joined and marked; `infeasible` names the clusters with no feasible plan, noted on
    the plot (they have no point to draw)."""
    costs = usd_per_million_tokens
    front = pareto_front(costs, tokens_per_s)
    fig = Figure(figsize=(8, 5.5))
    ax = fig.add_subplot()
    placed = [i for i, c in enumerate(costs) if c is not None]
    others = [i for i in placed if i not in front]
    ax.scatter([costs[i] for i in others], [tokens_per_s[i] for i in others],
               s=40, color="#999999", label="dominated", zorder=3)
    ax.plot([costs[i] for i in front], [tokens_per_s[i] for i in front], "-o",
            color="#D55E00", markersize=8, drawstyle="steps-post", label="Pareto front",
            zorder=4)
    for i in placed:
        hourly = usd_per_hour[i] if usd_per_hour is not None else None
        text = labels[i] if hourly is None else f"{labels[i]} (${hourly:,.2f}/h)"
        ax.annotate(text, (costs[i], tokens_per_s[i]), textcoords="offset points",
                    xytext=(6, 6), fontsize=8)
    ax.set_xlabel("cost ($ per 1M tokens trained)")
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:,.0f}"))
    ax.set_ylabel("throughput (tokens/s)")
    # Room on the right and top for the labels of the extreme points.
    ax.set_xlim(0, max((costs[i] for i in placed), default=1.0) * 1.25)
    ax.set_ylim(0, max((tokens_per_s[i] for i in placed), default=1.0) * 1.15)
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right", fontsize=8)
    notes = []
    missing = [labels[i] for i, c in enumerate(costs) if c is None]
    if missing:
        notes.append(f"no price: {', '.join(missing)}")
    if infeasible:
        notes.append(f"no feasible plan: {', '.join(infeasible)}")
    if notes:
        ax.text(0.01, 0.99, "\n".join(notes), transform=ax.transAxes, ha="left", va="top",
                fontsize=8, color="#D55E00")
    ax.set_title((f"{title}: " if title else "") + "throughput vs cost per token", fontsize=10)
    for edge in ("top", "right"):
        ax.spines[edge].set_visible(False)
    return fig


def draw_pareto(labels: Sequence[str], usd_per_million_tokens: Sequence[float | None],
                tokens_per_s: Sequence[float], path: str | Path, title: str = "", *,
                usd_per_hour: Sequence[float | None] | None = None,
                infeasible: Sequence[str] = ()) -> Path:
    """Write the throughput-vs-cost plot to `path` (.png or .svg)."""
    return save_figure(pareto_figure(labels, usd_per_million_tokens, tokens_per_s, title,
                                     usd_per_hour=usd_per_hour, infeasible=infeasible), path)
