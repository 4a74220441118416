"""The issue's accuracy targets on the public measurements in ../shared/data.

Skipped when the data folder is absent. Targets not yet met are strict xfails with the figure
we reach, so a model change that meets them turns them into failures to update.
"""

from __future__ import annotations

import pytest

from planner.estimate.validation import default_data_dir, run_all
from planner.estimate.validation.common import FileReport

DATA = default_data_dir()
pytestmark = pytest.mark.skipif(not (DATA / "amp_measured_plans.csv").exists(),
                                reason=f"public measurements not found at {DATA}")


@pytest.fixture(scope="module")
def reports() -> dict[tuple[str, str], FileReport]:
    return {(r.file, r.group): r for r in run_all(DATA, modes=("profiles",))["profiles"]}


def test_amp_t4_mape_and_rank(reports: dict) -> None:
    r = reports[("amp_measured_plans.csv", "homogeneous")]
    assert r.counted >= 40
    assert r.mape_pct <= 15.0
    assert r.spearman >= 0.85


def test_amp_heterogeneous_top1_regret(reports: dict) -> None:
    r = reports[("amp_measured_plans.csv", "het_cluster")]
    assert r.top1_regret_pct <= 3.0


@pytest.mark.xfail(strict=True, reason="Spearman 0.73 on AMP het: rows with TP>=2, PP>=4 and "
                   ">=16 micro-batches measured 1.6-2.1x slower than the same work in 4 "
                   "micro-batches; the model does not reproduce that (docs/cost-model.md)")
def test_amp_heterogeneous_rank(reports: dict) -> None:
    assert reports[("amp_measured_plans.csv", "het_cluster")].spearman >= 0.85


def test_sailor_mape_and_rank(reports: dict) -> None:
    r = reports[("sailor_measured_plans.csv", "all")]
    assert r.mape_pct <= 15.0
    assert r.spearman >= 0.85
    assert reports[("sailor_measured_plans.csv", "clariden")].mape_pct <= 15.0


@pytest.mark.parametrize("file", ["torchtitan_h100.csv", "llama3_405b.csv", "historic_runs.csv"])
def test_large_runs_within_ten_percent(reports: dict, file: str) -> None:
    assert reports[(file, "all")].mape_pct <= 10.0


@pytest.mark.xfail(strict=True, reason="torchtitan A100 MAPE 11.5 % (full activation "
                   "checkpointing predicted 20 % slow) and NeMo FP8 13.9 % (Llama rows 20 % "
                   "slow: eager memory traffic vs fused kernels)")
@pytest.mark.parametrize("file", ["torchtitan_a100.csv", "nemo_h100.csv"])
def test_large_runs_not_yet_within_ten_percent(reports: dict, file: str) -> None:
    assert reports[(file, "all")].mape_pct <= 10.0
