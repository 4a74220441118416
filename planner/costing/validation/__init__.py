"""The accuracy report: every public measured plan through `estimate`.

`run_all(data_dir)` returns, per file (and experiment group), each row's predicted vs measured
value, MAPE, Spearman rank correlation and top-1 regret, once with the analytic model alone
and once with the shipped profiles.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from cost_models.profiles import ProfileSet, default_profiles
from planner.costing.validation.amp import amp_reports
from planner.costing.validation.common import FileReport, Row, per_framework_reports
from planner.costing.validation.large_runs import large_run_reports
from planner.costing.validation.mpt_foundry import mpt_reports
from planner.costing.validation.nemo_tables import nemo_table_reports
from planner.costing.validation.sailor import sailor_reports

__all__ = ["DATA_FILES", "FileReport", "Row", "data_files_in", "default_data_dir", "run_all"]

MODES = ("analytic", "profiles")

DATA_FILES = ("amp_measured_plans.csv", "sailor_measured_plans.csv", "torchtitan_a100.csv",
              "torchtitan_h100.csv", "nemo_h100.csv", "llama3_405b.csv", "historic_runs.csv",
              "nemo_b200.csv", "nemo_h100_2025.csv", "mpt_llm_foundry.csv")
"""The measurement files the report reads, by name; each is optional."""


def default_data_dir() -> Path:
    """The measurements shipped with hetplan (package data; sources in its README.md)."""
    return Path(__file__).resolve().parent / "data"


def data_files_in(data_dir: Path) -> list[str]:
    """The measurement files `run_all` would read in `data_dir` (none: nothing to report)."""
    return [name for name in DATA_FILES if (data_dir / name).is_file()]


def run_all(data_dir: Path, modes: tuple[str, ...] = MODES,
            progress: Callable[[str], None] | None = None) -> dict[str, list[FileReport]]:
    """Reports per mode (`analytic`: no profiles; `profiles`: the shipped profile files);
    `progress(step)` is told each mode and file as it starts."""
    out: dict[str, list[FileReport]] = {}
    for mode in modes:
        profiles = ProfileSet() if mode == "analytic" else default_profiles()
        reports: list[FileReport] = []
        if (data_dir / "amp_measured_plans.csv").exists():
            if progress:
                progress(f"{mode}, amp_measured_plans.csv")
            reports += amp_reports(data_dir, profiles)
        if (data_dir / "sailor_measured_plans.csv").exists():
            if progress:
                progress(f"{mode}, sailor_measured_plans.csv")
            reports += sailor_reports(data_dir, profiles)
        if progress:
            progress(f"{mode}, large runs")
        reports += large_run_reports(data_dir, profiles)
        reports += nemo_table_reports(data_dir, profiles)
        if progress and (data_dir / "mpt_llm_foundry.csv").exists():
            progress(f"{mode}, mpt_llm_foundry.csv")
        reports += mpt_reports(data_dir, profiles)
        reports += per_framework_reports(reports)
        out[mode] = reports
    return out
