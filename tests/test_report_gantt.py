"""Gantt charts: valid PNG/SVG files, deterministic bytes, the right colours on the canvas."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.colors import to_rgb

from planner.errors import HetplanError
from planner.report.gantt import COLOURS, draw_gantt, gantt_figure
from planner.simulate import StageTiming, simulate


def _timeline(recompute: bool = False, sends: bool = True):
    chunks = [StageTiming(1e-3 * (1 + 0.2 * j), 2e-3 * (1 + 0.2 * j),
                          2e-4 if sends and j < 3 else 0.0, j,
                          recompute_s=6e-4 if recompute and j == 0 else 0.0) for j in range(4)]
    return simulate(chunks, 8, dp_sync_s=[2e-3] * 4, optimizer_s=[5e-4] * 4)


def _pixels(fig) -> np.ndarray:
    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    return np.asarray(canvas.buffer_rgba())[..., :3].astype(int)


def _has_colour(img: np.ndarray, colour: str) -> int:
    rgb = np.array([round(255 * c) for c in to_rgb(colour)])
    return int((np.abs(img - rgb).sum(axis=-1) <= 6).sum())


def test_png_and_svg_are_valid_and_deterministic(tmp_path: Path) -> None:
    t = _timeline(recompute=True)
    labels = [f"stage {s}: A100-SXM4-80GB TP2, layers {s * 8}-{s * 8 + 8}" for s in range(4)]
    png = draw_gantt(t, tmp_path / "a.png", labels, title="unit")
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    assert len(data) > 20_000
    draw_gantt(t, tmp_path / "b.png", labels, title="unit")
    assert (tmp_path / "b.png").read_bytes() == data
    svg = draw_gantt(t, tmp_path / "a.svg", labels, title="unit")
    root = ET.fromstring(svg.read_bytes())
    assert root.tag.endswith("svg")
    assert len(svg.read_bytes()) > 20_000
    draw_gantt(t, tmp_path / "b.svg", labels, title="unit")
    assert (tmp_path / "b.svg").read_bytes() == svg.read_bytes()
    assert "layers 8-16" in svg.read_text()


def test_colours_follow_the_events() -> None:
    with_all = _pixels(gantt_figure(_timeline(recompute=True)))
    for kind in ("fwd", "bwd", "recompute", "comm", "dp_sync", "optimizer", "idle"):
        assert _has_colour(with_all, COLOURS[kind]) > 50, kind
    plain = _pixels(gantt_figure(_timeline(recompute=False, sends=False)))
    assert _has_colour(plain, COLOURS["recompute"]) == 0
    assert _has_colour(plain, COLOURS["comm"]) == 0


def test_more_bubble_more_idle_pixels() -> None:
    few = simulate([StageTiming(1.0, 2.0, 0.0, j) for j in range(4)], 4)
    many = simulate([StageTiming(1.0, 2.0, 0.0, j) for j in range(4)], 32)
    assert few.bubble_fraction > many.bubble_fraction
    idle_few = _has_colour(_pixels(gantt_figure(few)), COLOURS["idle"])
    idle_many = _has_colour(_pixels(gantt_figure(many)), COLOURS["idle"])
    assert idle_few > 2 * idle_many


def test_bad_requests() -> None:
    with pytest.raises(HetplanError, match="name it .png or .svg"):
        draw_gantt(_timeline(), "out.jpg")
    with pytest.raises(ValueError, match="2 row labels for 4 rows"):
        gantt_figure(_timeline(), ["a", "b"])
