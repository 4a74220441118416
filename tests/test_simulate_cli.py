"""`hetplan simulate PLAN.json`: the numbers are estimate's, the charts are written."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from planner.cluster import load_cluster
from planner.costing import estimate, megatron_plan
from planner.graph import load_model
from tests.cli import run_cli as _run


@pytest.fixture(scope="module")
def plan_file(tmp_path_factory) -> tuple[Path, object]:
    model = load_model("tiny")
    cluster = load_cluster("lab-mixed")
    plan = megatron_plan(model, cluster, tp=1, pp=3, dp=2, micro_batch=1, global_batch=12,
                         recompute="selective")
    path = tmp_path_factory.mktemp("plans") / "tiny.json"
    plan.save(path)
    return path, estimate(model, cluster, plan)


def test_json_matches_estimate_and_charts_are_written(plan_file, tmp_path, capsys) -> None:
    path, est = plan_file
    png, svg = tmp_path / "g.png", tmp_path / "g.svg"
    code, out, _ = _run(["simulate", str(path), "--gantt", str(png), "--svg", str(svg),
                         "--json"], capsys)
    assert code == 0
    data = json.loads(out)
    assert data["iteration_time_s"] == pytest.approx(est.iteration_time_s, abs=1e-9)
    assert len(data["pipelines"]) == 2
    assert data["stages"][0] == "p0 stage 0: A100-SXM4-80GB TP1, L0–1"
    for p, tl in enumerate(est.timeline):
        got = data["pipelines"][p]
        assert got["makespan_s"] == pytest.approx(tl.makespan_s, abs=1e-9)
        assert [d["max_inflight"] for d in got["devices"]] == [3, 2, 1]
        kinds = {e["kind"] for e in got["events"]}
        assert {"fwd", "bwd", "send", "send_grad", "optimizer"} <= kinds
        fwd = [e for e in got["events"] if e["kind"] == "fwd"]
        assert len(fwd) == 3 * 6  # 3 stages × 6 micro-batches per pipeline
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 20_000
    assert svg.read_text().lstrip().startswith("<?xml") and svg.stat().st_size > 20_000


def test_table_for_people(plan_file, capsys) -> None:
    path, _ = plan_file
    code, out, _ = _run(["simulate", str(path)], capsys)
    assert code == 0
    assert "A100-SXM4-80GB×1" in out and "bubble" in out


def test_bad_inputs_are_one_line(tmp_path, plan_file, capsys) -> None:
    code, out, err = _run(["simulate", str(tmp_path / "missing.json")], capsys)
    assert code == 2 and err.startswith("error: ") and err.count("\n") == 1
    path, _ = plan_file
    code, _, err = _run(["simulate", str(path), "--gantt", str(tmp_path / "g.gif")], capsys)
    assert code == 2 and "name it .png or .svg" in err and err.count("\n") == 1
