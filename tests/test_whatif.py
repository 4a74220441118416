"""What-if before/after: the change table, and (with the search) the end-to-end command."""

from __future__ import annotations

import pytest

from planner.report.compare import CompareRow
from planner.report.whatif import WhatIf, change_pct, whatif_lines


def test_change_pct() -> None:
    assert change_pct(100.0, 150.0) == pytest.approx(50.0)
    assert change_pct(2.0, 1.0) == pytest.approx(-50.0)
    assert change_pct(None, 1.0) is None
    assert change_pct(0.0, 1.0) is None


def test_lines_show_gpus_shape_speed_and_cost() -> None:
    before = CompareRow(cluster="lab", feasible=True, tokens_per_s=1000.0, iteration_time_s=2.0,
                        mfu=0.40, usd_per_hour=10.0, usd_per_million_tokens=2.7778,
                        cluster_usd_per_hour=20.0, gpus_used={"A100": 8, "V100": 8},
                        gpus_available={"A100": 8, "V100": 16}, stages=2, pipelines=1,
                        micro_batch_size=1)
    after = CompareRow(cluster="lab (what-if)", feasible=True, tokens_per_s=2500.0,
                       iteration_time_s=0.8, mfu=0.45, usd_per_hour=30.0,
                       usd_per_million_tokens=3.3333, cluster_usd_per_hour=40.0,
                       gpus_used={"A100": 8, "H100": 8}, gpus_available={"A100": 8, "H100": 8},
                       stages=2, pipelines=2, micro_batch_size=1)
    lines = {name: (b, a, pct) for name, b, a, pct in whatif_lines(
        WhatIf(edits=(), before=before, after=after, cluster_after={}))}
    assert lines["A100 used"] == ("8/8", "8/8", 0.0)
    assert lines["V100 used"] == ("8/16", "0/0", -100.0)
    assert lines["H100 used"] == ("0/0", "8/8", None)
    assert lines["pipelines (DP)"] == ("1", "2", None)
    assert lines["tokens/s"] == ("1,000", "2,500", pytest.approx(150.0))
    assert lines["iteration s"][2] == pytest.approx(-60.0)
    assert lines["$/h (GPUs used)"] == ("10.00", "30.00", pytest.approx(200.0))
    assert lines["$/1M tokens"][2] == pytest.approx((3.3333 - 2.7778) / 2.7778 * 100)
