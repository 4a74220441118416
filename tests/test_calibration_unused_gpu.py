"""A calibration naming a GPU type the cluster lacks changes nothing there: the commands say
so in one stderr note (not an error: one file may serve several clusters)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from planner.costing.calibrate import apply_calibration
from tests.cli import run_cli


@pytest.fixture(autouse=True)
def _restore_constants():
    """A calibration is process-wide: leave the shipped constants for the next test."""
    yield
    apply_calibration({})


def _estimate(capsys, *extra: str) -> tuple[float, str]:
    # tiny on amp-t4: a cluster of T4 GPUs only (planner/configs/clusters/amp-t4.yaml).
    code, text, err = run_cli(["estimate", "tiny", "amp-t4", "--tp", "1", "--pp", "1",
                               "--global-batch", "16", "--json", *extra], capsys)
    assert code == 0, err
    return json.loads(text)["iteration_time_s"], err


def test_a_scale_for_a_gpu_the_cluster_lacks_is_noted(tmp_path: Path, capsys) -> None:
    cal = tmp_path / "cal.yaml"
    cal.write_text("gpu_efficiency_scale: {H100-SXM5-80GB: 0.5, A100-SXM4-80GB: 0.7}\n")
    plain, quiet = _estimate(capsys)
    calibrated, err = _estimate(capsys, "--calibration", str(cal))
    assert calibrated == plain  # the runtime's own figure: the scales do nothing on T4s
    notes = [line for line in err.splitlines() if line.startswith("note:")]
    assert len(notes) == 1 and "note:" not in quiet
    assert "A100-SXM4-80GB, H100-SXM5-80GB not in this cluster" in notes[0]
    assert "T4" in notes[0] and "no effect" in notes[0]


def test_a_scale_the_cluster_uses_is_not_noted(tmp_path: Path, capsys) -> None:
    cal = tmp_path / "cal.yaml"
    cal.write_text("gpu_efficiency_scale: {T4: 0.5, '*': 0.9}\n")
    plain, _ = _estimate(capsys)
    calibrated, err = _estimate(capsys, "--calibration", str(cal))
    assert calibrated > plain and "note:" not in err
