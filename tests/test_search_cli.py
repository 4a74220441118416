"""`hetplan plan` from the command line (one process per call: few calls)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from planner.costing.estimate import estimate
from planner.schema import Plan

ROOT = Path(__file__).resolve().parents[1]


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "planner.cli.main", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=300,
                          env={**os.environ, "COLUMNS": "200"})


def test_plan_json_and_plan_file(tmp_path: Path) -> None:
    out_file = tmp_path / "plan.json"
    out = _run("plan", "gpt2-medium", "lab-mixed", "--global-batch", "64", "--top-k", "3",
               "-o", str(out_file), "--json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert set(data) == {"plan", "alternatives", "search"}
    assert len(data["alternatives"]) == 2
    saved = Plan.load(out_file)
    assert saved.to_dict() == data["plan"]
    est = estimate(None, None, saved)
    assert est.feasible
    assert abs(saved.predicted["iteration_time_s"] - est.iteration_time_s) <= 1e-9


def test_plan_table_and_bad_input_is_one_line() -> None:
    out = _run("plan", "gpt2-medium", "lab-mixed", "--global-batch", "64", "--top-k", "2")
    assert out.returncode == 0, out.stderr
    for word in ("best plan", "tokens/s", "MFU", "memory GiB", "alternatives"):
        assert word in out.stdout
    bad = _run("plan", "gpt2-medium", "lab-mixed", "--objective", "speed")
    assert bad.returncode == 2
    assert bad.stderr.strip().count("\n") == 0 and bad.stderr.startswith("error:")
    assert "Traceback" not in bad.stderr
