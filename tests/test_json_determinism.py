"""Same inputs, same bytes: every `--json` command (and every file the commands write) prints
the same output in two fresh processes run in different folders under different hash seeds.
Wall times are only in the tables, or in `plan`/`dryrun` JSON with `--timing`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from planner.costing.validation import default_data_dir
from planner.runtime.dry_run import DryrunResult
from planner.search.result import SearchStats
from tests.json_runs import COMMANDS

ROOT = Path(__file__).resolve().parents[1]


def _workspace(folder: Path) -> None:
    """The inputs the commands read besides bundled names: a measured-runs file for
    `calibrate` (the plan it names is written by `plan` first) and a three-row data folder for
    `validate` (the shipped AMP file's first rows)."""
    folder.mkdir()
    # 0.01 s: inside what an efficiency scale in [0.1, 10] can reach for the tiny plan
    # (0.008-0.021 s); a time beyond it is refused, not fitted (test_audit3_calibrate.py).
    (folder / "runs.csv").write_text("plan,measured_iteration_s\np.json,0.01\n")
    lines = (default_data_dir() / "amp_measured_plans.csv").read_text().splitlines(True)
    (folder / "data").mkdir()
    (folder / "data" / "amp_measured_plans.csv").write_text("".join(lines[:4]))


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, dict]:
    base = tmp_path_factory.mktemp("twice")
    procs = []
    for name, seed in (("first", "0"), ("second-folder", "4242")):
        _workspace(base / name)
        env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONHASHSEED": seed}
        env.pop("COLUMNS", None)
        procs.append(subprocess.Popen(
            [sys.executable, "-m", "tests.json_runs", str(base / f"{name}.json")],
            cwd=base / name, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            text=True))
    for p in procs:
        out, _ = p.communicate(timeout=600)
        assert p.returncode == 0, out
    a, b = (json.loads((base / f"{n}.json").read_text()) for n in ("first", "second-folder"))
    return a, b


@pytest.mark.parametrize("name", [name for name, _ in COMMANDS])
def test_each_command_prints_the_same_bytes_twice(two_runs, name: str) -> None:
    a, b = (r["commands"][name] for r in two_runs)
    assert a["code"] == 0, a["err"]
    if "--json" in dict(COMMANDS)[name]:
        json.loads(a["out"])  # stdout is JSON only
    assert a["out"] == b["out"], f"{name}: stdout differs between identical runs"
    assert a["err"] == b["err"], f"{name}: stderr differs between identical runs"


def test_every_written_file_is_the_same_bytes_twice(two_runs) -> None:
    a, b = (r["files"] for r in two_runs)
    # What the commands wrote, not only their inputs (a plan, the launch scripts, ...).
    assert {"p.json", "r.json", "g.svg", "w.yaml", "cal.yaml", "launch/plan.json"} <= set(a)
    assert sorted(a) == sorted(b)
    for path in a:
        assert a[path] == b[path], f"{path} differs between identical runs"


def test_wall_times_only_on_request() -> None:
    stats = SearchStats(shapes=1, shapes_pruned=0, programs=1, candidates=1, costed=1,
                        seconds=1.23456, exact=True)
    assert "seconds" not in stats.to_dict()
    assert stats.to_dict(timing=True)["seconds"] == 1.235
    res = DryrunResult(ok=True, max_grad_diff=0.0, max_loss_diff=0.0, losses=(1.0,),
                       reference_losses=(1.0,), ranks=1, params_checked=1, wall_s=2.5,
                       model={})
    assert "wall_s" not in res.to_dict()
    assert res.to_dict(timing=True)["wall_s"] == 2.5
