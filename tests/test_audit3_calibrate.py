"""Adversarial runs files for `hetplan calibrate` (audit 3): a row that is not a measurement,
or a fit that only stops at the search's bound, is one `error:` line and no file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from planner.cluster import load_cluster
from planner.costing import estimate, megatron_plan
from planner.costing.calibrate import apply_calibration
from planner.graph import load_model
from tests.cli import run_cli


def _plan(tmp_path: Path) -> tuple[Path, float]:
    """A small plan on dgx-a100 and its predicted iteration time with the shipped constants."""
    plan = megatron_plan(load_model("tiny-llama"), load_cluster("dgx-a100"), tp=1, pp=1, dp=2,
                         micro_batch=1, global_batch=2)
    path = tmp_path / "p.json"
    plan.save(path)
    return path, estimate(None, None, plan).iteration_time_s


def _refused(tmp_path: Path, capsys: pytest.CaptureFixture[str], runs: Path,
             *words: str) -> None:
    out = tmp_path / "cal.yaml"
    code, _, err = run_cli(["calibrate", str(runs), "--out", str(out)], capsys)
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:") and "Traceback" not in err
    for word in words:
        assert word in lines[0], err
    assert not out.exists()


def test_a_boolean_time_is_not_one_second(tmp_path, capsys) -> None:
    path, _ = _plan(tmp_path)
    runs = tmp_path / "runs.jsonl"
    runs.write_text(json.dumps({"plan": path.name, "measured_iteration_s": True}) + "\n")
    _refused(tmp_path, capsys, runs, "runs.jsonl:1", "measured_iteration_s")


def test_a_row_with_more_cells_than_the_header_is_refused(tmp_path, capsys) -> None:
    path, t = _plan(tmp_path)
    runs = tmp_path / "runs.csv"
    runs.write_text(f"plan,measured_iteration_s\n{path.name},{t},{t}\n")
    _refused(tmp_path, capsys, runs, "runs.csv:2", "columns")


def test_a_fit_stopped_at_the_bound_is_refused_not_written(tmp_path, capsys) -> None:
    # 100× the predicted time: no efficiency scale in [0.1, 10] reaches it (the scale divides
    # the compute time at most 10×), so the fit stops at 0.1; it was written as a calibration.
    path, t = _plan(tmp_path)
    runs = tmp_path / "runs.csv"
    runs.write_text(f"plan,measured_iteration_s\n{path.name},{100 * t!r}\n")
    _refused(tmp_path, capsys, runs, "bound", "nothing written")


def test_a_broken_plan_in_a_row_is_named_by_its_row(tmp_path, capsys) -> None:
    # The plan's stages cover fewer layers than its model: the error said "plan: pipelines"
    # without the row or the file.
    path, t = _plan(tmp_path)
    data = json.loads(path.read_text())
    data["model"]["num_layers"] = 5
    path.write_text(json.dumps(data))
    runs = tmp_path / "runs.csv"
    runs.write_text(f"plan,measured_iteration_s\n{path.name},{t!r}\n")
    _refused(tmp_path, capsys, runs, "runs.csv:2: plan p.json:", "layers [0, 6)")


@pytest.fixture(autouse=True)
def _restore_constants():
    yield
    apply_calibration({})
