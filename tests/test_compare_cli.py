"""`hetplan compare` and `hetplan whatif` end to end: their numbers are plan + estimate's."""

from __future__ import annotations

import json
import warnings

import pytest

from planner.cluster import cluster_from_dict, load_cluster
from planner.costing import estimate
from planner.graph import load_model
from planner.report.scenario import edit_cluster
from planner.search import plan
from tests.cli import run_cli as _run

CLUSTERS = ("amp-t4", "amp-het", "lab-mixed")


@pytest.fixture(scope="module")
def tiny():
    return load_model("tiny")


def _expected(model, cluster, gbs: int = 8):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        best = plan(model, cluster, global_batch_size=gbs, objective="throughput", top_k=1).best
    return best, estimate(model, cluster, best)


def test_compare_rows_equal_plan_and_estimate(tiny, tmp_path, capsys) -> None:
    png = tmp_path / "pareto.png"
    code, out, err = _run(["compare", "tiny", *CLUSTERS, "--global-batch", "8", "--tokens",
                           "1B", "--json", "--plot", str(png)], capsys)
    assert code == 0, err
    rows = json.loads(out)
    assert sorted(r["cluster"] for r in rows) == sorted(CLUSTERS)
    tps = [r["tokens_per_s"] for r in rows]
    assert tps == sorted(tps, reverse=True)
    for row in rows:
        cluster = load_cluster(row["cluster"])
        best, est = _expected(tiny, cluster)
        assert row["tokens_per_s"] == pytest.approx(est.tokens_per_s, abs=1e-6)
        assert row["tokens_per_s"] == pytest.approx(best.predicted["tokens_per_s"], rel=1e-9)
        assert row["iteration_time_s"] == pytest.approx(est.iteration_time_s, abs=1e-9)
        assert row["mfu"] == pytest.approx(est.mfu, abs=1e-9)
        assert row["usd_per_hour"] == pytest.approx(est.usd_per_hour, abs=1e-9)
        assert row["usd_per_million_tokens"] == pytest.approx(est.usd_per_million_tokens,
                                                              abs=1e-9)
        assert row["train_time_s"] == pytest.approx(1e9 / est.tokens_per_s, rel=1e-9)
        assert sum(row["gpus_used"].values()) == len(best.ranks)
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 20_000


def test_compare_table_and_bad_tokens(tiny, capsys) -> None:
    code, out, _ = _run(["compare", "tiny", "amp-t4", "--global-batch", "8"], capsys)
    used = len(_expected(tiny, load_cluster("amp-t4"))[0].ranks)
    assert code == 0 and "amp-t4" in out and f"T4 {used}/16" in out.replace("  ", " ")
    code, _, err = _run(["compare", "tiny", "amp-t4", "--tokens", "lots"], capsys)
    assert code == 2 and "positive token count" in err and err.count("\n") == 1


def test_whatif_before_after_equal_plans(tiny, capsys) -> None:
    args = ["--add", "4 A100", "--price", "t4=0.5", "--global-batch", "8"]
    code, out, err = _run(["whatif", "tiny", "amp-t4", *args, "--json"], capsys)
    assert code == 0, err
    data = json.loads(out)
    base = load_cluster("amp-t4")
    # --price applies before too: the "before" plan is priced on T4 at 0.5 as well.
    repriced, _ = edit_cluster(base.spec, price=["t4=0.5"])
    best_before, est_before = _expected(tiny, cluster_from_dict(repriced))
    spec, notes = edit_cluster(base.spec, add=["4 A100"], price=["t4=0.5"])
    _, est_after = _expected(tiny, cluster_from_dict(spec))
    assert data["edits"] == [*notes, "the same prices apply before, so $ figures compare"]
    assert data["before"]["usd_per_hour"] == pytest.approx(0.5 * len(best_before.ranks))
    assert data["before"]["cluster_usd_per_hour"] == pytest.approx(16 * 0.5)
    assert data["cluster_before"] == cluster_from_dict(repriced).spec
    assert data["cluster_after"] == cluster_from_dict(spec).spec
    assert data["before"]["tokens_per_s"] == pytest.approx(est_before.tokens_per_s, abs=1e-6)
    assert data["after"]["tokens_per_s"] == pytest.approx(est_after.tokens_per_s, abs=1e-6)
    assert data["after"]["usd_per_hour"] == pytest.approx(est_after.usd_per_hour, abs=1e-9)
    assert data["after"]["gpus_available"] == {"T4": 16, "A100-SXM4-80GB": 4}
    assert data["change_pct"]["tokens/s"] == pytest.approx(
        (est_after.tokens_per_s / est_before.tokens_per_s - 1) * 100, rel=1e-6)
    # Whole-cluster price after: 16 T4 at the new 0.5 plus 4 A100 at the catalog price.
    a100 = cluster_from_dict(spec).groups[1].price_per_gpu_hour
    assert data["after"]["cluster_usd_per_hour"] == pytest.approx(16 * 0.5 + 4 * a100)


def test_whatif_table_and_bad_scenarios(capsys) -> None:
    code, out, _ = _run(["whatif", "tiny", "amp-t4", "--remove", "g4dn", "--add", "2x4 V100",
                         "--global-batch", "8"], capsys)
    assert code == 0 and "before" in out and "after" in out and "removed g4dn" in out
    for bad, message in ((["--add", "4 A1000"], "unknown GPU type 'A1000'"),
                         (["--remove", "h100"], "no H100"),
                         (["--add", "4 A100", "--price", "t4"], "write KEY=USD"),
                         ([], "nothing to change")):
        code, _, err = _run(["whatif", "tiny", "amp-t4", *bad], capsys)
        assert code == 2 and message in err and err.count("\n") == 1, err


def test_compare_infeasible_cluster_is_a_row(capsys) -> None:
    code, out, err = _run(["compare", "llama3-70b", "amp-t4", "--global-batch", "64", "--json"],
                          capsys)
    assert code == 0, err
    (row,) = json.loads(out)
    # 70 B parameters × 16 B of model state do not fit in 16 T4 × 16 GiB.
    assert row["feasible"] is False and "GiB" in row["problem"]
    assert row["tokens_per_s"] is None and row["gpus_available"] == {"T4": 16}


def test_compare_notes_infeasible_clusters_in_table_and_plot(tmp_path, capsys) -> None:
    svg = tmp_path / "p.svg"
    code, out, err = _run(["compare", "llama3-70b", "amp-t4", "--global-batch", "64", "--plot",
                           str(svg)], capsys)
    assert code == 0, err
    assert "no feasible plan" in out and "amp-t4" in out
    assert "no feasible plan: amp-t4" in svg.read_text()
