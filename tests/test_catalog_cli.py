"""`hetplan gpus` as a user runs it: table, JSON, one entry, and a one-line error."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from cost_models.catalog import all_gpus

ROOT = Path(__file__).resolve().parents[1]


def _hetplan(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "planner.cli.main", *args],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )


def test_gpus_json_lists_every_entry_with_numbers_and_sources() -> None:
    run = _hetplan("gpus", "--json")
    assert run.returncode == 0, run.stderr
    rows = json.loads(run.stdout)
    assert [r["name"] for r in rows] == [s.name for s in all_gpus()]
    a100 = next(r for r in rows if r["name"] == "A100-SXM4-80GB")
    assert a100["memory_gib"] == 80 and a100["hbm_gb_per_s"] == 2039
    assert a100["peak_tflops"] == {"fp32": 19.5, "tf32": 156, "fp16": 312, "bf16": 312}
    for row in rows:
        assert row["sources"]["memory_gib"] and row["sources"]["hbm_gb_per_s"]
        assert "bf16" not in row["peak_tflops"] or row["generation"] not in ("volta", "turing")


def test_gpus_one_entry_by_alias_and_table() -> None:
    run = _hetplan("gpus", "GH-96", "--json")
    assert run.returncode == 0, run.stderr
    (row,) = json.loads(run.stdout)
    assert row["name"] == "GH200-96GB"
    table = _hetplan("gpus")
    assert table.returncode == 0, table.stderr
    for spec in all_gpus():
        assert spec.name in table.stdout
    assert "1979" in table.stdout  # H100 dense FP8, uncut by a narrow console


def test_gpus_unknown_name_is_one_error_line() -> None:
    run = _hetplan("gpus", "A100-SXM4-8")
    assert run.returncode == 2
    assert run.stdout == ""
    assert run.stderr.strip().splitlines() == [
        "error: unknown GPU type 'A100-SXM4-8'; did you mean A100-SXM4-80GB? "
        "(`hetplan gpus` lists the catalog)"
    ]
