"""Gantt chart of a simulated pipeline iteration: one row per stage, the bubble visible.

Forward, backward, recomputation, p2p communication, DP gradient sync and the optimizer step
each get a colour; idle time is the hatched grey behind the bars, so the pipeline bubble (warm-up
and cool-down) shows as hatching. Several timelines (heterogeneous data-parallel pipelines) stack
on one time axis; a timeline that stands for N identical pipelines (`counts`) is drawn once, its
rows labelled by the caller (`p0–7 ×8 stage 0: ...`).

Readable at any size: micro-batch numbers only where the bars are wide enough and a row holds at
most `MAX_LABELLED_OPS` operations, and the figure's height stays under `MAX_HEIGHT_IN` however
many rows there are (the rows get thinner).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from matplotlib.colors import to_rgb
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from planner.report.figure import save_figure
from planner.simulate import Timeline

__all__ = ["COLOURS", "MAX_HEIGHT_IN", "MAX_LABELLED_OPS", "draw_gantt", "gantt_figure"]

# Colour-blind-safe palette (Okabe & Ito 2008); idle is a neutral grey.
COLOURS = {
    "fwd": "#0072B2",
    "bwd": "#E69F00",
    "recompute": "#CC79A7",
    "comm": "#D55E00",
    "dp_sync": "#009E73",
    "optimizer": "#444444",
    "idle": "#EEEEEE",
}
_LEGEND = [("fwd", "forward"), ("bwd", "backward"), ("recompute", "recompute"),
           ("comm", "p2p send"), ("dp_sync", "DP grad sync"), ("optimizer", "optimizer step")]
_BAR = 0.62
_COMM = 0.14
_ROW_IN = 0.55
MAX_HEIGHT_IN = 24.0
"""Tallest figure drawn (inches): beyond ~40 rows each row gets thinner instead."""
MAX_LABELLED_OPS = 64
"""Forward + backward passes per row above which no micro-batch numbers are written."""


def gantt_figure(timelines: Timeline | Sequence[Timeline],
                 row_labels: Sequence[str] | None = None, title: str = "",
                 counts: Sequence[int] | None = None) -> Figure:
    """The chart as a Figure; rows top to bottom: pipeline 0's stages, then pipeline 1's ...
    `counts[i]`: how many identical pipelines timeline i stands for (default 1 each)."""
    tls = [timelines] if isinstance(timelines, Timeline) else list(timelines)
    reps = list(counts) if counts is not None else [1] * len(tls)
    if len(reps) != len(tls) or min(reps) < 1:
        raise ValueError(f"counts {reps}: need one count >= 1 per timeline ({len(tls)})")
    rows = sum(t.num_devices for t in tls)
    if row_labels is not None and len(row_labels) != rows:
        raise ValueError(f"{len(row_labels)} row labels for {rows} rows")
    labels = list(row_labels) if row_labels else [
        (f"p{p} stage {d}" if len(tls) > 1 else f"stage {d}")
        + (f" ×{reps[p]}" if reps[p] > 1 else "")
        for p, t in enumerate(tls) for d in range(t.num_devices)]
    makespan = max(t.makespan_s for t in tls)
    scale, unit = (1.0, "s") if makespan >= 1.0 else (1e3, "ms")

    row_in = min(_ROW_IN, (MAX_HEIGHT_IN - 1.6) / rows)
    fig = Figure(figsize=(13, 1.6 + row_in * rows))
    ax = fig.add_subplot()
    base = 0
    for t in tls:
        _draw_pipeline(ax, t, base, scale, makespan)
        base += t.num_devices
    ax.set_ylim(rows - 0.5, -0.5)
    ax.set_yticks(range(rows), labels, fontsize=8 if row_in >= 0.3 else 6)
    ax.set_xlim(0, makespan * scale * 1.005)
    ax.set_xlabel(f"time ({unit})")
    for edge in ("top", "right"):
        ax.spines[edge].set_visible(False)
    kinds = {e.kind for t in tls for e in t.events}
    kinds |= {"comm"} if kinds & {"send", "send_grad"} else set()
    handles = [Patch(facecolor=COLOURS[k], label=name) for k, name in _LEGEND if k in kinds]
    if any(t.num_chunks > t.num_devices for t in tls):
        handles.append(Patch(facecolor=_lighter(COLOURS["fwd"], 1), label="later model chunk"))
    handles.append(Patch(facecolor=COLOURS["idle"], hatch="///", edgecolor="#BBBBBB",
                         label="idle (bubble)"))
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.005, 1.0), frameon=False,
              fontsize=8)
    devices = sum(t.num_devices * n for t, n in zip(tls, reps, strict=True))
    bubble = sum(t.bubble_fraction * t.num_devices * n
                 for t, n in zip(tls, reps, strict=True)) / devices
    head = f"{title} — " if title else ""
    mbs = sorted({t.microbatches for t in tls})
    mb = f"{mbs[0]}" if len(mbs) == 1 else f"{mbs[0]}–{mbs[-1]}"
    folded = f", {sum(reps)} pipelines" if sum(reps) > len(tls) else ""
    ax.set_title(f"{head}iteration {makespan * scale:.4g} {unit}, bubble {bubble:.1%} "
                 f"({tls[0].schedule}, {mb} micro-batches{folded})", fontsize=10)
    return fig


def draw_gantt(timelines: Timeline | Sequence[Timeline], path: str | Path,
               row_labels: Sequence[str] | None = None, title: str = "",
               counts: Sequence[int] | None = None) -> Path:
    """Write the chart to `path` (.png or .svg) and return the path."""
    return save_figure(gantt_figure(timelines, row_labels, title, counts), path)


def _lighter(colour: str, steps: int) -> tuple[float, float, float]:
    """The colour mixed with white, 30 % per step (opaque, so idle hatching stays hidden)."""
    rgb = to_rgb(colour)
    mix = min(0.3 * steps, 0.9)
    return tuple(c + (1.0 - c) * mix for c in rgb)  # type: ignore[return-value]


def _draw_pipeline(ax, t: Timeline, base: int, scale: float, makespan: float) -> None:
    s_count = t.num_devices
    spans: dict[tuple[int, str], list[tuple[float, float]]] = {}
    texts = []
    min_text_w = makespan * scale / 70
    # Numbers on dense rows would overprint each other (and cost a text artist each).
    ops_per_row = 2 * t.microbatches * t.virtual_stages
    numbered = ops_per_row <= MAX_LABELLED_OPS
    for e in t.events:
        key = "comm" if e.kind in ("send", "send_grad") else e.kind
        # Later virtual chunks of a device are drawn lighter to tell them apart.
        if key in ("fwd", "bwd", "recompute") and e.chunk >= s_count:
            key = f"{key}:{min(e.chunk // s_count, 3)}"
        w = (e.end_s - e.start_s) * scale
        spans.setdefault((e.device, key), []).append((e.start_s * scale, w))
        if numbered and e.kind in ("fwd", "bwd") and w >= min_text_w:
            texts.append((e.device, (e.start_s * scale + w / 2), str(e.microbatch)))
    # White borders separate wide bars; on dense charts they would paint the row white.
    edge = 0.4 if ops_per_row <= 64 else 0.0
    for d in range(s_count):
        ax.broken_barh([(0.0, t.makespan_s * scale)], (base + d - _BAR / 2, _BAR),
                       facecolors=COLOURS["idle"], edgecolor="#BBBBBB", hatch="///",
                       linewidth=0.0)
    for (d, key), xs in sorted(spans.items()):
        kind, _, shade = key.partition(":")
        if kind == "comm":
            y = (base + d + _BAR / 2 - _COMM, _COMM)
            ax.broken_barh(xs, y, facecolors=COLOURS["comm"], linewidth=0.0)
            continue
        ax.broken_barh(xs, (base + d - _BAR / 2, _BAR),
                       facecolors=_lighter(COLOURS[kind], int(shade or 0)),
                       edgecolor="white", linewidth=edge)
    for d, x, label in texts:
        ax.text(x, base + d - 0.04, label, ha="center", va="center", fontsize=6, color="white")
    if base:
        ax.axhline(base - 0.5, color="#555555", linewidth=0.8)
