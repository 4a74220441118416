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


def test_identical_replicas_fold_and_128_microbatches_stay_readable(tmp_path, capsys) -> None:
    """16 T4 as 4 identical pipelines of 4 stages, 128 micro-batches each: the chart shows one
    pipeline's 4 rows marked ×4, with no per-micro-batch numbers, at a bounded size."""
    import struct

    from matplotlib.text import Text

    from planner.cli.cmd_simulate import simulate_plan
    from planner.cluster import load_cluster
    from planner.costing import megatron_plan
    from planner.graph import load_model
    from planner.report.plan_view import fold_pipelines, folded_stage_labels
    from tests.cli import run_cli

    plan = megatron_plan(load_model("tiny"), load_cluster("amp-t4"), tp=1, pp=4, dp=4,
                         micro_batch=1, global_batch=512)
    assert [p.microbatches for p in plan.pipelines] == [128] * 4
    path = tmp_path / "p.json"
    plan.save(path)
    png = tmp_path / "g.png"
    code, _, err = run_cli(["simulate", str(path), "--gantt", str(png)], capsys)
    assert code == 0, err
    width, height = struct.unpack(">II", png.read_bytes()[16:24])  # PNG IHDR
    # 4 rows: about 1.6 + 4 × 0.55 in at 120 dpi; 16 unfolded rows would be ~1250 px tall.
    assert height < 700 and width < 2000, (width, height)

    _, _, timelines = simulate_plan(path)
    groups = fold_pipelines(plan, timelines)
    assert groups == [[0, 1, 2, 3]]
    labels = folded_stage_labels(plan, groups)
    assert labels[0].startswith("p0–3 ×4 stage 0: T4 TP1, L0")
    fig = gantt_figure([timelines[0]], labels, counts=[4])
    texts = [t for t in fig.findobj(Text) if t.get_text()]
    # Tick labels, axis labels, title, legend: tens; one per micro-batch would be ~1000.
    assert len(texts) < 60, len(texts)
    assert not [t for t in texts if t.get_text().isdigit() and t.get_fontsize() == 6]
    assert "4 pipelines" in fig.axes[0].get_title()


def test_micro_batch_numbers_on_sparse_charts() -> None:
    from matplotlib.text import Text

    sparse = simulate([StageTiming(1.0, 2.0, 0.0, j) for j in range(2)], 4)
    numbers = [t for t in gantt_figure(sparse).findobj(Text) if t.get_text().isdigit()
               and t.get_fontsize() == 6]
    assert len(numbers) == 2 * 2 * 4  # 2 devices × (forward + backward) × 4 micro-batches
