"""`hetplan export` comments state the plan's figures as it stands: a plan edited by hand
after `hetplan plan` priced it is re-estimated, and the stale stored block is called stale."""

from __future__ import annotations

import json
from pathlib import Path

import planner
from planner.costing import estimate, megatron_plan, with_prediction
from planner.schema import Plan
from tests.cli import run_cli


def _priced(tmp_path: Path) -> tuple[Path, float]:
    m, c = planner.load_model("gpt2-amp"), planner.load_cluster("dgx-a100")
    p = megatron_plan(m, c, tp=2, pp=2, dp=2, micro_batch=1, global_batch=16)
    est = estimate(m, c, p)
    path = tmp_path / "plan.json"
    with_prediction(p, est, "hetplan").save(path)  # as `hetplan plan` writes it
    return path, est.iteration_time_s


def test_an_edited_plan_exports_its_fresh_estimate(tmp_path: Path, capsys) -> None:
    path, stored_s = _priced(tmp_path)
    data = json.loads(path.read_text())
    for pipe in data["pipelines"]:  # the hand edit: full recompute everywhere
        for st in pipe["stages"]:
            st["recompute"] = "full"
    path.write_text(json.dumps(data))
    fresh_s = estimate(None, None, Plan.load(path)).iteration_time_s
    assert f"{fresh_s:.4f}" != f"{stored_s:.4f}"
    code, text, err = run_cli(["export", str(path), "--to", "megatron"], capsys)
    assert code == 0, err
    assert f"hetplan predicts {fresh_s:.4f} s per iteration" in text
    assert f"stored prediction ({stored_s:.4f} s per iteration) differs" in text
    assert f"predicts {stored_s:.4f}" not in text


def test_an_unedited_plan_states_its_figures_once(tmp_path: Path, capsys) -> None:
    path, stored_s = _priced(tmp_path)
    code, text, err = run_cli(["export", str(path), "--to", "megatron"], capsys)
    assert code == 0, err
    assert f"hetplan predicts {stored_s:.4f} s per iteration" in text
    assert "stored prediction" not in text
