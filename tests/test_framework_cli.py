"""`--framework` on `hetplan estimate` and `hetplan plan`: the runtime the numbers describe."""

from __future__ import annotations

import json

import pytest

from planner.cluster import load_cluster
from planner.costing import estimate, megatron_plan
from planner.costing.framework import DEFAULT_FRAMEWORK, MEGATRON_CORE
from planner.graph import load_model
from tests.cli import run_cli

ARGS = ["estimate", "gpt2-medium", "dgx-a100", "--tp", "4", "--pp", "2", "--dp", "1",
        "--global-batch", "8", "--json"]


def test_estimate_framework_flag_prices_that_runtime(capsys: pytest.CaptureFixture[str]) -> None:
    model, cluster = load_model("gpt2-medium"), load_cluster("dgx-a100")
    plan = megatron_plan(model.graph, cluster, tp=4, pp=2, dp=1, micro_batch=1, global_batch=8)
    for name, fw in (("hetplan", DEFAULT_FRAMEWORK), ("megatron", MEGATRON_CORE)):
        code, out, err = run_cli([*ARGS, "--framework", name], capsys)
        assert code == 0, err
        api = estimate(model, cluster, plan, framework=fw)
        assert json.loads(out)["iteration_time_s"] == pytest.approx(api.iteration_time_s,
                                                                     abs=1e-8)
    _, ours, _ = run_cli(ARGS, capsys)
    _, mega, _ = run_cli([*ARGS, "--framework", "megatron"], capsys)
    # The last stage holds the head and the tied embedding copy: whole on each of 4 TP ranks
    # in hetplan's runtime, a quarter in Megatron's.
    assert (json.loads(ours)["stages"][-1]["peak_memory_gib"]
            > json.loads(mega)["stages"][-1]["peak_memory_gib"])


def test_unknown_framework_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    for argv in ([*ARGS, "--framework", "jax"],
                 ["plan", "gpt2-medium", "dgx-a100", "--framework", "jax"]):
        code, out, err = run_cli(argv, capsys)
        assert code != 0
        assert err.strip().splitlines() == [
            "error: --framework 'jax': use one of hetplan, megatron, torchtitan, deepspeed"]
        assert "Traceback" not in err


def test_plan_framework_flag_predicts_with_that_runtime(capsys: pytest.CaptureFixture[str],
                                                         tmp_path) -> None:
    from planner.schema import Plan

    out_file = tmp_path / "plan.json"
    code, _, err = run_cli(["plan", "gpt2-medium", "dgx-a100", "--framework", "megatron",
                            "--global-batch", "64", "-o", str(out_file), "--json"], capsys)
    assert code == 0, err
    plan = Plan.load(str(out_file))
    assert plan.predicted["framework"] == "megatron"
    again = estimate(None, None, plan, framework=MEGATRON_CORE)
    assert plan.predicted["iteration_time_s"] == pytest.approx(again.iteration_time_s, abs=1e-9)
    # `estimate PLAN.json` prices the framework the plan names unless told otherwise.
    code, out, err = run_cli(["estimate", str(out_file), "--json"], capsys)
    assert code == 0, err
    assert json.loads(out)["iteration_time_s"] == pytest.approx(again.iteration_time_s,
                                                                 abs=1e-8)
    code, out, _ = run_cli(["estimate", str(out_file), "--framework", "hetplan", "--json"],
                           capsys)
    ours = estimate(None, None, plan, framework=DEFAULT_FRAMEWORK)
    assert json.loads(out)["iteration_time_s"] == pytest.approx(ours.iteration_time_s, abs=1e-8)
    # launch still writes the scripts, with a one-line warning on stderr.
    code, _, err = run_cli(["launch", str(out_file), "--out-dir", str(tmp_path / "l")], capsys)
    assert code == 0
    assert [line for line in err.splitlines() if line.startswith("warning:")] == [
        f"warning: {out_file} was priced for megatron; these scripts run hetplan's runtime, so "
        "expect `hetplan estimate --framework hetplan`'s figures"]


def test_compare_and_whatif_price_the_chosen_framework(capsys: pytest.CaptureFixture[str]) -> None:
    from planner.report.compare import compare
    from planner.report.whatif import whatif

    model = load_model("gpt2-amp")
    clusters = [("amp-t4", load_cluster("amp-t4")), ("amp-het", load_cluster("amp-het"))]
    code, out, err = run_cli(["compare", "gpt2-amp", "amp-t4", "amp-het", "--framework",
                              "megatron", "--json"], capsys)
    assert code == 0, err
    api = compare(model, clusters, framework=MEGATRON_CORE)
    assert [r["tokens_per_s"] for r in json.loads(out)] == pytest.approx(
        [r.tokens_per_s for r in api], rel=1e-9)
    code, out, err = run_cli(["whatif", "gpt2-amp", "amp-t4", "--remove", "g4dn",
                              "--add", "4 V100-SXM2-16GB", "--framework", "megatron", "--json"],
                             capsys)
    assert code == 0, err
    w = whatif(model, load_cluster("amp-t4"), remove=["g4dn"], add=["4 V100-SXM2-16GB"],
               framework=MEGATRON_CORE)
    assert json.loads(out)["after"]["tokens_per_s"] == pytest.approx(w.after.tokens_per_s,
                                                                      rel=1e-9)
