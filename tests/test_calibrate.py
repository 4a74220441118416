"""`hetplan calibrate`: recovers constants that generated synthetic runs; says when it cannot."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import yaml

from planner.cluster import load_cluster
from planner.costing import estimate, megatron_plan
from planner.costing.calibrate import apply_calibration, load_calibration
from planner.errors import HetplanError
from planner.graph import load_model
from tests.cli import run_cli


def _plans(tmp_path: Path) -> list[Path]:
    model, cluster = load_model("gpt2-medium"), load_cluster("dgx-a100")
    out = []
    for i, (tp, pp, dp) in enumerate([(1, 2, 4), (2, 2, 2), (4, 1, 2)]):
        plan = megatron_plan(model, cluster, tp=tp, pp=pp, dp=dp, micro_batch=2,
                             global_batch=32)
        path = tmp_path / f"p{i}.json"
        plan.save(path)
        out.append(path)
    return out


def _predict(path: Path, scales: dict[str, float]) -> float:
    from planner.schema import Plan

    apply_calibration(scales)
    try:
        return estimate(None, None, Plan.load(path)).iteration_time_s
    finally:
        apply_calibration({})


def test_calibrate_recovers_the_scale_that_made_the_runs(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    paths = _plans(tmp_path)
    gpu = json.loads(paths[0].read_text())["pipelines"][0]["stages"][0]["gpu"]
    truth = {gpu: 0.8}
    rows = ["plan,measured_iteration_s"] + [f"{p.name},{_predict(p, truth)!r}" for p in paths]
    (tmp_path / "runs.csv").write_text("\n".join(rows) + "\n")
    out = tmp_path / "cal.yaml"
    code, text, err = run_cli(["calibrate", str(tmp_path / "runs.csv"), "--out", str(out),
                               "--json"], capsys)
    assert code == 0, err
    res = json.loads(text)
    assert res["absorbed"] and res["rms_error_after_pct"] < 0.05
    assert res["rms_error_before_pct"] > 5
    cal = yaml.safe_load(out.read_text())
    assert cal["gpu_efficiency_scale"][gpu] == pytest.approx(0.8, rel=1e-3)
    # --calibration on estimate reproduces the generating constants.
    code, text, err = run_cli(["estimate", str(paths[1]), "--calibration", str(out), "--json"],
                              capsys)
    assert code == 0, err
    assert json.loads(text)["iteration_time_s"] == pytest.approx(_predict(paths[1], truth),
                                                                 rel=1e-3)
    apply_calibration({})


def test_contradictory_runs_are_reported_with_their_residual(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _plans(tmp_path)[0]
    base = _predict(path, {})
    # One plan measured twice, 2× apart: no constant makes both right. The best fit sits at
    # their geometric mean, ±ln(2)/2 in log error: rms exp(ln 2 / 2) − 1 = 41.4 %.
    csv_text = f"plan,measured_iteration_s\n{path.name},{0.7 * base}\n{path.name},{1.4 * base}\n"
    (tmp_path / "runs.csv").write_text(csv_text)
    code, text, err = run_cli(["calibrate", str(tmp_path / "runs.csv"), "--out",
                               str(tmp_path / "cal.yaml")], capsys)
    assert code == 0, err
    expected = 100 * (math.exp(math.log(2) / 2) - 1)
    assert f"residual rms {expected:.1f} %" in " ".join(text.split())
    assert "cannot absorb" in text
    apply_calibration({})


def test_bad_runs_file_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "runs.csv").write_text("plan,measured_iteration_s\nmissing.json,1.0\n")
    code, _, err = run_cli(["calibrate", str(tmp_path / "runs.csv"), "--out",
                            str(tmp_path / "c.yaml")], capsys)
    assert code != 0 and len(err.strip().splitlines()) == 1 and "runs.csv:2" in err
    (tmp_path / "bad.yaml").write_text("gpu_efficiency_scale: {A100: -1}\n")
    code, _, err = run_cli(["estimate", "x.json", "--calibration", str(tmp_path / "bad.yaml")],
                           capsys)
    assert code != 0 and "gpu_efficiency_scale.A100" in err


@pytest.fixture(autouse=True)
def _restore_constants():
    """A calibration is process-wide: leave the shipped constants for the next test."""
    yield
    apply_calibration({})


def test_calibrate_reads_the_runtime_run_log(tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    from planner.runtime.run_log import append_run_log

    path = _plans(tmp_path)[0]
    t = _predict(path, {})
    log = tmp_path / "run.jsonl"
    append_run_log(log, path, [50 * t, t, t])  # the first step (start-up) is skipped
    code, text, err = run_cli(["calibrate", str(log), "--out", str(tmp_path / "c.yaml"),
                               "--json"], capsys)
    assert code == 0, err
    res = json.loads(text)
    assert len(res["rows"]) == 2 and res["rms_error_before_pct"] == pytest.approx(0, abs=1e-6)


def test_a_calibration_names_catalog_gpus_or_is_refused(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # A key the cost model never looks up would calibrate nothing, silently: an alias applies
    # as its catalog name does, a typo or a non-GPU key is one line.
    path = _plans(tmp_path)[0]
    times = {}
    for name, key in (("canonical", "A100-SXM4-80GB"), ("alias", "A100 80GB")):
        (tmp_path / f"{name}.yaml").write_text(f"gpu_efficiency_scale: {{{key}: 0.5}}\n")
        code, text, err = run_cli(["estimate", str(path), "--calibration",
                                   str(tmp_path / f"{name}.yaml"), "--json"], capsys)
        assert code == 0, err
        times[name] = json.loads(text)["iteration_time_s"]
    assert times["alias"] == times["canonical"] == pytest.approx(
        _predict(path, {"A100-SXM4-80GB": 0.5}), rel=1e-9)
    assert times["canonical"] > 1.1 * _predict(path, {})
    for key in ("A100-SXM4-90GB", "kernel_s"):
        (tmp_path / "typo.yaml").write_text(f"gpu_efficiency_scale: {{{key}: 2}}\n")
        code, _, err = run_cli(["estimate", str(path), "--calibration",
                                str(tmp_path / "typo.yaml")], capsys)
        assert code == 2 and len(err.strip().splitlines()) == 1
        assert f"gpu_efficiency_scale.{key}: unknown GPU type" in err


def test_a_calibration_does_not_outlive_its_command(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Three in-process commands: the one without --calibration prices with the shipped
    # constants, exactly as the first did (once it stayed in force: 0.016197 → 0.018772 ×2).
    path = _plans(tmp_path)[0]
    gpu = json.loads(path.read_text())["pipelines"][0]["stages"][0]["gpu"]
    cal = tmp_path / "cal.yaml"
    cal.write_text(f"gpu_efficiency_scale: {{{gpu}: 0.5}}\n")
    times = []
    for extra in ([], ["--calibration", str(cal)], []):
        code, text, err = run_cli(["estimate", str(path), "--json", *extra], capsys)
        assert code == 0, err
        times.append(json.loads(text)["iteration_time_s"])
    assert times[0] == times[2] == pytest.approx(_predict(path, {}), rel=1e-6)
    assert times[1] > times[0]


def test_two_names_of_one_gpu_are_refused(tmp_path: Path) -> None:
    # "H100" and "H100-SXM5-80GB" are one catalog GPU: one of the two scales would be lost.
    from cost_models.catalog import get_gpu

    assert get_gpu("H100").name == get_gpu("H100-SXM5-80GB").name
    cal = tmp_path / "cal.yaml"
    cal.write_text("gpu_efficiency_scale: {H100: 0.9, H100-SXM5-80GB: 1.1}\n")
    with pytest.raises(HetplanError, match="names H100 and H100-SXM5-80GB, both the") as err:
        load_calibration(cal)
    assert "\n" not in str(err.value)
    cal.write_text("gpu_efficiency_scale: {H100: 0.9, A100: 1.1}\n")
    assert len(load_calibration(cal)) == 2
