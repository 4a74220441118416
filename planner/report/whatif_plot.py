"""The what-if picture: before and after bars of throughput and of cost per token.

Two panels, one bar per side in each: tokens/s (higher is better) and $ per 1M tokens (lower is
better), the value written on each bar and the change in % in the panel's title. A side with no
feasible plan, or no price, gets a labelled gap instead of a bar, so nothing is drawn as zero.
"""

from __future__ import annotations

from pathlib import Path

from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter

from planner.report.figure import save_figure
from planner.report.whatif import WhatIf, change_pct

__all__ = ["draw_whatif", "whatif_figure"]

_COLOURS = ("#999999", "#0072B2")  # before grey, after blue (Okabe & Ito)


def whatif_figure(w: WhatIf, title: str = "") -> Figure:
    """Figure with the two panels; `title` names the model and cluster."""
    fig = Figure(figsize=(9, 4.2))
    sides = ("before", "after")
    panels = (
        ("throughput (tokens/s)", "tokens/s",
         (w.before.tokens_per_s if w.before.feasible else None,
          w.after.tokens_per_s if w.after.feasible else None), "{:,.0f}"),
        ("cost ($ per 1M tokens)", "$/1M tokens",
         (w.before.usd_per_million_tokens if w.before.feasible else None,
          w.after.usd_per_million_tokens if w.after.feasible else None), "${:,.4g}"),
    )
    rows = (w.before, w.after)
    for k, (label, short, values, fmt) in enumerate(panels):
        ax = fig.add_subplot(1, 2, k + 1)
        top = max((v for v in values if v is not None), default=1.0) or 1.0
        for i, v in enumerate(values):
            if v is None:
                why = "no plan" if not rows[i].feasible else "no price"
                ax.text(i, top * 0.05, why, ha="center", va="bottom", fontsize=9,
                        color="#D55E00")
                continue
            ax.bar(i, v, width=0.6, color=_COLOURS[i])
            ax.text(i, v, fmt.format(v), ha="center", va="bottom", fontsize=9)
        ax.set_xticks(range(2), sides)
        ax.set_xlim(-0.6, 1.6)
        ax.set_ylim(0, top * 1.18)
        ax.set_ylabel(label)
        if k == 0:
            ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:,.0f}"))
        pct = change_pct(*values)
        ax.set_title(short + ("" if pct is None else f": {pct:+.1f}%"), fontsize=10)
        for edge in ("top", "right"):
            ax.spines[edge].set_visible(False)
    if title:
        fig.suptitle(title, fontsize=11)
    fig.subplots_adjust(wspace=0.35)
    return fig


def draw_whatif(w: WhatIf, path: str | Path, title: str = "") -> Path:
    """Write the before/after picture to `path` (.png or .svg)."""
    return save_figure(whatif_figure(w, title), path)
