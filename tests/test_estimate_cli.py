"""`hetplan estimate` / `hetplan validate` from the command line (one process per call)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "planner.cli.main", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)


def test_estimate_json_keys_and_bad_input_is_one_line() -> None:
    out = _run("estimate", "gpt2-amp", "amp-het", "--tp", "1", "--pp", "4", "--dp", "4",
               "--micro-batch", "2", "--global-batch", "32", "--json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    for key in ("iteration_time_s", "tokens_per_s", "mfu", "stages", "usd_per_hour",
                "usd_per_million_tokens", "feasible", "problems"):
        assert key in data
    assert len(data["stages"]) == 16
    assert data["iteration_time_s"] > 0

    bad = _run("estimate", "gpt2-amp", "amp-het", "--tp", "4", "--pp", "4", "--dp", "4")
    assert bad.returncode == 2
    lines = bad.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:") and "64 GPUs" in lines[0]
    assert "Traceback" not in bad.stderr


def test_validate_without_data_says_so_in_one_line(tmp_path: Path) -> None:
    out = _run("validate", "--data-dir", str(tmp_path / "none"))
    assert out.returncode == 2 and out.stdout == ""
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: --data-dir {tmp_path / 'none'}: "
                                                   "no such folder")
